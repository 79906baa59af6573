/**
 * A text as the guardrail engines also read it: NFKC (full-width `ｂａｄ` reads `bad`, `ﬁ` reads `fi`) with
 * format characters (`\p{Cf}`: zero-width spaces and joiners, soft hyphens, bidi marks) removed, so
 * `b\u200bad` reads `bad`. Those forms had let a keyword or pattern through (found by a security audit).
 * Case is left to the engines' own `i` flag (keywords are always case-insensitive).
 *
 * `toOriginal` maps a match back to the span of the original text it came from, so a redaction cuts the
 * characters the model would have read as the match (the zero-width space inside `b\u200bad` too).
 *
 * @example normalisedView('ｂａｄ')!.text // 'bad'
 */
export interface NormalisedView {
  text: string;
  /** `[start, end)` in `text` to `[start, end)` in the original (an empty span stays empty). */
  toOriginal(start: number, end: number): { start: number; end: number };
}

const FORMAT = /\p{Cf}/gu;
const HAS_FORMAT = /\p{Cf}/u;
const SURROGATE = /[\uD800-\uDFFF]/;
const JOINS = /[\p{M}\p{Cf}\u1160-\u11FF\uD7B0-\uD7FF]/u;
/**
 * A run of characters none of which joins the one before it, not followed by one that does (each of its
 * characters normalises alone, so a run that NFKC leaves as it is costs one call); or one character with
 * those that join it: combining marks, format characters, Hangul vowel and final jamo (`e` + U+0301 composes).
 */
const CLUSTER = /([^\p{M}\p{Cf}\u1160-\u11FF\uD7B0-\uD7FF]+)(?![\p{M}\p{Cf}\u1160-\u11FF\uD7B0-\uD7FF])|[\s\S][\p{M}\p{Cf}\u1160-\u11FF\uD7B0-\uD7FF]*/gu;

/** `text` normalised whole (a keyword of the config): NFKC, format characters removed. */
export function normaliseText(text: string): string {
  return text.replace(FORMAT, '').normalize('NFKC');
}

/**
 * The normalised view of `text`, or null when it reads the same (most text: no second pass is paid for).
 * Linear in the text: it is normalised a run at a time (see CLUSTER), and only the characters that change
 * are recorded, as edits: `[ns, ne)` in the view came from `[os, oe)` in the text.
 */
export function normalisedView(text: string): NormalisedView | null {
  const whole = text.normalize('NFKC');
  const hasFormat = HAS_FORMAT.test(text);
  if (!hasFormat && whole === text) return null;
  // Each character one unit before and after (full-width letters only): offsets are as they were.
  if (!hasFormat && whole.length === text.length && !SURROGATE.test(text) && !SURROGATE.test(whole) && !JOINS.test(text)) {
    return { text: whole, toOriginal: (start, end) => ({ start, end }) };
  }
  const ns: number[] = [];
  const ne: number[] = [];
  const os: number[] = [];
  const oe: number[] = [];
  let out = '';
  const piece = (original: string, at: number, norm: string) => {
    if (norm !== original) {
      ns.push(out.length);
      ne.push(out.length + norm.length);
      os.push(at);
      oe.push(at + original.length);
    }
    out += norm;
  };
  for (const m of text.matchAll(CLUSTER)) {
    const run = m[0];
    const norm = normaliseText(run);
    // A character with those that join it is one edit; a run of characters that each normalise alone is
    // one edit per character that changes (a match inside the run maps back to its own characters).
    if (norm === run || m[1] === undefined) piece(run, m.index!, norm);
    // Each character one unit before and after (full-width letters): offsets stay as they were, no edit.
    else if (norm.length === run.length && !SURROGATE.test(run) && !SURROGATE.test(norm)) out += norm;
    else {
      let at = m.index!;
      for (const ch of run) {
        piece(ch, at, ch.normalize('NFKC'));
        at += ch.length;
      }
    }
  }
  const n = out.length;
  // The original span of the normalised unit `u` (u < n): its edit's span, or one unit after the last edit.
  const unit = (u: number): { start: number; end: number } => {
    let lo = 0;
    let hi = ns.length - 1;
    let k = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (ns[mid] <= u) {
        k = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    // Edits that normalise to nothing share their `ns` with the next one: the last with `ns <= u` is the right one.
    if (k >= 0 && u < ne[k]) return { start: os[k], end: oe[k] };
    const o = k >= 0 ? oe[k] + (u - ne[k]) : u;
    return { start: o, end: o + 1 };
  };
  return {
    text: out,
    toOriginal(start, end) {
      const s = start < n ? unit(start).start : text.length;
      return { start: s, end: end > start ? unit(end - 1).end : s };
    },
  };
}
