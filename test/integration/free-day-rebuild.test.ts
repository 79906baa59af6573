import { describe, expect, it } from 'vitest';
import { post, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const FREE_MODEL = `
  - id: fake/free:free
    endpoints: [{ provider: fake-openai, upstream_model: gpt-free, pricing: { prompt: 0, completion: 0 } }]
`;

const t = perTestGateways();

describe('the free-model daily counter across midnight', () => {
  it('a free request admitted before midnight and ending after it counts in the day it was admitted, not again in the next one rebuilt from the ledger', async () => {
    let now = Date.UTC(2026, 10, 22, 23, 59, 50);
    const yaml = testConfigYaml(t.upstream.url, '[auth, validate, rate-limit, budget-check, upstream]').replace('pipelines:', `${FREE_MODEL}pipelines:`);
    const g = await t.start({ yaml: `${yaml}free_models: { per_minute: 100, daily_requests: 1, daily_requests_purchased: 1 }\n`, clock: () => now });
    let release!: () => void;
    t.upstream.always.set('gpt-free', { kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const free = () => post(`${g.url}/chat/completions`, g.key, { model: 'fake/free:free', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    const late = free();
    await expect.poll(() => t.upstream.received.length).toBe(1);
    now = Date.UTC(2026, 10, 23, 0, 0, 10);
    release();
    const first = await late;
    expect(first.status).toBe(200);
    const row = await g.ledgerRow(first.json.id);
    expect(row?.createdAt).toBe(new Date(Date.UTC(2026, 10, 22, 23, 59, 50)).toISOString());
    // The new day's counter is built from the ledger: the late request is not in it, so the day's one request passes.
    expect((await free()).status).toBe(200);
    const next = await free();
    expect(next.status).toBe(429);
    expect(next.json.error.metadata.scope).toBe('free_model_daily');
  });
});
