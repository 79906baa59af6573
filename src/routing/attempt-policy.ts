import type { GatewayError } from '../errors/gateway-error';

/** What routing does after a failed attempt (nothing has reached the caller yet). */
export type NextStep =
  | { kind: 'retry_same'; waitMs: number }
  | { kind: 'next_endpoint' }
  | { kind: 'next_model' }
  | { kind: 'larger_context' }
  | { kind: 'stop' };

export interface PolicyContext {
  /** This endpoint was already retried once for this request. */
  retriedSame: boolean;
  /** No other candidate endpoint is left after this one. */
  lastCandidate: boolean;
  /** Longest Retry-After worth waiting out (routing.retry_wait_max_ms). */
  retryWaitMaxMs: number;
}

/** Retry-After in milliseconds: delta-seconds or an HTTP date; null when absent or unreadable. */
export function retryAfterMs(value: string | undefined, now = Date.now()): number | null {
  if (!value) return null;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.round(Number(value) * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/**
 * The attempt policy, per error class:
 * - a caller mistake (`invalid_request`, `unprocessable`, `payload_too_large`) is never retried;
 * - `context_length_exceeded` skips to a model with a larger context;
 * - `content_policy_violation` and `refusal` are not retried on the same model;
 * - a transient upstream 5xx or a connection failure before headers is retried once on the same endpoint; an
 *   answer the endpoint began (2xx) and then broke fails over instead;
 * - 429 and overload fail over; when no other endpoint is left and the provider's Retry-After is within
 *   `retryWaitMaxMs`, it is waited out and the same endpoint is tried once more;
 * - a timeout fails over at once (a silent upstream costs one timeout, never several).
 *
 * @example nextStep(err, { retriedSame: false, lastCandidate: true, retryWaitMaxMs: 2000 })
 */
export function nextStep(err: GatewayError, ctx: PolicyContext): NextStep {
  if (CALLER_MISTAKES.has(err.errorType)) return { kind: 'stop' };
  switch (err.errorType) {
    case 'context_length_exceeded':
      return { kind: 'larger_context' };
    case 'content_policy_violation':
    case 'refusal':
      return { kind: 'next_model' };
    case 'timeout':
      return { kind: 'next_endpoint' };
    case 'rate_limit_exceeded':
    case 'provider_overloaded': {
      const wait = retryAfterMs(err.headers?.['retry-after']);
      if (ctx.lastCandidate && !ctx.retriedSame && wait !== null && wait <= ctx.retryWaitMaxMs) return { kind: 'retry_same', waitMs: wait };
      return { kind: 'next_endpoint' };
    }
    case 'provider_unavailable': {
      const code = err.metadata?.provider_code;
      // A reset connection or an upstream 500/502 is transient; a refused connection is not (fail over). An
      // endpoint that answered 2xx and then broke its answer (a body cut off, an error in it, a stream that
      // failed before output) has failed this request: the next endpoint is tried (it had been asked again).
      const transient = !answered(err) && (code === 500 || code === 502 || (code === undefined && err.metadata?.network === 'reset'));
      if (transient && !ctx.retriedSame) return { kind: 'retry_same', waitMs: 0 };
      return { kind: 'next_endpoint' };
    }
    default:
      return { kind: 'next_endpoint' };
  }
}

/** The endpoint had answered 2xx when it failed (flags set by the provider layer and by routing's stream wait). */
function answered(err: GatewayError): boolean {
  return err.metadata?.after_headers === true || err.metadata?.accepted === true;
}

/** Errors in what the caller sent: no endpoint would answer differently, so none is tried again. */
const CALLER_MISTAKES: ReadonlySet<string> = new Set([
  'invalid_request', 'invalid_prompt', 'unprocessable', 'payload_too_large', 'max_tokens_exceeded', 'token_limit_exceeded', 'string_too_long',
]);

/** Errors that say nothing about the endpoint's health (the caller's input or the content was the cause). */
export function blamesCaller(err: GatewayError): boolean {
  return CALLER_MISTAKES.has(err.errorType) || err.errorType === 'context_length_exceeded' || err.errorType === 'content_policy_violation' || err.errorType === 'refusal';
}
