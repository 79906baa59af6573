import type { StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import schema from './schema.json';

/**
 * `rate-limit`: platform request limits (gateway.yaml `rate_limits` and `free_models`) before anything else
 * is spent on the request; 429 with X-RateLimit-* and Retry-After when a window is full.
 */
export const rateLimit: StageDefinition<Record<string, never>, Services> = {
  id: 'rate-limit',
  configSchema: schema,
  create(_config, services) {
    return async (ctx, next) => {
      await services.rateLimits.check(services.config, ctx.state.gateway, services.spend.clock());
      await next();
    };
  },
};
