import { chatUsage, chatUsageBody } from '../dialects/chat-completions';
import { keyAt, num } from '../dialects/common';
import { messagesUsageBody } from '../dialects/messages';
import type { NormalizedUsage, SseEvent } from '../pipeline/types';
import { roundUsd } from './pricing';

/*
 * Totals over several upstream calls made for one client request (fusion's candidates and judge, a
 * server-tool loop's turns): the ledger bills the sum, and the answer's `usage` shows it.
 */

type Obj = Record<string, unknown>;
type Dialect = 'chat_completions' | 'messages';
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** Sum of usages; null when none is known. */
export function addUsage(list: (NormalizedUsage | null)[]): NormalizedUsage | null {
  const known = list.filter((u): u is NormalizedUsage => u !== null);
  if (known.length === 0) return null;
  const sum = (f: Exclude<keyof NormalizedUsage, 'calls'>) => known.reduce((s, u) => s + (u[f] ?? 0), 0);
  const hour = sum('cacheWrite1hTokens');
  return {
    inputTokens: sum('inputTokens'),
    outputTokens: sum('outputTokens'),
    cachedTokens: sum('cachedTokens'),
    cacheWriteTokens: sum('cacheWriteTokens'),
    ...(hour > 0 ? { cacheWrite1hTokens: hour } : {}),
    reasoningTokens: sum('reasoningTokens'),
  };
}

/** Sum of costs, rounded as each cost is (0.1 + 0.2 is no 0.30000000000000004 in an answer); null when none is known. */
export function addCost(list: (number | null)[]): number | null {
  const known = list.filter((c): c is number => typeof c === 'number');
  return known.length === 0 ? null : roundUsd(known.reduce((s, c) => s + c, 0));
}

/**
 * Puts the totals in a JSON answer's `usage` (what the client is billed), keeping the gateway's `is_byok`
 * stamp: chat `prompt_tokens`/`completion_tokens`/…/`cost`, messages `input_tokens`/`output_tokens`/…/`cost`.
 */
export function setTotalUsage(dialect: Dialect, body: Obj, usage: NormalizedUsage, cost: number | null): void {
  const before = isObj(body.usage) ? body.usage : {};
  const shaped = dialect === 'chat_completions' ? chatUsageBody(usage) : messagesUsageBody(usage);
  body.usage = { ...shaped, ...(cost !== null ? { cost } : {}), ...('is_byok' in before ? { is_byok: before.is_byok } : {}) };
}

/** The input-side counts of a messages `usage`: message_start carries them, message_delta when it repeats them. */
const MESSAGES_INPUT = ['input_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'] as const;

/**
 * A client-dialect stream event with the usage and cost of earlier calls (fusion's candidates) added to the
 * usage it carries, so a stream shows what the request is billed, as `setTotalUsage` makes a JSON answer
 * show: chat, a chunk's `usage` (the totals re-shaped, `cost` summed); messages, `message_start`'s input-side
 * counts, and `message_delta`'s `output_tokens`, the input-side counts it repeats and its `cost` (the
 * Anthropic SDK keeps message_start's input unless message_delta repeats it). Other events pass as they are.
 *
 * @example withUsageAdded('chat_completions', ev, candidatesUsage, candidatesCost)
 */
export function withUsageAdded(dialect: Dialect, ev: SseEvent, usage: NormalizedUsage | null, cost: number | null): SseEvent {
  if (!usage && cost === null) return ev;
  if (dialect === 'chat_completions') {
    if (keyAt(ev.data, 'usage":{') < 0) return ev;
    const data = JSON.parse(ev.data) as Obj;
    if (!isObj(data.usage)) return ev;
    const total = addUsage([chatUsage(data.usage), usage])!;
    data.usage = { ...data.usage, ...chatUsageBody(total), ...summedCost(data.usage, cost) };
    return { ...ev, data: JSON.stringify(data) };
  }
  if (ev.event !== 'message_start' && ev.event !== 'message_delta') return ev;
  const data = JSON.parse(ev.data) as Obj;
  const target = ev.event === 'message_start' ? (isObj(data.message) ? data.message.usage : undefined) : data.usage;
  if (!isObj(target)) return ev;
  const shaped = usage ? messagesUsageBody(usage) : {};
  for (const k of MESSAGES_INPUT) {
    if (ev.event === 'message_start' || typeof target[k] === 'number') target[k] = num(target[k]) + num(shaped[k]);
  }
  if (ev.event === 'message_delta') Object.assign(target, { output_tokens: num(target.output_tokens) + num(shaped.output_tokens) }, summedCost(target, cost));
  return { ...ev, data: JSON.stringify(data) };
}

/** `{cost}` of a usage object plus `cost`, when the usage shows one (the gateway stamps it on usage it relays). */
function summedCost(target: Obj, cost: number | null): Obj {
  return typeof target.cost === 'number' ? { cost: addCost([target.cost, cost]) } : {};
}
