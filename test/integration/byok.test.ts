import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { byokContext, maskProviderKey, sealProviderKey } from '../../src/auth/byok-seal';
import { perTestGateways } from '../fixtures/per-test';
import { post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { journalSpy } from '../fixtures/journal-spy';

/**
 * BYOK: a workspace's own provider keys, stored sealed, are what the upstream receives; such requests are
 * flagged `is_byok`, recorded but not debited, and exempt from the in-flight budget and from budgets that
 * do not count BYOK spend (spec 2.1, 8.2.4).
 */

const PIPELINE = '[auth, validate, rate-limit, budget-check, upstream]';
const ENCRYPTION_KEY = randomBytes(32);
const OWN_OPENAI = `sk-own-openai-${randomBytes(12).toString('hex')}`;
const OWN_ANTHROPIC = `sk-ant-own-${randomBytes(12).toString('hex')}`;
const META = { 'x-gateway-metadata': 'enabled' };

const chat = (over: Record<string, unknown> = {}) => ({ model: 'fake/gpt', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], ...over });
const message = (over: Record<string, unknown> = {}) => ({ model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], ...over });

const t = perTestGateways();

/** A gateway with the spend stages, the encryption key configured (unless `encryption: false`), and credit. */
async function start(o: { extra?: string; models?: string; encryption?: boolean; credit?: number; level?: string; pipeline?: string } = {}): Promise<TestGateway> {
  const byok = o.encryption === false ? '' : `byok: { encryption_key: ${ENCRYPTION_KEY.toString('base64')} }\n`;
  const base = testConfigYaml(t.upstream.url, o.pipeline ?? PIPELINE)
    .replace('logging: { level: info }', `logging: { level: ${o.level ?? 'info'} }`)
    .replace('pipelines:', `${o.models ?? ''}pipelines:`);
  const g = await t.start({ yaml: base + byok + (o.extra ?? '') });
  await g.store.addCredits(g.keyRecord.accountId, o.credit ?? 10);
  return g;
}

/** Stores a workspace's provider key as `gateway byok set` does. */
function storeOwnKey(g: TestGateway, provider: string, plaintext: string, workspaceId = g.keyRecord.workspaceId) {
  const secret = sealProviderKey(plaintext, ENCRYPTION_KEY, byokContext(workspaceId, provider));
  return g.store.putByokKey({ workspaceId, provider, secret, label: maskProviderKey(plaintext) });
}

/** A key in a second workspace of the same account, which has no provider keys of its own. */
async function otherWorkspaceKey(g: TestGateway) {
  const ws = await g.store.ensureWorkspace('other', g.keyRecord.accountId);
  return g.createKey({ workspaceId: ws.id, name: 'other' });
}

async function balance(g: TestGateway): Promise<number> {
  await g.gateway.ledger.flush();
  return (await g.store.findAccount(g.keyRecord.accountId))!.balanceUsd;
}

async function keyInfo(g: TestGateway, secret: string): Promise<any> {
  await g.gateway.ledger.flush();
  const res = await fetch(`${g.url}/key`, { headers: { authorization: `Bearer ${secret}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: any }).data;
}

describe('requests with a workspace provider key', () => {
  it('chat (openai kind): the upstream gets the workspace key; is_byok everywhere; recorded, not debited; byok_usage', async () => {
    const g = await start();
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    const r = await post(`${g.url}/chat/completions`, g.key, chat(), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received).toHaveLength(1);
    expect(t.upstream.received[0].headers.authorization).toBe(`Bearer ${OWN_OPENAI}`);
    expect(r.json.gateway_metadata).toMatchObject({ is_byok: true, endpoints: { available: [{ provider: 'fake-openai', selected: true }] } });
    expect(r.json.usage).toMatchObject({ is_byok: true, cost: expect.any(Number) });
    const cost = r.json.usage.cost as number;
    expect(cost).toBeGreaterThan(0);
    const row = await g.ledgerRow(r.json.id);
    expect(row).toMatchObject({ isByok: true, provider: 'fake-openai', costUsd: cost });
    expect(await balance(g)).toBe(10);
    const info = await keyInfo(g, g.key);
    expect(info.byok_usage).toBeCloseTo(cost, 12);
    expect(info.byok_usage_daily).toBeCloseTo(cost, 12);
    expect(info.usage).toBe(0);
  });

  it('messages (anthropic kind), JSON and streamed: the upstream gets the workspace key in x-api-key', async () => {
    const g = await start();
    await storeOwnKey(g, 'fake-anthropic', OWN_ANTHROPIC);
    const r = await post(`${g.url}/messages`, g.key, message(), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].headers['x-api-key']).toBe(OWN_ANTHROPIC);
    expect(t.upstream.received[0].headers.authorization).toBeUndefined();
    expect(r.json.gateway_metadata).toMatchObject({ is_byok: true });
    expect(r.json.usage.is_byok).toBe(true);
    const s = await post(`${g.url}/messages`, g.key, message({ stream: true }), META);
    expect(s.status).toBe(200);
    expect(t.upstream.received[1].headers['x-api-key']).toBe(OWN_ANTHROPIC);
    const start_ = JSON.parse(sseEvents(s.text).find((e) => e.event === 'message_start')!.data);
    expect(start_.message.gateway_metadata).toMatchObject({ is_byok: true });
    const rows = await Promise.all([g.ledgerRow(r.json.id), g.ledgerRow(start_.message.id)]);
    expect(rows.map((x) => x?.isByok)).toEqual([true, true]);
    expect(await balance(g)).toBe(10);
  });

  it('a chat stream: the workspace key upstream, is_byok in the metadata chunk and the usage chunk', async () => {
    const g = await start();
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    const r = await post(`${g.url}/chat/completions`, g.key, chat({ stream: true, stream_options: { include_usage: true } }), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].headers.authorization).toBe(`Bearer ${OWN_OPENAI}`);
    const chunks = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chunks[0].gateway_metadata).toMatchObject({ is_byok: true });
    expect(chunks.at(-1).usage).toMatchObject({ is_byok: true });
    expect((await g.ledgerRow(chunks[0].id))?.isByok).toBe(true);
  });

  it('a workspace without a key uses the operator key, is not flagged, and is debited', async () => {
    const g = await start();
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    const other = await otherWorkspaceKey(g);
    const r = await post(`${g.url}/chat/completions`, other.secret, chat(), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].headers.authorization).toBe('Bearer sk-upstream-openai-secret');
    expect(r.json.gateway_metadata.is_byok).toBe(false);
    expect(r.json.usage.is_byok).toBe(false);
    expect((await g.ledgerRow(r.json.id))?.isByok).toBe(false);
    expect(await balance(g)).toBeCloseTo(10 - r.json.usage.cost, 12);
    const info = await keyInfo(g, other.secret);
    expect(info.byok_usage).toBe(0);
    expect(info.usage).toBeCloseTo(r.json.usage.cost, 12);
    // The workspace's key is for fake-openai only: its anthropic requests use the operator key.
    const m = await post(`${g.url}/messages`, g.key, message(), META);
    expect(t.upstream.received[1].headers['x-api-key']).toBe('sk-upstream-anthropic-secret');
    expect(m.json.gateway_metadata.is_byok).toBe(false);
  });

  it("a workspace key the provider refuses (401) or limits (429) does not count against the endpoint's shared health (one tenant opened the breaker for all)", async () => {
    const g = await start();
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    for (const status of [401, 429, 401, 429]) {
      t.upstream.scripts.set('gpt-upstream', [{ kind: 'status', status }]);
      await post(`${g.url}/chat/completions`, g.key, chat());
    }
    // A stream the provider ends with a rate limit of that key after its answer began: the same.
    const limited = `data: ${JSON.stringify({ error: { code: 429, message: 'Rate limit reached for your organization' } })}\n\n`;
    const began = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt-upstream', choices: [{ index: 0, delta: { content: 'Hel' }, finish_reason: null }] })}\n\n`;
    for (let i = 0; i < 3; i++) {
      t.upstream.scripts.set('gpt-upstream', [{ kind: 'raw-stream', text: began + limited }]);
      const r = await post(`${g.url}/chat/completions`, g.key, chat({ stream: true }));
      expect(r.text).toContain('"error_type":"rate_limit_exceeded"');
    }
    expect(g.gateway.health.snapshot()['fake-openai/gpt-upstream']?.failures ?? 0).toBe(0);
    expect(g.gateway.health.state('fake-openai/gpt-upstream')).toBe('closed');
    // The operator's own key refused is the endpoint's failure, as before.
    const other = await otherWorkspaceKey(g);
    for (let i = 0; i < 3; i++) {
      t.upstream.scripts.set('gpt-upstream', [{ kind: 'status', status: 401 }]);
      await post(`${g.url}/chat/completions`, other.secret, chat());
    }
    expect(g.gateway.health.state('fake-openai/gpt-upstream')).toBe('open');
  });

  it('under sort latency, an endpoint that failed on the workspace key is no longer taken for unmeasured: the next request goes to the measured one first', async () => {
    // fake-openai (called with the workspace key, which the provider refuses) first, then fake-anthropic.
    const models = `  - id: byok/pair
    endpoints:
      - { provider: fake-openai, upstream_model: gpt-upstream, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-anthropic, upstream_model: claude-upstream, pricing: { prompt: 1, completion: 2 } }
`;
    const g = await start({ models });
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    t.upstream.always.set('gpt-upstream', { kind: 'status', status: 401 });
    const ask = () => post(`${g.url}/chat/completions`, g.key, chat({ model: 'byok/pair', provider: { sort: 'latency' } }));
    const n = t.upstream.received.length;
    expect((await ask()).json.provider).toBe('fake-anthropic');
    expect((await ask()).json.provider).toBe('fake-anthropic');
    // The first request tried the workspace key and measured the other endpoint; the second went to that one
    // (it had tried the refused key first on every request: never measured, it stayed "unmeasured" for good).
    expect(t.upstream.received.slice(n).map((r) => r.body.model)).toEqual(['gpt-upstream', 'claude-upstream', 'claude-upstream']);
  });

  it('a failover is flagged by the endpoint that answered', async () => {
    const g = await start();
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    // fake/failover: dead-openai (no workspace key, unreachable) first, then fake-openai.
    const r = await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/failover' }), META);
    expect(r.status).toBe(200);
    expect(r.json.gateway_metadata).toMatchObject({ attempt: 2, is_byok: true });
    expect(t.upstream.received[0].headers.authorization).toBe(`Bearer ${OWN_OPENAI}`);
  });

  it('a key stored or deleted while the gateway runs takes effect within seconds', async () => {
    const g = await start();
    expect((await post(`${g.url}/chat/completions`, g.key, chat(), META)).json.gateway_metadata.is_byok).toBe(false);
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    await expect.poll(async () => (await post(`${g.url}/chat/completions`, g.key, chat(), META)).json.gateway_metadata.is_byok, { timeout: 8000, interval: 250 }).toBe(true);
    await g.store.deleteByokKey(g.keyRecord.workspaceId, 'fake-openai');
    await expect.poll(async () => (await post(`${g.url}/chat/completions`, g.key, chat(), META)).json.gateway_metadata.is_byok, { timeout: 8000, interval: 250 }).toBe(false);
    expect(t.upstream.received.at(-1)!.headers.authorization).toBe('Bearer sk-upstream-openai-secret');
  }, 30_000);
});

describe('spend checks of BYOK requests', () => {
  it('a key limit counts BYOK spend only with include_byok_in_limit', async () => {
    const g = await start();
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    const counted = await g.createKey({ name: 'counted', limitUsd: 0.00001, limitReset: 'monthly', includeByokInLimit: true });
    const exempt = await g.createKey({ name: 'exempt', limitUsd: 0.00001, limitReset: 'monthly' });
    // One request costs more than the limit: the first is admitted, and its BYOK spend then spends the limit.
    expect((await post(`${g.url}/chat/completions`, counted.secret, chat())).status).toBe(200);
    await g.gateway.ledger.flush();
    const refused = await post(`${g.url}/chat/completions`, counted.secret, chat());
    expect(refused.status).toBe(403);
    expect(refused.json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', scope: 'key_limit', limit_usd: 0.00001 });
    expect(t.upstream.received).toHaveLength(1);
    for (let i = 0; i < 3; i++) expect((await post(`${g.url}/chat/completions`, exempt.secret, chat())).status).toBe(200);
    const info = await keyInfo(g, counted.secret);
    expect(info.include_byok_in_limit).toBe(true);
    expect(info.byok_usage).toBeGreaterThan(0.00001);
    // Limit minus spend (spec 2.1): negative, the one admitted request overran it.
    expect(info.limit_remaining).toBeCloseTo(0.00001 - info.byok_usage, 6);
    expect(info.limit_remaining).toBeLessThan(0);
    expect((await keyInfo(g, exempt.secret)).limit_remaining).toBe(0.00001);
    // fake/claude has no workspace key: paid spend, which the exempt key's limit counts as usual...
    expect((await post(`${g.url}/chat/completions`, exempt.secret, chat({ model: 'fake/claude' }))).status).toBe(200);
    await g.gateway.ledger.flush();
    expect((await post(`${g.url}/chat/completions`, exempt.secret, chat({ model: 'fake/claude' }))).status).toBe(403);
    // ...but a limit that never counts BYOK spend does not apply to a BYOK-only request, even when spent.
    const own = await post(`${g.url}/chat/completions`, exempt.secret, chat(), META);
    expect(own.status).toBe(200);
    expect(own.json.gateway_metadata.is_byok).toBe(true);
  });

  it('workspace budgets without include_byok do not apply to BYOK-only requests; those with it do', async () => {
    const budgets = (includeByok: boolean) => `
workspaces:
  - name: default
    budgets: [{ id: ws-cap, limit_usd: 0.00001, reset_interval: daily, include_byok: ${includeByok} }]
`;
    let g = await start({ extra: budgets(false) });
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    // Paid spend (fake/claude has no workspace key) spends the budget for paid requests...
    expect((await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/claude' }))).status).toBe(200);
    await g.gateway.ledger.flush();
    expect((await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/claude' }))).status).toBe(403);
    // ...not for BYOK-only ones.
    for (let i = 0; i < 3; i++) expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    await g.close();
    t.release();
    g = await start({ extra: budgets(true) });
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    await g.gateway.ledger.flush();
    const r = await post(`${g.url}/chat/completions`, g.key, chat());
    expect(r.status).toBe(403);
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_workspace_budget', scope: 'workspace' });
  });

  it('the in-flight budget does not hold requests served only with own keys; a partly-own request is held', async () => {
    // Balance 0.001 → at most 0.0005 in flight; max_tokens 100000 at $2/M completion is a $0.2 estimate.
    const g = await start({ extra: 'spend: { in_flight: { fraction: 0.5, ceiling_usd: 1 } }\n', credit: 0.001 });
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    const big = { max_tokens: 100_000 };
    const own = await post(`${g.url}/chat/completions`, g.key, chat(big), META);
    expect(own.status).toBe(200);
    expect(own.json.gateway_metadata.is_byok).toBe(true);
    expect(await g.gateway.state.held(`account:${g.keyRecord.accountId}`, g.gateway.spend.clock())).toBe(0);
    const other = await otherWorkspaceKey(g);
    const paid = await post(`${g.url}/chat/completions`, other.secret, chat(big));
    expect(paid.status).toBe(402);
    expect(paid.json.error.metadata).toMatchObject({ reason: 'weight_exceeds_budget' });
    // fake/failover may be served by dead-openai, which has no workspace key: not BYOK-only.
    const partly = await post(`${g.url}/chat/completions`, g.key, chat({ ...big, model: 'fake/failover' }));
    expect(partly.status).toBe(402);
    expect(partly.json.error.metadata).toMatchObject({ reason: 'weight_exceeds_budget' });
  });
});

describe('a request whose upstream calls are served both ways (fusion)', () => {
  // f/a and the judge on fake-openai, f/c on fake-anthropic, priced alike.
  const FUSION = `
  - id: f/a
    endpoints: [{ provider: fake-openai, upstream_model: up-a, pricing: { prompt: 1, completion: 2 } }]
  - id: f/c
    endpoints: [{ provider: fake-anthropic, upstream_model: up-c, pricing: { prompt: 1, completion: 2 } }]
  - id: f/judge
    endpoints: [{ provider: fake-openai, upstream_model: up-judge, pricing: { prompt: 1, completion: 2 } }]
`;
  const fused = () =>
    start({
      models: FUSION,
      pipeline: `[auth, validate, rate-limit, budget-check, fusion, upstream]`,
      extra: 'plugins:\n  fusion: { models: [f/a, f/c], judge: f/judge }\n',
    });
  const ask = (g: TestGateway) => post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: [{ role: 'user', content: 'hi' }] });

  it("the calls made with the operator's keys are debited, those made with the workspace's are not, whichever the judge used", async () => {
    for (const own of [['fake-openai', OWN_OPENAI], ['fake-anthropic', OWN_ANTHROPIC]] as const) {
      const g = await fused();
      await storeOwnKey(g, own[0], own[1]);
      const r = await ask(g);
      expect(r.status).toBe(200);
      const total = r.json.usage.cost as number;
      // Three calls (f/a, f/c, the judge) of the same price: f/c is the odd one out.
      const oneCall = total / 3;
      const ownCalls = own[0] === 'fake-openai' ? 2 : 1;
      const info = await keyInfo(g, g.key);
      expect(info.byok_usage).toBeCloseTo(ownCalls * oneCall, 12);
      expect(info.usage).toBeCloseTo((3 - ownCalls) * oneCall, 12);
      expect(await balance(g)).toBeCloseTo(10 - (3 - ownCalls) * oneCall, 12);
      await g.close();
      t.release();
    }
  });

  it('its one journal entry has the generation id of its rows: a sweep that finalised it (a kill leaves the same) is replaced by the paid row, and the -byok row is written with it', async () => {
    const g = await fused();
    await storeOwnKey(g, 'fake-anthropic', OWN_ANTHROPIC);
    // The ledger rows stay in the writer, as in a process killed before its batch was written.
    const { journaled, writerBack } = journalSpy(g.store);
    const r = await ask(g);
    expect(r.status).toBe(200);
    const id = r.json.id as string;
    // One entry (the candidates had each written one, all but one left behind), under the answer's id.
    expect(journaled).toEqual([id]);
    // Another process's sweep after the hold TTL: the request's own id as `interrupted` (it had been a
    // candidate's, never replaced by the request's rows).
    expect(await g.store.finalizePendingLedger({ beforeMs: Date.now() + 1000, exceptOwner: 'another-process' })).toBe(1);
    expect(await g.store.getLedger(id)).toMatchObject({ status: 'interrupted', costUsd: 0 });
    writerBack();
    await g.gateway.ledger.flush();
    const total = r.json.usage.cost as number;
    const paid = await g.store.getLedger(id);
    const own = await g.store.getLedger(`${id}-byok`);
    expect(paid).toMatchObject({ status: 'completed', isByok: false });
    expect(own).toMatchObject({ status: 'completed', isByok: true });
    expect(paid!.costUsd + own!.costUsd).toBeCloseTo(total, 12);
    expect(own!.costUsd).toBeCloseTo(total / 3, 12);
    expect(await balance(g)).toBeCloseTo(10 - paid!.costUsd, 12);
    expect(await g.store.listPendingLedger()).toEqual([]);
  });
});

describe('secrecy and misconfiguration', () => {
  it('the workspace key appears in no log line, error or metadata, also when the provider refuses it', async () => {
    const g = await start({ level: 'trace' });
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    await storeOwnKey(g, 'fake-anthropic', OWN_ANTHROPIC);
    const ok = await post(`${g.url}/chat/completions`, g.key, chat(), META);
    t.upstream.faults.push({ kind: 'status', status: 401, body: { error: { message: 'Incorrect API key provided', type: 'invalid_request_error' } } });
    const refused = await post(`${g.url}/chat/completions`, g.key, chat(), META);
    // A refused workspace key is an upstream credential failure like the operator's: 502, provider_code 401.
    expect(refused.status).toBe(502);
    expect(refused.json.error.metadata).toMatchObject({ provider_name: 'fake-openai', provider_code: 401 });
    t.upstream.faults.push({ kind: 'status', status: 500 });
    const failed = await post(`${g.url}/messages`, g.key, message({ stream: true }), META);
    const stream = await post(`${g.url}/chat/completions`, g.key, chat({ stream: true, debug: { echo_upstream_body: true } }), META);
    await g.gateway.ledger.flush();
    const everything = [ok.text, refused.text, failed.text, stream.text, ...g.logs].join('\n');
    expect(g.logs.length).toBeGreaterThan(0);
    expect(everything).not.toContain(OWN_OPENAI);
    expect(everything).not.toContain(OWN_ANTHROPIC);
    expect(everything).not.toContain(OWN_OPENAI.slice(14));
    // The store holds only the sealed form and the masked label.
    const stored = await g.store.listByokKeys(g.keyRecord.workspaceId);
    expect(JSON.stringify(stored)).not.toContain(OWN_OPENAI.slice(14));
    expect(stored.map((k) => k.label).sort()).toEqual([maskProviderKey(OWN_ANTHROPIC), maskProviderKey(OWN_OPENAI)].sort());
  });

  it('without byok.encryption_key, stored keys are not used: operator keys, one warning for many requests', async () => {
    const g = await start({ encryption: false });
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    for (let i = 0; i < 4; i++) {
      const r = await post(`${g.url}/chat/completions`, g.key, chat(), META);
      expect(r.status).toBe(200);
      expect(r.json.gateway_metadata.is_byok).toBe(false);
    }
    expect(t.upstream.received.map((x) => x.headers.authorization)).toEqual(Array(4).fill('Bearer sk-upstream-openai-secret'));
    expect(g.logs.filter((l) => l.includes('byok.encryption_key is not set'))).toHaveLength(1);
  });
});

describe('BYOK and the free-model limits (spec 8.3.2)', () => {
  const FREE = `
  - id: fake/free:free
    endpoints: [{ provider: fake-openai, upstream_model: gpt-free, pricing: { prompt: 0, completion: 0 } }]
pipelines:`;

  it('requests served with the workspace key are not gated by the free-model daily or per-minute limit', async () => {
    const base = testConfigYaml(t.upstream.url, PIPELINE).replace('pipelines:', FREE);
    const g = await t.start({ yaml: `${base}byok: { encryption_key: ${ENCRYPTION_KEY.toString('base64')} }\nfree_models: { per_minute: 1, daily_requests: 1 }\n` });
    await storeOwnKey(g, 'fake-openai', OWN_OPENAI);
    const free = (key: string) => post(`${g.url}/chat/completions`, key, chat({ model: 'fake/free:free' }));
    for (let i = 0; i < 3; i++) expect((await free(g.key)).status).toBe(200);
    expect(t.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${OWN_OPENAI}`);
    // The same account from a workspace without its own key: gated, and the own-key requests did not count.
    const other = await otherWorkspaceKey(g);
    expect((await free(other.secret)).status).toBe(200);
    expect((await free(other.secret)).status).toBe(429);
    const info = (await (await fetch(`${g.url}/key`, { headers: { authorization: `Bearer ${other.secret}` } })).json()) as any;
    expect(info.data.free_model_daily_requests).toEqual({ limit: 1, remaining: 0, used: 1 });
  });
});
