import { chatUsageBody } from '../dialects/chat-completions';
import { messagesUsageBody } from '../dialects/messages';
import type { NormalizedUsage } from '../pipeline/types';
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
