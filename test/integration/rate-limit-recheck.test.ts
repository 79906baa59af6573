import { describe, expect, it } from 'vitest';
import { post, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

// `rate-limit` placed before a router (here right after `validate`): its first pass sees `auto`, a model this
// gateway does not have, and the model the router chose had not been counted in its own or the free-model limits.
const PIPELINE = '[auth, validate, rate-limit, budget-check, auto-router, upstream]';
const FREE_MODEL = `
  - id: fake/free:free
    endpoints: [{ provider: fake-openai, upstream_model: gpt-free, pricing: { prompt: 0, completion: 0 } }]
`;

const t = perTestGateways();
const NOW = Date.UTC(2026, 10, 22, 10, 0, 10);

/** A gateway whose auto-router chooses among `allowed`, with `extra` top-level sections. */
function start(allowed: string, extra: string): Promise<TestGateway> {
  const yaml = testConfigYaml(t.upstream.url, PIPELINE).replace('pipelines:', `${FREE_MODEL}pipelines:`);
  // A fixed clock: every request falls in one window.
  return t.start({ yaml: `${yaml}plugins:\n  auto-router: { allowed_models: ['${allowed}'] }\n${extra}`, clock: () => NOW });
}

const auto = (g: TestGateway, path = '/chat/completions') =>
  post(`${g.url}${path}`, g.key, { model: 'auto', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });

describe('a stage after rate-limit that changes the model', () => {
  it("the chosen model counts in its own limit (429 with Retry-After in each dialect's envelope); the key window counts the request once", async () => {
    const g = await start('fake/gpt', 'rate_limits: { key: { requests: 4 }, models: [{ model: fake/gpt, requests: 2 }] }\naccounts:\n  - { name: default, billing: invoice }\n');
    const first = await auto(g);
    expect(first.status).toBe(200);
    expect(first.json.model).toBe('fake/gpt');
    // Counted twice in the key window, this one would be refused with scope `key`.
    expect((await auto(g)).status).toBe(200);
    const r = await auto(g);
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBe('50');
    expect(r.headers.get('x-ratelimit-limit')).toBe('2');
    expect(r.json.error).toMatchObject({ code: 429, metadata: { error_type: 'rate_limit_exceeded', scope: 'model', limit: 2 } });
    const m = await auto(g, '/messages');
    expect(m.status).toBe(429);
    expect(m.json).toMatchObject({ type: 'error', error: { type: 'rate_limit_error', error_type: 'rate_limit_exceeded' }, metadata: { scope: 'model' } });
    expect(m.headers.get('retry-after')).toBe('50');
    expect(t.upstream.received).toHaveLength(2);
  });

  it('a chosen free model counts in the free-model daily limit, and GET /key reports it', async () => {
    const g = await start('fake/free:free', 'free_models: { per_minute: 100, daily_requests: 1, daily_requests_purchased: 1 }\n');
    const first = await auto(g);
    expect(first.status).toBe(200);
    expect(first.json.model).toBe('fake/free:free');
    const r = await auto(g);
    expect(r.status).toBe(429);
    expect(r.json.error.metadata).toMatchObject({ scope: 'free_model_daily', limit: 1 });
    expect(r.headers.get('retry-after')).toBe(String((Date.UTC(2026, 10, 23) - NOW) / 1000));
    const res = await fetch(`${g.url}/key`, { headers: { authorization: `Bearer ${g.key}` } });
    const info = (await res.json()) as { data: { free_model_daily_requests: unknown } };
    expect(info.data.free_model_daily_requests).toEqual({ limit: 1, remaining: 0, used: 1 });
    expect(t.upstream.received).toHaveLength(1);
  });
});
