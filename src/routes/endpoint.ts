import { SpanStatusCode, type Span } from '@opentelemetry/api';
import type { Middleware } from 'koa';
import { errorBody, masked, statusFor, type ApiStyle } from '../errors/envelope';
import { GatewayError, toGatewayError } from '../errors/gateway-error';
import { CLIENT_CLOSED, clientClosed, RequestAbort } from '../pipeline/request-abort';
import type { EndpointId, GatewayContext, GatewayState } from '../pipeline/types';
import { shutdownCut } from '../drain';
import type { Runtime } from '../runtime';
import { formatSse } from '../providers/sse';
import { routingMetadata } from '../routing/metadata';
import { sessionOf } from '../routing/sticky';
import { failureBeforeAnswer } from '../routing/stream-relay';
import { ledgerRowsOf } from '../spend/ledger';
import { withSpan } from '../telemetry/linked-context';
import { readJsonBytes, refuseUnreadBody } from './body';
import { ClientBytes, REUSED_MIN_BYTES } from './client-bytes';
import type { ExactIntegers } from './exact-integers';
import { RequestState } from './request-state';
import { parentContext, refusedSpan, spanAttributes, spanName } from './request-span';
import { jsonTaken, requestIdHeader, setJsonBody, sseHead, writeJson, writeSse } from './respond';
import { StreamKeepalive } from './stream-keepalive';

export interface EndpointSpec {
  id: EndpointId;
  style: ApiStyle;
  /** POST endpoints read and parse a JSON body before the pipeline runs. */
  readsBody: boolean;
}

/**
 * The one endpoint factory: reads the body, opens the request span, runs the endpoint's pipeline from the
 * runtime current at arrival (a reload never changes a request in flight), writes JSON or SSE, writes
 * the ledger row, and turns every error into the endpoint's envelope.
 */
export function endpoint(spec: EndpointSpec, current: () => Runtime): Middleware {
  return async (koaCtx) => {
    const ctx = koaCtx as unknown as GatewayContext;
    const started = performance.now();
    const runtime = current();
    const tracer = runtime.services.tracer;
    const abort = new RequestAbort();
    const onClose = () => {
      if (!ctx.res.writableFinished) abort.abort(CLIENT_CLOSED);
    };
    ctx.res.once('close', onClose);
    // While the gateway drains (shutdown), a new request is refused in its endpoint's envelope.
    const drain = runtime.drain;
    const refusal = drain?.enter(abort) ?? null;

    let body: Record<string, unknown> | null = null;
    let clientBytes: ClientBytes | null = null;
    let integers: ExactIntegers | null = null;
    let span: Span | undefined;
    let state: GatewayState | undefined;
    let error: GatewayError | undefined;
    let firstWriteAt = 0;
    let gone = false;
    /** The stream answer went to writeSse (its events are read there); else, ending in an error, it is unread. */
    let streamRead = false;
    let keepalive: StreamKeepalive | null = null;
    try {
      if (refusal) throw refusal;
      const pipeline = runtime.pipelines[spec.id];
      if (spec.readsBody) {
        // Header checks first (the key): a client they refuse never has its body read or parsed.
        for (const { stage, check } of pipeline.beforeBody) {
          try {
            await check(ctx);
          } catch (err) {
            refuseUnreadBody(ctx, runtime.config.server);
            span = refusedSpan(ctx, spec.id, stage, err, tracer);
            throw err;
          }
        }
        const read = await readJsonBytes(ctx, runtime.config.server, abort);
        body = read.body;
        integers = read.integers;
        // Kept for the upstream call when no stage edits the body in place and it is big enough to matter.
        if (pipeline.keepsBody && read.raw.length >= REUSED_MIN_BYTES && (spec.id === 'chat_completions' || spec.id === 'messages')) clientBytes = new ClientBytes(read.raw, body);
      }
      const parent = parentContext(ctx, body);
      span = tracer.startSpan(spanName(spec.id, body), { attributes: spanAttributes(ctx, body) }, parent);
      state = newState({ spec, body, clientBytes, integers, abort, span, ctx, startedAt: started });
      state.traceContext = withSpan(parent, span);
      ctx.state.gateway = state;
      const keepaliveMs = runtime.config.server.stream_keepalive_ms;
      if (body?.stream === true && keepaliveMs > 0) {
        const streaming = state;
        keepalive = new StreamKeepalive(ctx.res, keepaliveMs, () => (drain?.started ? { ...sseHead(streaming), connection: 'close' } : sseHead(streaming)));
        state.streamAccepted = keepalive.accepted;
      }
      try {
        await pipeline(ctx);
      } finally {
        keepalive?.stop();
      }
      // The client left while a stage worked on the answer (a slow post-stage): nothing is written, and the
      // request is logged and counted as 499 `cancelled` like any client that left before its answer.
      if (clientClosed(abort)) throw CLIENT_CLOSED;
      const response = state.response;
      if (!response) throw new GatewayError('server', 'The pipeline produced no response');
      // A stage may have set it (README "Writing a plugin"): a status Node would send as "999 unknown", or a
      // kind that is neither, is the stage's bug, answered as a 500 in the envelope (a `kind: 'xml'` had been
      // streamed as SSE).
      if (!Number.isInteger(response.status) || response.status < 200 || response.status > 599 || (response.kind !== 'json' && response.kind !== 'sse')) {
        throw new GatewayError('server', `A stage set a response the gateway cannot send (kind ${String(response.kind)}, status ${String(response.status)})`);
      }
      if (response.headers) ctx.set(response.headers);
      // While draining every answer closes its connection: a client must not send its next request on a
      // connection the shutdown is about to close (it would see a reset, not the 503 it would get on a new one).
      if (drain?.started) ctx.set('Connection', 'close');
      ctx.status = response.status;
      if (response.kind === 'json') {
        writeJson(ctx, withPipelineRecords(state, response.body));
        // A client that does not take its answer (it stopped reading) held it and the connection for good, billed
        // `completed`: cut at `write_timeout_ms` and billed `cancelled`, as a stream is. Most answers are taken
        // at once and wait for nothing here.
        const waiting = jsonTaken(ctx.res, abort, runtime.config.server.write_timeout_ms);
        if (waiting) {
          const taken = await waiting;
          if (!taken) ctx.res.destroy();
          // (A shutdown's cut leaves the answer its grace to be taken: it stays billed as it was.)
          if ((!taken || clientClosed(abort)) && state.outcome === 'completed') state.outcome = 'cancelled';
        }
        // The answer is written (or, for HEAD, Koa writes it in the promise callbacks that follow this
        // return); the ledger row, the span's end, the log line and the metrics come right after (a tick
        // callback runs once the microtask queue is empty, before any I/O), so the caller waits for none of
        // them and nothing can observe the answer without them (one that waited above: once it was taken or cut).
        process.nextTick(afterAnswer, state, span, response.status);
        return;
      }
      ctx.respond = false; // the stream is written here, event by event, not by Koa
      streamRead = true;
      firstWriteAt = await writeSse(ctx, response.status, response.events, runtime.services.logger, runtime.config.server.write_timeout_ms);
      if (state.abort.aborted && state.outcome === 'completed') state.outcome = 'cancelled';
      span.setAttribute('gateway.outcome', state.outcome);
      // A stream that failed after its 200 is an error in the trace and the access line, as in the metrics.
      const ended = endedAs(state);
      if (state.outcome === 'failed') {
        span.setStatus({ code: SpanStatusCode.ERROR, message: 'The stream ended with an error' });
        span.setAttribute('gateway.error_type', ended);
      }
      finish(runtime, state, span, response.status, ended === 'none' ? undefined : ended);
    } catch (err) {
      // A stream never written (the client left, or a stage refused it, after its provider began the answer):
      // billed for what the provider had sent, its upstream closed (it had been billed nothing).
      if (state?.response?.kind === 'sse' && !streamRead) state.response.unread?.();
      // Cut at the drain timeout: the caller sees why (not the "client closed" the abort makes of it).
      const cut = shutdownCut(abort);
      const e = cut ?? toGatewayError(err);
      error = e;
      // A client that left is not an error of the gateway's, whatever the stage that saw it go threw.
      if (clientClosed(abort)) {
        clientGone();
        settle();
        return;
      }
      // Refused before its span was opened (a body that is no JSON, too large, too deep or too slow; a drain):
      // a span per request all the same (README Tracing), as a refusal from the headers gets.
      span ??= tracer.startSpan(spanName(spec.id, null), { attributes: spanAttributes(ctx, null) }, parentContext(ctx, null));
      if (e.errorType === 'server') runtime.services.logger.error({ err: e.cause ?? e, path: ctx.path }, 'unexpected error');
      // A stream a later stage refused before any byte was written: stop the provider's stream now (unread,
      // it would run on and hold a pooled connection).
      if (state?.response?.kind === 'sse' && (!ctx.res.headersSent || keepalive?.wroteHead)) abort.abort();
      // The client gets an error, so the request was not served, even if the provider answered it (a stage
      // after upstream refused or failed): its ledger row says `failed`, as output moderation's does.
      if (state?.outcome === 'completed') state.outcome = 'failed';
      // The keep-alive sent the 200 and the SSE headers (a provider had accepted the stream; spec 7.5.2): the
      // error ends that stream in-band, as a provider failing before any output does, with the debug echoes
      // and routing metadata the caller opted in to (it had carried the error alone).
      if (keepalive?.wroteHead && state && span) {
        ctx.respond = false;
        if (!ctx.res.destroyed) ctx.res.end(failureBeforeAnswer(state, e).map(formatSse).join(''));
        span.setStatus({ code: SpanStatusCode.ERROR, message: e.message });
        span.setAttribute('gateway.error_type', e.errorType);
        finish(runtime, state, span, ctx.res.statusCode, e.errorType);
        settle();
        return;
      }
      const style = spec.style;
      ctx.status = statusFor(e, style);
      // Node has no reason phrase for Anthropic's 529 (the status line read "529 unknown").
      if (ctx.status === 529) ctx.message = 'Overloaded';
      if (e.headers) ctx.set(e.headers);
      if (state?.requestId) ctx.set(requestIdHeader(style), state.requestId);
      if (drain?.started) ctx.set('Connection', 'close');
      const body = errorBody(e, style, state?.requestId ?? null);
      // Not on a 500 (spec 7.4 rule 3: its routing metadata is omitted, as its provider details are).
      if (state?.metadataOptIn && (state.candidates.length > 0 || state.pipeline.length > 0) && !masked(e)) {
        (body as Record<string, unknown>).gateway_metadata = routingMetadata(state);
      }
      // What a stage put in an error's metadata or in the pipeline records may not be JSON (a BigInt, a
      // cycle): Koa's own encoding then failed and the client got a bare text/plain 500, no envelope, no id.
      let text: string;
      try {
        text = JSON.stringify(body);
      } catch (encodeErr) {
        runtime.services.logger.error({ err: encodeErr, path: ctx.path, error_type: e.errorType }, 'an error answer could not be encoded as JSON; answered as a server error');
        const fallback = new GatewayError('server', 'Internal server error');
        ctx.status = statusFor(fallback, style);
        text = JSON.stringify(errorBody(fallback, style, state?.requestId ?? null));
      }
      setJsonBody(ctx, text);
      if (!state) runtime.services.logger.info({ endpoint: spec.id, status: ctx.status, error_type: e.errorType, ms: msSince(started) }, 'request');
      if (span) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: e.message });
        span.setAttribute('gateway.error_type', e.errorType);
        if (state) finish(runtime, state, span, ctx.status, e.errorType);
        else {
          span.setAttribute('http.response.status_code', ctx.status);
          span.end();
        }
      }
    }
    settle();

    /**
     * The client went away before its answer (an error, the timeout the abort surfaces as, is all that is left
     * of the request). Nobody is there to read an error body, so none is written; the log line, the metrics and
     * the spans say 499 `cancelled` (nginx's "client closed request"), not a 504 timeout an operator would
     * alert on. A request that reached a provider gets its ledger row from `finish` (routing set it `cancelled`).
     */
    function clientGone(): void {
      gone = true;
      ctx.respond = false;
      if (state && state.outcome === 'completed') state.outcome = 'cancelled';
      if (!span) {
        runtime.services.logger.info({ endpoint: spec.id, status: CLIENT_CLOSED_STATUS, error_type: 'cancelled', ms: msSince(started) }, 'request');
        return;
      }
      span.setAttribute('gateway.outcome', 'cancelled');
      if (state) return finish(runtime, state, span, CLIENT_CLOSED_STATUS, 'cancelled');
      span.setAttribute('http.response.status_code', CLIENT_CLOSED_STATUS);
      span.end();
    }

    /**
     * Last: a shutdown waits for every request to leave before it closes the ledger and the connections.
     * While draining, a request leaves once its answer is written out: an error answer is written by Koa
     * after this returns, and closing the connections before that sent the client nothing at all.
     */
    function settle(): void {
      if (drain?.started && !gone && !ctx.res.writableFinished && !ctx.res.destroyed) ctx.res.once('close', () => drain.leave(abort));
      else drain?.leave(abort);
      runtime.services.metrics?.request({
        endpoint: spec.id,
        status: gone ? CLIENT_CLOSED_STATUS : ctx.status,
        errorType: gone ? 'cancelled' : error ? error.errorType : endedAs(state),
        error,
        startedAt: started,
        endedAt: performance.now(),
        firstWriteAt,
        upstreamMs: state?.upstreamMs ?? -1,
      });
    }

    function afterAnswer(answered: GatewayState, answerSpan: Span, status: number): void {
      try {
        const ended = endedAs(answered);
        if (ended !== 'none') {
          answerSpan.setStatus({ code: SpanStatusCode.ERROR, message: 'The answer reports a failure' });
          answerSpan.setAttribute('gateway.error_type', ended);
        }
        finish(runtime, answered, answerSpan, status, ended === 'none' ? undefined : ended);
      } catch (err) {
        // The answer is out: nothing to turn into an error answer any more.
        runtime.services.logger.error({ err, generation_id: answered.requestId }, 'finishing a request failed');
      }
      settle();
    }
  };
}

/** The status logged and counted for a request whose client went away before its answer (nginx's 499). */
const CLIENT_CLOSED_STATUS = 499;

/** Milliseconds since `start` (a `performance.now()` reading), to a tenth: the access line's `ms`. */
function msSince(start: number): number {
  return Math.round((performance.now() - start) * 10) / 10;
}

/** The `error_type` metric label of an answer that is not an error: how a stream ended; `none` for JSON (unless it reports a failure). */
function endedAs(state: GatewayState | undefined): string {
  // A JSON answer that reports a failure with its 200 (spec 7.5.4) is counted as that failure.
  // One whose client did not take it (cut at write_timeout_ms, or gone) is counted `cancelled`, as a stream is.
  if (state?.response?.kind === 'json') return state.response.failure ?? (state.outcome === 'cancelled' ? 'cancelled' : 'none');
  if (state?.response?.kind !== 'sse' || state.outcome === 'completed') return 'none';
  return state.outcome === 'cancelled' ? 'cancelled' : 'stream_failed';
}

/**
 * A JSON answer's `gateway_metadata` is built when the provider answers, before post-stages (e.g.
 * response-healing) run; records they pushed onto `state.pipeline` are added here, once, for every stage.
 */
function withPipelineRecords(state: GatewayState, body: unknown): unknown {
  if (!state.metadataOptIn || state.pipeline.length === 0 || !body || typeof body !== 'object') return body;
  const meta = (body as Record<string, unknown>).gateway_metadata;
  if (!meta || typeof meta !== 'object') return body;
  const { pipeline: _built, ...rest } = meta as Record<string, unknown>;
  return { ...(body as Record<string, unknown>), gateway_metadata: { pipeline: state.pipeline, ...rest } };
}

/** The end of every request that got past body parsing: ledger row (queued), span end, access log line. */
function finish(runtime: Runtime, state: GatewayState, span: Span, status: number, errorType?: string): void {
  const { logger, ledger } = runtime.services;
  try {
    // Dated when it was admitted, if its spend was held: the window its cost was counted in (Admission.admittedAt).
    // A free-model request (no hold) is dated when the free-model daily window counted it: that day's counter is
    // rebuilt from the ledger by the row's date, and a request ending past midnight had counted in both days.
    const admittedAt = state.spendHold?.admission?.admittedAt ?? state.rateCounted?.dailyAt;
    const rows = ledgerRowsOf(state, admittedAt ?? runtime.services.spend.clock());
    // The row releases the request's journal entry when it is written (README "Ledger durability").
    const pendingId = state.pendingLedger?.id ?? null;
    rows.forEach((row, i) => ledger.add(row, i === 0 ? pendingId : null));
    if (rows.length === 0 && pendingId) ledger.release(pendingId);
  } finally {
    for (const done of state.onFinish) {
      try {
        done();
      } catch (err) {
        logger.error({ err, generation_id: state.requestId }, 'a finish hook failed');
      }
    }
    span.setAttribute('http.response.status_code', status);
    if (state.route) {
      span.setAttribute('gateway.model', state.route.model);
      span.setAttribute('gateway.provider', state.route.provider);
    }
    if (state.usage) {
      span.setAttribute('gen_ai.usage.input_tokens', state.usage.inputTokens);
      span.setAttribute('gen_ai.usage.output_tokens', state.usage.outputTokens);
    }
    if (state.costUsd !== null) span.setAttribute('gateway.cost_usd', state.costUsd);
    span.end();
    logger.info(
      {
        endpoint: state.endpoint,
        status,
        ms: msSince(state.startedAt),
        generation_id: state.requestId,
        key_id: state.key?.id,
        model: state.route?.model,
        provider: state.route?.provider,
        outcome: state.route ? state.outcome : undefined,
        error_type: errorType,
        cost_usd: state.costUsd ?? undefined,
      },
      'request',
    );
  }
}

interface NewState {
  spec: EndpointSpec;
  body: Record<string, unknown> | null;
  clientBytes: ClientBytes | null;
  integers: ExactIntegers | null;
  abort: RequestAbort;
  span: Span;
  ctx: GatewayContext;
  startedAt: number;
}

function newState({ spec, body, clientBytes, integers, abort, span, ctx, startedAt }: NewState): GatewayState {
  const opt = ctx.get('x-gateway-metadata') || ctx.get('x-gateway-experimental-metadata');
  return new RequestState({
    endpoint: spec.id,
    style: spec.style,
    body,
    clientBytes,
    exactIntegers: integers,
    abort,
    span,
    startedAt,
    session: sessionOf(body, ctx.get('x-session-id')),
    metadataOptIn: opt.toLowerCase() === 'enabled',
  });
}
