import type { NormalizedUsage } from '../pipeline/types';

/**
 * Request fields that steer the gateway itself and never go upstream. Everything else, including fields
 * the gateway does not know, is forwarded untouched.
 */
export const GATEWAY_ONLY_FIELDS: readonly string[] = [
  'models',
  'fallbacks',
  'provider',
  'plugins',
  'route',
  'session_id',
  'trace',
  'debug',
  'deferred_tools',
  'stop_server_tools_when',
  'speed',
  'safeguards',
  'preset',
  'transforms',
  'usage',
];

/** A shallow copy without gateway-only fields and with the upstream model. */
export function stripGatewayFields(body: Record<string, unknown>, upstreamModel: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k in body) {
    if (!GATEWAY_ONLY_FIELDS.includes(k)) out[k] = body[k];
  }
  out.model = upstreamModel;
  return out;
}

/** Chat `n`: how many choices a request asks for (1 unless it is an integer above 1; the schema caps it at 128). */
export function choiceCount(body: Record<string, unknown>): number {
  return typeof body.n === 'number' && Number.isInteger(body.n) && body.n > 1 ? body.n : 1;
}

export function num(v: unknown): number {
  // A negative count (a provider's bug) would lower the bill and the key's spend: it counts as none.
  return typeof v === 'number' && v >= 0 && v < Infinity ? v : 0;
}

/** The Messages API's split of `written` cache-write tokens by cache lifetime (`hour` of them for 1 hour). */
export function cacheCreation(written: number, hour: number): Record<string, number> {
  return { ephemeral_5m_input_tokens: Math.max(0, written - hour), ephemeral_1h_input_tokens: hour };
}

/** A JSON object as the translators handle it. */
export type Obj = Record<string, any>;

export function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Copies the usage fields of a stream event that are present into `into`; later events overwrite earlier ones,
 * except that a count never goes down: the counts are cumulative, and some Anthropic-compatible servers
 * (sglang) send `input_tokens: 0` in message_delta after message_start gave the real count (taken as sent,
 * the request was billed no input). Used by the messages rewriter and the messages → chat translator.
 */
export function mergeUsage(into: Obj, u: unknown): void {
  if (!isObj(u)) return;
  for (const [k, v] of Object.entries(u)) {
    if (v === null || v === undefined) continue;
    if (typeof v === 'number' && typeof into[k] === 'number' && v < into[k]) continue;
    into[k] = v;
  }
}

/** A usage of nothing: what a usage body shows when the provider reported none. */
export const NO_USAGE: Readonly<NormalizedUsage> = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 };

/**
 * Where `data` (JSON text) has the key whose name and what follows are `keyTail` (the key without its opening
 * quote), from `from` on, with that quote checked (`"finish_reason":"` exactly, not a longer key ending the
 * same way): the index of the key's opening quote, or -1. Inside JSON strings every quote is escaped, so a
 * match is a real key. The search leaves the quote out because JSON is full of quotes: a search that starts
 * with one stops at each (`"usage":{` took ~175 ns in a 250-character chunk, `usage":{` ~40 ns).
 *
 * @example keyAt('{"usage":null}', 'usage":') // 1
 */
export function keyAt(data: string, keyTail: string, from = 0): number {
  for (let i = data.indexOf(keyTail, from + 1); i >= 0; i = data.indexOf(keyTail, i + 1)) if (data.charCodeAt(i - 1) === 34) return i - 1;
  return -1;
}
