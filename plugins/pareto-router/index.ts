import { ConfigError } from '../../src/config/load';
import type { ModelConfig } from '../../src/config/types';
import { GatewayError } from '../../src/errors/gateway-error';
import { inferenceBody, requestPlugin } from '../../src/pipeline/request-plugins';
import type { StageDefinition } from '../../src/pipeline/types';
import { modelPool, poolConfigProblem, modelPrice, pluginField, requestedMaxTokens, type PoolConfig } from '../../src/routing/model-pool';
import type { Services } from '../../src/services';
import { inputTokens } from '../../src/spend/estimate';
import schema from './schema.json';

export interface ParetoRouterConfig extends PoolConfig {
  default_min_quality: number;
}

/**
 * The cheapest model (prompt + completion price per 1M tokens at its cheapest endpoint) among `pool` whose
 * declared `quality` is at least `minQuality` and whose `context_length` (when declared) holds `needTokens`;
 * ties go to the higher quality, then configured order. Models without a declared quality never qualify.
 *
 * @example paretoChoice(pool, 0.7, 1200)?.id
 */
export function paretoChoice(pool: ModelConfig[], minQuality: number, needTokens: number): ModelConfig | undefined {
  const eligible = pool.filter((m) => m.quality !== undefined && m.quality >= minQuality && (m.context_length === undefined || m.context_length >= needTokens));
  // Array.prototype.sort is stable, so equal keys keep configured order.
  return eligible.sort((a, b) => modelPrice(a) - modelPrice(b) || b.quality! - a.quality!)[0];
}

/**
 * `pareto-router`: on a request's `plugins: [{id: 'pareto-router', min_quality?}]`, replaces `model` with
 * `paretoChoice` from the allowed pool; none qualifying is a 400 naming `min_quality`.
 */
export const paretoRouter: StageDefinition<ParetoRouterConfig, Services> = {
  id: 'pareto-router',
  configSchema: schema,
  beforeUpstream: true,
  create(config, services) {
    const problem = poolConfigProblem(config, services.models, 'pareto-router');
    if (problem) throw new ConfigError(problem);
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const body = inferenceBody(state);
      if (!body) return next();
      const entry = requestPlugin(body, 'pareto-router');
      if (!entry || entry.enabled === false) return next();
      const field = pluginField(body, 'pareto-router');
      const minQuality = entry.min_quality ?? config.default_min_quality;
      if (typeof minQuality !== 'number' || !(minQuality >= 0 && minQuality <= 1)) {
        throw new GatewayError('invalid_request', '`min_quality` must be a number from 0 to 1', { metadata: { field: `${field}.min_quality` } });
      }
      const pool = modelPool({ models: services.models, config, request: entry, field });
      const need = inputTokens(body) + requestedMaxTokens(body);
      const model = paretoChoice(pool, minQuality, need);
      if (!model) {
        throw new GatewayError('invalid_request', `No allowed model declares a quality of at least ${minQuality} (and fits ${need} tokens)`, {
          metadata: { field: `${field}.min_quality` },
        });
      }
      const requested = body.model;
      body.model = model.id;
      const reason = `cheapest allowed model with quality ≥ ${minQuality}: ${model.id} (quality ${model.quality}, $${modelPrice(model)} per 1M prompt+completion)`;
      state.pipeline.push({
        type: 'router',
        name: 'pareto-router',
        summary: reason,
        data: { requested: typeof requested === 'string' ? requested : null, model: model.id, min_quality: minQuality, quality: model.quality, price_per_million: modelPrice(model), allowed: pool.map((m) => m.id) },
      });
      state.span.setAttribute('gateway.pareto_router.model', model.id);
      await next();
    };
  },
};
