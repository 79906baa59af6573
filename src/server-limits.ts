import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Middleware } from 'koa';
import type { Logger } from 'pino';
import type { GatewayConfig } from './config/types';
import { errorBody, standardEnvelope, statusFor, type ApiStyle } from './errors/envelope';
import { GatewayError } from './errors/gateway-error';
import { limitConnections } from './connection-limit';
import { continueWhenRead } from './routes/body';

type ServerConfig = GatewayConfig['server'];

/**
 * Socket-level edge limits (README "Edge limits"), applied to the HTTP server right after `listen()` is
 * called and before it is listening (Node reads `connectionsCheckingInterval` on 'listening').
 * - `headers_timeout_ms` → `server.headersTimeout`: a client that has not finished its headers by then
 *   gets a 408 `timeout` (standard envelope) and the connection is closed.
 * - `server.requestTimeout` = `headers_timeout_ms + body_timeout_ms`: a backstop for bodies nobody reads
 *   (readJsonBytes times out first on the endpoints that read one). Node counts it only until the request has
 *   been received, so it never cuts a long streamed answer.
 * - `max_connections` (0 = no limit): connections beyond it close idle keep-alive ones first, else are closed
 *   at once, before any HTTP is spoken (connection-limit.ts); keep it well above `max_in_flight`, which
 *   answers a clean 503.
 *
 * @example const s = app.listen(port); applyServerLimits(s, config.server, logger);
 */
export function applyServerLimits(server: Server, limits: ServerConfig, logger: Logger): void {
  server.headersTimeout = limits.headers_timeout_ms;
  server.requestTimeout = limits.headers_timeout_ms + limits.body_timeout_ms;
  // Node checks both timeouts on an interval (30 s by default, far coarser than a 10 s headers timeout).
  // (A createServer option in the typings; Node reads the property when the server starts listening.)
  (server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval = Math.max(
    25,
    Math.min(1000, Math.floor(limits.headers_timeout_ms / 4)),
  );
  limitConnections(server, limits.max_connections);
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => answerClientError(err, socket, logger));
}

/**
 * `Expect: 100-continue` (curl sends it for bodies over 1 MB): Node would answer `100 Continue` by itself
 * before any handler runs, and the client would then upload the body. Here a declared `Content-Length` over
 * the body limit (`maxBodyBytes()`, the current config's) gets no `100 Continue`: the endpoint answers its 413
 * at once, with `Connection: close` (routes/body.ts), and the client never sends the body. Any other request
 * is told to go on when its endpoint starts reading the body (`continueWhenRead`), after the key was checked
 * from the headers: a request refused before that never sends its body either (Node closes the connection
 * after an answer sent without `100 Continue`).
 */
export function refuseLargeBodiesBeforeContinue(server: Server, maxBodyBytes: () => number): void {
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (!(Number(req.headers['content-length']) > maxBodyBytes())) continueWhenRead(req);
    server.emit('request', req, res);
  });
  // Any other expectation is one the gateway cannot meet: 417, as Node answers it, but in the standard
  // envelope and closing the connection. Node's own 417 kept the connection open and never told the
  // handlers, so `max_connections` could not count it idle: a client could pin connections with it.
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) => {
    const e = new GatewayError('invalid_request', 'Only the expectation 100-continue is supported', { status: 417 });
    const body = JSON.stringify(standardEnvelope(e));
    res.writeHead(417, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close' });
    res.end(body);
  });
}

/** Reason phrases of the statuses `answerClientError` writes other than 400. */
const REASONS: Record<number, string> = { 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };

/**
 * Node's own answer to a malformed or timed-out request is a bare status line; ours carries the standard
 * envelope with an `error_type`. Written only when no answer to the request has started (as Node does).
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket, logger: Logger): void {
  // `_httpMessage` is the response in progress on this socket; Node's default handler checks it the same way.
  const inProgress = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (err.code === 'ECONNRESET' || !socket.writable || inProgress?.headersSent) {
    socket.destroy();
    return;
  }
  const e =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? new GatewayError('timeout', 'The request was not received in time', { status: 408 })
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? new GatewayError('invalid_request', 'Request headers are too large', { status: 431 }) // RFC 6585
        : new GatewayError('invalid_request', 'Malformed HTTP request');
  logger.info({ status: e.status, error_type: e.errorType, code: err.code }, 'client error');
  const body = JSON.stringify(standardEnvelope(e));
  socket.end(
    `HTTP/1.1 ${e.status} ${REASONS[e.status] ?? 'Bad Request'}\r\n` +
      'Content-Type: application/json; charset=utf-8\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      'Connection: close\r\n\r\n' +
      body,
  );
  socket.destroySoon();
}

/**
 * The count of requests being served by the endpoints, with a ceiling (`server.max_in_flight`, 0 = none).
 * A request over the ceiling is answered at once, before its body is read: 503 `provider_overloaded` (529 on
 * messages style, spec 7.2) with `Retry-After`. A request counts from arrival until its handler returns,
 * which for a stream is after its last event is written or the stream is abandoned, or until its client has
 * gone, if that comes first.
 *
 * @example const gate = new InFlightLimit(1024); router.post('/x', gate.around('standard', handler));
 */
export class InFlightLimit {
  private count = 0;

  constructor(
    private readonly max: number,
    private readonly retryAfterS = 1,
    /** Told of each refusal (the metrics count them, the access log has a line for each). */
    private readonly onRefused: (refused: { endpoint: string; status: number }) => void = () => undefined,
  ) {}

  /** Requests being served now. */
  get inFlight(): number {
    return this.count;
  }

  /** Wraps an endpoint handler: admits it (and counts it until it returns) or answers the overload error. */
  around(style: ApiStyle, handler: Middleware, endpoint = ''): Middleware {
    return async (ctx, next) => {
      if (this.max > 0 && this.count >= this.max) {
        const e = new GatewayError('provider_overloaded', `The gateway is at capacity (${this.max} requests in flight); retry shortly`, {
          headers: { 'retry-after': String(this.retryAfterS) },
          metadata: { reason: 'gateway_max_in_flight', max_in_flight: this.max },
        });
        ctx.status = statusFor(e, style);
        ctx.set(e.headers!);
        ctx.body = errorBody(e, style, null);
        this.onRefused({ endpoint, status: ctx.status });
        return;
      }
      // Counted until the handler returns or the client has gone, whichever comes first: a stage that hangs
      // (ignoring the abort a closed connection sends it) held its slot for good, and enough of them made every
      // request a 503 while /readyz said ready.
      this.count++;
      let counted = true;
      const release = () => {
        if (!counted) return;
        counted = false;
        this.count--;
      };
      ctx.res.once('close', release);
      try {
        await handler(ctx, next);
      } finally {
        ctx.res.off('close', release);
        release();
      }
    };
  }
}
