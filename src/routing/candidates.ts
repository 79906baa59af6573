import type { ModelConfig, ModelEndpointConfig } from '../config/types';
import { GatewayError, quoted } from '../errors/gateway-error';
import type { Dialect, Provider } from '../providers/types';

export interface Candidate {
  model: ModelConfig;
  endpoint: ModelEndpointConfig;
  provider: Provider;
  /** The style the provider is called in: the client's own when the provider speaks it, else translated. */
  dialect: Dialect;
}

/** The models a request names, in the order they are tried: `model`, then `models`, then `fallbacks`. */
export function requestedModels(body: Record<string, unknown>): string[] {
  const out: string[] = [];
  // A Set, not `out.includes`: `models` is the client's list, and 200 000 names took 203 s of the event loop.
  const seen = new Set<string>();
  const add = (m: unknown) => {
    if (typeof m === 'string' && m && !seen.has(m)) {
      seen.add(m);
      out.push(m);
    }
  };
  add(body.model);
  if (Array.isArray(body.models)) body.models.forEach(add);
  if (Array.isArray(body.fallbacks)) body.fallbacks.forEach((f) => add((f as { model?: unknown })?.model));
  return out;
}

/**
 * Every provider endpoint of the requested models, model by model (all endpoints of one model before the
 * next model), in configured order. An endpoint that speaks the client's style is called in it (pass-through);
 * one that speaks only the other style is called through the translator.
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
    // A model that is no string (a stage set `model: 42`) is named as it is, not as "``".
    const name = quoted(names[0] ?? (input.body.model === undefined ? '' : typeof input.body.model === 'string' ? input.body.model : JSON.stringify(input.body.model) ?? String(input.body.model)));
    throw new GatewayError('not_found', `Model \`${name}\` is not available on this gateway (see GET /models)`, {
      metadata: { model: name },
    });
  }
  const fast = input.body.speed === 'fast';
  const out: Candidate[] = [];
  for (const name of known) {
    const model = input.models.get(name)!;
    // `speed: fast`: where the model declares fast configurations, only those serve it, at their price.
    const fastOnes = fast ? model.endpoints.filter((e) => e.fast) : [];
    const endpoints = fastOnes.length > 0 ? fastOnes : model.endpoints;
    for (const declared of endpoints) {
      const endpoint = fast && declared.fast ? { ...declared, upstream_model: declared.fast.upstream_model ?? declared.upstream_model, pricing: declared.fast.pricing } : declared;
      const provider = input.providers.get(endpoint.provider)!;
      const dialect = callStyle(provider.dialects, input.dialect);
      out.push({ model, endpoint, provider, dialect });
    }
  }
  return out;
}

/** The style a provider speaking `dialects` is called in for a `client`-style request: the client's own when it speaks it, else its first. */
export function callStyle(dialects: ReadonlySet<Dialect>, client: Dialect): Dialect {
  return dialects.has(client) || dialects.size === 0 ? client : [...dialects][0];
}
