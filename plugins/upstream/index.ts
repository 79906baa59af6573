import { forwardedHeaders } from '../../src/pipeline/forward-headers';
import type { StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import schema from './schema.json';

export interface UpstreamConfig {
  forward_headers: string[];
}

/**
 * `upstream`: sends the request to the model's provider endpoints (routing in src/routing) and sets
 * `state.response`; stages after it see the answer (and may wrap a stream) after `await next()`. A stage before
 * it that answers in the provider call's place (fusion, web-fetch's tool loop) sets `state.answerer`, called
 * here instead; when one already set `state.response`, it only passes the answer on.
 */
export const upstream: StageDefinition<UpstreamConfig, Services> = {
  id: 'upstream',
  configSchema: schema,
  keepsBody: true,
  create(config, services) {
    return async (ctx, next) => {
      const forward = forwardedHeaders(ctx, config.forward_headers);
      // A stage before this one may already have produced the answer: never call a provider twice. One that
      // answers in the provider call's place (fusion, web-fetch's tool loop) does it here.
      const state = ctx.state.gateway;
      // A stage after rate-limit or budget-check may have changed the model (a router, `:online`): counted and
      // checked for the one called, rate limits first (spec 8.4's order).
      if (!state.response && state.rateCounted) {
        const daily = await services.rateLimits.recheck(services.config, state, services.spend.clock());
        if (daily) services.rateLimits.takeBackAtEnd({ dailyKey: daily, gw: state, clock: services.spend.clock, logger: services.logger });
      }
      if (!state.response && state.spendHold) await services.spend.recheck(services.config, services.models, state);
      if (!state.response) state.response = state.answerer ? await state.answerer() : await services.dispatch(state, forward);
      await next();
    };
  },
};
