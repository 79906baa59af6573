import { GatewayError, type ErrorType } from '../errors/gateway-error';
import { scrubbed } from './credentials';
import { textHead } from '../text-cut';

/**
 * A prompt longer than the model takes, as providers word it: OpenAI's "maximum context length is …" and
 * (GPT-5) "Input tokens exceed the configured limit of 272000 tokens", Anthropic's "prompt is too long" and
 * "input length and `max_tokens` exceed context limit", Bedrock's "Input is too long for requested model",
 * others' "context window". The provider's code `context_length_exceeded` says it too, whatever the text.
 */
const CONTEXT_LENGTH = /context[_ ](length|window|limit)|maximum context|too many (input )?tokens|prompt is too long|input is too long|input tokens exceed/i;
/**
 * The operator's provider account, not the caller's request: Anthropic's "Your credit balance is too low to
 * access the Anthropic API" (a 400 `invalid_request_error`), OpenAI's `insufficient_quota` ("You exceeded your
 * current quota", a 429) and billing errors. `provider_unavailable`: the next endpoint is tried, and the
 * caller is not told to fix (or wait out) what is the operator's to fix.
 */
const OPERATOR_ACCOUNT = /credit balance is too low|insufficient_quota|exceeded your current quota|billing_(hard_limit|not_active)|billing details/i;
const CONTENT_POLICY = /content[_ ](management[_ ])?polic|content[_ ]filter|safety system|flagged/i;
const REFUSAL = /refus/i;

interface UpstreamErrorBody {
  message: string;
  code: string;
  /** The provider's error object, small enough to hand back in `metadata.raw`. */
  raw: unknown;
  /** An Anthropic-style error's `error.details` object (`{error_code, …}`), when small. */
  details?: Record<string, unknown>;
}

/** Reads the usual error shapes: OpenAI `{error: {message, code, type}}`, Anthropic `{type: error, error: {type, message}}`, `{message}`, `{error: "…"}`. */
function readBody(text: string, credentials: readonly string[]): UpstreamErrorBody {
  try {
    // The text was scrubbed as it arrived; a key written with JSON escapes (`\u0073k-…`) is only seen once parsed.
    const body = scrubbed(JSON.parse(text), credentials) as { error?: { message?: unknown; code?: unknown; type?: unknown; details?: unknown } | string; message?: unknown };
    const err = body.error;
    const message = typeof err === 'string' ? err : typeof err?.message === 'string' ? err.message : typeof body.message === 'string' ? body.message : '';
    const code = typeof err === 'object' && err ? String(err.code ?? err.type ?? '') : '';
    const small = JSON.stringify(body).length <= 2000;
    const raw = small ? body : undefined;
    const details = small && typeof err === 'object' && err && isPlainObject(err.details) ? err.details : undefined;
    return { message: textHead(message, 500), code, raw, details };
  } catch {
    return { message: '', code: '', raw: text ? textHead(text, 500) : undefined };
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The error_type of an upstream failure from its HTTP status and, where they decide it, the provider's
 * error code and message. Shared by the provider layer and the translation of in-band stream errors.
 */
export function upstreamErrorType(status: number, code = '', message = ''): ErrorType {
  if ((status === 400 || status === 402 || status === 403 || status === 429) && OPERATOR_ACCOUNT.test(`${code} ${message}`)) return 'provider_unavailable';
  if (status === 400 || status === 403 || status === 422) {
    // A content filter or a refusal is 403 whatever the provider's own status (7.4 rule 1).
    if (CONTENT_POLICY.test(`${code} ${message}`)) return 'content_policy_violation';
    if (REFUSAL.test(code)) return 'refusal';
    if (status === 403) return 'provider_unavailable'; // our upstream credentials, not the caller's
    if (status === 422) return 'unprocessable';
    return CONTEXT_LENGTH.test(`${code} ${message}`) ? 'context_length_exceeded' : 'invalid_request';
  }
  if (status === 401 || status === 404) return 'provider_unavailable'; // our credentials or model name
  if (status === 408 || status === 504) return 'timeout';
  if (status === 413) return CONTEXT_LENGTH.test(`${code} ${message}`) ? 'context_length_exceeded' : 'payload_too_large';
  if (status === 429) return 'rate_limit_exceeded';
  if (status === 503 || status === 529) return 'provider_overloaded';
  return 'provider_unavailable';
}

/** Error types whose upstream message tells the caller what to fix (others would only show provider internals). */
const CALLER_FACING = new Set<ErrorType>(['invalid_request', 'context_length_exceeded', 'unprocessable', 'payload_too_large', 'content_policy_violation', 'refusal']);

export function callerFacing(type: ErrorType): boolean {
  return CALLER_FACING.has(type);
}

/**
 * Maps an upstream HTTP error to the gateway's error_type (spec 7.4), once, for every provider: by status,
 * then by the body's code and message (context length, content policy, refusal). The upstream message is
 * kept where it tells the caller what to fix; `metadata` carries `provider_name`, `provider_code` (the
 * upstream status) and `raw` (the provider's error object, when small); a caller-facing error keeps an
 * Anthropic-style `error.details` for the messages envelope.
 */
export function classifyUpstreamError(status: number, bodyText: string, providerId: string, retryAfter?: string | string[], credentials: readonly string[] = []): GatewayError {
  const body = readBody(bodyText, credentials);
  const type = upstreamErrorType(status, body.code, body.message);
  const message = callerFacing(type) && body.message ? body.message : `Provider ${providerId} returned HTTP ${status}`;
  let headers: Record<string, string> | undefined =
    typeof retryAfter === 'string' && (type === 'rate_limit_exceeded' || type === 'provider_overloaded') ? { 'retry-after': retryAfter } : undefined;
  // The provider refused our credentials or does not know the model (answered 502): the same request fails the
  // same way until the operator changes the config, so the official SDKs are told not to retry it (they read
  // `x-should-retry` before the status).
  if (type === 'provider_unavailable' && (status === 401 || status === 403 || status === 404)) headers = { 'x-should-retry': 'false' };
  const metadata: Record<string, unknown> = { provider_name: providerId, provider_code: status };
  // Not for a refusal of the operator's credentials (401, 403 that is no content policy): the caller has
  // nothing to read there, and a provider's error quoting the refused key in another form (upper-cased,
  // encoded) would carry it past the scrubbing.
  if (body.raw !== undefined && !((status === 401 || status === 403) && type === 'provider_unavailable')) metadata.raw = body.raw;
  // The details of an error that is the caller's to fix go to a messages client as the provider sent them
  // (the Anthropic SDK's typed errors read `error.details.error_code`); not for errors this gateway maps to
  // another status (a provider's 401/404 is the operator's, answered 502).
  const details = callerFacing(type) ? body.details : undefined;
  return new GatewayError(type, message, { metadata, headers, details });
}
