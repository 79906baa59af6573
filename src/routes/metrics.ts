import { createHash, timingSafeEqual } from 'node:crypto';
import type { Middleware } from 'koa';
import { keyUnusableReason } from '../auth/key-cache';
import type { GatewayConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import type { KeyLookup } from '../services';
import type { GatewayMetrics } from '../telemetry/metrics';

const sha256 = (text: string) => createHash('sha256').update(text).digest();

/**
 * `GET /metrics`: the Prometheus text of this gateway. Guarded as `server.metrics.auth` says: open, a
 * static scrape token, or a management gateway key. The metrics hold no secrets and no request content,
 * but they do show traffic, spend refusals and which providers fail, so a public listener should guard them.
 *
 * @example liveness.get('/metrics', metricsRoute(metrics, config.server.metrics, keys));
 */
export function metricsRoute(metrics: GatewayMetrics, config: GatewayConfig['server']['metrics'], keys: KeyLookup): Middleware {
  // Compared as hashes of equal length, so the comparison time says nothing about the token.
  const tokenHash = config.auth === 'token' && config.token ? sha256(config.token) : null;
  return async (ctx) => {
    if (config.auth !== 'none') {
      const m = /^Bearer\s+(.+)$/i.exec(ctx.get('authorization').trim());
      if (!m) throw new GatewayError('authentication', 'Missing Authentication header');
      const presented = m[1].trim();
      if (tokenHash) {
        if (!timingSafeEqual(sha256(presented), tokenHash)) throw new GatewayError('authentication', 'Invalid metrics token');
      } else {
        const key = await keys.find(presented);
        if (!key || keyUnusableReason(key) !== null) throw new GatewayError('authentication', 'Invalid API key');
        if (!key.isManagement) throw new GatewayError('permission_denied', 'GET /metrics needs a management key');
      }
    }
    const text = await metrics.scrape();
    ctx.set('content-type', metrics.contentType);
    ctx.set('cache-control', 'no-store');
    ctx.body = text;
  };
}
