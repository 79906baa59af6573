import { setTimeout as sleep } from 'node:timers/promises';
import type { Span, Tracer } from '@opentelemetry/api';
import type { OwnKeys } from '../auth/byok-keys';
import type { GatewayConfig, ModelConfig } from '../config/types';
import { DIALECTS, type FinishInfo } from '../dialects';
import { choiceCount } from '../dialects/common';
import { DEFAULT_MAX_TOKENS, translateRequest, translateResponse, translateStream } from '../dialects/translate';
import { chatUsageBody } from '../dialects/chat-completions';
import { messagesUsageBody } from '../dialects/messages';
import { cutOutcome } from '../drain';
import { standardEnvelope } from '../errors/envelope';
import { GatewayError, toGatewayError, withFlags } from '../errors/gateway-error';
import { clientClosed } from '../pipeline/request-abort';
import type { GatewayResponse, GatewayState, NormalizedUsage } from '../pipeline/types';
import { batched, batchesOf } from '../providers/sse';
import type { Dialect, Provider, UpstreamCall, UpstreamReply } from '../providers/types';
import { ABSURD_TOKENS, billedByDelivery, boundedUsage, estimatedAnswerUsage, serverLoopCalls, withRequestInput, type StreamDialect, type UsageBounds } from '../spend/delivered';
import { pendingRowOf, type LedgerJournal } from '../spend/journal';
import { requestedMaxTokens } from '../spend/estimate';
import { costOf } from '../spend/pricing';
import { stringifyExact } from '../routes/exact-integers';
import { blamesCaller, nextStep, retryAfterMs, type NextStep } from './attempt-policy';
import type { Candidate } from './candidates';
import { generationId } from './generation-id';
import type { EndpointHealth } from './health';
import { routingMetadata } from './metadata';
import { fittedBody } from './parameters';
import { endpointKey, planFor, primaryModel, sessionKey } from './plan';
import type { StickyRoutes } from './sticky';
import { endAttempt, failureBeforeAnswer, firstOutput, relay, sideChunks, unreadStream, type StreamEnd } from './stream-relay';
import type { GatewayMetrics } from '../telemetry/metrics';
import { spanText } from '../telemetry/span-text';

export interface DispatchDeps {
  models: ReadonlyMap<string, ModelConfig>;
  providers: ReadonlyMap<string, Provider>;
  tracer: Tracer;
  hashUser(user: string): string;
  /** Endpoint health and sticky sessions outlive config reloads, so they are handed in. */
  health: EndpointHealth;
  sticky: StickyRoutes;
  routing: GatewayConfig['routing'];
  /** The request's workspace's own provider keys (BYOK); a candidate whose provider has one is called with it. */
  ownKeys(state: GatewayState): Promise<OwnKeys>;
  /** The ledger journal (README "Ledger durability"); absent when `ledger.journal` is off. */
  journal?: LedgerJournal | null;
  /** Counts each upstream call's outcome (`gateway_upstream_attempts_total`); null when metrics are off. */
  metrics?: GatewayMetrics | null;
}

/** Sends one request upstream: candidates in order, the next one only while nothing reached the caller. */
export type Dispatch = (state: GatewayState, forwardHeaders: Record<string, string>) => Promise<GatewayResponse>;

/**
 * @example const dispatch = createDispatch({ models, providers, tracer, hashUser, health, sticky, routing, ownKeys });
 *          state.response = await dispatch(state, { 'anthropic-beta': '…' });
 */
export function createDispatch(deps: DispatchDeps): Dispatch {
  return async (state, forwardHeaders) => {
    const dialect = state.endpoint as Dialect;
    const body = state.body!;
    const session = sessionKey(state);
    const plan = planFor(state, deps, session ? await deps.sticky.lookup(session) : undefined);
    state.candidates = plan.map((c) => ({ provider: c.provider.id, model: c.model.id, region: c.provider.region }));
    // A stage may have chosen it already (fusion's judge: its stream's headers went out with it).
    state.requestId ??= generationId();
    state.span.setAttribute('gateway.generation_id', state.requestId);
    const stream = body.stream === true;
    const own = await deps.ownKeys(state);
    // Before anything is sent upstream: a durable pending row, one per request (a fusion child shares its parent's).
    // Claimed before the wait, and every call of the request waits for the same write: a fusion's candidates
    // dispatch together, and each had written a row of its own (one released, the others left to the sweep,
    // which wrote an `interrupted` row for each of them under an id no answer carries).
    const pending = state.pendingLedger;
    if (deps.journal && pending && plan.length > 0) {
      if (pending.id === null && pending.recording === undefined) {
        const row = pendingRowOf(state, plan[0], own.has(plan[0].provider.id), deps.journal.owner);
        if (row) {
          pending.recording = deps.journal.record(row);
          pending.id = row.generationId;
        }
      }
      if (pending.recording) await pending.recording;
    }
    let last: GatewayError | undefined;
    let lastServed: Served | undefined; // the endpoint that gave `last`
    // The first endpoint's refusal to express the request in its style: the caller's error only when no endpoint
    // that could take the request was tried (see the attempt loop).
    let refused: GatewayError | undefined;
    // The failed attempts: the answer's retry headers are read from all of them (see withRetryHeaders).
    const failures: GatewayError[] = [];
    // The last endpoint that accepted a stream (200) and then failed before any output (spec 7.5.2), with its failure.
    let accepted: { served: Served; err: GatewayError } | undefined;
    const skipped = new Set<Candidate>();
    // A half-open breaker lets one probe through: while it is out, the endpoint is tried after the others (as
    // an open one is), not by every request at once (each had waited out a dead endpoint's timeout).
    const order = [...plan];
    let deferred: Set<Candidate> | undefined;
    for (let i = 0; i < order.length; i++) {
      const candidate = order[i];
      if (skipped.has(candidate)) continue;
      const key = endpointKey(candidate);
      // What the breaker let through (a half-open probe, when it is one): a release gives back that probe alone.
      // A deferred endpoint asks again when its turn comes (its probe may have reported back meanwhile); still
      // refused, it is tried as a last resort without a pass, and its outcome moves no breaker (health.ts).
      const pass = deps.health.tryAcquire(key);
      if (!deferred?.has(candidate) && !pass) {
        const others = order.slice(i + 1).some((c) => !skipped.has(c) && !deferred?.has(c));
        if (others) {
          (deferred ??= new Set()).add(candidate);
          order.push(candidate);
          continue;
        }
      }
      for (let retriedSame = false; ; retriedSame = true) {
        if (state.abort.aborted) throw new GatewayError('timeout', 'The client closed the request');
        const apiKey = own.get(candidate.provider.id);
        const attempt = startAttempt(deps.tracer, state, candidate, apiKey !== undefined);
        const started = performance.now();
        let dropped: string[] | undefined;
        try {
          let upstreamBody = untranslatable(() =>
            translateRequest(
              dialect,
              candidate.dialect,
              DIALECTS[dialect].upstreamBody(body, { upstreamModel: candidate.endpoint.upstream_model, hashUser: deps.hashUser }),
              { defaultMaxTokens: candidate.model.max_output_tokens ?? DEFAULT_MAX_TOKENS },
            ),
          );
          // The model's `max_output_tokens` is its ceiling: the spend estimate holds no more, so no more is asked.
          const cap = candidate.model.max_output_tokens;
          if (cap !== undefined) upstreamBody = withOutputCap(upstreamBody, candidate.dialect, cap);
          // An endpoint that lists its parameters is sent only those; one that lists none, everything (README "Routing").
          const listed = candidate.endpoint.supported_parameters;
          if (listed !== undefined) {
            ({ body: upstreamBody, dropped } = fittedBody(upstreamBody, candidate.dialect, listed));
            if (dropped) attempt.setAttribute('gateway.dropped_parameters', dropped);
          }
          if (stream && debugEcho(body)) state.debugEchoes.push({ provider: candidate.provider.id, model: candidate.model.id, body: redactedEcho(upstreamBody) });
          const sent = performance.now();
          const reply = await candidate.provider
            .send(new CallFor(state, candidate.dialect, upstreamBody, stream, forwardHeaders, apiKey))
            .finally(() => waited(state, sent));
          // A fallback model that served the session is not remembered: the session stays with the model it names.
          const stick = () => {
            if (session && candidate.model.id === primaryModel(state)) deps.sticky.remember(session, key);
          };
          // A stream's endpoint is remembered when the stream ends, unless the provider failed it: it had been
          // at its first output, so a session moved to an endpoint that then cut its answer. A client that left
          // says nothing against the endpoint (its prompt cache is as warm).
          const throughput = (outputTokens: number, durationMs: number) => {
            deps.health.recordSuccess(key, { pass, outputTokens, durationMs });
            stick();
          };
          // A stream that fails after its answer began is the endpoint's failure too (it had been recorded as a
          // success at its first output, so an endpoint that cut every stream stayed first in line for ever).
          // One that tells nothing of the endpoint (the caller's fault, the workspace's own key, the client
          // left) gives a half-open probe back, as before the answer began (it stayed out for a cooldown).
          const failed = (err: GatewayError) => {
            if (blamesCaller(err) || (apiKey !== undefined && ownKeyFailure(err))) {
              deps.health.release(key, pass);
              deps.health.recordAttempt(key);
            } else deps.health.recordFailure(key, pass);
          };
          const cancelled = () => {
            deps.health.release(key, pass);
            stick();
          };
          const served: Served = { c: candidate, isByok: apiKey !== undefined, dropped };
          // A stream's attempt is counted when the stream ends (it may still fail after its first event).
          const counted = (outcome: string) => deps.metrics?.attempt(candidate.provider.id, outcome);
          const response = stream ? await streamResponse(state, served, reply, attempt, { throughput, failed, cancelled, counted }) : jsonResponse(state, served, reply, attempt);
          // No attempt follows a served one: the body's bytes need not outlive it (a stream may run for minutes).
          state.clientBytes = null;
          if (!stream) counted('success');
          // Latency is time to the answer (a stream: its first event); a stream's success (and throughput) or
          // failure is recorded when it ends, a JSON answer's here.
          const elapsed = performance.now() - started;
          if (stream) deps.health.observe(key, { latencyMs: elapsed });
          else deps.health.recordSuccess(key, { pass, latencyMs: elapsed, outputTokens: state.usage?.outputTokens, durationMs: elapsed });
          if (!stream) stick();
          return response;
        } catch (err) {
          const e = toGatewayError(err);
          // The client went away mid-call: the attempt is cancelled, not the timeout the abort surfaces as.
          const gone = clientClosed(state.abort);
          endAttempt(attempt, e, gone);
          // A request this endpoint cannot express never reached its provider: no upstream attempt to count.
          if (!e.metadata?.untranslatable) deps.metrics?.attempt(candidate.provider.id, gone ? 'cancelled' : e.errorType);
          state.attempts.push({ provider: candidate.provider.id, model: candidate.model.id, upstreamModel: candidate.endpoint.upstream_model, outcome: 'error', errorType: e.errorType, status: e.status, droppedParameters: dropped });
          // Whether the failure is the endpoint's (else a half-open probe is given back: see health.release).
          const endpointFailed = !state.abort.aborted && !blamesCaller(e) && !(apiKey !== undefined && ownKeyFailure(e));
          if (!endpointFailed) {
            deps.health.release(key, pass);
            // Answered all the same (no call was made for a request its style cannot express): tried, for `sort`.
            if (!state.abort.aborted && !e.metadata?.untranslatable) deps.health.recordAttempt(key);
          }
          if (state.abort.aborted) throw cutShort(state, { c: candidate, isByok: apiKey !== undefined }, gone ? new GatewayError('timeout', 'The client closed the request') : e);
          // A translation refusal says only that this endpoint cannot take the request: it does not replace the
          // failure of one that could (a 429 with its Retry-After reached the caller as a 400 "`n` > 1 is not
          // supported", which no SDK retries), nor count as an attempt without retry headers.
          if (e.metadata?.untranslatable) refused ??= e;
          else {
            last = e;
            lastServed = { c: candidate, isByok: apiKey !== undefined };
            failures.push(e);
          }
          if (stream && e.metadata?.accepted) accepted = { served: { c: candidate, isByok: apiKey !== undefined }, err: e };
          if (endpointFailed) {
            deps.health.recordFailure(key, pass);
            // A rate limit or overload that said when to come back: the endpoint is tried after the others until then.
            const wait = e.errorType === 'rate_limit_exceeded' || e.errorType === 'provider_overloaded' ? retryAfterMs(e.headers?.['retry-after']) : null;
            if (wait !== null) deps.health.rest(key, wait);
          }
          const remaining = order.slice(i + 1).filter((c) => !skipped.has(c));
          // A request the other API style cannot express (chat `n` > 1 for a messages provider, …) may still
          // be served by an endpoint that speaks the client's style: the next one is tried.
          const step: NextStep = e.metadata?.untranslatable
            ? { kind: 'next_endpoint' }
            : nextStep(e, { retriedSame, lastCandidate: remaining.length === 0, retryWaitMaxMs: deps.routing.retry_wait_max_ms });
          if (step.kind === 'stop') {
            if (accepted) return streamFailedBeforeOutput(state, accepted.served, accepted.err);
            // A caller mistake a provider reported in its 2xx body ends the request as any failure after headers
            // does (spec 7.5.4); it had been the only one answered with its own status.
            if (e.metadata?.after_headers && dialect === 'chat_completions' && !stream) return errorAfterHeaders(state, { c: candidate, isByok: apiKey !== undefined }, e);
            if (e.metadata?.after_headers) failedAfterAnswer(state, { c: candidate, isByok: apiKey !== undefined });
            throw withRetryHeaders(withoutRoutingFlags(e), failures);
          }
          if (step.kind === 'retry_same' && !retriedSame) {
            if (step.waitMs > 0) {
              const since = performance.now();
              await sleep(step.waitMs, undefined, { signal: state.signal }).catch(() => undefined);
              waited(state, since); // a wait the upstream asked for (Retry-After) is not the gateway's overhead
            }
            continue;
          }
          if (step.kind === 'next_model') for (const c of remaining) if (c.model.id === candidate.model.id) skipped.add(c);
          if (step.kind === 'larger_context') {
            const here = candidate.model.context_length ?? 0;
            for (const c of remaining) if ((c.model.context_length ?? 0) <= here) skipped.add(c);
          }
          break;
        }
      }
    }
    if (last?.metadata?.after_headers && lastServed && dialect === 'chat_completions' && !stream) return errorAfterHeaders(state, lastServed, last);
    if (accepted) return streamFailedBeforeOutput(state, accepted.served, accepted.err);
    if (last?.metadata?.after_headers && lastServed) failedAfterAnswer(state, lastServed);
    if (last) throw withRetryHeaders(withoutRoutingFlags(last), failures);
    throw refused ? withoutRoutingFlags(refused) : new GatewayError('provider_unavailable', 'No provider could serve the request');
  };
}

/**
 * Spec 7.5.4: when the last provider failed after it had answered 2xx, a chat-completions caller gets 200
 * with a body holding only `id` and `error` (callers must check for `error` even on 200). Messages-style
 * callers get the real error status instead: their SDK would read a 200 as a message.
 */
function errorAfterHeaders(state: GatewayState, served: Served, err: GatewayError): GatewayResponse {
  // The request reached the endpoint that answered it: its row names it, `failed`, nothing delivered, as a
  // stream that failed before output is billed (this one had no row, though the client was given its id).
  state.route = routeOf(served);
  state.outcome = 'failed';
  // The standard envelope's error (a gateway key quoted in it masked, as in every error body), and the routing
  // metadata a caller opted into, as other error bodies after routing carry it (it had none).
  const body: Record<string, unknown> = { id: state.requestId, ...standardEnvelope(withoutRoutingFlags(err)) };
  if (state.metadataOptIn) body.gateway_metadata = routingMetadata(state);
  return {
    kind: 'json',
    status: 200,
    body,
    // A failed request all the same: it had been logged and counted as a success (status 200, error_type none).
    failure: err.errorType,
  };
}

/**
 * The last endpoint failed after it had answered 2xx and the caller gets the real error status (a messages
 * caller; a stream whose provider answered with a JSON error): the request reached that endpoint, so its row
 * names it, `failed`, nothing billed, as errorAfterHeaders does for a chat caller. It had none, though the
 * caller's error carries its id; nor had a web-fetch tool loop whose first turn failed so (its row is written
 * on the last turn that has a route), even when the keep-alive had sent its stream's 200.
 */
function failedAfterAnswer(state: GatewayState, served: Served): void {
  state.route = routeOf(served);
  state.outcome = 'failed';
}

/**
 * Spec 7.5.2: once a provider has accepted a stream, the status stays 200 even if every provider then fails
 * before any output: the request is billed (`failed`, nothing delivered) to the last endpoint that accepted
 * it, and the client gets the dialect's in-band error (as for a failure mid-stream) naming that endpoint, with
 * that endpoint's own failure (it had been the last attempt's, another endpoint's 503 under this one's name).
 */
function streamFailedBeforeOutput(state: GatewayState, served: Served, err: GatewayError): GatewayResponse {
  state.route = routeOf(served);
  state.outcome = 'failed';
  // With what a stream that succeeds sends before its answer (the debug echoes, the routing metadata).
  const events = failureBeforeAnswer(state, withoutRoutingFlags(err));
  return { kind: 'sse', status: 200, events: (async function* () {
    yield* events;
  })() };
}

/**
 * The caller's retry headers, from every failed attempt and not the last one alone:
 * - Retry-After (spec 7.10): only when every failed attempt gave a readable retry hint, the longest of them (a
 *   wait that serves the first endpoint may not serve the others), in whole seconds; otherwise none. It had
 *   been the last attempt's, even when another endpoint had given none, or a longer one.
 * - `x-should-retry: false` (a provider refused our credentials or model: that endpoint fails the same way until
 *   the operator acts) only when every failed attempt said so. An endpoint that was overloaded, rate-limited or
 *   unreachable may serve the same request soon, and the official SDKs read the header before the status: a 503
 *   from the first endpoint and a 401 from the last had them give up at once.
 */
function withRetryHeaders(err: GatewayError, failures: readonly GatewayError[]): GatewayError {
  if (!err.headers) return err;
  const { 'retry-after': own, 'x-should-retry': shouldRetry, ...headers } = err.headers;
  if (own !== undefined) {
    // Whole seconds, as HTTP's delta-seconds has no fraction (a provider's `1.5` had reached the caller as it
    // was), rounded up; an HTTP date becomes the seconds to it; a hint no one can read (`soon`) is none.
    const waits = failures.map((f) => retryAfterMs(f.headers?.['retry-after']));
    if (waits.length > 0 && waits.every((w) => w !== null)) headers['retry-after'] = String(Math.ceil(Math.max(...(waits as number[])) / 1000));
  }
  if (shouldRetry !== undefined && (shouldRetry !== 'false' || failures.every((f) => f.headers?.['x-should-retry'] === 'false'))) headers['x-should-retry'] = shouldRetry;
  if (headers['retry-after'] === own && headers['x-should-retry'] === shouldRetry) return err;
  return new GatewayError(err.errorType, err.message, { status: err.status, metadata: err.metadata, headers: Object.keys(headers).length > 0 ? headers : undefined, details: err.details, cause: err.cause ?? err });
}

/** The error without the flags routing reads (`after_headers`, `accepted`, `untranslatable`), for the caller to see. */
function withoutRoutingFlags(err: GatewayError): GatewayError {
  const m = err.metadata;
  if (!m || (!('after_headers' in m) && !('accepted' in m) && !('untranslatable' in m))) return err;
  const { after_headers: _a, accepted: _b, untranslatable: _u, ...metadata } = m;
  return new GatewayError(err.errorType, err.message, { status: err.status, metadata, headers: err.headers, cause: err });
}

/** The translated request, or the translator's refusal flagged `untranslatable` (see the attempt loop). */
function untranslatable<T>(translate: () => T): T {
  try {
    return translate();
  } catch (err) {
    const e = toGatewayError(err);
    throw withFlags(e, { untranslatable: true });
  }
}

/**
 * The call for a provider: `abort` to watch, and `signal` made only if the provider asks for it (the HTTP
 * adapter watches `abort`; the simulated one's delays take `signal`). A class for the prototype getter (an
 * accessor in an object literal is V8's slow path).
 */
class CallFor implements UpstreamCall {
  readonly abort: GatewayState['abort'];
  readonly #state: GatewayState;
  constructor(
    state: GatewayState,
    readonly dialect: UpstreamCall['dialect'],
    readonly body: UpstreamCall['body'],
    readonly stream: boolean,
    readonly forwardHeaders: UpstreamCall['forwardHeaders'],
    readonly apiKey: string | undefined,
  ) {
    this.abort = state.abort;
    this.#state = state;
  }

  get signal(): AbortSignal {
    return this.#state.signal;
  }

  /** A call without streaming answered 2xx: the state's stream keep-alive may start (set only by the tool loop's turns). */
  accepted(): void {
    this.#state.streamAccepted?.();
  }

  /**
   * The body as JSON, with the client's own bytes for what it holds unchanged (src/routes/client-bytes.ts)
   * and the client's digits for integers past 2^53 (src/routes/exact-integers.ts).
   */
  encodedBody(): string | Buffer {
    const bytes = this.#state.clientBytes;
    const integers = this.#state.exactIntegers ?? null;
    if (bytes) return bytes.encode(this.body, integers);
    return integers ? stringifyExact(this.body, integers) : JSON.stringify(this.body);
  }
}

/**
 * `body` with its output limit lowered to the model's `max_output_tokens` where it asks for more (chat
 * `max_completion_tokens` / `max_tokens`, messages `max_tokens`; a thinking budget kept below it, or thinking
 * left off when that leaves under the Messages API's least budget, 1024). The spend estimate and a key's limit
 * hold the model's ceiling, and the provider had been asked for whatever the client wrote: 90 000 tokens
 * billed against a hold of 100 (found by a billing audit).
 */
export function withOutputCap(body: Record<string, unknown>, dialect: Dialect, cap: number): Record<string, unknown> {
  const fields = dialect === 'messages' ? ['max_tokens'] : ['max_completion_tokens', 'max_tokens'];
  let out = body;
  for (const f of fields) {
    const v = out[f];
    if (typeof v === 'number' && v > cap) out = { ...out, [f]: cap };
  }
  const thinking = out.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  if (out !== body && dialect === 'messages' && thinking?.type === 'enabled' && typeof thinking.budget_tokens === 'number' && thinking.budget_tokens >= cap) {
    out = cap - 1 >= 1024 ? { ...out, thinking: { ...thinking, budget_tokens: cap - 1 } } : { ...out, thinking: { type: 'disabled' } };
  }
  return out;
}

/**
 * A failure of a workspace's own provider key (BYOK), not of the endpoint: the provider refused that key
 * (401, 403) or limited that account (429, 402). It is not counted in the endpoint's shared health: one
 * tenant's bad or exhausted key opened the breaker for every tenant (found by a routing audit).
 */
function ownKeyFailure(e: GatewayError): boolean {
  const status = e.metadata?.provider_code;
  return status === 401 || status === 402 || status === 403 || status === 429;
}

/** Adds the time since `since` to the request's upstream waiting time (which starts at -1: no call yet). */
function waited(state: GatewayState, since: number): void {
  state.upstreamMs = Math.max(state.upstreamMs, 0) + (performance.now() - since);
}

function debugEcho(body: Record<string, unknown>): boolean {
  return (body.debug as { echo_upstream_body?: unknown } | undefined)?.echo_upstream_body === true;
}

const SECRET_KEY = /^(api[_-]?key|x-api-key|authorization|secret|password|access[_-]?token|client[_-]?secret)$/i;

/** The upstream body for the debug echo, with anything that looks like a credential replaced. */
function redactedEcho(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redactedEcho);
  if (!value || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = SECRET_KEY.test(k) ? '[redacted]' : redactedEcho(v);
  return out;
}

function startAttempt(tracer: Tracer, state: GatewayState, c: Candidate, byok: boolean): Span {
  const trace_ = state.body?.trace as { generation_name?: unknown } | undefined;
  const name = typeof trace_?.generation_name === 'string' && trace_.generation_name ? spanText(trace_.generation_name) : `gateway.upstream ${c.provider.id}`;
  return tracer.startSpan(
    name,
    {
      attributes: {
        'gateway.provider': c.provider.id,
        'gateway.model': c.model.id,
        'gateway.upstream_model': c.endpoint.upstream_model,
        'gateway.attempt': state.attempts.length + 1,
        'gateway.byok': byok,
      },
    },
    state.traceContext,
  );
}

/**
 * The endpoint an attempt went to, whether it was called with the workspace's own provider key, and the
 * request parameters left out of its body (its `supported_parameters` did not list them).
 */
interface Served {
  c: Candidate;
  isByok: boolean;
  dropped?: string[];
}

/** Commits the request to this endpoint: it answered (a stream: its first event arrived). */
function choose(state: GatewayState, served: Served): void {
  const { c } = served;
  state.route = routeOf(served);
  state.attempts.push({ provider: c.provider.id, model: c.model.id, upstreamModel: c.endpoint.upstream_model, outcome: 'success', droppedParameters: served.dropped });
  state.routeChosen?.(state.route);
}

function routeOf({ c, isByok }: Served): NonNullable<GatewayState['route']> {
  return { model: c.model.id, provider: c.provider.id, upstreamModel: c.endpoint.upstream_model, isByok };
}

/**
 * The request was aborted while a call was in flight, before it answered (a stream: before its first event):
 * the client went away, a shutdown cut it, or the stage that made it (fusion) gave up on it. The request
 * reached this endpoint, so its ledger row names it: status `cancelled` (`failed` when the shutdown cut it, as
 * a cut stream is), no tokens and cost 0, as a stream cut before any output: nothing was delivered. The
 * endpoint's health is left alone (the provider did not fail), and no other endpoint is tried. Returns `e`,
 * the error to throw.
 */
function cutShort(state: GatewayState, served: Served, e: GatewayError): GatewayError {
  state.route = routeOf(served);
  state.outcome = cutOutcome(state.abort);
  return e;
}

function finishInfo(state: GatewayState, { c, isByok }: Served): FinishInfo {
  const options = state.body?.stream_options as { include_usage?: unknown } | undefined;
  return {
    generationId: state.requestId!,
    model: c.model.id,
    provider: c.provider.id,
    isByok,
    costOf: (u: Parameters<typeof costOf>[0]) => costOf(u, c.endpoint.pricing),
    clientWantsUsage: options?.include_usage === true,
    choices: choiceCount(state.body ?? {}),
  };
}

/**
 * What the provider can have used for this request (see boundedUsage): output up to the limit it was given
 * (the client's, lowered to the model's `max_output_tokens`; the model's when the client set none) times chat
 * `n`, input up to the model's `context_length`. Each is at most the model's `context_length` and ABSURD_TOKENS
 * per call: a client's `max_tokens: 1e19` on a model without `max_output_tokens` had lifted the bound, so a
 * provider claiming 1e19 output tokens was billed so (a cost the Redis state's HINCRBY refused).
 */
function usageBounds(state: GatewayState, c: Candidate): UsageBounds {
  const b = state.body ?? {};
  // The larger when both names are set, as the spend estimate reads it.
  const asked = requestedMaxTokens(b) || undefined;
  const cap = c.model.max_output_tokens;
  const limit = asked !== undefined ? Math.min(asked, cap ?? asked) : cap;
  const context = Math.min(c.model.context_length ?? ABSURD_TOKENS, ABSURD_TOKENS);
  return { maxOutputTokens: Math.min(limit ?? ABSURD_TOKENS, context) * choiceCount(b), maxInputTokens: context, maxCalls: serverLoopCalls(b) };
}

function jsonResponse(state: GatewayState, served: Served, reply: UpstreamReply, attempt: Span): GatewayResponse {
  const { c } = served;
  if (reply.stream) throw new GatewayError('provider_unavailable', `Provider ${c.provider.id} answered with a stream`);
  const dialect = state.endpoint as Dialect;
  const body = translateResponse(c.dialect, dialect, reply.body);
  const info = finishInfo(state, served);
  let { usage, cost } = DIALECTS[dialect].finishBody(body, info);
  const reported = usage;
  if (!usage || (usage.inputTokens === 0 && usage.outputTokens === 0)) {
    // No usage from the provider (or a translation's zeros): billed from the request and the answer.
    usage = estimatedAnswerUsage(dialect as StreamDialect, body, state.body);
  } else {
    const bounds = usageBounds(state, c);
    usage = withRequestInput(boundedUsage(usage, bounds), state.body, bounds);
    // No output (or a count that is no number, or negative) for an answer with text: its output from the text.
    if (usage.outputTokens === 0) {
      const fromText = estimatedAnswerUsage(dialect as StreamDialect, body, null).outputTokens;
      if (fromText > 0) usage = { ...usage, outputTokens: fromText };
    }
  }
  if (usage !== reported) {
    cost = info.costOf(usage);
    if (reported) attempt.setAttribute('gateway.usage_corrected', true);
    // The answer says what is billed (it said zeros, nothing, or more than the request allowed; the ledger differed).
    if (!body.error) body.usage = { ...(dialect === 'chat_completions' ? chatUsageBody(usage) : messagesUsageBody(usage)), cost, is_byok: info.isByok };
  }
  choose(state, served);
  state.usage = usage;
  state.costUsd = cost;
  endAttempt(attempt);
  if (state.metadataOptIn) body.gateway_metadata = routingMetadata(state);
  return { kind: 'json', status: 200, body };
}

/**
 * Waits for the answer to begin before committing to this endpoint, so a provider that fails before any
 * output (an error event, a stream that ends or breaks, nothing within its first-token limit) still lets
 * the next candidate be tried (spec 7.5.2).
 */
async function streamResponse(
  state: GatewayState,
  served: Served,
  reply: UpstreamReply,
  attempt: Span,
  onStreamEnd: StreamEnd,
): Promise<GatewayResponse> {
  const { c } = served;
  if (!reply.stream) throw new GatewayError('provider_unavailable', `Provider ${c.provider.id} did not stream`);
  const dialect = state.endpoint as Dialect;
  // Same style: the provider's events go straight to the rewriter (no extra generator on the hot path), a
  // batch at a time (the events that arrived together).
  const seen = { reported: (): NormalizedUsage | null => null };
  const events = c.dialect === dialect ? reply.events : translateStream(c.dialect, dialect, reply.events, c.provider.id, seen);
  const iterator = batchesOf(events);
  const waitFrom = performance.now();
  // The status is 200 from here on (spec 7.5.2): the endpoint may start its keep-alive while the answer is slow to begin.
  state.streamAccepted?.();
  const first = await firstOutput(iterator, c, reply.abort, DIALECTS[dialect].opensOutput)
    .catch((err) => {
      // The provider had accepted the stream (200): see streamFailedBeforeOutput.
      const e = toGatewayError(err);
      throw withFlags(e, { accepted: true });
    })
    .finally(() => waited(state, waitFrom));
  choose(state, served);
  const info = finishInfo(state, served);
  // Messages style: the routing metadata rides in message_start (a new event name could upset SDKs).
  if (state.metadataOptIn && dialect === 'messages') info.metadata = routingMetadata(state);
  const rewriter = billedByDelivery(DIALECTS[dialect].streamRewriter(info), { dialect, info, body: state.body, reported: () => seen.reported(), bounds: usageBounds(state, c) });
  const before = dialect === 'chat_completions' ? sideChunks(state, { model: c.model.id, provider: c.provider.id }) : [];
  let read = false;
  return {
    kind: 'sse',
    status: 200,
    events: batched(() => {
      read = true;
      return relay(state, iterator, first, rewriter, attempt, before, onStreamEnd);
    }),
    unread: () => {
      if (read) return;
      read = true;
      unreadStream(state, iterator, first, rewriter, attempt, onStreamEnd);
    },
  };
}
