import type { Next, ParameterizedContext } from 'koa';
import { keyUnusableReason } from '../../src/auth/key-cache';
import { GatewayError } from '../../src/errors/gateway-error';
import type { GatewayContext, StageDefinition } from '../../src/pipeline/types';
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
const reading = new Map<string, number>();
const serving = new Map<string, number>();
/** Requests already counted in `serving` (the header check counts a request, its stage then does not). */
const counted = new WeakSet<object>();

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
        key = await keyOf(ctx);
        startServing(ctx, key.id, config.max_requests_per_key);
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
        startServing(ctx, key.id, config.max_requests_per_key);
        checked.set(ctx, { key, at: performance.now(), release: startReading(ctx, key.id, config.max_body_reads_per_key) });
      },
    });
  },
};

/**
 * Counts a request of `keyId` as one whose body is arriving, or throws the 429 when the key has `max` such
 * requests already (0: no limit). Returns the release, which the stage calls once the body was read; the
 * request's end (its answer written, or its connection closed: a body that failed or never came) calls it
 * too. It counts once.
 */
function startReading(ctx: ParameterizedContext, keyId: string, max: number): () => void {
  if (max <= 0) return noop;
  take(reading, keyId, max, 'key_body_reads', 'max_body_reads_per_key', 'are sending their body');
  let held = true;
  const release = () => {
    if (!held) return;
    held = false;
    give(reading, keyId);
  };
  ctx.res.once('close', release);
  return release;
}

/**
 * Counts a request of `keyId` as one being served until its response closes (answered, or the connection
 * gone), or throws the 429 when the key has `max` such requests already (0: no limit). A request is counted
 * once, by the header check or else by the stage.
 */
function startServing(ctx: ParameterizedContext, keyId: string, max: number): void {
  if (max <= 0 || counted.has(ctx)) return;
  take(serving, keyId, max, 'key_requests', 'max_requests_per_key', 'are being served');
  counted.add(ctx);
  ctx.res.once('close', () => give(serving, keyId));
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
