import { redact, resolveOverlaps, type Finding } from './detectors';
import type { TextSlot } from './texts';

/** One text part of a content list: a `text`/`input_text` block (or a bare string) at `index`. */
export interface TextPart {
  index: number;
  text: string;
  path: string;
  /** The block object, when the part is one (not a bare string). */
  block?: Record<string, unknown>;
  set(value: string): void;
}

/**
 * The text parts of one content list as one slot: their texts joined with nothing between, since the model
 * reads them together (split across parts, `project` + ` x`, `bob@exa` + `mple.com` or `pipe` + ` bomb`
 * had passed every engine; found by a security audit). Nothing between, because providers differ (some
 * concatenate parts, some put a line break between) and a separator we assumed would hide a match split
 * inside a word. A phrase split exactly at its space with the space in neither part (`pipe` + `bomb`) reads
 * `pipebomb` that way, which a provider that adds a line break shows the model as two words: `spaced` is
 * that reading (the parts joined with a line break), which the guardrail engines judge too.
 *
 * Redaction keeps the parts as they were, except where a match spans parts: those parts become one, the
 * first, holding the redacted text (it takes the last one's `cache_control`, so a cache breakpoint stays at
 * the end); the others leave the list. Non-text blocks between merged parts then follow the merged part.
 *
 * @example textRun(content, parts, false).text // 'tell me about project x' for parts 'tell me about project', ' x'
 */
export function textRun(list: unknown[], parts: readonly TextPart[], system: boolean): TextSlot {
  const text = parts.map((p) => p.text).join('');
  const starts: number[] = [];
  let at = 0;
  for (const p of parts) {
    starts.push(at);
    at += p.text.length;
  }
  const path = parts.map((p) => p.path).join(' + ');
  // Writes `value` into part `first` and drops parts first+1..last from the list, in one pass over it (a
  // splice per dropped part made many merges quadratic: 100 000 parts, 1.3 s of the event loop).
  const merge = (groups: { first: number; last: number; value: string }[]) => {
    const drop = new Set<number>();
    for (const { first, last, value } of groups) {
      parts[first].set(value);
      const cache = parts[last].block?.cache_control;
      if (last > first && cache !== undefined && parts[first].block) parts[first].block!.cache_control = cache;
      for (let j = first + 1; j <= last; j++) drop.add(parts[j].index);
    }
    if (drop.size === 0) return;
    let kept = 0;
    for (let i = 0; i < list.length; i++) if (!drop.has(i)) list[kept++] = list[i];
    list.length = kept;
  };
  // Offsets in the line-break reading map back to `text` by the part they fall in (a break maps to the end
  // of the part before it).
  // A binary search for the last part starting at or before `offset`: a walk back from the last part made a
  // list of many small parts quadratic (40 000 parts each holding an email: 1.7 s of the event loop).
  const toJoined = (offset: number): number => {
    let lo = 0;
    let hi = parts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid] + mid > offset) hi = mid - 1;
      else lo = mid;
    }
    return starts[lo] + Math.min(offset - (starts[lo] + lo), parts[lo].text.length);
  };
  return {
    text,
    path,
    system,
    spaced: parts.length > 1 ? { text: parts.map((p) => p.text).join('\n'), toJoined } : undefined,
    set: (value) => merge([{ first: 0, last: parts.length - 1, value }]),
    redact(findings) {
      const sorted = resolveOverlaps(findings);
      const groups: { first: number; last: number; value: string }[] = [];
      let k = 0;
      for (let first = 0; first < parts.length; ) {
        // Extend the group while a match crosses the end of its last part.
        let last = first;
        const end = () => starts[last] + parts[last].text.length;
        const mine: Finding[] = [];
        while (k < sorted.length && sorted[k].start < end()) {
          const f = sorted[k++];
          mine.push(f);
          while (f.end > end() && last < parts.length - 1) last++;
        }
        if (mine.length > 0) {
          const from = starts[first];
          const shifted = mine.map((f) => ({ ...f, start: f.start - from, end: f.end - from }));
          groups.push({ first, last, value: redact(text.slice(from, end()), shifted) });
        }
        first = last + 1;
      }
      merge(groups);
    },
  };
}
