import type { Next, ParameterizedContext } from 'koa';
import { keyUnusableReason } from '../../src/auth/key-cache';
import { GatewayError } from '../../src/errors/gateway-error';
import type { GatewayContext, StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import type { KeyRecord } from '../../src/store/types';
import schema from './schema.json';

export interface AuthConfig {
  accept_x_api_key: boolean;
}

const MISSING = 'Missing Authentication header';
/** One answer for every unusable key (unknown, revoked, disabled, expired): nothing to probe. */
const INVALID = 'Invalid API key';

/**
 * `auth`: `Authorization: Bearer <key>` (or `x-api-key`), looked up by hash; sets `state.key`. On the
 * endpoints that read a body the key is checked from the headers before the body is read (`beforeBody`), so
 * a client without a usable key never has its body read or parsed; the stage then takes the key found.
 */
export const auth: StageDefinition<AuthConfig, Services> = {
  id: 'auth',
  configSchema: schema,
  create(config, services) {
    /** Keys the header check found, by request, for the stage to take (dropped with the request). */
    const checked = new WeakMap<object, KeyRecord>();
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
      let key = checked.get(ctx);
      if (key) checked.delete(ctx);
      else key = await keyOf(ctx);
      const state = ctx.state.gateway;
      state.key = key;
      state.span.setAttribute('gateway.key_id', key.id);
      state.span.setAttribute('gateway.workspace_id', key.workspaceId);
      await next();
    };
    return Object.assign(stage, {
      beforeBody: async (ctx: ParameterizedContext) => {
        checked.set(ctx, await keyOf(ctx));
      },
    });
  },
};
