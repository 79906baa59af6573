import { keysMasked, withoutGatewayKeys } from '../telemetry/span-text';
import { GatewayError, type ErrorType } from './gateway-error';

/** The API style a response is written in; decides the error envelope. */
export type ApiStyle = 'standard' | 'messages';

const GENERIC_500 = 'Internal server error';

/** Spec 7.3: internal error_type → messages-style `error.type`. */
const MESSAGES_TYPE: Partial<Record<ErrorType, string>> = {
  authentication: 'authentication_error',
  permission_denied: 'permission_error',
  payment_required: 'billing_error',
  not_found: 'not_found_error',
  image_not_found: 'not_found_error',
  rate_limit_exceeded: 'rate_limit_error',
  provider_overloaded: 'overloaded_error',
  timeout: 'timeout_error',
  provider_unavailable: 'api_error',
  server: 'api_error',
  unmapped: 'api_error',
};

export function messagesErrorType(errorType: ErrorType): string {
  return MESSAGES_TYPE[errorType] ?? 'invalid_request_error';
}

/**
 * The HTTP status for an error in a given style. Messages style answers an overloaded provider with 529
 * (spec 7.2), the standard style with 503 (7.4).
 */
export function statusFor(err: GatewayError, style: ApiStyle): number {
  if (style === 'messages' && err.errorType === 'provider_overloaded' && err.status === 503) return 529;
  return err.status;
}

/** Spec 7.4 rule 3: a 500 (`server`, `unmapped`) shows a generic message, no provider details and no routing metadata. */
export function masked(err: GatewayError): boolean {
  return err.status >= 500 && (err.errorType === 'server' || err.errorType === 'unmapped');
}

/**
 * The message a caller may see, in an envelope or an in-band stream error. A gateway key the request put
 * where a message quotes it (a key pasted into `model`, `models`, `provider.only`) is masked as its label
 * (`sk-gw-v1-...abcd`), as in the spans: error bodies end up in client logs and proxies.
 */
export function publicMessage(err: GatewayError): string {
  return masked(err) ? GENERIC_500 : withoutGatewayKeys(err.message);
}

function publicParts(err: GatewayError): { message: string; metadata: Record<string, unknown> } {
  if (masked(err)) return { message: GENERIC_500, metadata: { error_type: err.errorType } };
  return { message: publicMessage(err), metadata: { ...(keysMasked(err.metadata) as object | undefined), error_type: err.errorType } };
}

/** Standard envelope (7.1): `{error: {code, message, metadata}}`; `error_type` in `metadata`. */
export function standardEnvelope(err: GatewayError, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { message, metadata } = publicParts(err);
  return { error: { code: err.status, message, metadata }, ...extra };
}

/**
 * Messages envelope (7.3): `{type: error, error: {type, message, error_type, details?}, request_id, metadata?}`.
 * `details` is the Messages API's own (its `error_code` picks the Anthropic SDK's typed error class).
 */
export function messagesEnvelope(err: GatewayError, requestId: string | null): Record<string, unknown> {
  const { message, metadata } = publicParts(err);
  const { error_type, ...rest } = metadata;
  const error: Record<string, unknown> = { type: messagesErrorType(err.errorType), message, error_type };
  if (err.details && !masked(err)) error.details = keysMasked(err.details);
  const body: Record<string, unknown> = {
    type: 'error',
    error,
    request_id: requestId,
  };
  if (Object.keys(rest).length > 0) body.metadata = rest;
  return body;
}

export function errorBody(err: GatewayError, style: ApiStyle, requestId: string | null): Record<string, unknown> {
  return style === 'messages' ? messagesEnvelope(err, requestId) : standardEnvelope(err);
}
