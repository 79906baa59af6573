import { describe, expect, it } from 'vitest';
import { openStore } from '../../src/store';
import { post, startTestGateway, testConfigYaml } from '../fixtures/gateway';

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
});
