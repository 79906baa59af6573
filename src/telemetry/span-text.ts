import { textHead } from '../text-cut';

/** Longest text a request can put into a span (a name, an attribute value). */
const SPAN_TEXT_MAX = 256;
/** A gateway key (`sk-gw-v1-` + hex), whole or cut. */
const GATEWAY_KEY = /sk-gw-v1-[0-9a-f]{4,}/g;

/**
 * A gateway key in `text` shown as its label would be (`sk-gw-v1-...abcd`): a client that pastes its key
 * into `model`, `user` or a trace field must not find it in the traces (error messages quote such fields).
 *
 * @example withoutGatewayKeys('Model `sk-gw-v1-0123…cdef` is not available') // 'Model `sk-gw-v1-...cdef` is not available'
 */
export function withoutGatewayKeys(text: string): string {
  return text.includes('sk-gw-v1-') ? text.replace(GATEWAY_KEY, (k) => `sk-gw-v1-...${k.slice(-4)}`) : text;
}

/** The longest string a span keeps (an attribute value, a status message): longer ones are cut. */
export const SPAN_VALUE_MAX = 4096;

/** Text from a request for a span: cut to 256 characters, gateway keys masked. */
export function spanText(text: string): string {
  return withoutGatewayKeys(textHead(text, SPAN_TEXT_MAX));
}

/**
 * A copy of `value` with every gateway key in its strings masked (objects and arrays, a few levels deep; an
 * object's own keys are masked too). Error bodies (envelope.ts) and logged errors (log.ts) go through it.
 */
export function keysMasked(value: unknown, levels = 5): unknown {
  if (typeof value === 'string') return withoutGatewayKeys(value);
  if (levels <= 0 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => keysMasked(v, levels - 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[withoutGatewayKeys(k)] = keysMasked(v, levels - 1);
  return out;
}
