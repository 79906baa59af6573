import type { IncomingMessage, ServerResponse } from 'node:http';
import { shutdownCut } from '../drain';
import { GatewayError } from '../errors/gateway-error';
import type { AbortWatch } from '../pipeline/request-abort';
import type { GatewayContext } from '../pipeline/types';
import { exactIntegers, type ExactIntegers } from './exact-integers';
import { jsonShape, loneSurrogateField } from './json-checks';

/** The `server:` limits a request body is read under (README "Edge limits"). */
export interface BodyLimits {
  max_body_bytes: number;
  max_json_depth: number;
  max_json_values: number;
  body_timeout_ms: number;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Requests that sent `Expect: 100-continue` with a body within the limit and have not been told to go on
 * (server-limits.ts): `100 Continue` is sent when the endpoint starts reading the body, so a request refused
 * before that (a missing or unusable key) never has its body sent. Node closes the connection after an
 * answer sent without `100 Continue`.
 */
const awaitingContinue = new WeakSet<IncomingMessage>();

/** See `awaitingContinue`. */
export function continueWhenRead(req: IncomingMessage): void {
  awaitingContinue.add(req);
}

/**
 * Reads and parses a JSON request body under the edge limits. Every refusal is a typed 4xx thrown before
 * any stage runs:
 * - size: a declared Content-Length over the limit is refused before a byte is read, and an undeclared
 *   (chunked) body is cut off once it passes the limit → 413 `payload_too_large`; the rest of the body is
 *   drained, so the keep-alive connection stays usable, up to twice the limit in all (a longer body's
 *   connection is closed);
 * - time: a body not complete within `body_timeout_ms` of the handler starting to read it (a slow-loris
 *   client) → 408 `timeout`, and the connection is closed;
 * - content: not UTF-8, empty, nested deeper than `max_json_depth`, more than `max_json_values` values, not
 *   JSON, or a string with a lone
 *   surrogate → 400 `invalid_request`.
 * Returns the parsed body, the bytes it was parsed from (src/routes/client-bytes.ts may send them on) and the
 * digits of any integer JSON.parse could not hold exactly (src/routes/exact-integers.ts), else null.
 *
 * @example const { body, raw } = await readJsonBytes(ctx, runtime.config.server);
 */
export async function readJsonBytes(ctx: GatewayContext, limits: BodyLimits, abort?: AbortWatch): Promise<{ body: Record<string, unknown>; raw: Buffer; integers: ExactIntegers | null }> {
  const type = ctx.get('content-type');
  if (type && !/^application\/(.+\+)?json\b/i.test(type)) {
    throw new GatewayError('invalid_request', `Content-Type must be application/json (got ${type.split(';')[0]})`);
  }
  const limit = limits.max_body_bytes;
  const declared = Number(ctx.get('content-length') || NaN);
  if (declared > limit) {
    // Drained without buffering so the connection can answer, up to twice the limit in all, as a chunked
    // body is (below); a longer one ends the connection after the answer, and the client is told so. A client
    // that waits for `100 Continue` was not sent one (server-limits.ts): its body never comes, so the
    // connection ends too.
    const drained = discardRest(ctx.req, ctx.res, 2 * limit);
    const ends = declared > 2 * limit || /100-continue/i.test(ctx.get('expect'));
    if (!ends) await answerWhenDrained(ctx.res, drained, limits.body_timeout_ms);
    throw tooLarge(limit, ends ? { connection: 'close' } : undefined);
  }
  if (awaitingContinue.delete(ctx.req)) ctx.res.writeContinue();
  const raw = await readRaw(ctx.req, ctx.res, limit, limits.body_timeout_ms, abort);
  meanBodyBytes += (raw.length - meanBodyBytes) / 32;
  let text: string;
  try {
    text = utf8.decode(raw);
  } catch {
    throw new GatewayError('invalid_request', 'Request body is not valid UTF-8');
  }
  if (text.trim() === '') throw new GatewayError('invalid_request', 'Request body is empty; a JSON object is required');
  const shape = jsonShape(text, limits.max_json_depth, limits.max_json_values);
  if (shape.exceeds === 'depth') {
    throw new GatewayError('invalid_request', `Request body nests deeper than ${limits.max_json_depth} levels`, {
      metadata: { max_depth: limits.max_json_depth },
    });
  }
  if (shape.exceeds === 'values') {
    throw new GatewayError('invalid_request', `Request body holds more than ${limits.max_json_values} JSON values`, {
      metadata: { max_values: limits.max_json_values },
    });
  }
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch (err) {
    throw new GatewayError('invalid_request', `Request body is not valid JSON: ${(err as Error).message}`);
  }
  // Refused on every endpoint, before any stage: a lone surrogate has no UTF-8 form, so stored (a preset's
  // `system`, a video request) it would not come back as sent. The field is named, as validation names one.
  const field = loneSurrogateField(text, body);
  if (field !== null) {
    throw new GatewayError('invalid_request', `\`${field}\` has a string with an unpaired UTF-16 surrogate (a lone \\uD800–\\uDFFF escape)`, { metadata: { field } });
  }
  return { body, raw, integers: shape.longInteger ? exactIntegers(text) : null };
}

/**
 * A request refused before its body was read (`Stage.beforeBody`: a missing or unusable key): the body is
 * read and dropped, up to `max_body_bytes`, so the keep-alive connection can serve the next request; a
 * longer one ends the connection after the answer (as a body over the limit does), and a declared length
 * over the limit gets `Connection: close` on the answer. A client still waiting for `100 Continue` sends
 * nothing (Node closes that connection after the answer).
 */
export function refuseUnreadBody(ctx: GatewayContext, limits: BodyLimits): void {
  if (awaitingContinue.delete(ctx.req)) return;
  discardRest(ctx.req, ctx.res, limits.max_body_bytes);
  if (Number(ctx.get('content-length') || NaN) > limits.max_body_bytes) ctx.set('Connection', 'close');
}

let meanBodyBytes = 0;

/**
 * The recent mean size of the JSON bodies read (each new body weighs 1/32), in bytes: with the requests in
 * flight, how much parsed body the process holds (src/heap-tuning.ts sizes the young generation by it).
 */
export function recentBodyBytes(): number {
  return meanBodyBytes;
}

function tooLarge(limit: number, headers?: Record<string, string>): GatewayError {
  return new GatewayError('payload_too_large', `Request body exceeds the limit of ${limit} bytes`, { metadata: { limit_bytes: limit }, headers });
}

/** How long a connection whose refused body ran past the drain's budget stays open, unread, before it is closed. */
const LINGER_MS = 1000;

/**
 * Reads and drops the rest of a refused body, so the keep-alive connection can serve the next request, but
 * at most `budget` more bytes. Past that the connection is ended: reading stops, the end is sent once the
 * 413 is written, and the socket is closed `LINGER_MS` later (closing it at once, with the client's bytes
 * still arriving, would reset the connection, and a client that had not read the 413 yet would lose it).
 * Without a cap a client could keep a connection busy for the whole `requestTimeout` sending data only to
 * have it thrown away.
 */
function discardRest(req: IncomingMessage, res: ServerResponse, budget: number): Promise<void> {
  let left = budget;
  let drained: () => void = () => undefined;
  const settled = new Promise<void>((resolve) => (drained = resolve));
  const onData = (chunk: Buffer) => {
    left -= chunk.length;
    if (left >= 0) return;
    done();
    req.pause();
    const socket = req.socket;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      socket.end();
      setTimeout(() => socket.destroy(), LINGER_MS).unref();
    };
    if (res.writableFinished) end();
    else res.once('finish', end).once('close', end);
  };
  const done = () => {
    req.off('data', onData);
    req.off('end', done);
    req.off('close', done);
    drained();
  };
  req.on('data', onData);
  req.once('end', done);
  req.once('close', done);
  req.resume();
  return settled;
}

/**
 * Waits, for a client that asked to close its connection (`Connection: close`, HTTP/1.0), until its refused
 * body has been read and dropped (`drained`, at most `timeoutMs`). Node closes such a connection as soon as
 * the answer is written; with the body still arriving, the close became a reset, and the client (Node's
 * `http.request` without an agent, for one: 18 of 30 tries) lost the 413 to EPIPE. On a kept-alive
 * connection the answer goes at once, while the rest is drained behind it.
 */
async function answerWhenDrained(res: ServerResponse, drained: Promise<void>, timeoutMs: number): Promise<void> {
  if (res.shouldKeepAlive) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([drained, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
  clearTimeout(timer);
}

/**
 * The body's bytes, or a typed error. Listeners rather than `for await`: on a timeout the request stream is
 * left paused but not destroyed (destroying it would destroy the socket before the 408 can be written).
 */
function readRaw(req: IncomingMessage, res: ServerResponse, limit: number, timeoutMs: number, abort?: AbortWatch): Promise<Buffer> {
  // The client may have gone while the key was looked up (a store round trip): its 'close' came before these
  // listeners, and waiting for it held the request's slot until the body timeout.
  if (req.destroyed) return Promise.reject(closedEarly());
  if (abort && shutdownCut(abort)) return Promise.reject(shutdownCut(abort));
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = (err: GatewayError | null) => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
      abort?.removeEventListener('abort', onAbort);
      if (!err) return resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
      // Past the limit already: as much again is drained (twice the limit in all), then the connection closes.
      if (err.errorType === 'payload_too_large') {
        void answerWhenDrained(res, discardRest(req, res, limit), timeoutMs).then(() => reject(err));
        return;
      }
      req.pause();
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return stop(tooLarge(limit));
      chunks.push(chunk);
    };
    const onEnd = () => stop(null);
    const onError = (err: Error) => stop(new GatewayError('invalid_request', 'The request body could not be read', { cause: err }));
    const onClose = () => stop(closedEarly());
    // Cut at the drain timeout (shutdown) with its body still arriving: answered with the 503 (and
    // `Connection: close`) as the 408 is; the wait had run on until the connections were closed, unanswered.
    const onAbort = () => {
      const cut = shutdownCut(abort!);
      if (cut) stop(cut);
    };
    const timer = setTimeout(
      () =>
        // `Connection: close`: Node then ends the socket once the 408 is written instead of reading on.
        stop(
          new GatewayError('timeout', `The request body was not received within ${timeoutMs} ms`, {
            status: 408,
            headers: { connection: 'close' },
            metadata: { timeout_ms: timeoutMs },
          }),
        ),
      timeoutMs,
    );
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
    req.once('close', onClose);
    abort?.addEventListener('abort', onAbort, { once: true });
  });
}

function closedEarly(): GatewayError {
  return new GatewayError('invalid_request', 'The client closed the connection before the body was complete');
}
