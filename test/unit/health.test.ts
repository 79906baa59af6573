import { describe, expect, it } from 'vitest';
import { DEFAULT_HEALTH_OPTIONS, EndpointHealth, EWMA_ALPHA } from '../../src/routing/health';

const K = 'acme/model-x';
const T0 = 1_000_000;

/** `n` failures of attempts the breaker let through at `now` (it was closed). */
function failTimes(h: EndpointHealth, n: number, now = T0, key = K) {
  for (let i = 0; i < n; i++) h.recordFailure(key, h.tryAcquire(key, now), now);
}

/** An attempt the breaker let through at `now` that failed. */
function failOnce(h: EndpointHealth, now = T0, key = K) {
  failTimes(h, 1, now, key);
}

describe('EndpointHealth breaker', () => {
  it('defaults to a threshold of 3 and a cooldown of 30 s', () => {
    expect(DEFAULT_HEALTH_OPTIONS).toEqual({ failureThreshold: 3, cooldownMs: 30_000 });
    const h = new EndpointHealth();
    expect(h.options).toEqual({ failureThreshold: 3, cooldownMs: 30_000 });
    failTimes(h, 2);
    expect(h.state(K, T0)).toBe('closed');
    failOnce(h);
    expect(h.state(K, T0 + 29_999)).toBe('open');
    expect(h.state(K, T0 + 30_000)).toBe('half_open');
  });

  it('rejects nonsensical options', () => {
    expect(() => new EndpointHealth({ failureThreshold: 0 })).toThrow(RangeError);
    expect(() => new EndpointHealth({ cooldownMs: -1 })).toThrow(RangeError);
  });

  it('an unknown endpoint is closed and may be tried', () => {
    const h = new EndpointHealth();
    expect(h.state('never/seen', T0)).toBe('closed');
    expect(h.tryAcquire('never/seen', T0)).not.toBeNull();
    expect(h.stats('never/seen')).toEqual({ latencyMs: null, throughput: null });
  });

  it('opens only after failureThreshold failures in a row; a success resets the count', () => {
    const h = new EndpointHealth({ failureThreshold: 2, cooldownMs: 1000 });
    failOnce(h);
    h.recordSuccess(K, { pass: h.tryAcquire(K, T0) });
    failOnce(h);
    expect(h.state(K, T0)).toBe('closed');
    expect(h.tryAcquire(K, T0)).not.toBeNull();
    failOnce(h, T0 + 10);
    expect(h.state(K, T0 + 10)).toBe('open');
    expect(h.tryAcquire(K, T0 + 10)).toBeNull();
    expect(h.tryAcquire(K, T0 + 1009)).toBeNull();
  });

  it('half-open lets exactly one probe through until it reports back', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    failOnce(h);
    const t = T0 + 1000;
    expect(h.state(K, t)).toBe('half_open');
    const probe = h.tryAcquire(K, t);
    expect(probe).not.toBeNull();
    expect(h.tryAcquire(K, t)).toBeNull();
    expect(h.tryAcquire(K, t + 500)).toBeNull();
    expect(h.state(K, t + 500)).toBe('half_open');
    h.recordSuccess(K, { pass: probe, latencyMs: 50 });
    expect(h.state(K, t + 500)).toBe('closed');
    expect(h.tryAcquire(K, t + 500)).not.toBeNull();
    expect(h.tryAcquire(K, t + 500)).not.toBeNull();
  });

  it('a probe given back (it told nothing) lets the next request probe; the breaker stays half-open', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    failOnce(h);
    const t = T0 + 1000;
    const pass = h.tryAcquire(K, t);
    expect(pass).not.toBeNull();
    expect(h.tryAcquire(K, t + 1)).toBeNull();
    h.release(K, pass);
    expect(h.state(K, t + 2)).toBe('half_open');
    expect(h.tryAcquire(K, t + 2)).not.toBeNull();
    expect(h.tryAcquire(K, t + 3)).toBeNull();
    h.release('never/seen', pass); // nothing to give back
    expect(h.state('never/seen', t)).toBe('closed');
  });

  it('giving back only clears the probe the caller took: not a later probe, not one taken by another request', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    // A request that was let through while the breaker was closed ends after the breaker opened and a probe went out.
    const early = h.tryAcquire(K, T0);
    expect(early).not.toBeNull();
    failOnce(h);
    const t = T0 + 1000;
    const probe = h.tryAcquire(K, t);
    expect(probe).not.toBeNull();
    h.release(K, early);
    expect(h.tryAcquire(K, t + 1)).toBeNull(); // the probe is still out: no second one
    // A probe that expired (its caller slow, not gone) gives back nothing of the probe that replaced it.
    const next = h.tryAcquire(K, t + 1000);
    expect(next).not.toBeNull();
    h.release(K, probe);
    expect(h.tryAcquire(K, t + 1001)).toBeNull();
    h.release(K, next);
    expect(h.tryAcquire(K, t + 1002)).not.toBeNull();
  });

  it('an attempt made without a pass (a last resort while the probe is out, or while open) moves no breaker: the probe decides', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    failOnce(h);
    const t = T0 + 1000;
    const probe = h.tryAcquire(K, t);
    expect(probe).not.toBeNull();
    expect(h.tryAcquire(K, t + 1)).toBeNull(); // refused: the endpoint is tried last, without a pass
    h.recordFailure(K, null, t + 2);
    expect(h.state(K, t + 2)).toBe('half_open');
    expect(h.tryAcquire(K, t + 3)).toBeNull(); // the probe is still out, not cleared by the reopening
    h.recordSuccess(K, { pass: null, latencyMs: 30 }, t + 4);
    expect(h.state(K, t + 4)).toBe('half_open');
    expect(h.stats(K).latencyMs).toBe(30); // measured all the same
    expect(h.tried(K, t + 4)).toBe(true);
    h.recordFailure(K, probe, t + 5);
    expect(h.state(K, t + 5)).toBe('open');
    h.recordSuccess(K, { pass: null }, t + 6); // a last resort while it cools down
    expect(h.state(K, t + 6)).toBe('open');
    expect(h.state(K, t + 5 + 1000)).toBe('half_open');
  });

  it('a failure reported late by an attempt let through before the breaker opened does not reopen it under its probe', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    const early = h.tryAcquire(K, T0); // let through while closed, still in flight
    failOnce(h); // another request's failure opens the breaker
    const t = T0 + 1000;
    const probe = h.tryAcquire(K, t);
    expect(probe).not.toBeNull();
    h.recordFailure(K, early, t + 10);
    expect(h.state(K, t + 10)).toBe('half_open');
    expect(h.tryAcquire(K, t + 11)).toBeNull(); // the probe is still out
    h.recordSuccess(K, { pass: probe }, t + 20);
    expect(h.state(K, t + 20)).toBe('closed');
  });

  it('nor reopens one its probe has just closed, nor counts towards opening it again', () => {
    const h = new EndpointHealth({ failureThreshold: 2, cooldownMs: 1000 });
    const early = [h.tryAcquire(K, T0), h.tryAcquire(K, T0), h.tryAcquire(K, T0)];
    failTimes(h, 2); // the breaker opens
    const t = T0 + 1000;
    h.recordSuccess(K, { pass: h.tryAcquire(K, t) }, t + 10); // the probe closes it
    h.recordFailure(K, early[0], t + 20);
    h.recordFailure(K, early[1], t + 30);
    expect(h.state(K, t + 30)).toBe('closed');
    expect(h.snapshot(t + 30)[K].failures).toBe(0);
    // Attempts let through now count as before.
    failTimes(h, 2, t + 40);
    expect(h.state(K, t + 40)).toBe('open');
    h.recordSuccess(K, { pass: early[2] }, t + 50); // nor does a late success close it again
    expect(h.state(K, t + 50)).toBe('open');
  });

  it('a success reported late by an attempt let through before the breaker opened does not close it under its probe', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    const early = h.tryAcquire(K, T0);
    failOnce(h);
    const t = T0 + 1000;
    const probe = h.tryAcquire(K, t);
    h.recordSuccess(K, { pass: early, latencyMs: 70 }, t + 10);
    expect(h.state(K, t + 10)).toBe('half_open');
    expect(h.stats(K).latencyMs).toBe(70); // measured all the same
    h.recordFailure(K, probe, t + 20); // the probe decides
    expect(h.state(K, t + 20)).toBe('open');
    expect(h.state(K, t + 20 + 1000)).toBe('half_open');
  });

  it('a probe that expired and was replaced still decides if it reports first; the other then moves nothing', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    failOnce(h);
    const t = T0 + 1000;
    const slow = h.tryAcquire(K, t); // a stream that runs longer than a cooldown
    const next = h.tryAcquire(K, t + 1000);
    expect(next).not.toBeNull();
    h.recordSuccess(K, { pass: slow }, t + 1500);
    expect(h.state(K, t + 1500)).toBe('closed');
    h.recordFailure(K, next, t + 1600);
    expect(h.state(K, t + 1600)).toBe('closed');
    // The other way round: the replacement fails first and reopens; the slow one's late success does not close.
    failOnce(h, t + 2000);
    const slow2 = h.tryAcquire(K, t + 3000);
    const next2 = h.tryAcquire(K, t + 4000);
    h.recordFailure(K, next2, t + 4100);
    expect(h.state(K, t + 4100)).toBe('open');
    h.recordSuccess(K, { pass: slow2 }, t + 4200);
    expect(h.state(K, t + 4200)).toBe('open');
  });

  it('a failed half-open probe reopens the breaker for another full cooldown', () => {
    const h = new EndpointHealth({ failureThreshold: 3, cooldownMs: 1000 });
    failTimes(h, 3);
    const t = T0 + 1500;
    const probe = h.tryAcquire(K, t);
    expect(probe).not.toBeNull();
    h.recordFailure(K, probe, t);
    expect(h.state(K, t)).toBe('open');
    expect(h.state(K, t + 999)).toBe('open');
    expect(h.tryAcquire(K, t + 999)).toBeNull();
    expect(h.state(K, t + 1000)).toBe('half_open');
    expect(h.tryAcquire(K, t + 1000)).not.toBeNull();
  });

  it('failures reported while open do not extend the cooldown', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    const inFlight = h.tryAcquire(K, T0);
    failOnce(h);
    h.recordFailure(K, inFlight, T0 + 900); // a request that was already in flight
    expect(h.state(K, T0 + 1000)).toBe('half_open');
  });

  it('a probe that never reports back expires after one cooldown', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    failOnce(h);
    expect(h.tryAcquire(K, T0 + 1000)).not.toBeNull();
    expect(h.tryAcquire(K, T0 + 1999)).toBeNull();
    expect(h.tryAcquire(K, T0 + 2000)).not.toBeNull();
    expect(h.tryAcquire(K, T0 + 2001)).toBeNull();
  });

  it('keeps endpoints apart', () => {
    const h = new EndpointHealth({ failureThreshold: 1, cooldownMs: 1000 });
    failOnce(h, T0, 'a/m');
    expect(h.state('a/m', T0)).toBe('open');
    expect(h.state('b/m', T0)).toBe('closed');
    expect(h.tryAcquire('b/m', T0)).not.toBeNull();
  });

  it('snapshot lists every endpoint seen with its state and consecutive failures', () => {
    const h = new EndpointHealth({ failureThreshold: 2, cooldownMs: 1000 });
    failTimes(h, 2, T0, 'a/m');
    failOnce(h, T0, 'b/m');
    h.recordSuccess('c/m', { pass: h.tryAcquire('c/m', T0) });
    expect(h.snapshot(T0 + 1)).toEqual({
      'a/m': { state: 'open', failures: 2 },
      'b/m': { state: 'closed', failures: 1 },
      'c/m': { state: 'closed', failures: 0 },
    });
    expect(h.snapshot(T0 + 1000)['a/m']).toEqual({ state: 'half_open', failures: 2 });
  });
});

describe('EndpointHealth Retry-After rest', () => {
  it('an endpoint that gave a Retry-After rests until it passes, at most one cooldown; a success ends it; the breaker is apart', () => {
    const h = new EndpointHealth({ failureThreshold: 3, cooldownMs: 10_000 });
    expect(h.resting(K, T0)).toBe(false);
    h.rest(K, 2_000, T0);
    expect(h.resting(K, T0 + 1_999)).toBe(true);
    expect(h.resting(K, T0 + 2_000)).toBe(false);
    expect(h.state(K, T0)).toBe('closed');
    h.rest(K, 3_600_000, T0); // an hour: capped at the cooldown
    expect(h.resting(K, T0 + 9_999)).toBe(true);
    expect(h.resting(K, T0 + 10_000)).toBe(false);
    h.rest(K, 5_000, T0);
    h.rest(K, 1_000, T0); // a shorter hint does not shorten a longer one
    expect(h.resting(K, T0 + 4_999)).toBe(true);
    h.recordSuccess(K, { pass: h.tryAcquire(K, T0) });
    expect(h.resting(K, T0)).toBe(false);
  });
});

describe('EndpointHealth stats', () => {
  it('keeps an EWMA of latency, seeded by the first sample', () => {
    const h = new EndpointHealth();
    h.recordSuccess(K, { pass: h.tryAcquire(K), latencyMs: 100 });
    expect(h.stats(K).latencyMs).toBe(100);
    h.recordSuccess(K, { pass: h.tryAcquire(K), latencyMs: 200 });
    expect(h.stats(K).latencyMs).toBeCloseTo(100 + EWMA_ALPHA * 100, 9);
    expect(EWMA_ALPHA).toBe(0.3);
    expect(h.stats(K).latencyMs).toBeCloseTo(130, 9);
  });

  it('keeps an EWMA of throughput in tokens per second', () => {
    const h = new EndpointHealth();
    h.recordSuccess(K, { pass: h.tryAcquire(K), outputTokens: 100, durationMs: 2000 });
    expect(h.stats(K)).toEqual({ latencyMs: null, throughput: 50 });
    h.recordSuccess(K, { pass: h.tryAcquire(K), outputTokens: 300, durationMs: 2000 }); // 150 tok/s
    expect(h.stats(K).throughput).toBeCloseTo(50 + 0.3 * 100, 9);
  });

  it('ignores samples that cannot be measured', () => {
    const h = new EndpointHealth();
    h.recordSuccess(K, { pass: h.tryAcquire(K), latencyMs: 80, outputTokens: 0, durationMs: 1000 });
    h.recordSuccess(K, { pass: h.tryAcquire(K), outputTokens: 10, durationMs: 0 });
    h.recordSuccess(K, { pass: h.tryAcquire(K), outputTokens: 10 });
    h.recordSuccess(K, { pass: h.tryAcquire(K), latencyMs: Number.NaN });
    h.recordSuccess(K, { pass: h.tryAcquire(K), latencyMs: -5 });
    expect(h.stats(K)).toEqual({ latencyMs: 80, throughput: null });
  });

  it('failures leave the measurements alone', () => {
    const h = new EndpointHealth({ failureThreshold: 1 });
    h.recordSuccess(K, { pass: h.tryAcquire(K), latencyMs: 40, outputTokens: 10, durationMs: 1000 });
    failOnce(h);
    expect(h.stats(K)).toEqual({ latencyMs: 40, throughput: 10 });
  });
});
