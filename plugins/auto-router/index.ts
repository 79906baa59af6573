import { ConfigError } from '../../src/config/load';
import { GatewayError } from '../../src/errors/gateway-error';
import { inferenceBody, requestPlugin } from '../../src/pipeline/request-plugins';
import type { StageDefinition } from '../../src/pipeline/types';
import type { ModelConfig } from '../../src/config/types';
import { endpointKeyOf } from '../../src/routing/plan';
import { modelPool, poolConfigProblem, pluginField, requestedMaxTokens, type PoolConfig } from '../../src/routing/model-pool';
import type { Services } from '../../src/services';
import { chooseModel, COST_TIERS, type AutoChoice, type CostTier, type Thresholds } from './choose';
import { requestFeatures } from './features';
import schema from './schema.json';

export interface AutoRouterConfig extends PoolConfig, Thresholds {
  model_id: string;
  default_cost_tier: CostTier;
  /** How many next-ranked models follow the choice as its fallbacks (0: none). */
  fallback_models: number;
}

/** Whether the request names the auto model as its `model` or among its `models` (spec 4.2: either selects the model). */
function namesAuto(body: Record<string, unknown>, modelId: string): boolean {
  return body.model === modelId || (Array.isArray(body.models) && body.models.includes(modelId));
}

/**
 * Puts the chosen models where the request named the auto model: `model` (or, for a request's plugin entry,
 * whatever `model` it names, or the front when it names none) and each `models` entry naming it. The models
 * the request names besides keep their places.
 */
function placeChoice(input: { body: Record<string, unknown>; modelId: string; chosen: string[]; byEntry: boolean }): void {
  const { body, modelId, chosen, byEntry } = input;
  const list = Array.isArray(body.models) ? (body.models as unknown[]) : undefined;
  const head = body.model === modelId || (byEntry && (body.model !== undefined || !list?.includes(modelId))) ? chosen : [];
  if (head.length > 0) body.model = head[0];
  const rest = (list ?? []).flatMap((m) => (m === modelId ? chosen : [m]));
  // The list is rewritten only when it has more than the request's `model` alone.
  const all = [...new Set([...head, ...rest])];
  if (list !== undefined || all.length > 1) body.models = all;
}

/**
 * `auto-router`: on `model: "auto"` (config `model_id`, as `model` or in `models`) or a request's `plugins: [{id: 'auto-router', …}]`,
 * replaces `model` with the model chosen from the allowed pool by `chooseModel` (or `pin_model`), and
 * records the choice and its reason in `gateway_metadata.pipeline` and on the request span.
 */
export const autoRouter: StageDefinition<AutoRouterConfig, Services> = {
  id: 'auto-router',
  configSchema: schema,
  beforeUpstream: true,
  create(config, services) {
    const problem = poolConfigProblem(config, services.models, 'auto-router');
    if (problem) throw new ConfigError(problem);
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const body = inferenceBody(state);
      if (!body) return next();
      const entry = requestPlugin(body, 'auto-router');
      if (entry?.enabled === false || (!entry && !namesAuto(body, config.model_id))) return next();
      const field = pluginField(body, 'auto-router');

      const costTier = entry?.cost_tier ?? config.default_cost_tier;
      if (!COST_TIERS.includes(costTier as CostTier)) {
        throw new GatewayError('invalid_request', `\`cost_tier\` must be one of ${COST_TIERS.join(', ')}`, { metadata: { field: `${field}.cost_tier` } });
      }
      const pool = modelPool({ models: services.models, config, request: entry, field });
      const features = requestFeatures(body);
      let choice: AutoChoice;
      if (entry?.pin_model !== undefined) {
        const pinned = pool.find((m) => m.id === entry.pin_model);
        if (!pinned) {
          throw new GatewayError('invalid_request', `\`pin_model\` must name one of the allowed models (${pool.map((m) => m.id).join(', ')})`, {
            metadata: { field: `${field}.pin_model` },
          });
        }
        choice = { model: pinned, ranked: [pinned], targetTier: pinned.tier ?? 2, points: 0, reason: `pinned by pin_model: ${pinned.id}` };
      } else {
        const down = (m: ModelConfig) => m.endpoints.every((e) => services.health.down(endpointKeyOf(e.provider, e.upstream_model)));
        choice = chooseModel({ pool, features, costTier: costTier as CostTier, maxTokens: requestedMaxTokens(body), thresholds: config, down });
      }
      // The next-ranked models go after the choice, so that upstream's fallback between models tries them
      // when the choice fails (a pinned model has none: the caller asked for that one).
      const fallbacks = choice.ranked.slice(1, 1 + config.fallback_models).map((m) => m.id);

      const requested = body.model ?? (Array.isArray(body.models) ? body.models[0] : undefined);
      placeChoice({ body, modelId: config.model_id, chosen: [choice.model.id, ...fallbacks], byEntry: entry !== undefined });
      state.pipeline.push({
        type: 'router',
        name: 'auto-router',
        summary: choice.reason,
        data: {
          requested: typeof requested === 'string' ? requested : null,
          model: choice.model.id,
          fallbacks,
          pinned: entry?.pin_model !== undefined,
          cost_tier: costTier,
          target_tier: choice.targetTier,
          demand_points: choice.points,
          features,
          allowed: pool.map((m) => m.id),
        },
      });
      state.span.setAttribute('gateway.auto_router.model', choice.model.id);
      state.span.setAttribute('gateway.auto_router.reason', choice.reason);
      await next();
    };
  },
};
