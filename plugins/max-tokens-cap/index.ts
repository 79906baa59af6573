import { ConfigError } from '../../src/config/load';
import { GatewayError } from '../../src/errors/gateway-error';
import type { StageDefinition } from '../../src/pipeline/types';
import { requestedModels } from '../../src/routing/candidates';
import type { Services } from '../../src/services';
import schema from './schema.json';
import { fitThinking, thinkingBudget } from './thinking';

/** The operator config of the stage (`plugins.max-tokens-cap` in gateway.yaml), defaults filled by its schema. */
export interface MaxTokensCapConfig {
  max: number;
  per_model: Record<string, number>;
  mode: 'clamp' | 'reject';
  default?: number;
}

/** The field a request's completion budget is in, per API style. */
const FIELDS = ['max_tokens', 'max_completion_tokens'] as const;

/**
 * `max-tokens-cap`: the example plugin of the README's "Writing a plugin". Caps the completion tokens a
 * request may ask for (per model, else `max`): it lowers them (`clamp`) or refuses the request with a 400
 * (`reject`), and gives a request that asks for none its `default`, else the cap. `max` defaults to 4096. A thinking
 * budget counts within the limit and is kept below it (thinking.ts). Runs after `validate` (the fields are
 * known to be integers) and before the spend checks (so estimates use the capped value).
 *
 * @example pipelines: { default: [auth, validate, max-tokens-cap, budget-check, upstream] }
 *          plugins: { max-tokens-cap: { max: 4096, per_model: { anthropic/claude-sonnet-4: 8192 } } }
 */
export const maxTokensCap: StageDefinition<MaxTokensCapConfig, Services> = {
  id: 'max-tokens-cap',
  configSchema: schema,
  keepsBody: true,
  beforeUpstream: true,
  create(config, services) {
    for (const model of Object.keys(config.per_model)) {
      if (!services.models.has(model)) throw new ConfigError(`plugins.max-tokens-cap.per_model: unknown model "${model}"`);
    }
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const body = state.body;
      if (body) {
        // Any requested model may answer (a `models` list, `fallbacks`): the tightest of their caps, as the stage
        // runs once before routing (a fallback had been sent the primary's larger limit).
        const models = requestedModels(body);
        const cap = models.length === 0 ? config.max : Math.min(...models.map((m) => config.per_model[m] ?? config.max));
        const fields = FIELDS.filter((f) => typeof body[f] === 'number');
        // The limit this stage sets, which a thinking budget must stay below.
        let limit: number | undefined;
        if (fields.length === 0) {
          // Thinking counts within the limit: a budget at or above the default gets the default on top of it,
          // as the gateway does for a messages provider (README models[] max_output_tokens), within the cap.
          // Without a default the cap itself: a request that set no limit had gone uncapped (the provider's
          // own default, or the model's max_output_tokens, however far above the cap).
          const thinking = thinkingBudget(state.endpoint, body)?.tokens ?? 0;
          const wanted = config.default ?? cap;
          const value = Math.min(thinking >= wanted && config.default !== undefined ? thinking + wanted : wanted, cap);
          body[state.endpoint === 'chat_completions' ? 'max_completion_tokens' : 'max_tokens'] = value;
          state.pipeline.push({ type: 'max-tokens-cap', name: 'max-tokens-cap', summary: `set the completion budget to ${value}`, data: { action: 'default', value } });
          limit = value;
        }
        // A chat request may name both fields (a provider may read either): each is capped.
        for (const field of fields) {
          const asked = body[field] as number;
          if (asked <= cap) continue;
          if (config.mode === 'reject') {
            throw new GatewayError('invalid_request', `\`${field}\` may be at most ${cap} on this gateway (asked ${asked})`, { metadata: { field } });
          }
          body[field] = cap;
          state.pipeline.push({ type: 'max-tokens-cap', name: 'max-tokens-cap', summary: `lowered ${field} from ${asked} to ${cap}`, data: { action: 'clamp', field, asked, value: cap } });
          state.span.setAttribute('gateway.max_tokens_cap', cap);
          limit = cap;
        }
        if (limit !== undefined) fitThinking({ state, body, limit, mode: config.mode });
      }
      await next();
    };
  },
};
