import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteRedisKeys, REDIS_URL, uniquePrefix } from '../fixtures/backing';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway } from '../fixtures/gateway';

/** What the memory state admits, the Redis state admits too: the same requests on both drivers. */
const prefix = uniquePrefix('parity');
let upstream: FakeUpstream;

beforeAll(async () => {
  upstream = await startFakeUpstream();
});
afterAll(async () => {
  await upstream?.close();
  await deleteRedisKeys(prefix);
});

const yaml = (state: string) => `
server: { port: 0, watch_config: false }
storage: { driver: sqlite, path: ':memory:' }
state: ${state}
logging: { level: warn }
accounts:
  - { name: default, billing: invoice }
providers:
  - { id: fake-openai, kind: openai, base_url: ${upstream.url}, api_key: sk-upstream }
models:
  - id: fake/gpt
    endpoints: [{ provider: fake-openai, upstream_model: gpt-upstream, pricing: { prompt: 1, completion: 2000 } }]
pipelines:
  default: [auth, validate, budget-check, upstream]
`;

describe.each([
  { driver: 'memory', state: '{ driver: memory }' },
  { driver: 'redis', state: `{ driver: redis, url: '${REDIS_URL}', prefix: '${prefix}', command_timeout_ms: 2000 }` },
])('spend holds on the $driver state', ({ state }) => {
  it('a max_tokens whose estimate is past 2^53 nano-USD (9007199254740991, 1e20) is admitted under a key limit (Redis refused it: a 503, its INCRBY given 1.8e+22)', async () => {
    const g = await startTestGateway({ yaml: yaml(state) });
    try {
      const { secret } = await g.createKey({ limitUsd: 100 });
      for (const max_tokens of [2 ** 53 - 1, 1e20]) {
        const r = await post(`${g.url}/chat/completions`, secret, { model: 'fake/gpt', max_tokens, messages: [{ role: 'user', content: 'hi' }] });
        expect(r.status, JSON.stringify(r.json)).toBe(200);
      }
    } finally {
      await g.close();
    }
  });
});
