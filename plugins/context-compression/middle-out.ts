import { budgetedCount, countTokens, inputTokens } from '../../src/spend/estimate';
import { textHead, textTail } from '../../src/text-cut';

type Message = Record<string, unknown> & { role?: unknown; content?: unknown };

/** What middle-out did: removed and truncated messages are named by their index in the original list. */
export interface Compression {
  messages: Message[];
  removed: { index: number; role: string; tokens: number }[];
  truncated: { index: number; tokens_removed: number }[];
  tokensBefore: number;
  tokensAfter: number;
  fits: boolean;
}

const isSystem = (m: Message) => m.role === 'system' || m.role === 'developer';
const blocks = (m: Message): Record<string, unknown>[] => (Array.isArray(m.content) ? (m.content as Record<string, unknown>[]) : []);

/** An assistant turn that calls tools (chat `tool_calls`/`function_call`, messages `tool_use` blocks). */
function callsTools(m: Message): boolean {
  if (m.role !== 'assistant') return false;
  if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) return true;
  if (m.function_call) return true;
  return blocks(m).some((b) => b?.type === 'tool_use' || b?.type === 'server_tool_use');
}

/** A turn carrying tool results (chat `tool`/`function` role, messages user turn with `tool_result` blocks). */
function carriesResults(m: Message): boolean {
  if (m.role === 'tool' || m.role === 'function') return true;
  return m.role === 'user' && blocks(m).some((b) => b?.type === 'tool_result');
}

/**
 * Units that are removed whole: a tool-calling assistant turn together with the result turns that follow
 * it (so a call never loses its result, nor a result its call); every other message is a unit of one.
 */
function units(messages: Message[]): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < messages.length; ) {
    let end = i;
    if (callsTools(messages[i])) while (end + 1 < messages.length && carriesResults(messages[end + 1])) end++;
    out.push([i, end]);
    i = end + 1;
  }
  return out;
}

/** Writable text slots of a message: string content, text blocks, tool-result text (never tool-call arguments). */
function textSlots(m: Message): { get(): string; set(v: string): void }[] {
  const slots: { get(): string; set(v: string): void }[] = [];
  const holder = (o: Record<string, unknown>, k: string) => {
    if (typeof o[k] === 'string') slots.push({ get: () => o[k] as string, set: (v) => (o[k] = v) });
  };
  holder(m, 'content');
  for (const b of blocks(m)) {
    if (!b || typeof b !== 'object') continue;
    if (b.type === 'text') holder(b, 'text');
    if (b.type === 'tool_result') {
      holder(b, 'content');
      if (Array.isArray(b.content)) for (const inner of b.content as Record<string, unknown>[]) if (inner?.type === 'text') holder(inner, 'text');
    }
  }
  return slots;
}

/**
 * The order in which taking the middle element of a shrinking list (`splice(floor(length / 2), 1)`) visits
 * its indices, without the splices (each moved the rest of the list: 230 000 messages took 6.5 s): the
 * middle, then alternately its neighbours outwards, the left one first when the length is even.
 *
 * @example [...middleOutOrder(6)] // [3, 2, 4, 1, 5, 0]
 */
export function* middleOutOrder(length: number): Generator<number> {
  if (length === 0) return;
  const mid = Math.floor(length / 2);
  yield mid;
  let left = mid - 1;
  let right = mid + 1;
  let leftTurn = length % 2 === 0;
  while (left >= 0 || right < length) {
    if (leftTurn ? left >= 0 : right >= length) yield left--;
    else yield right++;
    leftTurn = !leftTurn;
  }
}

/** Texts shorter than this are not truncated further. */
const MIN_TRUNCATE_CHARS = 200;
/** Tokens counted for the marker a cut leaves (`[… N tokens removed by context-compression …]`, ~15). */
const MARKER_TOKENS = 16;
/** Truncation passes at most (one or two are nearly always enough; see middleOut). */
const MAX_PASSES = 8;

/**
 * Middle-out: fits `body.messages` into `budget` input tokens (counted as `inputTokens`). Keeps every
 * system/developer message, the first user message and the units holding the last `keepLatest` messages;
 * removes the other units from the middle outwards until the prompt fits; if it still does not, cuts the
 * longest texts of the kept messages (never the latest message nor a system prompt), wholly or their middle,
 * as many as it takes. A prompt that cannot fit even so (a system prompt and the latest message over the
 * budget) is left uncut: `fits: false`, nothing removed.
 * Returns null when the prompt already fits. The body is not mutated.
 *
 * @example const c = middleOut({ body, budget: 4096 - 512, keepLatest: 2 }); if (c) body.messages = c.messages;
 */
export function middleOut(input: { body: Record<string, unknown>; budget: number; keepLatest: number }): Compression | null {
  const { body, budget } = input;
  const original = Array.isArray(body.messages) ? (body.messages as Message[]) : [];
  const tokensBefore = inputTokens(body);
  if (tokensBefore <= budget || original.length === 0) return null;

  // One tokenizing budget for all the messages, as for the request as a whole: counted one by one, each
  // message had its own 100 000 characters (33 messages of 99 000 characters took 2.7 s of the event loop).
  const shared = budgetedCount();
  const cost = original.map((m) => inputTokens({ messages: [m] }, shared));
  const firstUser = original.findIndex((m) => m.role === 'user' && !carriesResults(m));
  const tailFrom = original.length - Math.max(1, input.keepLatest);
  const all = units(original);
  const kept = (u: [number, number]) => u[1] >= tailFrom || (firstUser >= u[0] && firstUser <= u[1]) || original.slice(u[0], u[1] + 1).some(isSystem);
  const removable = all.filter((u) => !kept(u));

  let total = tokensBefore;
  const dropped = new Set<number>();
  const removed: Compression['removed'] = [];
  for (const k of middleOutOrder(removable.length)) {
    if (total <= budget) break;
    const [start, end] = removable[k];
    for (let i = start; i <= end; i++) {
      dropped.add(i);
      total -= cost[i];
      removed.push({ index: i, role: String(original[i].role), tokens: cost[i] });
    }
  }
  removed.sort((a, b) => a.index - b.index);

  // Copies, so truncation never writes into the caller's objects.
  const survivors = original
    .map((m, index) => ({ index, message: structuredClone(m) }))
    .filter((s) => !dropped.has(s.index));
  const messagesOf = () => survivors.map((s) => s.message);
  total = inputTokens({ ...body, messages: messagesOf() });

  const truncated = new Map<number, number>();
  const last = original.length - 1;
  // Each pass cuts what is still over from the longest texts first, wiping a text whole while the excess is
  // larger, and cutting the middle of the next by the rest: one sort and one recount a pass. (One text a
  // round, with a stop after 32 rounds, had sent a conversation needing more cuts over the window.) A wiped
  // text takes off the larger of its BPE count and 1 token per 3 characters, never less than the total counted
  // for it (past 100 000 characters a request's texts count by length): taken off at its BPE count alone, the
  // excess of a prose request counted by length wiped every text, down to a tenth of the budget. A middle
  // cut is sized by BPE. What a pass leaves over (a text counted at less than it takes off) the next one cuts.
  for (let pass = 0; total > budget && pass < MAX_PASSES; pass++) {
    const slots = survivors
      .filter((s) => s.index !== last && !isSystem(s.message))
      .flatMap((s) => textSlots(s.message).map((slot) => ({ index: s.index, slot, text: slot.get() })))
      .filter((s) => s.text.length >= MIN_TRUNCATE_CHARS)
      .sort((a, b) => b.text.length - a.text.length);
    if (slots.length === 0) break;
    let excess = total - budget;
    for (const { index, slot, text } of slots) {
      if (excess <= 0) break;
      const bpe = countTokens(text);
      const tokens = Math.max(bpe, Math.ceil(text.length / 3));
      const want = excess + MARKER_TOKENS;
      let next: string;
      if (bpe <= want) {
        next = `[… ${bpe} tokens removed by context-compression …]`;
        excess -= tokens - MARKER_TOKENS;
      } else {
        const keepChars = Math.floor((text.length * (bpe - want)) / bpe);
        next = `${textHead(text, Math.floor(keepChars / 2))}\n[… ${want} tokens removed by context-compression …]\n${textTail(text, Math.ceil(keepChars / 2))}`;
        excess = 0;
      }
      slot.set(next);
      truncated.set(index, (truncated.get(index) ?? 0) + Math.max(0, bpe - countTokens(next)));
    }
    total = inputTokens({ ...body, messages: messagesOf() });
  }

  // What cannot fit goes upstream uncut: the provider refuses it either way (context_length_exceeded, which
  // routing answers by trying a fallback with a larger context), and a cut would have lost the conversation's
  // middle for nothing, for the larger model too.
  if (total > budget) return { messages: original, removed: [], truncated: [], tokensBefore, tokensAfter: tokensBefore, fits: false };

  return {
    messages: messagesOf(),
    removed,
    truncated: [...truncated].map(([index, tokens_removed]) => ({ index, tokens_removed })),
    tokensBefore,
    tokensAfter: total,
    fits: total <= budget,
  };
}
