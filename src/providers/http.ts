import type { Dispatcher } from 'undici';
import { Agent, errors as undiciErrors } from '../net/undici-parts';
import { GatewayError, withFlags } from '../errors/gateway-error';
import type { AbortWatch } from '../pipeline/request-abort';
import { credentialsIn, withoutCredentials, withoutEscapedCredentials } from './credentials';
import { classifyUpstreamError } from './upstream-errors';
import { isJsonBody, jsonAsEvents, malformedAnswer, reportedFailure } from './json-stream';
import { batched, parseSseBatches } from './sse';
import type { UpstreamCall, UpstreamReply } from './types';

/**
 * Keep-alive connection pools per upstream origin, shared by every provider and every config reload; one
 * agent per connect timeout (undici sets that per agent, the other timeouts per call).
 */
const agents = new Map<number, Agent>();
export function agentFor(connectTimeoutMs: number): Agent {
  let agent = agents.get(connectTimeoutMs);
  if (!agent) {
    agent = new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 600_000, connections: 256, pipelining: 1, connect: { timeout: connectTimeoutMs } });
    agents.set(connectTimeoutMs, agent);
  }
  return agent;
}

/** The largest answer read whole (a JSON answer, an error body): past it the call fails rather than hold it all. */
export const MAX_WHOLE_BODY_BYTES = 64 * 1024 * 1024;

function tooLarge(providerId: string): GatewayError {
  return new GatewayError('provider_unavailable', `Provider ${providerId} sent an answer over ${MAX_WHOLE_BODY_BYTES / 1024 / 1024} MB`, {
    metadata: { provider_name: providerId },
  });
}

/** A provider's per-attempt timeouts, resolved from its config. */
export interface Timeouts {
  connectMs: number;
  headersMs: number;
  /** Streams: from response headers to the first event (enforced by routing, which owns the first event). */
  firstTokenMs: number;
  /** Longest gap between two body chunks. */
  idleMs: number;
}

export function timeoutsOf(config: { timeout_ms: number; connect_timeout_ms: number; headers_timeout_ms?: number; first_token_timeout_ms?: number; idle_timeout_ms?: number }): Timeouts {
  return {
    connectMs: config.connect_timeout_ms,
    headersMs: config.headers_timeout_ms ?? config.timeout_ms,
    firstTokenMs: config.first_token_timeout_ms ?? config.timeout_ms,
    idleMs: config.idle_timeout_ms ?? config.timeout_ms,
  };
}

/** Where a provider's calls go, split once when the provider is built (not per request). */
export interface UpstreamTarget {
  origin: string;
  path: string;
}

/** `https://api.openai.com/v1` + `/chat/completions` → origin and path. */
export function upstreamTarget(baseUrl: string, suffix: string): UpstreamTarget {
  const url = new URL(`${baseUrl.replace(/\/+$/, '')}${suffix}`);
  return { origin: url.origin, path: url.pathname + url.search };
}

/**
 * `headers` with `name` set to `value`, replacing any spelling of it (an operator's `headers:` may say
 * `Authorization`): used for a per-call API key.
 *
 * @example withHeader(headers, 'authorization', `Bearer ${call.apiKey}`)
 */
export function withHeader(headers: Record<string, string>, name: string, value: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() !== name) out[k] = v;
  out[name] = value;
  return out;
}

export interface PostInput {
  target: UpstreamTarget;
  headers: Record<string, string>;
  body: string | Buffer;
  signal: AbortWatch;
  timeouts: Timeouts;
  providerId: string;
}

/**
 * An upstream answer as it arrives. Built on undici's dispatch API rather than `request()`: no Readable
 * stream and no AbortController per call (the profile showed both on the hot path); a client going away
 * aborts the upstream call through the dispatch controller.
 */
class UpstreamExchange implements Dispatcher.DispatchHandler {
  status = 0;
  headers: Record<string, string | string[] | undefined> = {};
  private controller: Dispatcher.DispatchController | undefined;
  private chunks: Buffer[] = [];
  /** `text()` is reading: the whole body is wanted, so reading never pauses (only a stream's reader resumes). */
  private whole = false;
  private held = 0;
  private done = false;
  private error: Error | undefined;
  private wake: (() => void) | undefined;
  private started: { resolve: () => void; reject: (e: Error) => void } | undefined;
  readonly responseStarted: Promise<void>;

  constructor(
    private readonly signal: AbortWatch,
    private readonly providerId: string,
  ) {
    this.responseStarted = new Promise((resolve, reject) => (this.started = { resolve, reject }));
    this.responseStarted.catch(() => undefined);
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  private readonly onAbort = () => {
    this.abort(Object.assign(new Error('Request aborted'), { name: 'AbortError' }));
  };

  /** Cuts the call off: a pending read fails with `reason`. */
  abort(reason: Error): void {
    if (this.controller && !this.done) this.controller.abort(reason);
    else this.fail(reason);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.signal.aborted) this.onAbort();
  }

  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.status = statusCode;
    this.headers = headers;
    this.started?.resolve();
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.chunks.push(chunk);
    this.held += chunk.length;
    if (this.whole) {
      if (this.held > MAX_WHOLE_BODY_BYTES) this.abort(tooLarge(this.providerId));
    } else if (this.chunks.length > 64) {
      // Backpressure: a slow client makes the gateway stop reading from the provider (its stream's reader resumes).
      controller.pause();
    }
    this.notify();
  }

  onResponseEnd(): void {
    this.done = true;
    this.cleanup();
    this.notify();
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    this.fail(err);
  }

  private fail(err: Error): void {
    this.error = err;
    this.done = true;
    this.cleanup();
    this.started?.reject(err);
    this.notify();
  }

  private cleanup(): void {
    this.signal.removeEventListener('abort', this.onAbort);
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** The whole body, once it has arrived. */
  async text(): Promise<string> {
    // A body read whole was paused after 64 chunks with nothing to resume it (undici's body timeout does not run
    // while paused): a JSON answer over ~1 MB on TLS, or ~5 MB on plain HTTP, hung its request for good.
    this.whole = true;
    if (this.held > MAX_WHOLE_BODY_BYTES) this.abort(tooLarge(this.providerId));
    if (this.controller?.paused) this.controller.resume();
    while (!this.done) await new Promise<void>((r) => (this.wake = r));
    if (this.error) throw this.error;
    return this.chunks.length === 1 ? this.chunks[0].toString('utf8') : Buffer.concat(this.chunks).toString('utf8');
  }

  /** The body as it arrives (chunks that arrived together as one); a failure mid-body surfaces as a classified GatewayError. */
  async *bytes(): AsyncGenerator<Buffer> {
    try {
      for (;;) {
        if (this.chunks.length > 0) {
          const batch = this.chunks;
          this.chunks = [];
          this.held = 0;
          if (this.controller?.paused) this.controller.resume();
          // What arrived together is passed on together (the SSE parser then gives its events as one batch).
          yield batch.length === 1 ? batch[0] : Buffer.concat(batch);
          continue;
        }
        if (this.error) throw networkError(this.error, this.providerId, true);
        if (this.done) return;
        await new Promise<void>((r) => (this.wake = r));
      }
    } finally {
      // The consumer stopped early (client gone, or a failure): stop reading from the provider.
      if (!this.done) this.controller?.abort(new Error('consumer stopped'));
      this.cleanup();
    }
  }
}

/**
 * POSTs JSON upstream and resolves when the response starts; a non-2xx answer is read and thrown as a
 * classified GatewayError, network failures too.
 */
export async function postUpstream(input: PostInput): Promise<UpstreamExchange> {
  const exchange = new UpstreamExchange(input.signal, input.providerId);
  try {
    agentFor(input.timeouts.connectMs).dispatch(
      {
        origin: input.target.origin,
        path: input.target.path,
        method: 'POST',
        // Providers build their headers with the content type once; other callers get it added here.
        headers: input.headers['content-type'] === undefined ? { 'content-type': 'application/json', ...input.headers } : input.headers,
        body: input.body,
        headersTimeout: input.timeouts.headersMs,
        bodyTimeout: input.timeouts.idleMs,
      },
      exchange,
    );
    await exchange.responseStarted;
  } catch (err) {
    throw networkError(err, input.providerId);
  }
  if (exchange.status >= 200 && exchange.status < 300) return exchange;
  const credentials = credentialsIn(input.headers);
  const text = withoutCredentials(await exchange.text().catch(() => ''), credentials);
  throw classifyUpstreamError(exchange.status, text, input.providerId, exchange.headers['retry-after'], credentials);
}

/** Sends one call as JSON and returns the parsed answer, or its events when streaming. */
export async function sendJson(input: {
  target: UpstreamTarget;
  headers: Record<string, string>;
  /** `credentialsIn(headers)`, when the caller has it already (a provider's own headers: worked out once). */
  credentials?: string[];
  call: UpstreamCall;
  timeouts: Timeouts;
  providerId: string;
}): Promise<UpstreamReply> {
  const { call, providerId } = input;
  const exchange = await postUpstream({
    target: input.target,
    headers: call.stream ? { ...input.headers, accept: 'text/event-stream' } : input.headers,
    body: call.encodedBody ? call.encodedBody() : JSON.stringify(call.body),
    signal: call.abort ?? call.signal,
    timeouts: input.timeouts,
    providerId,
  });
  if (!call.stream) call.accepted?.();
  // An answer may carry the key back too (an in-band error event, or a 2xx body holding an error).
  const credentials = input.credentials ?? credentialsIn(input.headers);
  if (call.stream && !isJsonBody(exchange.headers['content-type'])) {
    return { stream: true, events: batched(() => parseSseBatches(exchange.bytes(), credentials, true)), abort: (reason) => exchange.abort(reason) };
  }
  let text: string;
  try {
    text = withoutEscapedCredentials(withoutCredentials(await exchange.text(), credentials), credentials);
  } catch (err) {
    // The provider had already answered 2xx: spec 7.5.4 gives the caller a 200 holding only the error.
    throw afterHeaders(networkError(err, providerId, true));
  }
  if (call.stream) {
    // A 2xx JSON body where events were asked for: an error keeps its type, a whole answer is streamed.
    let events;
    try {
      events = jsonAsEvents(call.dialect, text, providerId);
    } catch (err) {
      throw afterHeaders(err as GatewayError);
    }
    return { stream: true, events: batched(async function* () { yield events; }) };
  }
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new GatewayError('provider_unavailable', `Provider ${providerId} returned a body that is not JSON`, {
      metadata: { provider_name: providerId },
    });
  }
  // A 2xx body that reports a failure is a failed attempt (the next endpoint is tried), failed after headers (7.5.4).
  const failure = reportedFailure(call.dialect, body, providerId);
  if (failure) throw afterHeaders(failure);
  const wrong = malformedAnswer(call.dialect, body);
  if (wrong) throw new GatewayError('provider_unavailable', `Provider ${providerId} returned an invalid response (${wrong})`, { metadata: { provider_name: providerId } });
  return { stream: false, body };
}

/** `e` flagged as a failure after the provider answered 2xx (routing reads it: see attempt-policy and dispatch). */
const afterHeaders = (e: GatewayError): GatewayError => withFlags(e, { after_headers: true });

/** A failed call as the GatewayError it stands for; `midAnswer`: the provider had begun its answer (a cut, not an unreachable host). */
function networkError(err: unknown, providerId: string, midAnswer = false): GatewayError {
  if (err instanceof GatewayError) return err;
  const name = (err as Error)?.name;
  if (name === 'AbortError') {
    return new GatewayError('timeout', 'Request aborted', { metadata: { provider_name: providerId }, cause: err });
  }
  const timeout =
    err instanceof undiciErrors.HeadersTimeoutError ||
    err instanceof undiciErrors.BodyTimeoutError ||
    err instanceof undiciErrors.ConnectTimeoutError;
  if (timeout) return new GatewayError('timeout', `Provider ${providerId} timed out`, { metadata: { provider_name: providerId }, cause: err });
  // Nobody listening is not a blip worth an immediate retry; a connection reset is.
  const code = (err as { code?: string; cause?: { code?: string } })?.code ?? (err as { cause?: { code?: string } })?.cause?.code;
  const unreachable = code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH' || code === 'EAI_AGAIN';
  const message = midAnswer ? `Provider ${providerId} broke off its answer (connection lost)` : `Provider ${providerId} could not be reached`;
  return new GatewayError('provider_unavailable', message, {
    metadata: { provider_name: providerId, ...(unreachable ? { network: 'unreachable' } : { network: 'reset' }) },
    cause: err,
  });
}
/**
 * Closes the upstream pools, last in a shutdown (after the drain): a call still running then is one nothing
 * waits for (a timed-out video job's cancel) and is ended, not waited for (undici's `close()` waited for it,
 * up to the provider's `timeout_ms`, holding the exit past the supervisor's grace period).
 */
export async function closeUpstreamPool(): Promise<void> {
  await Promise.all([...agents.values()].map((a) => a.destroy()));
  agents.clear();
}
