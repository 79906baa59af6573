import type { StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import schema from './schema.json';

/**
 * `rate-limit`: platform request limits (gateway.yaml `rate_limits` and `free_models`) before anything else
 * is spent on the request; 429 with X-RateLimit-* and Retry-After when a window is full. A request counted
 * in the free-model daily window and not served by a free model is taken back from it when it ends. A stage
 * after this one that changes the model has `upstream` count the model served (`services.rateLimits.recheck`).
 */
export const rateLimit: StageDefinition<Record<string, never>, Services> = {
  id: 'rate-limit',
  configSchema: schema,
  keepsBody: true,
  beforeUpstream: true,
  create(_config, services) {
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const daily = await services.rateLimits.check(services.config, state, services.spend.clock());
      if (daily) services.rateLimits.takeBackAtEnd({ dailyKey: daily, gw: state, clock: services.spend.clock, logger: services.logger });
      await next();
    };
  },
};
