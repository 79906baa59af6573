import { GatewayError, quoted } from '../errors/gateway-error';
import type { Stage } from '../pipeline/types';
import type { Services } from '../services';

/** The models configured in gateway.yaml as GET /models lists them: OpenAI's model object plus routing facts. */
function modelEntries(services: Services): Map<string, Record<string, unknown>> {
  const created = Math.floor(Date.now() / 1000);
  return new Map(
    [...services.models.values()].map((m) => [
      m.id,
      {
        id: m.id,
        object: 'model',
        created,
        owned_by: m.id.includes('/') ? m.id.split('/')[0] : 'gateway',
        name: m.name ?? m.id,
        context_length: m.context_length ?? null,
        endpoints: m.endpoints.map((e) => ({
          provider: e.provider,
          // The cache prices where the endpoint sets them (a client weighing prompt caching reads them here).
          pricing: {
            prompt: e.pricing.prompt,
            completion: e.pricing.completion,
            request: e.pricing.request,
            cached_read: e.pricing.cached_read,
            cache_write: e.pricing.cache_write,
            cache_write_1h: e.pricing.cache_write_1h,
          },
        })),
      },
    ]),
  );
}

/** GET /models: the models configured in gateway.yaml, in OpenAI's list shape plus routing facts. */
export function modelsStage(services: Services): Stage {
  const body = { object: 'list', data: [...modelEntries(services).values()] };
  return async (ctx) => {
    ctx.state.gateway.response = { kind: 'json', status: 200, body };
  };
}

/**
 * GET /models/{id}: one model of the list, as the SDKs' `models.retrieve(id)` asks for it (the OpenAI SDK sends
 * `simulated%2Fchat`, a path of segments works too); an unknown id is a 404 `not_found`.
 */
export function modelGetStage(services: Services): Stage {
  const entries = modelEntries(services);
  return async (ctx) => {
    const id = String((ctx as unknown as { params?: { id?: unknown } }).params?.id ?? '');
    const entry = entries.get(id);
    if (!entry) {
      throw new GatewayError('not_found', `Model \`${quoted(id)}\` is not available on this gateway (see GET /models)`);
    }
    ctx.state.gateway.response = { kind: 'json', status: 200, body: entry };
  };
}
