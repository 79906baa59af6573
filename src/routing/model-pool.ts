import type { ModelConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import type { RequestPlugin } from '../pipeline/request-plugins';

/** `*` matches any run of characters (`fake/*`); other characters match themselves. */
export function matchesPattern(pattern: string, id: string): boolean {
  if (!pattern.includes('*')) return pattern === id;
  const re = new RegExp(`^${pattern.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
  return re.test(id);
}

const matchesAny = (patterns: readonly string[], id: string) => patterns.some((p) => matchesPattern(p, id));

/** The operator's side of a router's model pool (its `plugins.<id>` config). */
export interface PoolConfig {
  /** Patterns; empty = every configured model. */
  allowed_models: string[];
  excluded_models: string[];
}

/**
 * An operator's pool naming no configured model (a typo in `allowed_models` made every request a 400 that
 * blamed the caller; one in `excluded_models` let the model it meant to exclude through): a config error.
 *
 * @example poolConfigProblem(config, services.models, 'auto-router') // 'plugins.auto-router.allowed_models[0]: "nope/x" matches no configured model'
 */
export function poolConfigProblem(config: PoolConfig, models: ReadonlyMap<string, ModelConfig>, stageId: string): string | undefined {
  const ids = [...models.keys()];
  for (const field of ['allowed_models', 'excluded_models'] as const) {
    const i = config[field].findIndex((p) => !ids.some((id) => matchesPattern(p, id)));
    if (i >= 0) return `plugins.${stageId}.${field}[${i}]: "${config[field][i]}" matches no configured model`;
  }
  return undefined;
}

function stringList(value: unknown, field: string): string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) {
    throw new GatewayError('invalid_request', `\`${field}\` must be an array of strings`, { metadata: { field } });
  }
  return value as string[];
}

/**
 * The models a router may choose from: the operator's `allowed_models` (all configured models when empty)
 * minus its `excluded_models`, narrowed by the request's own `allowed_models` / `excluded_models` (a request
 * can only narrow, never widen). Configured order is kept. An empty result is a 400 naming the field.
 *
 * @example const pool = modelPool({ models: services.models, config, request: requestPlugin(body, 'auto-router'), field: 'plugins[0]' });
 */
export function modelPool(input: {
  models: ReadonlyMap<string, ModelConfig>;
  config: PoolConfig;
  request: RequestPlugin | undefined;
  /** Path of the request's plugin entry, for error metadata (e.g. `plugins[0]`). */
  field: string;
}): ModelConfig[] {
  const { config, request, field } = input;
  const reqAllowed = stringList(request?.allowed_models, `${field}.allowed_models`);
  const reqExcluded = stringList(request?.excluded_models, `${field}.excluded_models`) ?? [];
  const pool = [...input.models.values()].filter(
    (m) =>
      (config.allowed_models.length === 0 || matchesAny(config.allowed_models, m.id)) &&
      !matchesAny(config.excluded_models, m.id) &&
      (reqAllowed === undefined || reqAllowed.length === 0 || matchesAny(reqAllowed, m.id)) &&
      !matchesAny(reqExcluded, m.id),
  );
  if (pool.length === 0) {
    throw new GatewayError('invalid_request', 'No model is left to choose from: the allowed models (the operator\'s, narrowed by the request\'s) minus the excluded ones is empty', {
      metadata: { field: `${field}.allowed_models` },
    });
  }
  return pool;
}

/** Index of a request's plugin entry, for error paths (`plugins[2]`). */
export function pluginField(body: Record<string, unknown> | null, id: string): string {
  const list = Array.isArray(body?.plugins) ? (body!.plugins as { id?: unknown }[]) : [];
  const i = list.findIndex((p) => p?.id === id);
  return i >= 0 ? `plugins[${i}]` : 'plugins';
}

/** USD per 1M prompt + 1M completion tokens at the model's cheapest endpoint (the routers' price). */
export function modelPrice(model: ModelConfig): number {
  // Rounded to 12 significant digits: 0.1 + 0.2 is 0.30000000000000004, which a router's summary showed.
  return Math.min(...model.endpoints.map((e) => Number(((e.pricing?.prompt ?? 0) + (e.pricing?.completion ?? 0)).toPrecision(12))));
}

/** `max_tokens` / `max_completion_tokens` of a body, if set. */
export function requestedMaxTokens(body: Record<string, unknown>): number {
  for (const f of ['max_completion_tokens', 'max_tokens']) {
    const v = body[f];
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return Math.floor(v);
  }
  return 0;
}
