import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { parseConfigText } from '../../src/config/load';
import { estimate } from '../../src/spend/estimate';
import { toNano } from '../../src/state/types';
import { post, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { type FakeUpstream } from '../fixtures/fake-upstream';
import { perTestGateways } from '../fixtures/per-test';
import { spent } from '../fixtures/ledger';

const PIPELINE = '[auth, validate, rate-limit, budget-check, upstream]';
const FREE_MODEL = `
  - id: fake/free:free
    endpoints: [{ provider: fake-openai, upstream_model: gpt-free, pricing: { prompt: 0, completion: 0 } }]
`;

/** The test config with the spend stages on, a free model, and `extra` top-level sections. */
function yaml(upstream: FakeUpstream, extra = ''): string {
  return testConfigYaml(t.upstream.url, PIPELINE).replace('pipelines:', `${FREE_MODEL}pipelines:`) + extra;
}

const chat = (over: Record<string, unknown> = {}) => ({ model: 'fake/gpt', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], ...over });

const t = perTestGateways();

async function start(extra = '', clock?: () => number): Promise<TestGateway> {
  return t.start({ yaml: yaml(t.upstream, extra), clock });
}

async function credit(g: TestGateway, usd: number): Promise<void> {
  await g.store.addCredits(g.keyRecord.accountId, usd);
  g.gateway.spend.forgetAccount(g.keyRecord.accountId);
}

async function keyInfo(g: TestGateway, secret: string): Promise<any> {
  const res = await fetch(`${g.url}/key`, { headers: { authorization: `Bearer ${secret}` } });
  expect(res.status).toBe(200);
  return res.json();
}

/** A request held at the upstream until `release()`, so many can be in flight at once. */
function holdUpstream(model = 'gpt-upstream') {
  let release!: () => void;
  const until = new Promise<void>((r) => (release = r));
  t.upstream.always.set(model, { kind: 'hold', until });
  return release;
}


describe('key limit under concurrency', () => {
  it('a model priced per request holds its fee: 20 concurrent requests against a limit of 5 fees admit 5 (all 20 were admitted, nothing held)', async () => {
    const fee = `
  - id: fake/fee
    endpoints: [{ provider: fake-openai, upstream_model: gpt-fee, pricing: { prompt: 0, completion: 0, request: 0.01 } }]
`;
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url, PIPELINE).replace('pipelines:', `${fee}pipelines:`) });
    await credit(g, 100);
    const { secret, record } = await g.createKey({ limitUsd: 0.05, name: 'fees' });
    const release = holdUpstream('gpt-fee');
    const results = Array.from({ length: 20 }, () => post(`${g.url}/chat/completions`, secret, chat({ model: 'fake/fee' })));
    await expect.poll(() => t.upstream.received.length, { timeout: 5000 }).toBe(5);
    release();
    const all = await Promise.all(results);
    expect(all.filter((r) => r.status === 200)).toHaveLength(5);
    expect(t.upstream.received).toHaveLength(5);
    expect(all.find((r) => r.status !== 200)?.json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', scope: 'key_limit' });
    await g.gateway.ledger.flush();
    expect((await g.store.spendTotals({ kind: 'key', keyId: record.id }, 0)).paid).toBeCloseTo(0.05, 9);
  });

  it('200 concurrent requests against a limit that admits 50: 50 reach the upstream, settled spend stays within limit + one estimate', async () => {
    const g = await start();
    await credit(g, 100);
    const est = estimate(chat(), g.gateway.runtime().services.models, 4096);
    const limit = (50 * toNano(est.usd)) / 1e9;
    const { secret, record } = await g.createKey({ limitUsd: limit, limitReset: 'monthly', name: 'limited' });
    const release = holdUpstream();
    let rejected = 0;
    const settledRejections = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 10_000);
      const results = Array.from({ length: 200 }, () =>
        post(`${g.url}/chat/completions`, secret, chat()).then((r) => {
          if (r.status !== 200 && ++rejected === 150) {
            clearTimeout(timer);
            resolve();
          }
          return r;
        }),
      );
      void Promise.all(results).then((all) => (outcomes = all));
    });
    let outcomes: Awaited<ReturnType<typeof post>>[] = [];
    await settledRejections;
    // Admitted requests may still be on their way to the upstream when the last refusal arrives.
    await expect.poll(() => t.upstream.received.length, { timeout: 5000 }).toBe(50);
    release();
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(200);
    expect(outcomes.filter((r) => r.status === 200)).toHaveLength(50);
    expect(t.upstream.received).toHaveLength(50);
    const refused = outcomes.filter((r) => r.status !== 200);
    expect(new Set(refused.map((r) => r.status))).toEqual(new Set([403]));
    expect(refused[0].json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', scope: 'key_limit' });
    await g.gateway.ledger.flush();
    const settled = await g.store.spendTotals({ kind: 'key', keyId: record.id }, 0);
    expect(settled.paid).toBeLessThanOrEqual(limit + est.usd);
    expect(settled.paid).toBeGreaterThan(0);
    // Every hold was released at settlement.
    await expect.poll(() => g.gateway.state.held(`key:${record.id}`, g.gateway.spend.clock())).toBe(0);
  });
});

describe('chat n is held n times', () => {
  it('20 concurrent requests with n: 8 against a limit of 4 such estimates: 4 reach the upstream (held at one choice, all 20 were admitted)', async () => {
    const g = await start();
    await credit(g, 100);
    const body = chat({ n: 8 });
    // What 8 choices of up to 20 tokens each cost: one choice of up to 160.
    const eight = estimate(chat({ max_tokens: 8 * 20 }), g.gateway.runtime().services.models, 4096);
    const limit = (4 * toNano(eight.usd)) / 1e9;
    const { secret } = await g.createKey({ limitUsd: limit, limitReset: 'monthly', name: 'n-limited' });
    const release = holdUpstream();
    let refused = 0;
    const pending = Array.from({ length: 20 }, () =>
      post(`${g.url}/chat/completions`, secret, body).then((r) => {
        if (r.status !== 200) refused++;
        return r;
      }),
    );
    // Released once every request has been admitted or refused (a settled one frees its hold for later ones).
    await expect.poll(() => t.upstream.received.length + refused, { timeout: 10_000 }).toBe(20);
    expect(t.upstream.received).toHaveLength(4);
    release();
    const outcomes = await Promise.all(pending);
    expect(outcomes.filter((r) => r.status === 200)).toHaveLength(4);
  });
});

describe('budget checks', () => {
  const budgets = (o: { team?: number; person?: number; keyg?: number; wsLife?: number; wsMonth?: number } = {}) => `
guardrails:
  - { id: team, budget: { limit_usd: ${o.team ?? 1}, reset_interval: monthly } }
  - { id: person, budget: { limit_usd: ${o.person ?? 1}, reset_interval: weekly } }
  - { id: keyg, budget: { limit_usd: ${o.keyg ?? 1}, reset_interval: daily } }
workspaces:
  - name: default
    default_guardrail: team
    members: [{ user_id: user_test, guardrail: person }]
    keys: [{ key: key-a, guardrail: keyg }]
    budgets:
      - { id: ws-month, limit_usd: ${o.wsMonth ?? 1}, reset_interval: monthly }
      - { id: ws-life, limit_usd: ${o.wsLife ?? 1}, reset_interval: lifetime }
`;

  it('rejects on the first spent budget in spec order, with exactly the 7.7 metadata and no Retry-After', async () => {
    const g = await start(budgets());
    await credit(g, 100);
    const a = await g.createKey({ name: 'key-a', limitUsd: 0.4, limitReset: 'monthly' });
    const b = await g.createKey({ name: 'key-b' });
    await spent(g, a.record.id, 0.5);
    await spent(g, b.record.id, 1.5); // same member: the member's combined spend is 2
    const reject = async () => {
      const r = await post(`${g.url}/chat/completions`, a.secret, chat());
      expect(r.headers.get('retry-after')).toBeNull();
      return r;
    };
    const reload = (o: Parameters<typeof budgets>[0]) => g.gateway.reload(parseConfigText(yaml(t.upstream, budgets(o)), { registry }));

    let r = await reject();
    expect(r.status).toBe(403);
    expect(r.json.error.metadata).toEqual({
      error_type: 'permission_denied',
      limit_source: 'gateway_guardrail_budget',
      scope: 'workspace_default_member',
      limit_usd: 1,
      spend_usd: 2,
      resets_at: expect.stringMatching(/^\d{4}-\d{2}-01T00:00:00\.000Z$/),
      remedy_hint: expect.any(String),
    });
    expect(r.json.error.message).toMatch(/spend \$2\.00 of limit \$1\.00, resets at \d{4}-\d{2}-01T00:00:00\.000Z$/);

    reload({ team: 10 });
    r = await reject();
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_guardrail_budget', scope: 'member', spend_usd: 2 });

    reload({ team: 10, person: 10, keyg: 0.5 });
    r = await reject();
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_guardrail_budget', scope: 'api_key', spend_usd: 0.5, limit_usd: 0.5 });

    reload({ team: 10, person: 10 });
    r = await reject();
    // Workspace budgets: the broadest spent one (lifetime) is reported, with resets_at null.
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_workspace_budget', scope: 'workspace', spend_usd: 2, resets_at: null });
    expect(r.json.error.message).toMatch(/never resets$/);

    reload({ team: 10, person: 10, wsLife: 10, wsMonth: 10 });
    r = await reject();
    expect(r.status).toBe(403);
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', scope: 'key_limit', limit_usd: 0.4, spend_usd: 0.5 });

    const info = await keyInfo(g, a.secret);
    expect(info.data.budgets.map((x: { scope: string }) => x.scope)).toEqual([
      'workspace_default_member',
      'workspace_default_key',
      'member',
      'api_key',
      'workspace',
      'workspace',
      'key_limit',
    ]);
    // Limit 0.4, spent 0.5: spec 2.1's "limit minus spend" (it was shown as 0).
    expect(info.data.effective_budget).toMatchObject({ scope: 'key_limit', remaining_usd: -0.1 });
    expect(info.data.limit_remaining).toBe(-0.1);
  });

  it('effective_budget is the least remaining when nothing is spent; GET /key lists every applicable budget', async () => {
    const g = await start(budgets({ team: 10, person: 3, keyg: 5, wsLife: 100, wsMonth: 50 }));
    const a = await g.createKey({ name: 'key-a', limitUsd: 4, limitReset: 'weekly' });
    await spent(g, a.record.id, 1);
    const info = await keyInfo(g, a.secret);
    expect(info.data.effective_budget).toEqual({
      budget_id: null,
      guardrail_id: 'person',
      include_byok: false,
      limit_usd: 3,
      spend_usd: 1,
      remaining_usd: 2,
      reset_interval: 'weekly',
      resets_at: expect.stringMatching(/T00:00:00\.000Z$/),
      scope: 'member',
    });
    expect(new Date(info.data.effective_budget.resets_at).getUTCDay()).toBe(1); // Monday
    expect(info.data.budgets.find((b: { budget_id: string }) => b.budget_id === 'ws-life')).toMatchObject({ reset_interval: 'lifetime', resets_at: null, remaining_usd: 99 });
    expect(info.data.limit).toBe(4);
    expect(info.data.limit_remaining).toBe(3);
  });

  it('a key limit without a reset window is the key running out of credit: 402 gateway_key_limit', async () => {
    const g = await start();
    await credit(g, 100);
    const a = await g.createKey({ limitUsd: 0.25 });
    await spent(g, a.record.id, 0.25);
    const r = await post(`${g.url}/messages`, a.secret, { model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(402);
    expect(r.json).toEqual({
      type: 'error',
      error: { type: 'billing_error', message: expect.stringMatching(/never resets$/), error_type: 'payment_required' },
      request_id: null,
      metadata: { limit_source: 'gateway_key_limit', reason: 'key_limit_exhausted', scope: 'key_limit', limit_usd: 0.25, spend_usd: 0.25, resets_at: null, remedy_hint: expect.any(String) },
    });
    expect(r.headers.get('retry-after')).toBeNull();
    expect(t.upstream.received).toHaveLength(0);
  });

  it('the messages envelope carries budget rejections as permission_error with metadata', async () => {
    const g = await start(budgets({ person: 10, keyg: 10, wsLife: 10, wsMonth: 10, team: 0.1 }));
    await credit(g, 100);
    await spent(g, g.keyRecord.id, 0.2);
    const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(403);
    expect(r.json.error).toMatchObject({ type: 'permission_error', error_type: 'permission_denied' });
    expect(r.json.metadata).toMatchObject({ limit_source: 'gateway_guardrail_budget', scope: 'workspace_default_member', limit_usd: 0.1 });
  });

  it('free models skip budgets', async () => {
    const g = await start(budgets({ team: 0 }));
    const r = await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/free:free' }));
    expect(r.status).toBe(200);
  });
});

describe('credits and the in-flight budget', () => {
  it('a paid request needs a positive balance; a negative balance blocks free models too (402 gateway_credits)', async () => {
    const g = await start();
    let r = await post(`${g.url}/chat/completions`, g.key, chat());
    expect(r.status).toBe(402);
    expect(r.json.error).toEqual({
      code: 402,
      message: 'Insufficient credits; add credits to continue: balance $0.00',
      metadata: { error_type: 'payment_required', limit_source: 'gateway_credits', reason: 'insufficient_credits', remedy_hint: expect.stringContaining('credits add') },
    });
    expect(r.headers.get('retry-after')).toBeNull();
    expect((await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/free:free' }))).status).toBe(200);
    await spent(g, g.keyRecord.id, 0.5);
    g.gateway.spend.forgetAccount(g.keyRecord.accountId);
    r = await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/free:free' }));
    expect(r.status).toBe(402);
    expect(r.json.error.message).toMatch(/balance \$-0\.50$/);
    await credit(g, 1);
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
  });

  it('invoice-billed accounts are not held to the balance', async () => {
    const g = await start('accounts:\n  - { name: default, billing: invoice }\n');
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
  });

  it('holds at most fraction × balance in flight: the rest get a transient 402 with Retry-After; too big a request gets weight_exceeds_budget', async () => {
    const g = await start('spend: { in_flight: { fraction: 0.5, ceiling_usd: 1, retry_after_s: 3 } }\n');
    const est = estimate(chat(), g.gateway.runtime().services.models, 4096);
    // Room for exactly 10 estimates in flight.
    await credit(g, (2 * 10 * toNano(est.usd)) / 1e9);
    const release = holdUpstream();
    const inflight = Array.from({ length: 10 }, () => post(`${g.url}/chat/completions`, g.key, chat()));
    await expect.poll(() => t.upstream.received.length).toBe(10);
    const r = await post(`${g.url}/chat/completions`, g.key, chat());
    expect(r.status).toBe(402);
    expect(r.headers.get('retry-after')).toBe('3');
    expect(r.json.error.metadata).toEqual({
      error_type: 'payment_required',
      limit_source: 'gateway_in_flight_budget',
      reason: 'in_flight_budget_exhausted',
      remedy_hint: expect.any(String),
    });
    const big = await post(`${g.url}/chat/completions`, g.key, chat({ max_tokens: 100_000 }));
    expect(big.status).toBe(402);
    expect(big.headers.get('retry-after')).toBeNull();
    expect(big.json.error.metadata).toMatchObject({ limit_source: 'gateway_credits', reason: 'weight_exceeds_budget' });
    release();
    expect((await Promise.all(inflight)).map((x) => x.status)).toEqual(Array(10).fill(200));
    // Settled holds turn into the actual (smaller) cost for the settlement window, then lapse.
    const held = await g.gateway.state.held(`account:${g.keyRecord.accountId}`, g.gateway.spend.clock());
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThan(10 * toNano(est.usd));
    expect(await g.gateway.state.held(`account:${g.keyRecord.accountId}`, g.gateway.spend.clock() + 5001)).toBe(0);
  });

  it('accounts at or above the threshold are not subject to the in-flight budget', async () => {
    const g = await start('spend: { in_flight: { applies_below_balance_usd: 50 } }\n');
    await credit(g, 50);
    const big = await post(`${g.url}/chat/completions`, g.key, chat({ max_tokens: 100_000 }));
    expect(big.status).toBe(200);
  });
});

describe('a stage after budget-check that changes the model', () => {
  // A router (or the web stage's `:online`) placed after budget-check: the checks saw a model this gateway does
  // not have (`auto`), held nothing and let routing answer it 404, and the router then chose a paid model.
  const routed = (extra = '') =>
    t.start({ yaml: testConfigYaml(t.upstream.url, '[auth, validate, rate-limit, budget-check, auto-router, upstream]') + `plugins:\n  auto-router: { allowed_models: ['fake/gpt'] }\n${extra}` });
  const auto = (g: TestGateway, secret: string) => post(`${g.url}/chat/completions`, secret, chat({ model: 'auto' }));

  it('the checks run again for the chosen model: a negative balance refuses it (402), as it does the model named', async () => {
    const g = await routed();
    await credit(g, -5);
    const r = await auto(g, g.key);
    expect(r.status).toBe(402);
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_credits', reason: 'insufficient_credits' });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('a key limit counts it: the request that spends the limit is served, the next refused (403)', async () => {
    const g = await routed();
    await credit(g, 100);
    // One answer of the fake upstream costs $0.00002 (10 prompt and 5 completion tokens at $1 and $2 per 1M).
    const { secret, record } = await g.createKey({ limitUsd: 0.00001, limitReset: 'daily', name: 'routed' });
    const ok = await auto(g, secret);
    expect(ok.status).toBe(200);
    expect(ok.json.model).toBe('fake/gpt');
    await expect.poll(() => g.gateway.state.held(`key:${record.id}`, g.gateway.spend.clock())).toBe(0);
    const r = await auto(g, secret);
    expect(r.status).toBe(403);
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', scope: 'key_limit' });
    expect(t.upstream.received).toHaveLength(1);
  });
});

describe('holds and windows', () => {
  it('a crashed process’s hold blocks until its TTL, then lapses', async () => {
    let now = Date.now();
    const g = await start('spend: { hold_ttl_ms: 60000 }\n', () => now);
    await credit(g, 100);
    const a = await g.createKey({ limitUsd: 1, limitReset: 'daily' });
    await post(`${g.url}/chat/completions`, a.secret, chat()); // creates the counter
    // Another gateway process held the whole limit, then died without settling.
    const counter = `key:${a.record.id}:daily:${Date.UTC(new Date(now).getUTCFullYear(), new Date(now).getUTCMonth(), new Date(now).getUTCDate())}`;
    await g.gateway.state.reserve({
      holdId: 'crashed', now, lines: [{ counter, group: `key:${a.record.id}`, limitNano: 10e9, includeByok: false }],
      balanceBlocked: false, estimateNano: 1e9, holdUntil: now + 60_000, inFlight: null,
    });
    expect((await post(`${g.url}/chat/completions`, a.secret, chat())).status).toBe(403);
    now += 60_000;
    expect((await post(`${g.url}/chat/completions`, a.secret, chat())).status).toBe(200);
  });

  it('a request running past midnight is dated when it was admitted: its ledger row and its counted cost are in the same window', async () => {
    const today = new Date();
    let now = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate(), 23, 59, 50);
    const g = await start('', () => now);
    await credit(g, 100);
    const a = await g.createKey({ limitUsd: 1, limitReset: 'daily' });
    const release = holdUpstream();
    const before = t.upstream.received.length;
    const running = post(`${g.url}/chat/completions`, a.secret, chat());
    // Admitted and waiting at the provider: the fake has its request.
    while (t.upstream.received.length === before) await new Promise((r) => setTimeout(r, 5));
    now += 20_000; // past midnight
    release();
    const res = await running;
    expect(res.status).toBe(200);
    const row = await g.ledgerRow(res.json.id);
    expect(row!.createdAt < new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() + 1)).toISOString()).toBe(true);
    // Today's figures (GET /key reads the ledger) hold nothing of it, as today's counter does not.
    const info = await keyInfo(g, a.secret);
    expect(info.data.usage_daily).toBe(0);
  });

  it('a daily key limit resets at 00:00 UTC (injected clock)', async () => {
    const today = new Date();
    let now = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate(), 23, 59, 30);
    const g = await start('', () => now);
    await credit(g, 100);
    const a = await g.createKey({ limitUsd: 0.1, limitReset: 'daily' });
    await spent(g, a.record.id, 0.1);
    let r = await post(`${g.url}/chat/completions`, a.secret, chat());
    expect(r.status).toBe(403);
    const midnight = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() + 1);
    expect(r.json.error.metadata.resets_at).toBe(new Date(midnight).toISOString());
    now = midnight;
    r = await post(`${g.url}/chat/completions`, a.secret, chat());
    expect(r.status).toBe(200);
    const info = await keyInfo(g, a.secret);
    expect(info.data.limit_remaining).toBeGreaterThan(0.09);
    expect(info.data.effective_budget.resets_at).toBe(new Date(midnight + 86_400_000).toISOString());
  });
});

describe('shared state unreachable', () => {
  it('fails closed: 503 with Retry-After, a typed error in both envelopes, nothing sent upstream', async () => {
    // With nothing to check, no state is read; a key rate limit makes every request need it.
    const g = await start("state: { driver: redis, url: 'redis://127.0.0.1:1', command_timeout_ms: 200 }\nrate_limits: { key: { requests: 100 } }\n");
    await credit(g, 100);
    const r = await post(`${g.url}/chat/completions`, g.key, chat());
    expect(r.status).toBe(503);
    expect(r.headers.get('retry-after')).toBe('1');
    expect(r.json.error).toEqual({ code: 503, message: 'Internal server error', metadata: { error_type: 'server' } });
    const m = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    expect(m.status).toBe(503);
    expect(m.json.error).toMatchObject({ type: 'api_error', error_type: 'server' });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('a reserve whose reply was lost (it ran, then timed out) has its hold released, not left to block spend until the hold TTL', async () => {
    const g = await start();
    const { secret, record } = await g.createKey({ limitUsd: 1 });
    await credit(g, 100);
    const state = g.gateway.state;
    const reserve = state.reserve.bind(state);
    let lose = 1;
    state.reserve = async (input) => {
      const r = await reserve(input);
      if (r.ok && lose-- > 0) throw new Error('Command timed out');
      return r;
    };
    const r = await post(`${g.url}/chat/completions`, secret, chat());
    expect(r.status).toBe(503);
    expect(t.upstream.received).toHaveLength(0);
    for (let i = 0; i < 100 && (await state.held(`key:${record.id}`, Date.now())) > 0; i++) await new Promise((res) => setTimeout(res, 10));
    expect(await state.held(`key:${record.id}`, Date.now())).toBe(0);
    expect(g.gateway.spend.pendingSettlements()).toBe(0);
    expect((await post(`${g.url}/chat/completions`, secret, chat())).status).toBe(200);
  });
});

describe('rate limits', () => {
  it('per key: the request over the limit gets 429 with X-RateLimit-* and Retry-After; successes carry none', async () => {
    const now = Date.UTC(2026, 10, 22, 10, 0, 10);
    const g = await start('rate_limits: { key: { requests: 2, window_s: 60 } }\naccounts:\n  - { name: default, billing: invoice }\n', () => now);
    for (let i = 0; i < 2; i++) {
      const ok = await post(`${g.url}/chat/completions`, g.key, chat());
      expect(ok.status).toBe(200);
      expect([...ok.headers.keys()].filter((h) => h.startsWith('x-ratelimit'))).toEqual([]);
    }
    const r = await post(`${g.url}/chat/completions`, g.key, chat());
    expect(r.status).toBe(429);
    expect(r.headers.get('x-ratelimit-limit')).toBe('2');
    expect(r.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(r.headers.get('x-ratelimit-reset')).toBe(String(Date.UTC(2026, 10, 22, 10, 1)));
    expect(r.headers.get('retry-after')).toBe('50');
    expect(r.json.error).toMatchObject({ code: 429, metadata: { error_type: 'rate_limit_exceeded', scope: 'key', limit: 2 } });
    // Another key has its own window.
    const other = await g.createKey();
    expect((await post(`${g.url}/chat/completions`, other.secret, chat())).status).toBe(200);
    const m = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    expect(m.status).toBe(429);
    expect(m.json.error).toMatchObject({ type: 'rate_limit_error', error_type: 'rate_limit_exceeded' });
  });

  it('per model: two limits on one model whose windows start together count apart (1 s and 10 s)', async () => {
    let now = Date.UTC(2026, 10, 22, 10, 0, 10);
    const g = await start(
      'rate_limits: { models: [{ model: fake/gpt, requests: 100, window_s: 1, per: key }, { model: fake/gpt, requests: 3, window_s: 10, per: key }] }\naccounts:\n  - { name: default, billing: invoice }\n',
      () => now,
    );
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    now += 1000; // a new 1 s window, the same 10 s one
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    const r = await post(`${g.url}/chat/completions`, g.key, chat());
    expect(r.status).toBe(429);
    expect(r.json.error.metadata).toMatchObject({ scope: 'model', limit: 3 });
  });

  it('per model: global across keys', async () => {
    const g = await start('rate_limits: { models: [{ model: fake/gpt, requests: 1 }] }\naccounts:\n  - { name: default, billing: invoice }\n');
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    const other = await g.createKey();
    const r = await post(`${g.url}/chat/completions`, other.secret, chat());
    expect(r.status).toBe(429);
    expect(r.json.error.metadata).toMatchObject({ scope: 'model' });
    expect((await post(`${g.url}/chat/completions`, other.secret, chat({ model: 'fake/failover' }))).status).not.toBe(429);
    // A name this gateway does not have, put first, does not stand in for the model that serves (it passed every limit).
    const dodge = await post(`${g.url}/chat/completions`, other.secret, chat({ model: 'no/such', models: ['fake/gpt'] }));
    expect(dodge.status).toBe(429);
    expect(dodge.json.error.metadata).toMatchObject({ scope: 'model' });
  });

  it('free models: an unknown first model does not lift the per-minute limit', async () => {
    const now = Date.UTC(2026, 10, 22, 10, 0, 0);
    const g = await start('free_models: { per_minute: 2, daily_requests: 50, daily_requests_purchased: 50, purchase_threshold_usd: 10 }\n', () => now);
    const free = () => post(`${g.url}/chat/completions`, g.key, chat({ model: 'no/such', models: ['fake/free:free'] }));
    expect((await free()).status).toBe(200);
    expect((await free()).status).toBe(200);
    const third = await free();
    expect(third.status).toBe(429);
    expect(third.json.error.metadata.scope).toBe('free_model_per_minute');
  });

  it('free models: per-minute limit, and a daily tier chosen by credits purchased (GET /key reports it)', async () => {
    let now = Date.UTC(2026, 10, 22, 10, 0, 0);
    const g = await start('free_models: { per_minute: 2, daily_requests: 3, daily_requests_purchased: 5, purchase_threshold_usd: 10 }\n', () => now);
    const free = () => post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/free:free' }));
    expect((await free()).status).toBe(200);
    expect((await free()).status).toBe(200);
    const minute = await free();
    expect(minute.status).toBe(429);
    expect(minute.json.error.metadata.scope).toBe('free_model_per_minute');
    now += 60_000;
    expect((await free()).status).toBe(200);
    now += 60_000;
    const day = await free();
    expect(day.status).toBe(429);
    expect(day.json.error.metadata.scope).toBe('free_model_daily');
    expect(day.headers.get('x-ratelimit-reset')).toBe(String(Date.UTC(2026, 10, 23)));
    let info = await keyInfo(g, g.key);
    expect(info.data.free_model_daily_requests).toEqual({ limit: 3, remaining: 0, used: 3 });
    expect(info.data.is_free_tier).toBe(true);
    // One credit below the threshold is enough for the higher tier.
    await g.store.addCredits(g.keyRecord.accountId, 9);
    g.gateway.spend.forgetAccount(g.keyRecord.accountId);
    expect((await free()).status).toBe(200);
    info = await keyInfo(g, g.key);
    expect(info.data.free_model_daily_requests).toEqual({ limit: 5, remaining: 1, used: 4 });
    expect(info.data.is_free_tier).toBe(false);
  });

  it.each(['invoice', 'enterprise', 'subscription'])('GET /key: an account with `billing: %s` (billed outside the gateway) is not free tier', async (billing) => {
    const g = await start(`accounts:\n  - { name: default, billing: ${billing} }\n`);
    const info = await keyInfo(g, g.key);
    expect(info.data.is_free_tier).toBe(false);
    // The free-model tier is still chosen by credits purchased (spec 8.3.2: independent of is_free_tier).
    expect(info.data.free_model_daily_requests.limit).toBe(g.config.free_models.daily_requests);
  });

  it('the free daily quota counts requests a free model served: refused ones (balance, unknown model) are taken back', async () => {
    const g = await start('free_models: { per_minute: 100, daily_requests: 2 }\n');
    await credit(g, -1); // a negative balance refuses free models too (402)
    const free = (model = 'fake/free:free') => post(`${g.url}/chat/completions`, g.key, chat({ model }));
    for (let i = 0; i < 3; i++) expect((await free()).status).toBe(402);
    for (let i = 0; i < 3; i++) expect((await free('nope/unknown:free')).status).toBe(404);
    let info = await keyInfo(g, g.key);
    expect(info.data.free_model_daily_requests).toEqual({ limit: 2, remaining: 2, used: 0 });
    await credit(g, 2);
    expect((await free()).status).toBe(200);
    expect((await free()).status).toBe(200);
    const third = await free();
    expect(third.status).toBe(429);
    expect(third.json.error.metadata.scope).toBe('free_model_daily');
    info = await keyInfo(g, g.key);
    expect(info.data.free_model_daily_requests).toEqual({ limit: 2, remaining: 0, used: 2 });
    // What it is rebuilt from when the state loses it: today's ledger rows of free models.
    await g.gateway.ledger.flush();
    expect(await g.store.countFreeModelRequests(g.keyRecord.accountId, Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate()))).toBe(2);
  });

  it('the free daily counter is rebuilt from the ledger when the state lost it', async () => {
    const g = await start('free_models: { daily_requests: 2 }\n');
    await spent(g, g.keyRecord.id, 0, { model: 'fake/free:free' });
    await spent(g, g.keyRecord.id, 0, { model: 'fake/free:free' });
    const r = await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/free:free' }));
    expect(r.status).toBe(429);
    expect(r.json.error.metadata.scope).toBe('free_model_daily');
  });
});
