import { createHash, randomBytes } from 'node:crypto';
import { linearRegExpFallback } from './regexp-fallback';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import Router from '@koa/router';
import { trace, type Tracer } from '@opentelemetry/api';
import Koa from 'koa';
import type { Logger } from 'pino';
import { ByokKeys } from './auth/byok-keys';
import { createKeyLookup } from './auth/key-cache';
import type { GatewayConfig } from './config/types';
import { messagesEnvelope, standardEnvelope } from './errors/envelope';
import { GatewayError, quoted, toGatewayError } from './errors/gateway-error';
import type { StageRegistry } from './pipeline/types';
import { closeUpstreamPool } from './providers/http';
import { Presets } from './presets/lookup';
import { endpoint, type EndpointSpec } from './routes/endpoint';
import { buildRuntime, type LateServices, type Runtime } from './runtime';
import { applyServerLimits, InFlightLimit, refuseLargeBodiesBeforeContinue } from './server-limits';
import type { KeyLookup } from './services';
import { EndpointHealth } from './routing/health';
import { StickyRoutes } from './routing/sticky';
import { cors } from './cors';
import { SpendControl } from './spend/control';
import { LedgerWriter } from './spend/ledger';
import { RateLimiter } from './spend/rate-limits';
import { openState } from './state';
import type { SharedState } from './state/types';
import { ensureDeclared } from './store/declared';
import type { Store } from './store/types';
import { GatewayMetrics } from './telemetry/metrics';
import { metricsRoute } from './routes/metrics';
import { restoreVideoHolds } from './videos/billing';
import { VideoPoller } from './videos/poller';
import { Drain } from './drain';
import { LedgerJournal } from './spend/journal';
import { unreservedDecoded } from './routes/path-spelling';

/** `server.*` fields read from the current config per request (so a reload changes them); the rest apply at start. */
const SERVER_FIELDS_LIVE = new Set<string>(['max_body_bytes', 'max_json_depth', 'max_json_values', 'body_timeout_ms', 'write_timeout_ms', 'stream_keepalive_ms', 'drain_timeout_ms', 'cors']);

export interface GatewayOptions {
  config: GatewayConfig;
  registry: StageRegistry;
  store: Store;
  logger: Logger;
  tracer?: Tracer;
  /** The clock of spend windows, holds and rate limits (tests inject one). */
  clock?: () => number;
}

export interface Gateway {
  app: Koa;
  keys: KeyLookup;
  /** The batching ledger writer; `flush()` makes every finished request's row visible in the store. */
  ledger: LedgerWriter;
  /** Per-endpoint health (circuit breakers), shared by every config generation. */
  health: EndpointHealth;
  sticky: StickyRoutes;
  /** The shared fast state (memory or Redis) and the spend checks over it. */
  state: SharedState;
  spend: SpendControl;
  /** The background poller of video jobs (one per process; started with the gateway, stopped by close()). */
  videos: VideoPoller;
  /** The runtime new requests get. */
  runtime(): Runtime;
  /** The process resources behind every runtime's services (what the stage copies of a config check reach afterwards). */
  resources(): LateServices;
  /** Graceful shutdown (README "Shutdown and probes"): `drain.begin()` turns /readyz to 503 at once; close() drains. */
  drain: Drain;
  /** Pending ledger rows of requests in flight (README "Ledger durability"); null with `ledger.journal: false`. */
  journal: LedgerJournal | null;
  /** Requests the endpoints are serving now, streams until their last event (limited by `server.max_in_flight`). */
  inFlight(): number;
  /**
   * Swaps in a new, already validated config: new pipelines, models and providers for new requests;
   * requests in flight finish on the runtime they started with. Throws (and keeps the old one) if the
   * new runtime cannot be built.
   */
  reload(config: GatewayConfig): void;
  listen(port?: number, host?: string): Promise<{ port: number; server: Server }>;
  close(): Promise<void>;
}

/** Socket errors that mean the client went away. */
const CLIENT_LEFT = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED', 'ERR_STREAM_PREMATURE_CLOSE']);

/**
 * Builds the Koa app for a config. The caller owns the store and the telemetry SDK.
 *
 * @example const gw = await createGateway({ config, registry, store, logger }); await gw.listen();
 */
export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  linearRegExpFallback();
  const { store, logger, registry } = options;
  const tracer = options.tracer ?? trace.getTracer('model-gateway');
  const salt = options.config.server.user_hash_salt ?? (await store.settingOrInit('user_hash_salt', randomBytes(32).toString('hex')));
  const hashUser = (user: string) => createHash('sha256').update(salt).update('\0').update(user).digest('hex');
  const keys = createKeyLookup(store);
  // Batching settings are read at start (a reload keeps the writer, so no queued row is orphaned).
  const ledger = new LedgerWriter(store, logger, { flushMs: options.config.ledger.flush_ms, maxBatch: options.config.ledger.max_batch });
  // Health and sticky sessions are learnt from traffic: a reload keeps them.
  const { routing } = options.config;
  const health = new EndpointHealth({ failureThreshold: routing.circuit_breaker.failure_threshold, cooldownMs: routing.circuit_breaker.cooldown_ms });
  await ensureDeclared(store, options.config);
  // Shared state, spend control and rate limits outlive reloads; they read the current config per request.
  const state = openState(options.config.state, options.clock);
  const byok = new ByokKeys({ store, logger });
  const spend = new SpendControl({ store, state, ledger, logger, byok, clock: options.clock });
  const sticky = new StickyRoutes(state, routing.sticky_ttl_ms, logger);
  const rateLimits = new RateLimiter(
    state,
    store,
    ledger,
    (id, config) => spend.account(id, config),
    (config, model, gw) => spend.servedByOwnKeys(config, config.models.filter((m) => m.id === model), gw),
  );
  const presets = new Presets(store);
  // Shutdown drain and ledger journal outlive reloads; the journal at once finalises what a dead process left.
  const drain = new Drain();
  const journal: LedgerJournal | null = options.config.ledger.journal
    ? new LedgerJournal({ store, logger, holdTtlMs: (): number => current.config.spend.hold_ttl_ms })
    : null;
  // One registry per gateway; the gauges read health, holds and the current config at scrape time.
  const metrics = options.config.server.metrics.enabled
    ? new GatewayMetrics({
        health,
        inFlightHolds: () => spend.inFlightHolds(),
        requestsInFlight: () => inFlight.inFlight,
        config: (): GatewayConfig => current.config,
      })
    : null;
  const build = (config: GatewayConfig) =>
    buildRuntime({ config, registry, store, ledger, keys, health, sticky, tracer, logger, hashUser, state, spend, rateLimits, byok, presets, metrics, journal, drain });
  let current = build(options.config);
  const runtime = () => current;
  journal?.start();
  // Started at once: jobs left unfinished by an earlier process are resumed from the store, their holds first
  // put back into in-process state (which starts empty). Redis keeps them: the poller puts them back only
  // once Redis lost them (holdsLost).
  const restored = state.holdsLost ? 0 : await restoreVideoHolds(store, state);
  if (restored > 0) logger.info({ holds: restored }, 'video jobs: holds of unfinished jobs put back');
  const videos = new VideoPoller(() => current.services, spend.clock);
  videos.start();

  const app = new Koa();
  const messagesPath = `${options.config.server.base_path}/messages/`;
  // Koa's own errors (a response that failed after its handler returned: a client that reset its connection
  // during a stream) go to the logger, not to Koa's default `console.error`, past the log level and format.
  app.on('error', (err: NodeJS.ErrnoException) => {
    if (CLIENT_LEFT.has(err?.code ?? '')) logger.debug({ code: err.code }, 'client connection closed');
    else logger.error({ err }, 'unexpected error');
  });
  app.use(async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        // The path is quoted cut at 200 characters, as a model name is: a 16 KB path had been echoed whole.
        throw new GatewayError('not_found', `No route for ${ctx.method} ${quoted(ctx.path)}`);
      }
      // A path served with other methods (`GET /chat/completions`): 405 with `Allow` (the router's allowedMethods set both).
      // Also for a method the router has no routes for at all (TRACE, PROPFIND), which it answers 501: the path is
      // there, the method is not allowed on it, and 501 is no status of the spec's.
      if ((ctx.status === 405 || ctx.status === 501) && ctx.body === undefined) {
        const allow = String(ctx.response.get('Allow') ?? '');
        throw new GatewayError('invalid_request', `${ctx.method} is not allowed on ${quoted(ctx.path)}${allow ? ` (allowed: ${allow.split(/,\s*/).join(', ')})` : ''}`, {
          status: 405,
          headers: allow ? { Allow: allow } : undefined,
        });
      }
    } catch (err) {
      const e = toGatewayError(err);
      if (e.errorType === 'server') logger.error({ err: e.cause ?? e, path: ctx.path }, 'unexpected error');
      ctx.status = e.status;
      // A path under the Messages API's (`/messages/count_tokens`, `/messages/batches`, which this gateway does
      // not serve) is answered in its envelope, so the Anthropic SDK's error has its `type` (not_found_error).
      if (e.headers) ctx.set(e.headers);
      ctx.body = ctx.path.startsWith(messagesPath) || ctx.path === messagesPath.slice(0, -1) ? messagesEnvelope(e, null) : standardEnvelope(e);
    }
  });

  // Counts requests across reloads; server.* limits take effect at start (README "Edge limits").
  const inFlight = new InFlightLimit(options.config.server.max_in_flight, 1, ({ endpoint: id, status }) => {
    metrics?.overloadRefused();
    // An access line as every answered request has (a refusal had none: the log showed no sign of overload).
    logger.info({ endpoint: id, status, error_type: 'provider_overloaded', reason: 'gateway_max_in_flight' }, 'request');
  });
  const serve = (spec: EndpointSpec) => inFlight.around(spec.style, endpoint(spec, runtime), spec.id);
  const basePath = options.config.server.base_path;
  const router = new Router({ prefix: basePath || undefined });
  // The routes without parameters, by exact method and path, ahead of the router: the hot endpoints skip its
  // matching (every layer's regular expressions: 2.6 % of a chat request's instructions). Any other spelling (a
  // trailing slash, other letter case, HEAD) still goes to the router, which answers it as before.
  const exact = new Map<string, Koa.Middleware>();
  const post = (path: string, handler: Koa.Middleware) => {
    router.post(path, handler);
    exact.set(`POST ${basePath}${path}`, handler);
  };
  const get = (path: string, handler: Koa.Middleware) => {
    router.get(path, handler);
    exact.set(`GET ${basePath}${path}`, handler);
  };
  app.use(cors(() => current.config.server.cors));
  app.use((ctx, next) => {
    // Before any route is matched (the exact lookup, the router, the probes): one spelling for one URI.
    const path = unreservedDecoded(ctx.path);
    if (path !== ctx.path) ctx.path = path;
    const handler = exact.get(`${ctx.method} ${ctx.path}`);
    return handler ? handler(ctx, next) : next();
  });
  post('/messages', serve({ id: 'messages', style: 'messages', readsBody: true }));
  post('/chat/completions', serve({ id: 'chat_completions', style: 'standard', readsBody: true }));
  get('/key', serve({ id: 'key', style: 'standard', readsBody: false }));
  get('/models', serve({ id: 'models', style: 'standard', readsBody: false }));
  // One model (the SDKs' models.retrieve): an id with slashes may come encoded (%2F) or as path segments.
  router.get('/models/*id', serve({ id: 'model_get', style: 'standard', readsBody: false }));
  router.post('/presets/:slug/messages', serve({ id: 'preset_write', style: 'standard', readsBody: true }));
  get('/presets', serve({ id: 'preset_list', style: 'standard', readsBody: false }));
  router.get('/presets/:slug', serve({ id: 'preset_get', style: 'standard', readsBody: false }));
  router.get('/presets/:slug/versions', serve({ id: 'preset_versions', style: 'standard', readsBody: false }));
  post('/videos', serve({ id: 'videos_create', style: 'standard', readsBody: true }));
  router.get('/videos/:jobId', serve({ id: 'videos_get', style: 'standard', readsBody: false }));
  router.post('/videos/:jobId/cancel', serve({ id: 'videos_cancel', style: 'standard', readsBody: false }));
  app.use(router.routes());
  app.use(router.allowedMethods());
  // Probes, /metrics and unknown paths: still answered while draining, but a kept-alive connection (a prober's,
  // a scraper's) should not hold the shutdown up (the API routes say the same in routes/endpoint.ts).
  app.use(async (ctx, next) => {
    await next();
    if (drain.started) ctx.set('Connection', 'close');
  });
  const liveness = new Router();
  liveness.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  // Readiness: 503 from the moment a shutdown begins, so load balancers stop sending traffic.
  liveness.get('/readyz', (ctx) => {
    ctx.status = drain.started ? 503 : 200;
    ctx.body = { status: drain.started ? 'draining' : 'ready' };
  });
  if (metrics) liveness.get('/metrics', metricsRoute(metrics, options.config.server.metrics, keys));
  app.use(liveness.routes());

  let server: Server | undefined;
  return {
    app,
    keys,
    ledger,
    health,
    sticky,
    state,
    spend,
    videos,
    runtime,
    resources: () => ({ store, ledger, keys, health, sticky, state, rateLimits, byok, presets }),
    drain,
    journal,
    inFlight: () => inFlight.inFlight,
    reload(config) {
      const before = current.config;
      current = build(config);
      // The breaker and sticky sessions outlive a reload (their records are kept); their settings follow it.
      health.configure({ failureThreshold: config.routing.circuit_breaker.failure_threshold, cooldownMs: config.routing.circuit_breaker.cooldown_ms });
      sticky.ttlMs = config.routing.sticky_ttl_ms;
      const differs = (a: unknown, b: unknown) => JSON.stringify(a) !== JSON.stringify(b);
      // The log level applies at once (pino reads it per line; every part of the gateway logs through this logger).
      if (before.logging.level !== config.logging.level) {
        logger.level = config.logging.level;
        // Not `level`: pino writes its own numeric `level` first, and a second key of that name read as the line's level.
        logger.info({ log_level: config.logging.level }, 'log level changed');
      }
      for (const section of ['storage', 'state', 'telemetry', 'ledger'] as const) {
        if (differs(before[section], config[section])) {
          logger.warn({ section }, `config section "${section}" changed: it takes effect at the next restart`);
        }
      }
      const server = [...new Set([...Object.keys(before.server), ...Object.keys(config.server)])] as (keyof GatewayConfig['server'])[];
      const atRestart = server.filter((k) => !SERVER_FIELDS_LIVE.has(k) && differs(before.server[k], config.server[k]));
      if (atRestart.length > 0) {
        logger.warn({ section: 'server', fields: atRestart }, `config fields ${atRestart.map((k) => `server.${k}`).join(', ')} changed: they take effect at the next restart`);
      }
    },
    listen(port = options.config.server.port, host = options.config.server.host) {
      return new Promise((resolve, reject) => {
        const s = app.listen(port, host);
        applyServerLimits(s, options.config.server, logger);
        refuseLargeBodiesBeforeContinue(s, () => current.config.server.max_body_bytes);
        s.once('error', reject);
        s.once('listening', () => {
          server = s;
          s.keepAliveTimeout = 65_000;
          resolve({ port: (s.address() as AddressInfo).port, server: s });
        });
      });
    },
    async close() {
      // The port stays open while draining: probes read 503 and new requests get a typed 503 with
      // `Connection: close`, instead of connection refused. Idle keep-alive connections are not closed now
      // (a client may be sending on one at that instant, and would see a reset): their next answer closes them.
      drain.begin();
      const cut = await drain.settle(current.config.server.drain_timeout_ms);
      if (cut > 0) logger.warn({ requests: cut }, 'drain timeout: requests still in flight were cut');
      if (server) {
        const s = server;
        await new Promise<void>((resolve) => {
          s.close(() => resolve());
          s.closeAllConnections();
        });
      }
      // Before the ledger and the state close: a poll round under way may still bill a job.
      await videos.stop();
      // After the server has drained: every finished request's row is queued, now write them all.
      await ledger.close();
      await spend.close();
      await journal?.close();
      await state.close();
      // The row of a request that ended during the steps above (its client gone at the cut, a stage that did
      // not watch the abort) was written at once (LedgerWriter.close): wait for that write, the store closes next.
      await ledger.close();
    },
  };
}

export { closeUpstreamPool };
