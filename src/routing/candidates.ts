import type { ModelConfig, ModelEndpointConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import type { Dialect, Provider } from '../providers/types';

export interface Candidate {
  model: ModelConfig;
  endpoint: ModelEndpointConfig;
  provider: Provider;
}

/** The models a request names, in the order they are tried: `model`, then `models`, then `fallbacks`. */
export function requestedModels(body: Record<string, unknown>): string[] {
  const out: string[] = [];
  const add = (m: unknown) => {
    if (typeof m === 'string' && m && !out.includes(m)) out.push(m);
  };
  add(body.model);
  if (Array.isArray(body.models)) body.models.forEach(add);
  if (Array.isArray(body.fallbacks)) body.fallbacks.forEach((f) => add((f as { model?: unknown })?.model));
  return out;
}

/**
 * Every provider endpoint that can serve the request in the client's dialect, model by model (all
 * endpoints of one model before the next model). Translation between dialects comes later, so an
 * endpoint of the other dialect is not a candidate.
 */
export function candidatesFor(input: {
  body: Record<string, unknown>;
  dialect: Dialect;
  models: ReadonlyMap<string, ModelConfig>;
  providers: ReadonlyMap<string, Provider>;
}): Candidate[] {
  const names = requestedModels(input.body);
  const known = names.filter((n) => input.models.has(n));
  if (known.length === 0) {
    const name = names[0] ?? '';
    throw new GatewayError('not_found', `Model \`${name}\` is not available on this gateway (see GET /models)`, {
      metadata: { model: name },
    });
  }
  const out: Candidate[] = [];
  for (const name of known) {
    const model = input.models.get(name)!;
    for (const endpoint of model.endpoints) {
      const provider = input.providers.get(endpoint.provider)!;
      if (provider.dialects.has(input.dialect)) out.push({ model, endpoint, provider });
    }
  }
  if (out.length === 0) {
    const other = input.dialect === 'messages' ? 'chat-completions' : 'messages';
    throw new GatewayError(
      'invalid_request',
      `Model \`${known[0]}\` is served only through the ${other} API on this gateway; call that endpoint instead (translation between the two styles is not available yet)`,
      { metadata: { model: known[0] } },
    );
  }
  return out;
}
