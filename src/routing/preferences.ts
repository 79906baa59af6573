/**
 * Provider preferences (the request's `provider` object): filters, then ordering of candidate endpoints.
 *
 * Filters (hard, in this order): `only`, `ignore`, `max_price`, `data_collection: deny`, `require_parameters`,
 * the key's allowed data regions. Nothing left → GatewayError `provider_unavailable` with status 503 and a
 * message naming the filter that removed the last endpoints.
 *
 * Ordering is per model (models keep the request's order) unless `sort.partition` is `none`:
 * - `order`: the listed providers first, in that order; then the rest (unless `allow_fallbacks: false`).
 * - `sort`: price (prompt + completion, ascending), latency (EWMA ascending) or throughput (EWMA descending);
 *   endpoints without a measurement yet go first, so each is measured once (last, they were never tried
 *   while the measured ones answered: the first endpoint to answer after a start stayed first for good),
 *   unless one was tried within the last cooldown and gave no measurement (it failed, or failed on a
 *   workspace's own key): that one goes after the measured ones (it had stayed first for every request).
 * - default: healthy (breaker closed or half-open) first, then by price; ties keep the configured order.
 * - `allow_fallbacks: false` without `order`: only the first endpoint of each model (of the whole list with
 *   `partition: none`).
 * Endpoints whose breaker is open, or that are resting after a Retry-After (EndpointHealth.rest), are never
 * removed: they move to the very end of the plan, as a last resort.
 * Provider ids are compared case-insensitively; an empty `only` or `ignore` list restricts nothing. `route` (deprecated) is mapped by the caller.
 */
import { GatewayError } from '../errors/gateway-error';
import type { BreakerState, EndpointHealth } from './health';

export type SortBy = 'price' | 'throughput' | 'latency';

export interface ProviderPreferences {
  order?: string[];
  only?: string[];
  ignore?: string[];
  allow_fallbacks?: boolean;
  sort?: SortBy | { by: SortBy; partition?: 'model' | 'none' };
  require_parameters?: boolean;
  data_collection?: 'allow' | 'deny';
  /** USD per 1M tokens for prompt/completion, USD per request for request. */
  max_price?: { prompt?: number; completion?: number; request?: number };
}

export interface EndpointFacts {
  provider: string;
  model: string;
  region: string;
  pricing: { prompt: number; completion: number; request: number };
  dataCollection: 'allow' | 'deny';
  supportedParameters?: string[];
}

export interface PlanInput<C> {
  candidates: C[];
  preferences?: ProviderPreferences;
  health: EndpointHealth;
  now?: number;
  /** key of the endpoint: `${provider}/${upstream_model}` */
  keyOf(c: C): string;
  /** facts of an endpoint */
  facts(c: C): EndpointFacts;
  /** request parameters the caller set (for require_parameters) */
  requestedParameters: readonly string[];
  /** regions the key may use; empty = any */
  allowedRegions: string[];
}

export type FilterName = 'only' | 'ignore' | 'max_price' | 'data_collection' | 'require_parameters' | 'region';

interface Item<C> {
  c: C;
  f: EndpointFacts;
  key: string;
  state: BreakerState;
  /** Breaker open, or resting after a Retry-After: tried after every other endpoint. */
  last: boolean;
  idx: number;
}

const lower = (s: string) => s.toLowerCase();
const price = (f: EndpointFacts) => f.pricing.prompt + f.pricing.completion;
const quote = (xs: readonly string[]) => xs.map((x) => `\`${x}\``).join(', ');

interface Filter {
  name: FilterName;
  active(prefs: ProviderPreferences, input: PlanInput<unknown>): boolean;
  keep(f: EndpointFacts, prefs: ProviderPreferences, input: PlanInput<unknown>): boolean;
  /** Why nothing is left; `ofModels` is "of `model-a` or `model-b`". */
  why(ofModels: string, prefs: ProviderPreferences, input: PlanInput<unknown>): string;
}

/** The hard filters, in the order they apply. Built once: a request allocates nothing for a filter it does not use. */
const FILTERS: Filter[] = [
  {
    name: 'only',
    active: (prefs) => (prefs.only?.length ?? 0) > 0,
    keep: (f, prefs) => (prefs.only ?? []).some((p) => lower(p) === lower(f.provider)),
    why: (ofModels, prefs) => `No endpoint ${ofModels} is served by a provider in \`provider.only\` (${quote(prefs.only ?? [])})`,
  },
  {
    name: 'ignore',
    active: (prefs) => (prefs.ignore?.length ?? 0) > 0,
    keep: (f, prefs) => !(prefs.ignore ?? []).some((p) => lower(p) === lower(f.provider)),
    why: (ofModels, prefs) => `Every endpoint ${ofModels} is served by a provider in \`provider.ignore\` (${quote(prefs.ignore ?? [])})`,
  },
  {
    name: 'max_price',
    active: (prefs) => prefs.max_price !== undefined,
    keep: (f, prefs) => {
      const m = prefs.max_price ?? {};
      return !(
        (m.prompt !== undefined && f.pricing.prompt > m.prompt) ||
        (m.completion !== undefined && f.pricing.completion > m.completion) ||
        (m.request !== undefined && f.pricing.request > m.request)
      );
    },
    why: (ofModels, prefs) => {
      const m = prefs.max_price ?? {};
      const parts = (['prompt', 'completion', 'request'] as const)
        .filter((k) => m[k] !== undefined)
        .map((k) => `${k} <= ${m[k]}`);
      return `No endpoint ${ofModels} is within \`provider.max_price\` (${parts.join(', ')})`;
    },
  },
  {
    name: 'data_collection',
    active: (prefs) => prefs.data_collection === 'deny',
    keep: (f) => f.dataCollection !== 'allow',
    why: (ofModels) => `No endpoint ${ofModels} meets \`provider.data_collection: deny\` (every one may collect data)`,
  },
  {
    name: 'require_parameters',
    active: (prefs, input) => prefs.require_parameters === true && input.requestedParameters.length > 0,
    keep: (f, _prefs, input) => !f.supportedParameters || input.requestedParameters.every((p) => f.supportedParameters!.includes(p)),
    why: (ofModels, _prefs, input) =>
      `No endpoint ${ofModels} supports every requested parameter (${quote(input.requestedParameters)}) ` +
      'and `provider.require_parameters` is true',
  },
  {
    name: 'region',
    active: (_prefs, input) => input.allowedRegions.length > 0,
    keep: (f, _prefs, input) => input.allowedRegions.some((r) => lower(r) === lower(f.region)),
    why: (ofModels, _prefs, input) => `No endpoint ${ofModels} is in an allowed data region (${input.allowedRegions.join(', ')})`,
  },
];

/** Orders and filters candidates. Throws GatewayError with a message saying why when nothing is left. */
export function planRoute<C>(input: PlanInput<C>): C[] {
  const prefs = input.preferences ?? {};
  const now = input.now ?? Date.now();
  const all: Item<C>[] = input.candidates.map((c, idx) => {
    const key = input.keyOf(c);
    const state = input.health.state(key, now);
    return { c, f: input.facts(c), key, state, last: input.health.down(key, now), idx };
  });
  const models = [...new Set(all.map((i) => i.f.model))];
  const filtered: Record<FilterName, number> = {
    only: 0, ignore: 0, max_price: 0, data_collection: 0, require_parameters: 0, region: 0,
  };
  const fail = (reason: string, message: string): never => {
    // No endpoint can serve the request as asked (its provider preferences, the key's regions): spec 7.2's
    // "503 | No provider meets the routing requirements". No provider failed, so it is not 7.4's 502; the
    // error_type is provider_unavailable (no endpoint is available to this request), `metadata.reason` says why.
    // The request's own preferences decide it: the official SDKs, which retry a 503, are told not to.
    throw new GatewayError('provider_unavailable', message, { status: 503, headers: { 'x-should-retry': 'false' }, metadata: { reason, models, filtered } });
  };
  if (all.length === 0) fail('no_endpoints', 'No provider endpoint is configured for the requested model');

  const ofModels = () => `of ${models.map((m) => `\`${m}\``).join(' or ')}`;

  let left = all;
  for (const filter of FILTERS) {
    if (!filter.active(prefs, input)) continue;
    const kept = left.filter((i) => filter.keep(i.f, prefs, input));
    filtered[filter.name] = left.length - kept.length;
    left = kept;
    if (left.length === 0) fail(filter.name, filter.why(ofModels(), prefs, input));
  }

  const sort = typeof prefs.sort === 'string' ? { by: prefs.sort, partition: 'model' as const } : prefs.sort;
  const groups: Item<C>[][] =
    sort?.partition === 'none' ? [left] : models.map((m) => left.filter((i) => i.f.model === m)).filter((g) => g.length);

  const stats = (i: Item<C>) => input.health.stats(i.key);
  // Untried first, then the measured ones by their measure, then those tried without a measurement: see the header.
  const tier = (i: Item<C>, v: number | null) => (v !== null ? 1 : input.health.tried(i.key, now) ? 2 : 0);
  const byKnown = (a: Item<C>, b: Item<C>, pick: (s: ReturnType<typeof stats>) => number | null, asc: boolean) => {
    const va = pick(stats(a));
    const vb = pick(stats(b));
    const d = tier(a, va) - tier(b, vb);
    if (d || va === null || vb === null) return d;
    return asc ? va - vb : vb - va;
  };
  const compare = (a: Item<C>, b: Item<C>): number => {
    // Open breakers (and resting endpoints) last in every mode, so `allow_fallbacks: false` picks a healthy endpoint when there is one.
    let d = Number(a.last) - Number(b.last);
    if (d) return d;
    if (sort?.by === 'latency') d = byKnown(a, b, (s) => s.latencyMs, true);
    else if (sort?.by === 'throughput') d = byKnown(a, b, (s) => s.throughput, false);
    else d = price(a.f) - price(b.f); // `sort: price` and the default order
    return d || a.idx - b.idx;
  };

  const order = (prefs.order ?? []).map(lower);
  const rank = (i: Item<C>) => order.indexOf(lower(i.f.provider));
  const noFallbacks = prefs.allow_fallbacks === false;

  const planned: Item<C>[] = [];
  for (const group of groups) {
    const sorted = [...group].sort(compare);
    if (order.length > 0) {
      const listed = sorted.filter((i) => rank(i) >= 0).sort((a, b) => rank(a) - rank(b) || compare(a, b));
      planned.push(...listed);
      if (!noFallbacks) planned.push(...sorted.filter((i) => rank(i) < 0));
    } else {
      planned.push(...(noFallbacks ? sorted.slice(0, 1) : sorted));
    }
  }
  if (planned.length === 0) {
    fail(
      'order',
      `No endpoint ${ofModels()} is served by a provider in \`provider.order\` (${quote(prefs.order ?? [])}) ` +
        'and `provider.allow_fallbacks` is false',
    );
  }
  // Open breakers and resting endpoints are a last resort: after everything else, in plan order.
  if (!planned.some((i) => i.last)) return planned.map((i) => i.c);
  return [...planned.filter((i) => !i.last), ...planned.filter((i) => i.last)].map((i) => i.c);
}
