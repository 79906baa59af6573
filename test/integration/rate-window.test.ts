import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { parseConfigText } from '../../src/config/load';
import { post, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const PIPELINE = '[auth, validate, rate-limit, budget-check, upstream]';
const FREE_MODEL = `
  - id: fake/free:free
    endpoints: [{ provider: fake-openai, upstream_model: gpt-free, pricing: { prompt: 0, completion: 0 } }]
`;
const INVOICE = 'accounts:\n  - { name: default, billing: invoice }\n';
const t = perTestGateways();
const yaml = (extra = '') => testConfigYaml(t.upstream.url, PIPELINE).replace('pipelines:', `${FREE_MODEL}pipelines:`) + extra;
const start = (extra = '', clock?: () => number): Promise<TestGateway> => t.start({ yaml: yaml(extra), clock });
const chat = (over: Record<string, unknown> = {}) => ({ model: 'fake/gpt', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], ...over });

describe('rate limits across a config reload', () => {
  it('a reload that changes the key window\'s length mid-window starts a new count, and its 429 resets when it says', async () => {
    let now = Date.UTC(2026, 10, 22, 10, 0, 10);
    const g = await start('rate_limits: { key: { requests: 3, window_s: 60 } }\n' + INVOICE, () => now);
    for (let i = 0; i < 3; i++) expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    // 10:00:10: the 60 s window and the 3600 s one start together, at 10:00:00.
    g.gateway.reload(parseConfigText(yaml('rate_limits: { key: { requests: 3, window_s: 3600 } }\n' + INVOICE), { registry }));
    let admitted = 0;
    let refusal: Awaited<ReturnType<typeof post>> | undefined;
    for (let i = 0; i < 5; i++) {
      const r = await post(`${g.url}/chat/completions`, g.key, chat());
      if (r.status === 200) admitted++;
      else refusal ??= r;
    }
    expect(admitted).toBe(3);
    expect(refusal!.status).toBe(429);
    const reset = Date.UTC(2026, 10, 22, 11);
    expect(refusal!.headers.get('x-ratelimit-reset')).toBe(String(reset));
    expect(refusal!.headers.get('retry-after')).toBe(String((reset - now) / 1000));
    expect(refusal!.json.error.metadata).toMatchObject({ scope: 'key', limit: 3, resets_at: new Date(reset).toISOString() });
    // A minute on, still in that hour: refused (the requests had counted in the 60 s counter, gone at 10:01).
    now += 60_000;
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(429);
    now = reset;
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
  });

  it('a reload that changes only the number of requests keeps the window\'s count', async () => {
    const now = Date.UTC(2026, 10, 22, 10, 0, 10);
    const g = await start('rate_limits: { key: { requests: 5, window_s: 60 } }\n' + INVOICE, () => now);
    for (let i = 0; i < 3; i++) expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    g.gateway.reload(parseConfigText(yaml('rate_limits: { key: { requests: 4, window_s: 60 } }\n' + INVOICE), { registry }));
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    const r = await post(`${g.url}/chat/completions`, g.key, chat());
    expect(r.status).toBe(429);
    expect(r.headers.get('x-ratelimit-limit')).toBe('4');
  });
});

describe('rate limit lines', () => {
  it('two lines with the same model, per and window_s are a config error naming both (each request had counted once per line)', () => {
    const lines = (per: string) =>
      `rate_limits: { models: [{ model: fake/gpt, requests: 5, window_s: 60, per: key }, { model: fake/gpt, requests: 10, window_s: 60${per} }] }\n`;
    expect(() => parseConfigText(yaml(lines(', per: key')), { registry })).toThrow(/rate_limits\.models\[1\]: repeats rate_limits\.models\[0\]/);
    // Another scope or another window length is another counter.
    expect(() => parseConfigText(yaml(lines('')), { registry })).not.toThrow();
  });
});
