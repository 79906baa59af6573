import { describe, expect, it } from 'vitest';
import { openStore } from '../../src/store';
import { addCost } from '../../src/spend/usage-sum';
import { post, startTestGateway, testConfigYaml } from '../fixtures/gateway';
import { spent } from '../fixtures/ledger';

describe('ledger batching', () => {
  it('writes rows off the request path and loses none on a graceful shutdown', async () => {
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    // A long flush interval: nothing is written until the batch fills or the gateway closes.
    const gw = await startTestGateway({ store, yaml: testConfigYaml() + 'ledger: { flush_ms: 10000, max_batch: 1000 }\n' });
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'sim/chat', messages: [{ role: 'user', content: `n${i}` }] });
      ids.push(res.json.id);
    }
    expect(gw.gateway.ledger.pending).toBe(20);
    expect(await store.getLedger(ids[0])).toBeNull();
    await gw.close();
    for (const id of ids) expect((await store.getLedger(id))?.status).toBe('completed');
    await store.close();
  });

  it('GET /key reads its own writes: usage includes requests that finished just before', async () => {
    const gw = await startTestGateway({ yaml: testConfigYaml() + 'ledger: { flush_ms: 10000, max_batch: 1000 }\n' });
    try {
      const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'sim/chat', messages: [{ role: 'user', content: 'x' }] });
      const key = (await (await fetch(`${gw.url}/key`, { headers: { authorization: `Bearer ${gw.key}` } })).json()) as any;
      expect(key.data.usage).toBeCloseTo(res.json.usage.cost, 12);
    } finally {
      await gw.close();
    }
  });

  it('summed costs carry no binary noise: GET /key usage and a multi-call answer (0.1 + 0.2 showed 0.30000000000000004)', async () => {
    expect(addCost([0.1, 0.2])).toBe(0.3);
    const gw = await startTestGateway();
    try {
      const k = await gw.createKey({ limitUsd: 1, limitReset: 'monthly' });
      for (const isByok of [false, true]) for (const usd of [0.1, 0.2]) await spent(gw, k.record.id, usd, { isByok });
      const { data } = (await (await fetch(`${gw.url}/key`, { headers: { authorization: `Bearer ${k.secret}` } })).json()) as any;
      for (const f of ['usage', 'usage_daily', 'usage_weekly', 'usage_monthly', 'byok_usage', 'byok_usage_daily', 'byok_usage_weekly', 'byok_usage_monthly']) expect(data[f], f).toBe(0.3);
      expect(data.budgets[0].spend_usd).toBe(0.3);
    } finally {
      await gw.close();
    }
  });
});
