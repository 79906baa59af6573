import { randomBytes } from 'node:crypto';
import {
  propagation,
  ROOT_CONTEXT,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type { Middleware } from 'koa';
import type { Logger } from 'pino';
import { errorBody, statusFor, type ApiStyle } from '../errors/envelope';
import { GatewayError, toGatewayError } from '../errors/gateway-error';
import { CLIENT_CLOSED, clientClosed, RequestAbort, type AbortWatch } from '../pipeline/request-abort';
import type { EndpointId, GatewayContext, GatewayState, SseEvent } from '../pipeline/types';
import { inBandError } from '../dialects/in-band-error';
import { shutdownCut } from '../drain';
import { batchesOf, formatSse } from '../providers/sse';
import type { Runtime } from '../runtime';
import { routingMetadata } from '../routing/metadata';
import { sessionOf } from '../routing/sticky';
import { ledgerRowOf } from '../spend/ledger';
import { spanText } from '../telemetry/span-text';
import { withSpan } from '../telemetry/linked-context';
import { stageSpanName } from '../pipeline/build';
import { readJsonBytes, refuseUnreadBody } from './body';
import { ClientBytes, REUSED_MIN_BYTES } from './client-bytes';
import { RequestState } from './request-state';

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
    let span: Span | undefined;
    let state: GatewayState | undefined;
    let error: GatewayError | undefined;
    let firstWriteAt = 0;
    let gone = false;
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
        const read = await readJsonBytes(ctx, runtime.config.server);
        body = read.body;
        // Kept for the upstream call when no stage edits the body in place and it is big enough to matter.
        if (pipeline.keepsBody && read.raw.length >= REUSED_MIN_BYTES && (spec.id === 'chat_completions' || spec.id === 'messages')) clientBytes = new ClientBytes(read.raw, body);
      }
      const parent = parentContext(ctx, body);
      span = tracer.startSpan(spanName(spec.id, body), { attributes: spanAttributes(ctx, body) }, parent);
      state = newState({ spec, body, clientBytes, abort, span, ctx, startedAt: started });
      state.traceContext = withSpan(parent, span);
      ctx.state.gateway = state;
      await pipeline(ctx);
      const response = state.response;
      if (!response) throw new GatewayError('server', 'The pipeline produced no response');
      if (response.headers) ctx.set(response.headers);
      // While draining every answer closes its connection: a client must not send its next request on a
      // connection the shutdown is about to close (it would see a reset, not the 503 it would get on a new one).
      if (drain?.started) ctx.set('Connection', 'close');
      ctx.status = response.status;
      if (response.kind === 'json') {
        writeJson(ctx, withPipelineRecords(state, response.body));
        // The answer is written (or, for HEAD, Koa writes it in the promise callbacks that follow this
        // return); the ledger row, the span's end, the log line and the metrics come right after (a tick
        // callback runs once the microtask queue is empty, before any I/O), so the caller waits for none of
        // them and nothing can observe the answer without them.
        process.nextTick(afterAnswer, state, span, response.status);
        return;
      }
      ctx.respond = false; // the stream is written here, event by event, not by Koa
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
      // Cut at the drain timeout: the caller sees why (not the "client closed" the abort makes of it).
      const cut = shutdownCut(abort);
      const e = cut ?? toGatewayError(err);
      error = e;
      if (e.errorType === 'server') runtime.services.logger.error({ err: e.cause ?? e, path: ctx.path }, 'unexpected error');
      if (clientClosed(abort)) {
        clientGone();
        settle();
        return;
      }
      // A stream a later stage refused before any byte was written: stop the provider's stream now (unread,
      // it would run on and hold a pooled connection); the request was not served.
      if (state?.response?.kind === 'sse' && !ctx.res.headersSent) {
        abort.abort();
        if (state.outcome === 'completed') state.outcome = 'failed';
      }
      const style = spec.style;
      ctx.status = statusFor(e, style);
      if (e.headers) ctx.set(e.headers);
      if (state?.requestId) ctx.set(requestIdHeader(style), state.requestId);
      if (drain?.started) ctx.set('Connection', 'close');
      setJsonBody(ctx, errorBody(e, style, state?.requestId ?? null));
      if (state?.metadataOptIn && (state.candidates.length > 0 || state.pipeline.length > 0)) {
        (ctx.body as Record<string, unknown>).gateway_metadata = routingMetadata(state);
      }
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
        finish(runtime, answered, answerSpan, status);
      } catch (err) {
        // The answer is out: nothing to turn into an error answer any more.
        runtime.services.logger.error({ err, generation_id: answered.requestId }, 'finishing a request failed');
      }
      settle();
    }
  };
}

const JSON_TYPE = 'application/json; charset=utf-8';

/** The status logged and counted for a request whose client went away before its answer (nginx's 499). */
const CLIENT_CLOSED_STATUS = 499;

/**
 * A JSON answer. The content type is set as a header first: Koa would otherwise look the type up by its
 * extension (`mime-types`) on every request to arrive at the same `application/json; charset=utf-8`.
 */
function setJsonBody(ctx: GatewayContext, body: unknown): void {
  if (!ctx.res.hasHeader('content-type')) ctx.set('Content-Type', JSON_TYPE);
  ctx.body = body;
}

/**
 * A JSON answer written here, not by Koa. Koa sets the content type and length with `setHeader`, each a
 * store into the response's header object that V8 hands to its runtime (~1.5 % of a chat request's CPU
 * time in a `perf` profile), and looks at the body's kind and the status again in `respond`. Here the two
 * headers go to `writeHead` with the status, as one list. The bytes and headers are Koa's: `Content-Type`
 * (unless a stage set one; headers a stage set are kept, Node merges them) and `Content-Length`. A HEAD
 * request (GET /key, /models, /presets) goes through Koa, which sends the headers without the body; a
 * stage that sent its own head gets the body after it; an answer to a client that has gone away is only
 * ended.
 */
function writeJson(ctx: GatewayContext, body: unknown): void {
  if (ctx.method === 'HEAD') return setJsonBody(ctx, body);
  const res = ctx.res;
  const text = JSON.stringify(body);
  if (!ctx.writable) {
    ctx.respond = false;
    res.end();
    return;
  }
  if (res.headersSent) {
    ctx.respond = false;
    res.end(text);
    return;
  }
  const length = String(Buffer.byteLength(text));
  const head = res.hasHeader('content-type') ? ['Content-Length', length] : ['Content-Type', JSON_TYPE, 'Content-Length', length];
  const id = ctx.state.gateway.requestId;
  if (id) head.push(requestIdHeader(ctx.state.gateway.style), id);
  // Koa stays in charge until the head is written: if writeHead throws, the error answer is Koa's to send.
  res.writeHead(res.statusCode, head);
  ctx.respond = false;
  res.end(text);
}

/** Milliseconds since `start` (a `performance.now()` reading), to a tenth: the access line's `ms`. */
function msSince(start: number): number {
  return Math.round((performance.now() - start) * 10) / 10;
}

/**
 * The header the official SDKs read a request id from (OpenAI's `x-request-id`, Anthropic's `request-id`:
 * `_request_id`, `error.requestID`, their retry logs), carrying the generation id of the body and the ledger.
 */
function requestIdHeader(style: ApiStyle): string {
  return style === 'messages' ? 'request-id' : 'x-request-id';
}

/** The `error_type` metric label of an answer that is not an error: how a stream ended; `none` for JSON. */
function endedAs(state: GatewayState | undefined): string {
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

/**
 * Writes an SSE answer straight to the socket. Events that are ready in the same tick (a provider usually
 * sends many per TCP packet, and they come as one batch) go out as one write: one chunk of the chunked encoding and one syscall instead
 * of one per event. Backpressure from a slow client is respected. A stream's failures arrive as events (see
 * routing/dispatch.ts), so nothing here throws to the caller. Returns when the first bytes went out (0: never).
 */
async function writeSse(ctx: GatewayContext, status: number, events: AsyncIterable<SseEvent>, logger: Logger, writeTimeoutMs: number): Promise<number> {
  const res = ctx.res;
  const state = ctx.state.gateway;
  // A stage that sent its status and headers itself gets the events after them (writeHead would throw, and
  // with Koa's answer already switched off the request would hang).
  if (!res.headersSent) {
    const head: Record<string, string> = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' };
    if (state.requestId) head[requestIdHeader(state.style)] = state.requestId;
    res.writeHead(status, head);
  }
  let pending = '';
  let scheduled = false;
  let blocked = false;
  let firstWriteAt = 0;
  const flush = () => {
    scheduled = false;
    if (pending === '' || res.destroyed) return;
    const out = pending;
    pending = '';
    if (firstWriteAt === 0) firstWriteAt = performance.now();
    if (!res.write(out)) blocked = true;
  };
  try {
    // A batch at a time where the stream has batches (routing's relay does, unless a stage wrapped it).
    for await (const batch of { [Symbol.asyncIterator]: () => batchesOf(events) }) {
      if (res.destroyed) break;
      for (const ev of batch) pending += formatSse(ev);
      if (!scheduled) {
        scheduled = true;
        process.nextTick(flush); // runs once the events already at hand have all been added
      }
      if (blocked) {
        blocked = false;
        // The socket may have drained already (the write went out while this waited for the next batch):
        // waiting for a 'drain' that came and went hung the stream for good.
        if (res.writableNeedDrain && !(await drained(res, state.abort, writeTimeoutMs))) {
          // A client that stopped reading held its request slot and a pooled upstream connection for good (undici's
          // body timeout does not run while the upstream read is paused): cut like a client that left.
          res.destroy();
          break;
        }
      }
    }
  } catch (err) {
    // Only a stage's own stream wrapper can get here; the answer is cut short and billed as failed.
    state.outcome = 'failed';
    logger.error({ err, generation_id: state.requestId }, 'stream failed after headers were sent');
  } finally {
    // Cut at the drain timeout (shutdown): the stream ends with its dialect's in-band error, billed as failed.
    const cut = shutdownCut(state.abort);
    if (cut && state.outcome !== 'completed' && !res.destroyed) {
      state.outcome = 'failed';
      pending += inBandError(state, cut).map(formatSse).join('');
    }
    flush();
    if (!res.destroyed) res.end();
  }
  return firstWriteAt;
}

/** Waits for the client to take what was written: true once it has (or the request was aborted), false after `timeoutMs`. */
function drained(res: NodeJS.WritableStream, signal: AbortWatch, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (taken: boolean) => {
      clearTimeout(timer);
      res.off('drain', onDrain);
      signal.removeEventListener('abort', onDrain);
      resolve(taken);
    };
    const onDrain = () => done(true);
    const timer = setTimeout(() => done(false), timeoutMs);
    res.once('drain', onDrain);
    signal.addEventListener('abort', onDrain, { once: true });
  });
}

/** The end of every request that got past body parsing: ledger row (queued), span end, access log line. */
function finish(runtime: Runtime, state: GatewayState, span: Span, status: number, errorType?: string): void {
  const { logger, ledger } = runtime.services;
  try {
    const row = ledgerRowOf(state, runtime.services.spend.clock());
    // The row releases the request's journal entry when it is written (README "Ledger durability").
    const pendingId = state.pendingLedger?.id ?? null;
    if (row) ledger.add(row, pendingId);
    else if (pendingId) ledger.release(pendingId);
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
  abort: RequestAbort;
  span: Span;
  ctx: GatewayContext;
  startedAt: number;
}

function newState({ spec, body, clientBytes, abort, span, ctx, startedAt }: NewState): GatewayState {
  const opt = ctx.get('x-gateway-metadata') || ctx.get('x-gateway-experimental-metadata');
  return new RequestState({
    endpoint: spec.id,
    style: spec.style,
    body,
    clientBytes,
    abort,
    span,
    startedAt,
    session: sessionOf(body, ctx.get('x-session-id')),
    metadataOptIn: opt.toLowerCase() === 'enabled',
  });
}

const HEX32 = /^[0-9a-f]{32}$/;
const HEX16 = /^[0-9a-f]{16}$/;
const ZERO_SPAN = '0000000000000000';

/** The caller's trace: `trace.trace_id` + `trace.parent_span_id` in the body win over a `traceparent` header. */
function parentContext(ctx: GatewayContext, body: Record<string, unknown> | null): Context {
  const t = traceObject(body);
  const traceId = typeof t?.trace_id === 'string' ? t.trace_id.toLowerCase() : '';
  if (HEX32.test(traceId)) {
    // Without parent_span_id the request still joins the caller's trace, under a stand-in remote parent id.
    const given = typeof t?.parent_span_id === 'string' ? t.parent_span_id.toLowerCase() : '';
    // An all-zero id is no span (W3C): the stand-in parent then, as for a missing one, not a new trace.
    const spanId = HEX16.test(given) && given !== ZERO_SPAN ? given : randomBytes(8).toString('hex');
    return trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
  }
  if (ctx.get('traceparent')) return propagation.extract(ROOT_CONTEXT, ctx.headers);
  return ROOT_CONTEXT;
}

function traceObject(body: Record<string, unknown> | null): Record<string, unknown> | undefined {
  const t = body?.trace;
  return t && typeof t === 'object' && !Array.isArray(t) ? (t as Record<string, unknown>) : undefined;
}

/**
 * The spans of a request a stage's header check refused before the body was read: the request span (named
 * and parented from the headers alone: the body's `trace` fields are not read), and the refusing stage's
 * span under it marked with the error, as when the stage refuses in the pipeline. The request span is
 * ended by the caller with the answer's status.
 */
function refusedSpan(ctx: GatewayContext, id: EndpointId, stage: string, err: unknown, tracer: Tracer): Span {
  const parent = parentContext(ctx, null);
  const span = tracer.startSpan(spanName(id, null), { attributes: spanAttributes(ctx, null) }, parent);
  const refusing = tracer.startSpan(stageSpanName(stage), { attributes: { 'gateway.stage': stage } }, withSpan(parent, span));
  refusing.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
  refusing.setAttribute('gateway.error_type', toGatewayError(err).errorType);
  refusing.end();
  return span;
}

function spanName(id: EndpointId, body: Record<string, unknown> | null): string {
  const t = traceObject(body);
  if (typeof t?.span_name === 'string' && t.span_name) return clip(t.span_name);
  if (typeof t?.trace_name === 'string' && t.trace_name) return clip(t.trace_name);
  return `gateway.request ${id}`;
}

const KNOWN_TRACE_KEYS = new Set(['trace_id', 'parent_span_id', 'span_name', 'trace_name', 'generation_name']);
/** What a request may put in its span (read before the key is checked): values and names cut, keys counted. */
const SPAN_TRACE_KEYS_MAX = 32;
const clip = spanText;

/**
 * The request span's attributes from the body: the model asked for and the caller's `trace` fields. These
 * come from anyone (before authentication) and live in the export queue until sent: each value and name is
 * cut to 256 characters and at most 32 trace fields are taken, or a slow collector let unauthenticated
 * requests with a 9 MB `model` hold gigabytes.
 */
function spanAttributes(ctx: GatewayContext, body: Record<string, unknown> | null): Record<string, string | number | boolean> {
  const attrs: Record<string, string | number | boolean> = { 'http.request.method': ctx.method, 'url.path': clip(ctx.path) };
  if (typeof body?.model === 'string') attrs['gateway.requested_model'] = clip(body.model);
  const t = traceObject(body);
  if (t) {
    if (typeof t.trace_name === 'string') attrs['gateway.trace_name'] = clip(t.trace_name);
    let taken = 0;
    for (const [k, v] of Object.entries(t)) {
      if (KNOWN_TRACE_KEYS.has(k)) continue;
      if (++taken > SPAN_TRACE_KEYS_MAX) break;
      const name = `gateway.trace.${clip(k)}`;
      if (typeof v === 'string') attrs[name] = clip(v);
      else if (typeof v === 'number' || typeof v === 'boolean') attrs[name] = v;
      else if (v !== null && v !== undefined) attrs[name] = clip(JSON.stringify(v));
    }
  }
  return attrs;
}
