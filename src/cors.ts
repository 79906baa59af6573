import type Koa from 'koa';
import type { GatewayConfig } from './config/types';
import { errorBody, statusFor } from './errors/envelope';
import { GatewayError } from './errors/gateway-error';

type CorsConfig = GatewayConfig['server']['cors'];

/** Headers a browser client may read besides the CORS-safelisted ones. */
const EXPOSED = 'x-request-id, request-id, retry-after, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset';
const METHODS = 'GET, POST, OPTIONS';
/** Outside the API (and `base_path`): never refused for their Origin. */
const OUTSIDE = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * CORS for browser clients (spec 7.2 files CORS failures under 400). Off while `allowed_origins` is empty:
 * then no answer carries CORS headers and a preflight (`OPTIONS` with `Access-Control-Request-Method`) is a
 * 400 saying CORS is off, rather than the 404 of an unknown route. With origins listed:
 * - a preflight from a listed origin is answered 204 with the methods, the headers it asked for and
 *   `Access-Control-Max-Age`; from another origin, 400;
 * - a request from a listed origin gets `Access-Control-Allow-Origin` (its origin; `*` when `*` is listed) and
 *   the exposed headers (request id, Retry-After, X-RateLimit-*), so the browser may read them;
 * - a request from another origin is refused with 400 before any work (a browser would not let the page read
 *   the answer, but without the refusal the request would still run and be billed).
 * Requests without an `Origin` header (servers, SDKs, curl) are never affected. Read per request: a reload
 * applies at once.
 *
 * @example app.use(cors(() => current.config.server.cors));
 */
export function cors(config: () => CorsConfig): Koa.Middleware {
  const apply = corsFor(config);
  // With CORS off (the default) only a preflight has anything to do: every other request passes at once.
  return (ctx, next) => (ctx.method === 'OPTIONS' || config().allowed_origins.length > 0 ? apply(ctx, next) : next());
}

function corsFor(config: () => CorsConfig): Koa.Middleware {
  return async (ctx, next) => {
    const origin = ctx.get('origin');
    const preflight = ctx.method === 'OPTIONS' && ctx.get('access-control-request-method') !== '';
    // Probes and metrics are for supervisors and scrapers, whatever page they are viewed from.
    if ((!origin && !preflight) || OUTSIDE.has(ctx.path)) return next();
    const { allowed_origins: allowed, max_age_s: maxAge } = config();
    if (allowed.length === 0) {
      if (!preflight) return next();
      return refuse(ctx, new GatewayError('invalid_request', 'CORS is not enabled on this gateway (server.cors.allowed_origins)'));
    }
    if (!origin) return refuse(ctx, new GatewayError('invalid_request', 'A CORS preflight needs an Origin header', { metadata: { field: 'origin' } }));
    const any = allowed.includes('*');
    // Scheme and host are case-insensitive (browsers send them in lower case; an operator may not write them so).
    if (!any && !allowed.some((a) => a.toLowerCase() === origin.toLowerCase())) {
      return refuse(ctx, new GatewayError('invalid_request', `CORS: origin ${JSON.stringify(origin.slice(0, 200))} is not allowed`, { metadata: { field: 'origin' } }));
    }
    ctx.set('Access-Control-Allow-Origin', any ? '*' : origin);
    if (!any) ctx.vary('Origin');
    if (preflight) {
      ctx.set('Access-Control-Allow-Methods', METHODS);
      const asked = ctx.get('access-control-request-headers');
      if (asked) ctx.set('Access-Control-Allow-Headers', asked);
      ctx.set('Access-Control-Max-Age', String(maxAge));
      ctx.status = 204;
      return;
    }
    ctx.set('Access-Control-Expose-Headers', EXPOSED);
    return next();
  };
}

/** The refusal in the envelope of the endpoint asked for (the messages one on `/messages`). */
function refuse(ctx: Koa.Context, e: GatewayError): void {
  const style = ctx.path.endsWith('/messages') && !ctx.path.includes('/presets/') ? 'messages' : 'standard';
  ctx.status = statusFor(e, style);
  ctx.body = errorBody(e, style, null);
}
