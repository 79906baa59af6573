/**
 * A streamed answer's relay to the client (used by dispatch.ts): the wait for an attempt's first output, the
 * gateway's own chunks before the answer, and the provider's events through the dialect's rewriter.
 */

import { SpanStatusCode, type Span } from '@opentelemetry/api';
import type { StreamRewriter } from '../dialects';
import { inBandError } from '../dialects/in-band-error';
import { endedBeforeOutput } from '../dialects/stream-error';
import { masked } from '../errors/envelope';
import { GatewayError, toGatewayError } from '../errors/gateway-error';
import type { GatewayState, SseEvent } from '../pipeline/types';
import type { Candidate } from './candidates';
import { routingMetadata } from './metadata';

/** Ends an attempt's span: an error with `err`, unless the client cancelled it (`cancelled`), which is none. */
export function endAttempt(span: Span, err?: GatewayError, cancelled = false): void {
  if (cancelled) span.setAttribute('gateway.outcome', 'cancelled');
  else if (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
    span.setAttribute('gateway.error_type', err.errorType);
  }
  span.end();
}

/** What a stream reports when it ends: throughput for endpoint health, and the attempt's outcome for metrics. */
export interface StreamEnd {
  /** The stream ended whole: the endpoint's health records a success (with its throughput when usage is known). */
  throughput(outputTokens: number, durationMs: number): void;
  /** The provider failed the stream after its answer began (a cut, a stall, an in-band error): a failure of the endpoint's. */
  failed(err: GatewayError): void;
  /** The client left (or a shutdown cut the stream): nothing is told of the endpoint. */
  cancelled(): void;
  counted(outcome: string): void;
}

/** Events a stream may send before its answer begins (pings, a role chunk): past it, the attempt fails. */
const MAX_HELD_EVENTS = 10_000;

/**
 * The events up to and including the batch in which the answer begins (`opensOutput`: a token, a tool call, a
 * finish or the end), as one batch: what comes before it (message_start, a role chunk, pings) is held back,
 * and the client sees nothing of an attempt that failed before any output. Throws, for the next candidate to
 * be tried, when the provider reports an error or ends its stream before that, or sends no output within its
 * first-token limit; the upstream call is then aborted (a silent upstream costs one timeout, never several).
 */
export async function firstOutput(
  iterator: AsyncIterator<SseEvent[]>,
  c: Candidate,
  abort: ((reason: Error) => void) | undefined,
  opensOutput: (ev: SseEvent, providerId: string) => boolean,
): Promise<IteratorResult<SseEvent[]>> {
  const limit = c.provider.firstTokenTimeoutMs;
  let timer: NodeJS.Timeout | undefined;
  const timedOut =
    limit && abort
      ? new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const err = new GatewayError('timeout', `Provider ${c.provider.id} sent no output within ${limit} ms`, { metadata: { provider_name: c.provider.id } });
            abort(err);
            reject(err);
          }, limit);
        })
      : undefined;
  let held: SseEvent[] = [];
  try {
    for (;;) {
      const r = await (timedOut ? Promise.race([iterator.next(), timedOut]) : iterator.next());
      if (r.done) throw endedBeforeOutput(c.provider.id);
      try {
        if (r.value.some((ev) => opensOutput(ev, c.provider.id))) {
          if (held.length === 0) return { done: false, value: r.value };
          for (const ev of r.value) held.push(ev);
          return { done: false, value: held };
        }
      } catch (err) {
        // The provider reported an error (or sent garbage) before any output: stop reading its stream.
        if (abort) abort(err as Error);
        else await iterator.return?.().catch(() => undefined);
        throw err;
      }
      // Held in place (a copy per batch was quadratic in a long preamble), and at most MAX_HELD_EVENTS of them.
      for (const ev of r.value) held.push(ev);
      if (held.length > MAX_HELD_EVENTS) {
        const err = new GatewayError('provider_unavailable', `Provider ${c.provider.id} sent ${held.length} events before any output`, { metadata: { provider_name: c.provider.id } });
        if (abort) abort(err);
        else await iterator.return?.().catch(() => undefined);
        throw err;
      }
    }
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A chat chunk with no choices that carries gateway data (routing metadata, debug echo) before the answer,
 * stamped with the model and provider it is about.
 */
function sideChunk(state: GatewayState, about: { model: string; provider: string }, extra: Record<string, unknown>): SseEvent {
  const chunk = { id: state.requestId, object: 'chat.completion.chunk', created: Math.floor(Date.now() / 1000), model: about.model, provider: about.provider, choices: [], ...extra };
  return { data: JSON.stringify(chunk) };
}

/**
 * Chat style, before the answer: one debug chunk per attempted provider (spec 6.1.3, streaming only), each
 * naming the provider and model of its attempt, then the routing metadata (stamped with `about`) when `shown`.
 */
export function sideChunks(state: GatewayState, about: { model: string; provider: string }, shown = state.metadataOptIn): SseEvent[] {
  const out = state.debugEchoes.map((echo) => sideChunk(state, echo, { debug: { echo_upstream_body: echo.body } }));
  if (shown) out.push(sideChunk(state, about, { gateway_metadata: routingMetadata(state) }));
  return out;
}

/**
 * The in-band error that ends a stream before any of its answer went out, with what a stream that succeeds
 * sends before its answer: chat the debug echoes (spec 6.1: one per attempted provider) and the metadata
 * chunk; messages, which has no message_start here, the metadata in the error event, as its JSON error
 * envelope has it (7.3). Not the metadata for a 500, whose routing metadata spec 7.4 rule 3 omits. Used for
 * every provider failing before output (spec 7.5.2), and for a stage's refusal after the keep-alive sent the
 * 200 (src/routes/stream-keepalive.ts), which had carried the error alone. Names `state.route`.
 */
export function failureBeforeAnswer(state: GatewayState, e: GatewayError): SseEvent[] {
  const events = inBandError(state, e);
  const shown = state.metadataOptIn && !masked(e);
  if (state.endpoint === 'messages') {
    if (!shown) return events;
    return events.map((ev) => (ev.event === 'error' ? { ...ev, data: JSON.stringify({ ...JSON.parse(ev.data), gateway_metadata: routingMetadata(state) }) } : ev));
  }
  return [...sideChunks(state, { model: state.route?.model ?? '', provider: state.route?.provider ?? '' }, shown), ...events];
}

/**
 * Ends a stream whose events will never be read: the endpoint did not write its answer (the client left, or a
 * later stage refused it). The provider had begun its answer (its first events are in `first`), so the request
 * is billed as a stream cut then is: what those events carried (reported usage; their text as output) and the
 * input counted from the request when the provider reported none. It had been billed nothing (the relay, which
 * bills a stream when it ends, never ran). Closes the provider's stream and ends the attempt as cancelled;
 * the outcome is the endpoint's to say (`cancelled`, or `failed` for a refusal).
 */
export function unreadStream(
  state: GatewayState,
  iterator: AsyncIterator<SseEvent[]>,
  first: IteratorResult<SseEvent[]>,
  rewriter: StreamRewriter,
  attempt: Span,
  onStreamEnd: StreamEnd,
): void {
  for (const ev of first.done ? [] : first.value) {
    try {
      rewriter.rewrite(ev);
    } catch {
      break;
    }
    if (rewriter.complete()) break;
  }
  state.usage = rewriter.usage();
  state.costUsd = rewriter.cost();
  void iterator.return?.().catch(() => undefined);
  endAttempt(attempt, undefined, true);
  onStreamEnd.counted('cancelled');
  onStreamEnd.cancelled();
}

export async function* relay(
  state: GatewayState,
  iterator: AsyncIterator<SseEvent[]>,
  first: IteratorResult<SseEvent[]>,
  rewriter: StreamRewriter,
  attempt: Span,
  before: SseEvent[],
  onStreamEnd: StreamEnd,
): AsyncGenerator<SseEvent[]> {
  const streamStarted = performance.now();
  let failure: GatewayError | undefined;
  let completed = false;
  /** The relay is waiting for the provider's next events (not rewriting them). */
  let reading = false;
  try {
    if (before.length > 0) yield before;
    for (let r = first; !r.done; reading = true, r = await iterator.next(), reading = false) {
      const out: SseEvent[] = [];
      let bad: unknown;
      for (const ev of r.value) {
        try {
          const o = rewriter.rewrite(ev);
          if (o) out.push(o);
        } catch (err) {
          bad = err;
          break;
        }
        if (rewriter.complete()) break; // nothing after the terminal event goes out
      }
      // What the batch gave before a bad event still goes out, then the stream fails.
      if (out.length > 0) yield out;
      if (bad !== undefined) throw bad;
      if (rewriter.complete()) {
        // The answer is whole: stop reading (the provider may keep its connection open, or send more).
        await iterator.return?.().catch(() => undefined);
        break;
      }
    }
    const end = rewriter.end();
    if (end.length > 0) yield end;
    completed = true;
  } catch (err) {
    if (reading && !state.abort.aborted && rewriter.answered()) {
      // The answer was whole (chat: its finish_reason relayed) when the provider stalled or dropped the
      // connection before its usage chunk or `[DONE]`: the client gets the normal end, the request is billed
      // from what was relayed (spend/delivered.ts), and the span says what happened to the tail.
      attempt.setAttribute('gateway.stream_tail', toGatewayError(err).message);
      const end = rewriter.end();
      completed = true;
      if (end.length > 0) yield end;
    } else {
      failure = toGatewayError(err);
      const told = state.abort.aborted ? [] : rewriter.failure(failure);
      if (told.length > 0) yield told;
    }
  } finally {
    state.usage = rewriter.usage();
    state.costUsd = rewriter.cost();
    state.outcome = state.abort.aborted || (!completed && !failure) ? 'cancelled' : failure || rewriter.failed() ? 'failed' : 'completed';
    if (!completed) await iterator.return?.().catch(() => undefined);
    // A client that left is no failure of the provider's (the abort surfaces as a timeout otherwise).
    endAttempt(attempt, failure, state.abort.aborted);
    onStreamEnd.counted(state.outcome === 'completed' ? 'success' : state.outcome === 'cancelled' ? 'cancelled' : (failure?.errorType ?? 'stream_failed'));
    // By the outcome, not by `completed`: a stream that ended before its finish ends with the in-band error
    // too, and had been recorded a success (an endpoint that cut every answer that way stayed first).
    if (state.outcome === 'completed') onStreamEnd.throughput(state.usage?.outputTokens ?? 0, performance.now() - streamStarted);
    else if (state.outcome === 'failed') onStreamEnd.failed(failure ?? new GatewayError('provider_unavailable', 'The provider reported a failure in its stream'));
    else onStreamEnd.cancelled();
  }
}
