import type { Stage } from '../pipeline/types';
import type { Services } from '../services';

/** GET /models: the models configured in gateway.yaml, in OpenAI's list shape plus routing facts. */
export function modelsStage(services: Services): Stage {
  const created = Math.floor(Date.now() / 1000);
  const body = {
    object: 'list',
    data: [...services.models.values()].map((m) => ({
      id: m.id,
      object: 'model',
      created,
      owned_by: m.id.includes('/') ? m.id.split('/')[0] : 'gateway',
      name: m.name ?? m.id,
      context_length: m.context_length ?? null,
      endpoints: m.endpoints.map((e) => ({
        provider: e.provider,
        pricing: { prompt: e.pricing.prompt, completion: e.pricing.completion, request: e.pricing.request },
      })),
    })),
  };
  return async (ctx) => {
    ctx.state.gateway.response = { kind: 'json', status: 200, body };
  };
}
