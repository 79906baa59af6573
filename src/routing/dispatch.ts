import { SpanStatusCode, type Span, type Tracer } from '@opentelemetry/api';
import type { ModelConfig } from '../config/types';
import { DIALECTS, type StreamRewriter } from '../dialects';
import { GatewayError, toGatewayError } from '../errors/gateway-error';
import type { GatewayResponse, GatewayState, SseEvent } from '../pipeline/types';
import { isRetryable } from '../providers/http';
import type { Dialect, Provider, UpstreamReply } from '../providers/types';
import { costOf } from '../spend/pricing';
import { candidatesFor, type Candidate } from './candidates';
import { generationId } from './generation-id';
import { routingMetadata } from './metadata';
import { translateRequest, translateResponse, translateStream } from '../dialects/translate';

/** `max_tokens` sent to a messages-style provider when a chat client set none and the model declares none. */
const DEFAULT_MAX_TOKENS = 4096;

export interface DispatchDeps {
  models: ReadonlyMap<string, ModelConfig>;
  providers: ReadonlyMap<string, Provider>;
  tracer: Tracer;
  hashUser(user: string): string;
}

/** Sends one request upstream: candidates in order, the next one only while nothing reached the caller. */
export type Dispatch = (state: GatewayState, forwardHeaders: Record<string, string>) => Promise<GatewayResponse>;

/**
 * @example const dispatch = createDispatch({ models, providers, tracer, hashUser });
 *          state.response = await dispatch(state, { 'anthropic-beta': '…' });
 */
export function createDispatch(deps: DispatchDeps): Dispatch {
  return async (state, forwardHeaders) => {
    const dialect = state.endpoint as Dialect;
    const body = state.body!;
    const candidates = candidatesFor({ body, dialect, models: deps.models, providers: deps.providers });
    state.candidates = candidates.map((c) => ({ provider: c.provider.id, model: c.model.id, region: c.provider.region }));
    state.requestId = generationId();
    state.span.setAttribute('gateway.generation_id', state.requestId);
    const stream = body.stream === true;
    let last: GatewayError | undefined;
    for (const candidate of candidates) {
      if (state.signal.aborted) break;
      const attempt = startAttempt(deps.tracer, state, candidate);
      try {
        const upstreamBody = translateRequest(
          dialect,
          candidate.dialect,
          DIALECTS[dialect].upstreamBody(body, { upstreamModel: candidate.endpoint.upstream_model, hashUser: deps.hashUser }),
          { defaultMaxTokens: candidate.model.max_output_tokens ?? DEFAULT_MAX_TOKENS },
        );
        const reply = await candidate.provider.send({ dialect: candidate.dialect, body: upstreamBody, stream, signal: state.signal, forwardHeaders });
        const response = stream
          ? await streamResponse(state, candidate, reply, attempt)
          : jsonResponse(state, candidate, reply, attempt);
        return response;
      } catch (err) {
        const e = toGatewayError(err);
        endAttempt(attempt, e);
        state.attempts.push({
          provider: candidate.provider.id,
          model: candidate.model.id,
          upstreamModel: candidate.endpoint.upstream_model,
          outcome: 'error',
          errorType: e.errorType,
          status: e.status,
        });
        last = e;
        if (!isRetryable(e)) break;
      }
    }
    if (state.signal.aborted) throw new GatewayError('timeout', 'The client closed the request');
    throw last ?? new GatewayError('provider_unavailable', 'No provider could serve the request');
  };
}

function startAttempt(tracer: Tracer, state: GatewayState, c: Candidate): Span {
  const trace_ = state.body?.trace as { generation_name?: unknown } | undefined;
  const name = typeof trace_?.generation_name === 'string' ? trace_.generation_name : `gateway.upstream ${c.provider.id}`;
  return tracer.startSpan(
    name,
    {
      attributes: {
        'gateway.provider': c.provider.id,
        'gateway.model': c.model.id,
        'gateway.upstream_model': c.endpoint.upstream_model,
        'gateway.attempt': state.attempts.length + 1,
      },
    },
    state.traceContext,
  );
}

function endAttempt(span: Span, err?: GatewayError): void {
  if (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
    span.setAttribute('gateway.error_type', err.errorType);
  }
  span.end();
}

/** Commits the request to this endpoint: it answered (a stream: its first event arrived). */
function choose(state: GatewayState, c: Candidate): void {
  state.route = { model: c.model.id, provider: c.provider.id, upstreamModel: c.endpoint.upstream_model, isByok: false };
  state.attempts.push({ provider: c.provider.id, model: c.model.id, upstreamModel: c.endpoint.upstream_model, outcome: 'success' });
}

function finishInfo(state: GatewayState, c: Candidate) {
  const options = state.body?.stream_options as { include_usage?: unknown } | undefined;
  return {
    generationId: state.requestId!,
    model: c.model.id,
    provider: c.provider.id,
    isByok: false,
    costOf: (u: Parameters<typeof costOf>[0]) => costOf(u, c.endpoint.pricing),
    clientWantsUsage: options?.include_usage === true,
  };
}

function jsonResponse(state: GatewayState, c: Candidate, reply: UpstreamReply, attempt: Span): GatewayResponse {
  if (reply.stream) throw new GatewayError('provider_unavailable', `Provider ${c.provider.id} answered with a stream`);
  const dialect = state.endpoint as Dialect;
  const body = translateResponse(c.dialect, dialect, reply.body);
  const { usage, cost } = DIALECTS[dialect].finishBody(body, finishInfo(state, c));
  choose(state, c);
  state.usage = usage;
  state.costUsd = cost;
  endAttempt(attempt);
  if (state.metadataOptIn) body.gateway_metadata = routingMetadata(state);
  return { kind: 'json', status: 200, body };
}

/**
 * Waits for the first event before committing to this endpoint, so a provider that fails before any
 * output still lets the next candidate be tried (spec 7.5.2).
 */
async function streamResponse(state: GatewayState, c: Candidate, reply: UpstreamReply, attempt: Span): Promise<GatewayResponse> {
  if (!reply.stream) throw new GatewayError('provider_unavailable', `Provider ${c.provider.id} did not stream`);
  const dialect = state.endpoint as Dialect;
  // Same style: the provider's events go straight to the rewriter (no extra generator on the hot path).
  const events = c.dialect === dialect ? reply.events : translateStream(c.dialect, dialect, reply.events, c.provider.id);
  const iterator = events[Symbol.asyncIterator]();
  const first = await iterator.next();
  const rewriter = DIALECTS[state.endpoint as Dialect].streamRewriter(finishInfo(state, c));
  choose(state, c);
  return { kind: 'sse', status: 200, events: relay(state, iterator, first, rewriter, attempt) };
}

async function* relay(
  state: GatewayState,
  iterator: AsyncIterator<SseEvent>,
  first: IteratorResult<SseEvent>,
  rewriter: StreamRewriter,
  attempt: Span,
): AsyncGenerator<SseEvent> {
  let failure: GatewayError | undefined;
  let completed = false;
  try {
    for (let r = first; !r.done; r = await iterator.next()) {
      const out = rewriter.rewrite(r.value);
      if (out) yield out;
    }
    yield* rewriter.end();
    completed = true;
  } catch (err) {
    failure = toGatewayError(err);
    if (!state.signal.aborted) yield* rewriter.failure(failure);
  } finally {
    state.usage = rewriter.usage();
    state.costUsd = rewriter.cost();
    state.outcome = state.signal.aborted || (!completed && !failure) ? 'cancelled' : failure || rewriter.failed() ? 'failed' : 'completed';
    if (!completed) await iterator.return?.().catch(() => undefined);
    endAttempt(attempt, failure);
  }
}
