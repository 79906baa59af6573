import { describe, expect, it } from 'vitest';
import { testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();
const get = async (url: string, key: string) => {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, json: (await res.json()) as any };
};

const MODELS = `
  - id: p/cached
    endpoints: [{ provider: fake-anthropic, upstream_model: up-claude, pricing: { prompt: 3, completion: 15, cached_read: 0.3, cache_write: 3.75, cache_write_1h: 6 } }]
  - id: p/plain
    endpoints: [{ provider: fake-openai, upstream_model: up-gpt, pricing: { prompt: 1, completion: 2, request: 0.001 } }]
`;

describe('GET /models pricing', () => {
  it('lists the cache prices an endpoint sets, and only those', async () => {
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url).replace('pipelines:', `${MODELS}pipelines:`) });
    const res = await get(`${g.url}/models`, g.key);
    expect(res.status).toBe(200);
    const byId = new Map((res.json.data as { id: string; endpoints: { pricing: unknown }[] }[]).map((m) => [m.id, m]));
    expect(byId.get('p/cached')!.endpoints[0].pricing).toEqual({ prompt: 3, completion: 15, request: 0, cached_read: 0.3, cache_write: 3.75, cache_write_1h: 6 });
    expect(byId.get('p/plain')!.endpoints[0].pricing).toEqual({ prompt: 1, completion: 2, request: 0.001 });
    expect((await get(`${g.url}/models/p/cached`, g.key)).json.endpoints[0].pricing.cache_write_1h).toBe(6);
  });
});
