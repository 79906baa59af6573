import { describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/errors/gateway-error';
import { EndpointHealth } from '../../src/routing/health';
import { planRoute, type PlanInput, type ProviderPreferences } from '../../src/routing/preferences';

interface Ep {
  provider: string;
  model: string;
  region?: string;
  prompt?: number;
  completion?: number;
  request?: number;
  dc?: 'allow' | 'deny';
  params?: string[];
}

const NOW = 5_000_000;
const id = (e: Ep) => `${e.model}@${e.provider}`;
const keyOf = (e: Ep) => `${e.provider}/${e.model}-up`;

function plan(
  candidates: Ep[],
  preferences?: ProviderPreferences,
  extra: Partial<PlanInput<Ep>> = {},
): string[] {
  return planRoute<Ep>({
    candidates,
    preferences,
    health: new EndpointHealth(),
    now: NOW,
    keyOf,
    facts: (e) => ({
      provider: e.provider,
      model: e.model,
      region: e.region ?? 'us',
      pricing: { prompt: e.prompt ?? 1, completion: e.completion ?? 1, request: e.request ?? 0 },
      dataCollection: e.dc ?? 'deny',
      supportedParameters: e.params,
    }),
    requestedParameters: [],
    allowedRegions: [],
    ...extra,
  }).map(id);
}

function planError(candidates: Ep[], preferences?: ProviderPreferences, extra: Partial<PlanInput<Ep>> = {}) {
  try {
    plan(candidates, preferences, extra);
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    return err as GatewayError;
  }
  throw new Error('planRoute did not throw');
}

/** A health tracker where the given endpoints have an open breaker at NOW. */
function withOpen(...eps: Ep[]): EndpointHealth {
  const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 10_000 });
  for (const e of eps) h.recordFailure(keyOf(e), h.tryAcquire(keyOf(e), NOW - 1), NOW - 1);
  return h;
}

const a = { provider: 'alpha', model: 'm', prompt: 3, completion: 3 };
const b = { provider: 'beta', model: 'm', prompt: 1, completion: 1 };
const c = { provider: 'gamma', model: 'm', prompt: 2, completion: 2 };
const n1 = { provider: 'alpha', model: 'n', prompt: 0.5, completion: 0.5 };
const n2 = { provider: 'delta', model: 'n', prompt: 9, completion: 9 };

describe('planRoute filters', () => {
  it('only keeps the listed providers (case-insensitive); an empty list restricts nothing', () => {
    expect(plan([a, b, c], { only: ['Gamma', 'alpha'] })).toEqual(['m@gamma', 'm@alpha']);
    expect(plan([a, b, c], { only: [] })).toEqual(['m@beta', 'm@gamma', 'm@alpha']);
  });

  it('ignore removes the listed providers', () => {
    expect(plan([a, b, c], { ignore: ['beta'] })).toEqual(['m@gamma', 'm@alpha']);
  });

  it('max_price removes endpoints above any given maximum (prompt, completion or request)', () => {
    const cheapPrompt = { provider: 'p', model: 'm', prompt: 1, completion: 10 };
    const cheapCompletion = { provider: 'q', model: 'm', prompt: 10, completion: 1 };
    const perRequest = { provider: 'r', model: 'm', prompt: 1, completion: 1, request: 0.01 };
    const all = [cheapPrompt, cheapCompletion, perRequest];
    expect(plan(all, { max_price: { prompt: 2 } })).toEqual(['m@r', 'm@p']);
    expect(plan(all, { max_price: { completion: 2 } })).toEqual(['m@r', 'm@q']);
    expect(plan(all, { max_price: { request: 0 } })).toEqual(['m@p', 'm@q']);
    expect(plan(all, { max_price: { prompt: 1, completion: 1 } })).toEqual(['m@r']); // equal is within
  });

  it('data_collection deny removes endpoints that may collect data; allow keeps them', () => {
    const collects = { ...b, dc: 'allow' as const };
    expect(plan([a, collects], { data_collection: 'deny' })).toEqual(['m@alpha']);
    expect(plan([a, collects], { data_collection: 'allow' })).toEqual(['m@beta', 'm@alpha']);
  });

  it('require_parameters removes endpoints whose declared parameters miss one requested', () => {
    const tools = { ...a, params: ['tools', 'temperature'] };
    const plain = { ...b, params: ['temperature'] };
    const undeclared = c;
    const extra = { requestedParameters: ['tools', 'temperature'] };
    expect(plan([tools, plain, undeclared], { require_parameters: true }, extra)).toEqual(['m@gamma', 'm@alpha']);
    expect(plan([tools, plain, undeclared], {}, extra)).toEqual(['m@beta', 'm@gamma', 'm@alpha']);
  });

  it('allowedRegions removes endpoints in other regions; empty means any', () => {
    const eu = { ...a, region: 'europe' };
    expect(plan([eu, b], {}, { allowedRegions: ['europe'] })).toEqual(['m@alpha']);
    expect(plan([eu, b], {}, { allowedRegions: [] })).toEqual(['m@beta', 'm@alpha']);
  });

  it('throws spec 7.2\'s 503 (no provider meets the routing requirements) naming the filter that removed the last endpoints', () => {
    const err = planError([a, b], { ignore: ['beta'] }, { allowedRegions: ['europe'] });
    expect(err.errorType).toBe('provider_unavailable');
    expect(err.status).toBe(503);
    expect(err.message).toBe('No endpoint of `m` is in an allowed data region (europe)');
    expect(err.metadata).toMatchObject({
      reason: 'region',
      models: ['m'],
      filtered: { only: 0, ignore: 1, max_price: 0, data_collection: 0, require_parameters: 0, region: 1 },
    });
  });

  it.each([
    [{ only: ['zeta'] }, {}, 'only', /provider\.only.*`zeta`/],
    [{ ignore: ['alpha', 'beta'] }, {}, 'ignore', /provider\.ignore/],
    [{ max_price: { prompt: 0.1 } }, {}, 'max_price', /max_price.*prompt <= 0\.1/],
    [{ require_parameters: true }, { requestedParameters: ['top_k'] }, 'require_parameters', /`top_k`/],
  ] as const)('names the filter: %j', (prefs, extra, reason, message) => {
    const eps = [
      { ...a, params: ['tools'] },
      { ...b, params: [] },
    ];
    const err = planError(eps, prefs as ProviderPreferences, extra as Partial<PlanInput<Ep>>);
    expect(err.metadata?.reason).toBe(reason);
    expect(err.message).toMatch(message);
  });

  it('names data_collection and every model when all endpoints may collect data', () => {
    const err = planError([{ ...a, dc: 'allow' }, { ...n2, dc: 'allow' }], { data_collection: 'deny' });
    expect(err.metadata?.reason).toBe('data_collection');
    expect(err.message).toMatch(/^No endpoint of `m` or `n` meets `provider\.data_collection: deny`/);
  });

  it('throws when there is no candidate at all', () => {
    expect(planError([]).metadata?.reason).toBe('no_endpoints');
  });
});

describe('planRoute default order', () => {
  it('orders by price (prompt + completion), keeping configured order for ties', () => {
    const tie1 = { provider: 't1', model: 'm', prompt: 1.5, completion: 0.5 };
    const tie2 = { provider: 't2', model: 'm', prompt: 0.5, completion: 1.5 };
    expect(plan([a, tie1, c, tie2])).toEqual(['m@t1', 'm@t2', 'm@gamma', 'm@alpha']);
    expect(plan([a, tie2, c, tie1])).toEqual(['m@t2', 'm@t1', 'm@gamma', 'm@alpha']);
  });

  it('keeps models in request order, each model ordered on its own', () => {
    expect(plan([a, b, n2, n1])).toEqual(['m@beta', 'm@alpha', 'n@alpha', 'n@delta']);
  });

  it('puts open-breaker endpoints after every other one, never removing them', () => {
    const health = withOpen(b, n1);
    expect(plan([a, b, n2, n1], {}, { health })).toEqual(['m@alpha', 'n@delta', 'm@beta', 'n@alpha']);
    expect(plan([b], {}, { health })).toEqual(['m@beta']);
  });

  it('puts an endpoint resting after a Retry-After last, under a sort too, until the wait has passed', () => {
    const health = new EndpointHealth({ cooldownMs: 60_000 });
    health.rest(keyOf(b), 30_000, NOW);
    expect(plan([a, b, c], {}, { health })).toEqual(['m@gamma', 'm@alpha', 'm@beta']);
    expect(plan([a, b, c], { sort: 'latency' }, { health })).toEqual(['m@alpha', 'm@gamma', 'm@beta']);
    expect(plan([a, b, c], { allow_fallbacks: false }, { health })).toEqual(['m@gamma']);
    expect(plan([a, b, c], {}, { health, now: NOW + 30_000 })).toEqual(['m@beta', 'm@gamma', 'm@alpha']);
  });

  it('treats a half-open endpoint as healthy (it gets the probe) and does not acquire it', () => {
    const health = withOpen(b);
    const later = NOW + 10_000;
    expect(health.state(keyOf(b), later)).toBe('half_open');
    expect(plan([a, b], {}, { health, now: later })).toEqual(['m@beta', 'm@alpha']);
    expect(health.tryAcquire(keyOf(b), later)).not.toBeNull(); // planning did not take the probe
  });
});

describe('planRoute order and allow_fallbacks', () => {
  it('tries the order providers first, in that order, then the rest by the default order', () => {
    const d = { provider: 'delta', model: 'm', prompt: 0.1, completion: 0.1 };
    expect(plan([a, b, c, d], { order: ['GAMMA', 'alpha'] })).toEqual(['m@gamma', 'm@alpha', 'm@delta', 'm@beta']);
    // order wins over price: alpha is the dearest endpoint but listed first
    expect(plan([a, b, c, d], { order: ['alpha', 'gamma'] })).toEqual(['m@alpha', 'm@gamma', 'm@delta', 'm@beta']);
  });

  it('with allow_fallbacks false keeps only the order providers', () => {
    expect(plan([a, b, c], { order: ['gamma', 'alpha'], allow_fallbacks: false })).toEqual(['m@gamma', 'm@alpha']);
    expect(plan([a, b, n1, n2], { order: ['delta'], allow_fallbacks: false })).toEqual(['n@delta']);
  });

  it('with allow_fallbacks false and no order keeps the first endpoint of each model', () => {
    expect(plan([a, b, c, n2, n1], { allow_fallbacks: false })).toEqual(['m@beta', 'n@alpha']);
    expect(plan([a, b, c], { allow_fallbacks: false }, { health: withOpen(b) })).toEqual(['m@gamma']);
  });

  it('throws when allow_fallbacks is false and no order provider serves the model', () => {
    const err = planError([a, b], { order: ['zeta'], allow_fallbacks: false });
    expect(err.status).toBe(503);
    expect(err.metadata?.reason).toBe('order');
    expect(err.message).toMatch(/provider\.order.*`zeta`.*allow_fallbacks/);
  });

  it('an open order provider still goes to the end', () => {
    expect(plan([a, b, c], { order: ['alpha', 'gamma'] }, { health: withOpen(a) })).toEqual([
      'm@gamma',
      'm@beta',
      'm@alpha',
    ]);
  });
});

describe('planRoute sort', () => {
  function measured(): EndpointHealth {
    const h = new EndpointHealth();
    h.recordSuccess(keyOf(a), { pass: h.tryAcquire(keyOf(a)), latencyMs: 100, outputTokens: 300, durationMs: 1000 }); // 300 tok/s
    h.recordSuccess(keyOf(b), { pass: h.tryAcquire(keyOf(b)), latencyMs: 900, outputTokens: 50, durationMs: 1000 }); // 50 tok/s
    // c: never measured
    h.recordSuccess(keyOf(n1), { pass: h.tryAcquire(keyOf(n1)), latencyMs: 10, outputTokens: 1000, durationMs: 1000 });
    h.recordSuccess(keyOf(n2), { pass: h.tryAcquire(keyOf(n2)), latencyMs: 500, outputTokens: 100, durationMs: 1000 });
    return h;
  }

  it('sort price orders by prompt + completion', () => {
    expect(plan([a, c, b], { sort: 'price' })).toEqual(['m@beta', 'm@gamma', 'm@alpha']);
  });

  it('sort latency orders by EWMA latency ascending, an unmeasured endpoint first (last, it was never measured)', () => {
    expect(plan([c, b, a], { sort: 'latency' }, { health: measured() })).toEqual(['m@gamma', 'm@alpha', 'm@beta']);
  });

  it('an endpoint that was never measured is tried once, then takes its measured place', () => {
    const health = new EndpointHealth();
    health.recordSuccess(keyOf(a), { pass: health.tryAcquire(keyOf(a)), latencyMs: 100 });
    // alpha answered first after a start: gamma, listed later, had never been tried while alpha answered.
    expect(plan([a, c], { sort: 'latency' }, { health })).toEqual(['m@gamma', 'm@alpha']);
    health.recordSuccess(keyOf(c), { pass: health.tryAcquire(keyOf(c)), latencyMs: 50 });
    expect(plan([a, c], { sort: 'latency' }, { health })).toEqual(['m@gamma', 'm@alpha']);
    health.recordSuccess(keyOf(c), { pass: health.tryAcquire(keyOf(c)), latencyMs: 5000 });
    expect(plan([a, c], { sort: 'latency' }, { health })).toEqual(['m@alpha', 'm@gamma']);
  });

  it('an endpoint tried without a measurement (it failed, or failed on a workspace key) goes after the measured ones for a cooldown; an untried one still goes first', () => {
    const health = new EndpointHealth({ failureThreshold: 3, cooldownMs: 10_000 });
    health.recordSuccess(keyOf(a), { pass: health.tryAcquire(keyOf(a)), latencyMs: 100, outputTokens: 100, durationMs: 1000 }, NOW);
    health.recordFailure(keyOf(c), health.tryAcquire(keyOf(c), NOW), NOW); // the endpoint's failure (its breaker stays closed)
    health.recordAttempt(keyOf(b), NOW); // a workspace's own key refused: nothing against the endpoint
    expect(plan([c, b, a], { sort: 'latency' }, { health })).toEqual(['m@alpha', 'm@gamma', 'm@beta']);
    expect(plan([c, b, a], { sort: 'throughput' }, { health })).toEqual(['m@alpha', 'm@gamma', 'm@beta']);
    const d = { provider: 'delta', model: 'm' };
    expect(plan([c, b, a, d], { sort: 'latency' }, { health })).toEqual(['m@delta', 'm@alpha', 'm@gamma', 'm@beta']);
    // A cooldown later they are tried first again, as untried ones are (else never measured while alpha answers).
    expect(plan([c, b, a], { sort: 'latency' }, { health, now: NOW + 10_000 })).toEqual(['m@gamma', 'm@beta', 'm@alpha']);
  });

  it('sort throughput orders by EWMA throughput descending, an unmeasured endpoint first', () => {
    expect(plan([c, b, a], { sort: { by: 'throughput' } }, { health: measured() })).toEqual([
      'm@gamma',
      'm@alpha',
      'm@beta',
    ]);
  });

  it('partitions by model unless partition is none', () => {
    const health = measured();
    const eps = [a, b, n2, n1];
    expect(plan(eps, { sort: { by: 'latency', partition: 'model' } }, { health })).toEqual([
      'm@alpha',
      'm@beta',
      'n@alpha',
      'n@delta',
    ]);
    expect(plan(eps, { sort: { by: 'latency', partition: 'none' } }, { health })).toEqual([
      'n@alpha',
      'm@alpha',
      'n@delta',
      'm@beta',
    ]);
    expect(plan(eps, { sort: { by: 'price', partition: 'none' }, allow_fallbacks: false })).toEqual(['n@alpha']);
  });

  it('order still comes before sort; the rest follow the sort', () => {
    expect(plan([a, b, c], { order: ['alpha'], sort: 'latency' }, { health: measured() })).toEqual([
      'm@alpha',
      'm@gamma',
      'm@beta',
    ]);
    expect(plan([a, b, c], { order: ['gamma'], sort: 'throughput' }, { health: measured() })).toEqual([
      'm@gamma',
      'm@alpha',
      'm@beta',
    ]);
  });

  it('open endpoints go last under a sort too', () => {
    const health = measured();
    health.recordFailure(keyOf(a), health.tryAcquire(keyOf(a), NOW), NOW);
    health.recordFailure(keyOf(a), health.tryAcquire(keyOf(a), NOW), NOW);
    health.recordFailure(keyOf(a), health.tryAcquire(keyOf(a), NOW), NOW);
    expect(plan([a, b, c], { sort: 'latency' }, { health })).toEqual(['m@gamma', 'm@beta', 'm@alpha']);
  });
});
