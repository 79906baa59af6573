/**
 * The response writers of the endpoint factory (endpoint.ts): a JSON answer, written by Koa or straight to
 * the socket, and an SSE answer written event batch by event batch.
 */

import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import type { ApiStyle } from '../errors/envelope';
import type { AbortWatch } from '../pipeline/request-abort';
import type { GatewayContext, GatewayState, SseEvent } from '../pipeline/types';
import { inBandError } from '../dialects/in-band-error';
import { shutdownCut } from '../drain';
import { toGatewayError, type GatewayError } from '../errors/gateway-error';
import { batchesOf, formatSse } from '../providers/sse';

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * A JSON answer. The content type is set as a header first: Koa would otherwise look the type up by its
 * extension (`mime-types`) on every request to arrive at the same `application/json; charset=utf-8`.
 */
export function setJsonBody(ctx: GatewayContext, body: unknown): void {
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
export function writeJson(ctx: GatewayContext, body: unknown): void {
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
/**
 * The header the official SDKs read a request id from (OpenAI's `x-request-id`, Anthropic's `request-id`:
 * `_request_id`, `error.requestID`, their retry logs), carrying the generation id of the body and the ledger.
 */
export function requestIdHeader(style: ApiStyle): string {
  return style === 'messages' ? 'request-id' : 'x-request-id';
}
/** The dialect's in-band error that ends a stream whose headers are out, in wire form (spec 7.5.3). */
export function inBandSse(state: GatewayState, err: GatewayError): string {
  return inBandError(state, err).map(formatSse).join('');
}

/** The headers of an SSE answer (written by writeSse, or earlier by the stream's keep-alive). */
export function sseHead(state: GatewayState): Record<string, string> {
  const head: Record<string, string> = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' };
  if (state.requestId) head[requestIdHeader(state.style)] = state.requestId;
  return head;
}
/**
 * Writes an SSE answer straight to the socket. Events that are ready in the same tick (a provider usually
 * sends many per TCP packet, and they come as one batch) go out as one write: one chunk of the chunked encoding and one syscall instead
 * of one per event. Backpressure from a slow client is respected. A stream's failures arrive as events (see
 * routing/stream-relay.ts), so nothing here throws to the caller. Returns when the first bytes went out (0: never).
 */
export async function writeSse(ctx: GatewayContext, status: number, events: AsyncIterable<SseEvent>, logger: Logger, writeTimeoutMs: number): Promise<number> {
  const res = ctx.res;
  const state = ctx.state.gateway;
  // A stage that sent its status and headers itself gets the events after them (writeHead would throw, and
  // with Koa's answer already switched off the request would hang).
  if (!res.headersSent) res.writeHead(status, sseHead(state));
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
        if (res.writableNeedDrain && !(await drained(res, 'drain', state.abort, writeTimeoutMs))) {
          // A client that stopped reading held its request slot and a pooled upstream connection for good (undici's
          // body timeout does not run while the upstream read is paused): cut like a client that left.
          res.destroy();
          break;
        }
      }
    }
  } catch (err) {
    // Only a stage's own stream wrapper can get here: the answer is cut short, billed as failed, and ends with
    // its dialect's in-band error (spec 7.5.3) as a provider failing mid-stream does, not with a bare close (a
    // client saw a chat stream with no finish_reason and no [DONE], or a 200 with an empty body).
    state.outcome = 'failed';
    const failure = toGatewayError(err);
    if (failure.errorType === 'server') logger.error({ err, generation_id: state.requestId }, 'stream failed after headers were sent');
    // (A shutdown's cut writes its own, below.)
    if (!res.destroyed && !shutdownCut(state.abort)) pending += inBandSse(state, failure);
  } finally {
    // Cut at the drain timeout (shutdown): the stream ends with its dialect's in-band error, billed as failed.
    const cut = shutdownCut(state.abort);
    if (cut && state.outcome !== 'completed' && !res.destroyed) {
      state.outcome = 'failed';
      pending += inBandSse(state, cut);
    }
    flush();
    // The last events may be the ones a client that stopped reading leaves untaken (a provider's answer can end
    // within one batch): ended at once, they sat in the process for good with the connection, the request
    // billed `completed`. They get the same `write_timeout_ms` as the events before them.
    // (Not once the request was aborted: a shutdown's cut gives such a client its own 2 s.)
    if (!res.destroyed && !state.abort.aborted && res.writableNeedDrain && !(await drained(res, 'drain', state.abort, writeTimeoutMs))) {
      res.destroy();
      if (state.outcome === 'completed') state.outcome = 'cancelled';
    }
    if (!res.destroyed) res.end();
  }
  return firstWriteAt;
}
/**
 * A JSON answer the socket could not take at once (a large answer, a client reading slowly or not at all):
 * resolves true once the client has taken it (or the request was aborted), false once it took nothing for
 * `timeoutMs` (the caller cuts it). Null, with nothing to wait for, when the answer is already with the kernel.
 *
 * @example const waiting = jsonTaken(ctx.res, state.abort, 60000); if (waiting && !(await waiting)) ctx.res.destroy();
 */
export function jsonTaken(res: ServerResponse, signal: AbortWatch, timeoutMs: number): Promise<boolean> | null {
  if (res.destroyed || res.writableFinished || !res.socket || res.socket.writableLength === 0) return null;
  // Not 'drain': a ServerResponse that was ended emits none; 'finish' comes once its last bytes are with the kernel.
  return drained(res, 'finish', signal, timeoutMs);
}
/**
 * Waits for the client to take what was written (`event`: 'drain' while writing, 'finish' once ended): true once
 * it has (or the request was aborted), false once it took no byte for `timeoutMs`. The wait is for progress, not
 * for the whole backlog: a client reading slowly but steadily a large answer (a 12 MB event took longer than the
 * timeout to drain) is not cut.
 */
function drained(res: ServerResponse, event: 'drain' | 'finish', signal: AbortWatch, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    let taken = bytesTaken(res);
    let movedAt = performance.now();
    const done = (ok: boolean) => {
      clearInterval(timer);
      res.off(event, onTaken);
      signal.removeEventListener('abort', onTaken);
      resolve(ok);
    };
    const onTaken = () => done(true);
    const check = () => {
      const now = bytesTaken(res);
      if (now !== taken) {
        taken = now;
        movedAt = performance.now();
      } else if (performance.now() - movedAt >= timeoutMs) done(false);
    };
    // Looked at four times per timeout: a client that stopped reading is cut between 1 and 1.25 times it after its last byte.
    const timer = setInterval(check, Math.max(1, timeoutMs / 4));
    res.once(event, onTaken);
    signal.addEventListener('abort', onTaken, { once: true });
  });
}
/**
 * How many bytes of the socket's output the kernel has taken so far, or null if this Node does not say. A write
 * is one libuv request however large: Node's own counts (`writableLength`, 'drain') move only when all of it has
 * gone, so the bytes libuv still holds (`_handle.writeQueueSize`, which shrinks as the client reads) are
 * subtracted from those handed to it (`_bytesDispatched`). Without them the wait is for the whole backlog.
 */
function bytesTaken(res: ServerResponse): number | null {
  const socket = res.socket as (Socket & { _bytesDispatched?: unknown; _handle?: { writeQueueSize?: unknown } | null }) | null;
  const dispatched = socket?._bytesDispatched;
  const queued = socket?._handle?.writeQueueSize;
  return typeof dispatched === 'number' && typeof queued === 'number' ? dispatched - queued : null;
}
