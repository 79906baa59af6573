import type { Next, ParameterizedContext } from 'koa';
import { keyUnusableReason } from '../../src/auth/key-cache';
import { GatewayError } from '../../src/errors/gateway-error';
import type { GatewayContext, HeaderKeyState, StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import type { KeyRecord } from '../../src/store/types';
import schema from './schema.json';

export interface AuthConfig {
  accept_x_api_key: boolean;
  max_body_reads_per_key: number;
  max_requests_per_key: number;
}

const MISSING = 'Missing Authentication header';
/** One answer for every unusable key (unknown, revoked, disabled, expired): nothing to probe. */
const INVALID = 'Invalid API key';

/** A key found before a body that took longer than this to arrive is looked up again once the body is in. */
const RECHECK_AFTER_MS = 1000;

/**
 * Requests whose body is being received, and requests being served at all, by key id, across every pipeline
 * and reload of this process (a `create` runs per pipeline: a count in its closure would be per endpoint).
 */
const readingCounts = new Map<string, number>();
const servingCounts = new Map<string, number>();

/**
 * `auth`: `Authorization: Bearer <key>` (or `x-api-key`), looked up by hash; sets `state.key`. On the
 * endpoints that read a body the key is checked from the headers before the body is read (`beforeBody`), so
 * a client without a usable key never has its body read or parsed; the stage then takes the key found.
 * There, too, a key may have at most `max_body_reads_per_key` requests whose body is still arriving: a
 * client with a key cannot hold every `max_in_flight` slot with bodies it never finishes. On every endpoint
 * a key may have at most `max_requests_per_key` requests being served at once (body read or not, its answer
 * not yet finished), so one key cannot hold every `max_in_flight` slot with slow or held requests either.
 */
export const auth: StageDefinition<AuthConfig, Services> = {
  id: 'auth',
  configSchema: schema,
  keepsBody: true,
  create(config, services) {
    /** Keys the header check found, by request, for the stage to take (dropped with the request). */
    const checked = new WeakMap<object, { key: KeyRecord; at: number; release: () => void }>();
    const keyOf = async (ctx: ParameterizedContext): Promise<KeyRecord> => {
      const header = ctx.get('authorization');
      let presented = '';
      if (header) {
        const m = /^Bearer\s+(.+)$/i.exec(header.trim());
        if (!m) throw new GatewayError('authentication', INVALID);
        presented = m[1].trim();
      } else if (config.accept_x_api_key) {
        presented = ctx.get('x-api-key').trim();
      }
      if (!presented) throw new GatewayError('authentication', MISSING);
      const key = await services.keys.find(presented);
      if (!key || keyUnusableReason(key) !== null) throw new GatewayError('authentication', INVALID);
      return key;
    };
    const stage = async (ctx: GatewayContext, next: Next) => {
      const found = checked.get(ctx);
      let key: KeyRecord;
      if (found) {
        // The body has been read: the request no longer counts as one whose body is arriving.
        checked.delete(ctx);
        found.release();
        key = found.key;
        // A body that took a while may have outlived its key (revoked, disabled or expired meanwhile): looked
        // up again, as a request would be, so the window stays the key cache's, not `body_timeout_ms`.
        if (performance.now() - found.at > RECHECK_AFTER_MS) key = await keyOf(ctx);
        else if (keyUnusableReason(key) !== null) throw new GatewayError('authentication', INVALID);
      } else {
        // No header check ran (an endpoint without a body): the request is counted here, with no body to wait for.
        key = await keyOf(ctx);
        startRequest(ctx, key.id, config.max_requests_per_key, 0);
      }
      const state = ctx.state.gateway;
      state.key = key;
      state.span.setAttribute('gateway.key_id', key.id);
      state.span.setAttribute('gateway.workspace_id', key.workspaceId);
      await next();
    };
    return Object.assign(stage, {
      beforeBody: async (ctx: ParameterizedContext) => {
        const key = await keyOf(ctx);
        checked.set(ctx, { key, at: performance.now(), release: startRequest(ctx, key.id, config.max_requests_per_key, config.max_body_reads_per_key) });
        // For the header checks after this one (HeaderKeyState): a preset write refuses a regular key before the body.
        (ctx.state as HeaderKeyState).headerKey = key;
      },
    });
  },
};

/**
 * Counts a request of `keyId` as one being served until its response closes (answered, or the connection
 * gone), and as one whose body is arriving until the returned release is called (the stage calls it once the
 * body was read; the response's close calls it too, for a body that failed or never came). Throws the 429
 * when the key already has `maxServing` requests being served or `maxReading` bodies arriving (0: no limit;
 * a request without a body passes 0 for the latter); then nothing stays counted. One `close` listener for both.
 */
function startRequest(ctx: ParameterizedContext, keyId: string, maxServing: number, maxReading: number): () => void {
  const serving = maxServing > 0;
  const reading = maxReading > 0;
  if (serving) take(servingCounts, keyId, maxServing, 'key_requests', 'max_requests_per_key', 'are being served');
  if (reading) {
    try {
      take(readingCounts, keyId, maxReading, 'key_body_reads', 'max_body_reads_per_key', 'are sending their body');
    } catch (err) {
      if (serving) give(servingCounts, keyId);
      throw err;
    }
  }
  if (!serving && !reading) return noop;
  let stillReading = reading;
  const doneReading = () => {
    if (!stillReading) return;
    stillReading = false;
    give(readingCounts, keyId);
  };
  whenClosed(ctx, () => {
    doneReading();
    if (serving) give(servingCounts, keyId);
  });
  return doneReading;
}

/**
 * Runs `release` when the response closes, or now if it already has: a client that left while its key was
 * looked up closed it before the counts were taken, and a listener added then would never run (the key would
 * keep that count until the process restarts).
 */
function whenClosed(ctx: ParameterizedContext, release: () => void): void {
  if (ctx.res.closed || ctx.res.destroyed) release();
  else ctx.res.once('close', release);
}

/** One more in `counts` for `keyId`, or the 429 (Retry-After: 1) naming the limit when it has `max`. */
function take(counts: Map<string, number>, keyId: string, max: number, reason: string, setting: string, what: string): void {
  const now = counts.get(keyId) ?? 0;
  if (now >= max) {
    throw new GatewayError('rate_limit_exceeded', `Too many requests of this key ${what} at once (limit ${max}); retry shortly`, {
      headers: { 'retry-after': '1' },
      metadata: { reason, [setting]: max },
    });
  }
  counts.set(keyId, now + 1);
}

function give(counts: Map<string, number>, keyId: string): void {
  const left = (counts.get(keyId) ?? 1) - 1;
  if (left > 0) counts.set(keyId, left);
  else counts.delete(keyId);
}

function noop(): void {}
