import { Agent, request, errors as undiciErrors } from 'undici';
import { GatewayError, type ErrorType } from '../errors/gateway-error';
import { parseSse } from './sse';
import type { UpstreamCall, UpstreamReply } from './types';

/** One keep-alive connection pool per upstream origin, shared by every provider and every config reload. */
const agent = new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 600_000, connections: 256, pipelining: 1 });

export interface PostInput {
  url: string;
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
  timeoutMs: number;
  providerId: string;
}

export interface PostResult {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: AsyncIterable<Uint8Array> & { text(): Promise<string>; json(): Promise<unknown> };
}

/** POSTs JSON upstream; a non-2xx answer is read and thrown as a classified GatewayError. */
export async function postUpstream(input: PostInput): Promise<PostResult> {
  let res;
  try {
    res = await request(input.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...input.headers },
      body: input.body,
      signal: input.signal,
      dispatcher: agent,
      headersTimeout: input.timeoutMs,
      bodyTimeout: input.timeoutMs,
    });
  } catch (err) {
    throw networkError(err, input.providerId);
  }
  if (res.statusCode >= 200 && res.statusCode < 300) return { status: res.statusCode, headers: res.headers, body: res.body };
  const text = await res.body.text().catch(() => '');
  throw classifyUpstreamError(res.statusCode, text, input.providerId, res.headers['retry-after']);
}

/** Sends one call as JSON and returns the parsed answer, or its events when streaming. */
export async function sendJson(input: {
  url: string;
  headers: Record<string, string>;
  call: UpstreamCall;
  timeoutMs: number;
  providerId: string;
}): Promise<UpstreamReply> {
  const { call, providerId } = input;
  const res = await postUpstream({
    url: input.url,
    headers: call.stream ? { ...input.headers, accept: 'text/event-stream' } : input.headers,
    body: JSON.stringify(call.body),
    signal: call.signal,
    timeoutMs: input.timeoutMs,
    providerId,
  });
  if (call.stream) return { stream: true, events: parseSse(upstreamBytes(res.body, providerId)) };
  return { stream: false, body: (await res.body.json()) as Record<string, unknown> };
}

/** Wraps a body iterator so network failures mid-stream surface as GatewayErrors too. */
export async function* upstreamBytes(body: AsyncIterable<Uint8Array>, providerId: string): AsyncGenerator<Uint8Array> {
  try {
    for await (const chunk of body) yield chunk;
  } catch (err) {
    throw networkError(err, providerId);
  }
}

function networkError(err: unknown, providerId: string): GatewayError {
  if (err instanceof GatewayError) return err;
  const name = (err as Error)?.name;
  if (name === 'AbortError') {
    return new GatewayError('timeout', 'Request aborted', { metadata: { provider_name: providerId }, cause: err });
  }
  const timeout =
    err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError;
  return new GatewayError(
    timeout ? 'timeout' : 'provider_unavailable',
    timeout ? `Provider ${providerId} timed out` : `Provider ${providerId} could not be reached`,
    { metadata: { provider_name: providerId }, cause: err },
  );
}

const CONTEXT_LENGTH = /context[_ ]length|maximum context|too many tokens|prompt is too long/i;

/**
 * Maps an upstream HTTP error to the gateway's error_type (spec 7.4). The upstream message is kept for
 * 4xx answers (it tells the caller what to fix); the upstream status goes to `metadata.provider_code`.
 */
export function classifyUpstreamError(
  status: number,
  bodyText: string,
  providerId: string,
  retryAfter?: string | string[],
): GatewayError {
  const upstreamMessage = extractMessage(bodyText);
  let type: ErrorType;
  if (status === 400) type = CONTEXT_LENGTH.test(upstreamMessage) ? 'context_length_exceeded' : 'invalid_request';
  else if (status === 401 || status === 403) type = 'provider_unavailable'; // our upstream credentials, not the caller's
  else if (status === 404) type = 'provider_unavailable';
  else if (status === 408 || status === 504) type = 'timeout';
  else if (status === 413) type = CONTEXT_LENGTH.test(upstreamMessage) ? 'context_length_exceeded' : 'payload_too_large';
  else if (status === 422) type = 'unprocessable';
  else if (status === 429) type = 'rate_limit_exceeded';
  else if (status === 503 || status === 529) type = 'provider_overloaded';
  else type = 'provider_unavailable';
  const callerFacing = type === 'invalid_request' || type === 'context_length_exceeded' || type === 'unprocessable' || type === 'payload_too_large';
  const message = callerFacing && upstreamMessage ? upstreamMessage : `Provider ${providerId} returned HTTP ${status}`;
  const headers = typeof retryAfter === 'string' && (type === 'rate_limit_exceeded' || type === 'provider_overloaded') ? { 'retry-after': retryAfter } : undefined;
  return new GatewayError(type, message, { metadata: { provider_name: providerId, provider_code: status }, headers });
}

function extractMessage(text: string): string {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    if (typeof body.error === 'string') return body.error.slice(0, 500);
    if (body.error && typeof body.error.message === 'string') return body.error.message.slice(0, 500);
    if (typeof body.message === 'string') return body.message.slice(0, 500);
  } catch {
    // not JSON: fall through to no message
  }
  return '';
}

/** Whether another endpoint may be tried after this error (nothing has reached the caller yet). */
export function isRetryable(err: GatewayError): boolean {
  return !['invalid_request', 'context_length_exceeded', 'unprocessable', 'payload_too_large'].includes(err.errorType);
}

export async function closeUpstreamPool(): Promise<void> {
  await agent.close();
}
