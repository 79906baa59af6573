import { validateHeaderName, validateHeaderValue } from 'node:http';
import { isUnavailable } from './unavailable';
import { textHead } from '../text-cut';

/**
 * The one error type of the gateway. `errorType` is the stable vocabulary of spec 7.4; the HTTP status
 * follows from it. Each API style serializes it with its own envelope (see envelope.ts).
 *
 * @example throw new GatewayError('invalid_request', '`temperature` must be <= 2', { metadata: { field: 'temperature' } });
 */
export const ERROR_STATUS = {
  context_length_exceeded: 400,
  max_tokens_exceeded: 400,
  token_limit_exceeded: 400,
  string_too_long: 400,
  authentication: 401,
  permission_denied: 403,
  payment_required: 402,
  rate_limit_exceeded: 429,
  provider_overloaded: 503,
  provider_unavailable: 502,
  invalid_request: 400,
  invalid_prompt: 400,
  not_found: 404,
  /** Not in spec 7.4 (which has no type for 409): a write lost a race with another (presets); retry later. */
  conflict: 409,
  precondition_failed: 412,
  payload_too_large: 413,
  unprocessable: 422,
  content_policy_violation: 403,
  refusal: 403,
  invalid_image: 400,
  image_too_large: 400,
  image_too_small: 400,
  unsupported_image_format: 400,
  image_not_found: 404,
  image_download_failed: 400,
  server: 500,
  timeout: 504,
  unmapped: 500,
} as const;

export type ErrorType = keyof typeof ERROR_STATUS;

export interface GatewayErrorOptions {
  metadata?: Record<string, unknown>;
  /** Overrides the status derived from the error type (e.g. 408 for a client read timeout). */
  status?: number;
  /** Extra response headers, e.g. Retry-After. */
  headers?: Record<string, string>;
  /**
   * The Messages API's `error.details` (e.g. `{error_code: "thread_unsupported_request"}`), which the Anthropic
   * SDK maps to its typed error classes; written in the messages envelope only.
   */
  details?: Record<string, unknown>;
  cause?: unknown;
}

export class GatewayError extends Error {
  readonly errorType: ErrorType;
  readonly status: number;
  readonly metadata: Record<string, unknown> | undefined;
  readonly headers: Record<string, string> | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(errorType: ErrorType, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GatewayError';
    this.errorType = errorType;
    this.status = options.status ?? ERROR_STATUS[errorType];
    this.metadata = options.metadata;
    this.headers = options.headers;
    this.details = options.details;
  }
}

/**
 * `e` with `flags` added to its metadata (the flags routing reads: `after_headers`, `accepted`,
 * `untranslatable`), all else kept.
 */
export function withFlags(e: GatewayError, flags: Record<string, true>): GatewayError {
  return new GatewayError(e.errorType, e.message, { status: e.status, metadata: { ...e.metadata, ...flags }, headers: e.headers, details: e.details, cause: e.cause ?? e });
}

/** Any thrown value as a GatewayError; unknown exceptions become a typed 500 `server`. */
export function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return answerable(err) ? err : new GatewayError('server', 'Internal server error', { cause: err });
  // A store or state that cannot be reached fails the request closed, as a retryable 503 (README "Outages").
  if (isUnavailable(err)) return new GatewayError('server', 'A backing service is unavailable', { status: 503, headers: { 'Retry-After': '1' }, cause: err });
  return new GatewayError('server', 'Internal server error', { cause: err });
}

/**
 * A GatewayError that can be written as an answer: a known error type, an error status (400–599) and headers
 * Node accepts. A stage (a plugin) may build one that is not (`new GatewayError('nonsense' as never, …)`, a
 * status of 42, a header value with a line break); writing it threw inside the error handling, and the
 * request was left without its access line, span end or ledger row. Such an error is the stage's bug: a 500.
 */
function answerable(err: GatewayError): boolean {
  if (!Object.hasOwn(ERROR_STATUS, err.errorType) || !Number.isInteger(err.status) || err.status < 400 || err.status > 599) return false;
  if (!err.headers) return true;
  try {
    for (const [name, value] of Object.entries(err.headers)) {
      validateHeaderName(name);
      validateHeaderValue(name, value);
    }
  } catch {
    return false;
  }
  return true;
}

/**
 * A client's text (a model or job id) as an error message quotes it: cut at `max` characters with an ellipsis
 * (a 5 000-character path segment had been echoed whole).
 *
 * @example quoted('y'.repeat(5000)) // 200 y's and an ellipsis
 */
export function quoted(text: string, max = 200): string {
  return text.length > max ? `${textHead(text, max)}…` : text;
}
