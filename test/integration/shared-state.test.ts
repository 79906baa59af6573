import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { MemoryState } from '../../src/state/memory';
import { RedisState } from '../../src/state/redis';
import { toNano, type BudgetLine, type ReserveInput, type SharedState } from '../../src/state/types';

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379/0';
const NOW = Date.UTC(2026, 10, 22, 12);

/** Every prefix a test used, so the keys it left in the shared Redis are deleted at the end. */
const prefixes: string[] = [];
afterAll(async () => {
  const redis = new Redis(REDIS_URL);
  for (const prefix of prefixes) {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
  }
  await redis.quit();
});

function redisState(): RedisState {
  const prefix = `gwtest:${randomBytes(4).toString('hex')}:`;
  prefixes.push(prefix);
  return new RedisState({ url: REDIS_URL, prefix, commandTimeoutMs: 2000 }, () => NOW);
}

/** The contract both drivers keep: the same test runs against each. */
const drivers: [string, () => SharedState][] = [
  ['memory', () => new MemoryState(() => NOW)],
  ['redis', redisState],
];

const line = (over: Partial<BudgetLine> = {}): BudgetLine => ({ counter: 'key:k1:monthly:1', group: 'key:k1', limitNano: 1000, includeByok: false, ...over });

function reserve(over: Partial<ReserveInput> = {}): ReserveInput {
  return { holdId: 'h1', now: NOW, lines: [line()], balanceBlocked: false, estimateNano: 100, holdUntil: NOW + 60_000, inFlight: null, ...over };
}

describe.each(drivers)('shared state contract (%s)', (_name, make) => {
  let state: SharedState;
  afterEach(async () => {
    await state?.close();
  });

  it('puts lost holds back (video jobs\'): once, lapsed ones skipped, and a settlement still releases them', async () => {
    state = make();
    const hold = { id: 'v1', groups: ['key:k1', 'videos:account:a'], amountNano: 850, until: NOW + 60_000 };
    await state.restoreHolds!([hold, { id: 'v2', groups: ['key:k1'], amountNano: 5, until: NOW }]);
    await state.restoreHolds!([hold]); // another process putting them back too
    expect(await state.held('key:k1', NOW)).toBe(850);
    expect(await state.held('videos:account:a', NOW)).toBe(850);
    await state.settle({ holdId: 'v1', groups: ['key:k1'], counters: [], byok: false, costNano: 0, inFlight: { group: 'videos:account:a', until: 0 } });
    expect(await state.held('key:k1', NOW)).toBe(0);
    expect(await state.held('videos:account:a', NOW)).toBe(0);
  });

  it('asks for counters that do not exist, holding nothing', async () => {
    state = make();
    const r = await state.reserve(reserve());
    expect(r).toEqual({ ok: false, reason: 'missing', counters: ['key:k1:monthly:1'] });
    expect(await state.held('key:k1', NOW)).toBe(0);
  });

  it('holds the estimate in every group until settled, then counts the actual cost', async () => {
    state = make();
    await state.initCounter('key:k1:monthly:1', 200, 0, NOW + 86_400_000);
    await state.initCounter('workspace:w:lifetime', 0, 0, null);
    const lines = [line(), line({ counter: 'workspace:w:lifetime', group: 'workspace:w', limitNano: 10_000 })];
    expect(await state.reserve(reserve({ lines }))).toEqual({ ok: true });
    expect(await state.held('key:k1', NOW)).toBe(100);
    expect(await state.held('workspace:w', NOW)).toBe(100);
    await state.settle({ holdId: 'h1', groups: ['key:k1', 'workspace:w'], counters: ['key:k1:monthly:1', 'workspace:w:lifetime'], byok: false, costNano: 70, inFlight: null });
    expect(await state.held('key:k1', NOW)).toBe(0);
    // 200 + 70 spent: a line with limit 270 is now spent.
    const r = await state.reserve(reserve({ holdId: 'h2', lines: [line({ limitNano: 270 })] }));
    expect(r).toEqual({ ok: false, reason: 'budget', line: 0, spentNano: 270, heldNano: 0 });
  });

  it('rejects on the first line whose spend plus holds reached its limit', async () => {
    state = make();
    await state.initCounter('a', 0, 0, null);
    await state.initCounter('b', 0, 0, null);
    const lines = [line({ counter: 'a', group: 'ga', limitNano: 1000 }), line({ counter: 'b', group: 'gb', limitNano: 250 })];
    expect((await state.reserve(reserve({ holdId: 'x1', lines, estimateNano: 200 }))).ok).toBe(true);
    expect((await state.reserve(reserve({ holdId: 'x2', lines, estimateNano: 200 }))).ok).toBe(true); // 200 < 250 admitted
    const r = await state.reserve(reserve({ holdId: 'x3', lines, estimateNano: 200 }));
    expect(r).toEqual({ ok: false, reason: 'budget', line: 1, spentNano: 0, heldNano: 400 });
    expect(await state.held('ga', NOW)).toBe(400); // the rejected request held nothing
  });

  it('counts BYOK spend only on lines that include it', async () => {
    state = make();
    await state.initCounter('c', 0, 0, null);
    await state.settle({ holdId: 'b1', groups: [], counters: ['c'], byok: true, costNano: 500, inFlight: null });
    expect((await state.reserve(reserve({ lines: [line({ counter: 'c', limitNano: 500 })] }))).ok).toBe(true);
    const r = await state.reserve(reserve({ holdId: 'h2', lines: [line({ counter: 'c', limitNano: 500, includeByok: true })] }));
    expect(r).toMatchObject({ ok: false, reason: 'budget', spentNano: 500 });
  });

  it('checks the balance after the budgets and before the in-flight budget', async () => {
    state = make();
    await state.initCounter('c', 1000, 0, null);
    expect(await state.reserve(reserve({ lines: [line({ counter: 'c' })], balanceBlocked: true }))).toMatchObject({ reason: 'budget' });
    expect(await state.reserve(reserve({ lines: [], balanceBlocked: true, inFlight: { group: 'acct', capNano: 0 } }))).toEqual({ ok: false, reason: 'balance' });
  });

  it('keeps the in-flight total under the cap; settled cost stays held for the settlement window', async () => {
    state = make();
    const inFlight = { group: 'account:a', capNano: 250 };
    expect((await state.reserve(reserve({ holdId: 'f1', lines: [], inFlight }))).ok).toBe(true);
    expect((await state.reserve(reserve({ holdId: 'f2', lines: [], inFlight }))).ok).toBe(true);
    const r = await state.reserve(reserve({ holdId: 'f3', lines: [], inFlight }));
    expect(r).toEqual({ ok: false, reason: 'in_flight', heldNano: 200, capNano: 250, nextExpiry: NOW + 60_000 });
    await state.settle({ holdId: 'f1', groups: [], counters: [], byok: false, costNano: 30, inFlight: { group: 'account:a', until: NOW + 5000 } });
    expect(await state.held('account:a', NOW)).toBe(130);
    expect(await state.held('account:a', NOW + 5000)).toBe(100); // settlement window over
    expect(await state.held('account:a', NOW + 60_000)).toBe(0); // a crashed process's hold lapses
  });

  it('the in-flight budget holds its own estimate (token prices only), the budget lines theirs (with the per-request fee)', async () => {
    state = make();
    await state.initCounter('c', 0, 0, null);
    const inFlight = { group: 'account:a', capNano: 250, estimateNano: 30 };
    const lines = [line({ counter: 'c', group: 'key:k1', limitNano: 1000 })];
    expect((await state.reserve(reserve({ holdId: 'x1', lines, estimateNano: 100, inFlight }))).ok).toBe(true);
    expect(await state.held('key:k1', NOW)).toBe(100);
    expect(await state.held('account:a', NOW)).toBe(30);
    // The in-flight check is of its own estimate: 30 + 230 > 250 refuses, though the lines' 100 would not fit either way.
    expect(await state.reserve(reserve({ holdId: 'x2', lines, estimateNano: 100, inFlight: { ...inFlight, estimateNano: 230 } }))).toMatchObject({ ok: false, reason: 'in_flight', heldNano: 30 });
    expect((await state.reserve(reserve({ holdId: 'x3', lines, estimateNano: 100, inFlight: { ...inFlight, estimateNano: 220 } }))).ok).toBe(true);
    expect(await state.held('account:a', NOW)).toBe(250);
    expect(await state.held('key:k1', NOW)).toBe(200);
  });

  it('expired holds stop counting (a crashed process)', async () => {
    state = make();
    await state.initCounter('c', 0, 0, null);
    expect((await state.reserve(reserve({ lines: [line({ counter: 'c', limitNano: 100 })], holdUntil: NOW + 1000 }))).ok).toBe(true);
    const later = reserve({ holdId: 'h2', now: NOW + 1000, lines: [line({ counter: 'c', limitNano: 100 })] });
    expect((await state.reserve(later)).ok).toBe(true);
  });

  it('initCounter does not overwrite an existing counter', async () => {
    state = make();
    await state.initCounter('c', 5, 0, null);
    await state.initCounter('c', 999, 0, null);
    expect(await state.reserve(reserve({ lines: [line({ counter: 'c', limitNano: 5 })] }))).toMatchObject({ spentNano: 5 });
  });

  it('settling a hold twice counts the cost once for holds (idempotent release)', async () => {
    state = make();
    await state.initCounter('c', 0, 0, null);
    await state.reserve(reserve({ lines: [line({ counter: 'c' })] }));
    await state.settle({ holdId: 'h1', groups: ['key:k1'], counters: [], byok: false, costNano: 10, inFlight: null });
    await state.settle({ holdId: 'h1', groups: ['key:k1'], counters: [], byok: false, costNano: 10, inFlight: null });
    expect(await state.held('key:k1', NOW)).toBe(0);
  });

  it('an absurd cost (a provider\'s $1e14) is counted at the ceiling both engines take, not refused', async () => {
    state = make();
    await state.initCounter('c', 0, 0, null);
    await state.reserve(reserve({ lines: [line({ counter: 'c', limitNano: 10_000 })] }));
    // Redis's HINCRBY had refused 1e23 (written with an exponent): the settlement was retried forever.
    await state.settle({ holdId: 'h1', groups: ['key:k1'], counters: ['c'], byok: false, costNano: toNano(1e14), inFlight: null });
    expect(await state.held('key:k1', NOW)).toBe(0);
    const r = await state.reserve(reserve({ holdId: 'h2', lines: [line({ counter: 'c' })] }));
    expect(r).toMatchObject({ ok: false, reason: 'budget' });
    // About $9 M (Redis's Lua reads 2^53 − 1 back as 2^53).
    expect((r as { spentNano: number }).spentNano / 1e9).toBeCloseTo(Number.MAX_SAFE_INTEGER / 1e9, 3);
    expect(toNano(Number.NaN)).toBe(0);
  });

  it('a retried settlement counts the cost only if its hold was still there (a first attempt that ran is not counted twice)', async () => {
    state = make();
    await state.initCounter('c', 0, 0, null);
    await state.reserve(reserve({ lines: [line({ counter: 'c', limitNano: 10_000 })] }));
    const settle = { holdId: 'h1', groups: ['key:k1'], counters: ['c'], byok: false, costNano: 30, inFlight: null };
    await state.settle(settle); // ran, but its reply was lost
    await state.settle({ ...settle, retry: true });
    // 30 spent, not 60: a line with limit 60 still has room.
    expect(await state.reserve(reserve({ holdId: 'h2', estimateNano: 30, lines: [line({ counter: 'c', limitNano: 60 })] }))).toEqual({ ok: true });
    // A first attempt that never ran: the retry finds the hold and counts the cost.
    await state.settle({ holdId: 'h2', groups: ['key:k1'], counters: ['c'], byok: false, costNano: 25, inFlight: null, retry: true });
    expect(await state.reserve(reserve({ holdId: 'h3', estimateNano: 6, lines: [line({ counter: 'c', limitNano: 55 })] }))).toMatchObject({ ok: false, reason: 'budget', spentNano: 55 });
  });

  it('rate windows: all or nothing, limited once full, counts reported', async () => {
    state = make();
    const lines = [
      { key: 'rl:a', limit: 3, resetAt: NOW + 60_000 },
      { key: 'rl:b', limit: 2, resetAt: NOW + 60_000 },
    ];
    expect(await state.hit(lines, NOW)).toEqual({ ok: true, counts: [1, 1] });
    expect(await state.hit(lines, NOW)).toEqual({ ok: true, counts: [2, 2] });
    expect(await state.hit(lines, NOW)).toEqual({ ok: false, reason: 'limited', line: 1, count: 2 });
    expect(await state.rateCount('rl:a', NOW)).toBe(2); // the rejected hit counted nowhere
    expect(await state.hit(lines, NOW + 60_000)).toEqual({ ok: true, counts: [1, 1] }); // new window
  });

  it('rate windows marked rebuild ask to be initialized first', async () => {
    state = make();
    const lines = [{ key: 'rl:free', limit: 5, resetAt: NOW + 60_000, rebuild: true }];
    expect(await state.hit(lines, NOW)).toEqual({ ok: false, reason: 'missing', keys: ['rl:free'] });
    await state.initRate('rl:free', 4, NOW + 60_000);
    await state.initRate('rl:free', 0, NOW + 60_000);
    expect(await state.hit(lines, NOW)).toEqual({ ok: true, counts: [5] });
    expect(await state.hit(lines, NOW)).toMatchObject({ ok: false, reason: 'limited', count: 5 });
  });

  it('unhit takes one back from a live window, never below 0, and does nothing to a missing or ended one', async () => {
    state = make();
    const lines = [{ key: 'rl:u', limit: 5, resetAt: NOW + 60_000 }];
    await state.hit(lines, NOW);
    await state.hit(lines, NOW);
    await state.unhit('rl:u', NOW);
    expect(await state.rateCount('rl:u', NOW)).toBe(1);
    await state.unhit('rl:u', NOW);
    await state.unhit('rl:u', NOW);
    expect(await state.rateCount('rl:u', NOW)).toBe(0);
    expect(await state.hit(lines, NOW)).toEqual({ ok: true, counts: [1] });
    await state.unhit('rl:none', NOW);
    expect(await state.rateCount('rl:none', NOW)).toBe(0);
    await state.unhit('rl:u', NOW + 60_000); // the window has ended: nothing to take back
    expect(await state.hit(lines, NOW + 60_000)).toEqual({ ok: true, counts: [1] });
  });

  it('sticky sessions: set, get, delete', async () => {
    state = make();
    expect(await state.stickyGet('s1', 1000)).toBeUndefined();
    await state.stickySet('s1', 'openai/gpt', 60_000);
    expect(await state.stickyGet('s1', 60_000)).toBe('openai/gpt');
    await state.stickyDelete('s1');
    expect(await state.stickyGet('s1', 60_000)).toBeUndefined();
  });

  it('concurrent reserves never hold more than the limit admits', async () => {
    state = make();
    await state.initCounter('c', 0, 0, null);
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => state.reserve(reserve({ holdId: `p${i}`, lines: [line({ counter: 'c', limitNano: 1000 })], estimateNano: 100 }))),
    );
    expect(results.filter((r) => r.ok)).toHaveLength(10);
  });
});

describe('redis state', () => {
  const prefix = `gwtest:${randomBytes(4).toString('hex')}:`;
  const opened: RedisState[] = [];
  const open = (url = REDIS_URL, commandTimeoutMs = 2000) => {
    const s = new RedisState({ url, prefix, commandTimeoutMs }, () => NOW);
    opened.push(s);
    return s;
  };

  afterEach(async () => {
    const admin = new Redis(REDIS_URL);
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
    await Promise.all(opened.splice(0).map((s) => s.close()));
  });

  it('two processes with the same prefix see each other’s holds, counters and rate windows', async () => {
    const a = open();
    const b = open();
    await a.initCounter('c', 100, 0, null);
    await b.initCounter('c', 999, 0, null); // first writer wins across processes
    const lines = [line({ counter: 'c', limitNano: 300 })];
    expect(await a.reserve(reserve({ holdId: 'a1', lines, estimateNano: 200 }))).toEqual({ ok: true });
    expect(await b.held('key:k1', NOW)).toBe(200);
    expect(await b.reserve(reserve({ holdId: 'b1', lines, estimateNano: 200 }))).toEqual({ ok: false, reason: 'budget', line: 0, spentNano: 100, heldNano: 200 });
    await b.settle({ holdId: 'a1', groups: ['key:k1'], counters: ['c'], byok: false, costNano: 50, inFlight: null });
    expect(await a.held('key:k1', NOW)).toBe(0);
    expect(await a.reserve(reserve({ holdId: 'a2', lines: [line({ counter: 'c', limitNano: 150 })] }))).toMatchObject({ reason: 'budget', spentNano: 150 });
    const rl = [{ key: 'rl:shared', limit: 2, resetAt: NOW + 60_000 }];
    expect(await a.hit(rl, NOW)).toEqual({ ok: true, counts: [1] });
    expect(await b.hit(rl, NOW)).toEqual({ ok: true, counts: [2] });
    expect(await a.hit(rl, NOW)).toEqual({ ok: false, reason: 'limited', line: 0, count: 2 });
  });

  it('rejects instead of hanging when Redis is unreachable', async () => {
    const down = open('redis://127.0.0.1:1', 300);
    await expect(down.reserve(reserve())).rejects.toThrow();
    await expect(down.held('key:k1', NOW)).rejects.toThrow(); // later calls fail too, without waiting
  });
});

describe('redis state: lost holds', () => {
  it('tells that its holds may be lost until they are marked kept; a flush loses the mark', async () => {
    const state = redisState();
    const redis = new Redis(REDIS_URL);
    try {
      expect(await state.holdsLost()).toBe(true);
      await state.markHolds();
      expect(await state.holdsLost()).toBe(false);
      const prefix = prefixes[prefixes.length - 1];
      await redis.del(...(await redis.keys(`${prefix}*`))); // what a Redis restarted without persistence has
      expect(await state.holdsLost()).toBe(true);
    } finally {
      redis.disconnect();
      await state.close();
    }
  });
});
