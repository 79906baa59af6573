import { describe, expect, it } from 'vitest';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const PIPELINE = '[auth, validate, rate-limit, budget-check, upstream]';
/** A model whose first endpoint is overloaded (503), so requests fall back to the second. */
const FLAKY_MODEL = `
  - id: fake/flaky
    endpoints:
      - { provider: fake-openai, upstream_model: gpt-flaky, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-anthropic, upstream_model: claude-upstream, pricing: { prompt: 1, completion: 2 } }
`;
/** One sim/chat request per minute; a breaker that opens at the first failure. */
const EXTRA = `
rate_limits: { models: [{ model: sim/chat, requests: 1, window_s: 60 }] }
routing: { circuit_breaker: { failure_threshold: 1, cooldown_ms: 600000 } }
`;

const t = perTestGateways();

function yaml(server = ''): string {
  const base = testConfigYaml(t.upstream.url, PIPELINE).replace('pipelines:', `${FLAKY_MODEL}pipelines:`) + EXTRA;
  return server ? base.replace('watch_config: false }', `watch_config: false, ${server} }`) : base;
}

const chat = (over: Record<string, unknown> = {}) => ({ model: 'fake/gpt', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], ...over });

async function credit(g: TestGateway, usd: number): Promise<void> {
  await g.store.addCredits(g.keyRecord.accountId, usd);
  g.gateway.spend.forgetAccount(g.keyRecord.accountId);
}

/** GET /metrics (outside the base path); the body's lines, without comments. */
async function scrape(g: TestGateway, headers: Record<string, string> = {}): Promise<{ status: number; type: string | null; text: string; lines: string[] }> {
  const res = await fetch(new URL('/metrics', g.url), { headers });
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type'), text, lines: text.split('\n').filter((l) => l && !l.startsWith('#')) };
}

/** The value of one sample line, e.g. `gateway_requests_total{endpoint="key",status="200",error_type="none"}`; undefined when absent. */
function sample(lines: string[], series: string): number | undefined {
  const line = lines.find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('GET /metrics', () => {
  it('counts requests, upstream attempts, fallbacks and budget rejections exactly, in the Prometheus text format', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.always.set('gpt-flaky', { kind: 'status', status: 503 });

    // No credits yet: the spend check refuses a paid model (402 insufficient_credits) before any upstream call.
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(402);
    await credit(g, 50);
    expect((await post(`${g.url}/chat/completions`, g.key, chat())).status).toBe(200);
    const stream = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(stream.status).toBe(200);
    expect(stream.text).toContain('message_stop');
    const fallback = await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/flaky' }));
    expect(fallback.status).toBe(200);
    expect(fallback.json.provider).toBe('fake-anthropic');
    expect((await post(`${g.url}/chat/completions`, g.key, chat({ model: 'sim/chat' }))).status).toBe(200);
    // The model's rate limit (1 per minute) refuses the second one: 429.
    expect((await post(`${g.url}/chat/completions`, g.key, chat({ model: 'sim/chat' }))).status).toBe(429);

    const m = await scrape(g);
    expect(m.status).toBe(200);
    expect(m.type).toBe('text/plain; version=0.0.4; charset=utf-8');
    const requests = m.lines.filter((l) => l.startsWith('gateway_requests_total'));
    expect(requests.sort()).toEqual(
      [
        'gateway_requests_total{endpoint="chat_completions",status="402",error_type="payment_required"} 1',
        'gateway_requests_total{endpoint="chat_completions",status="200",error_type="none"} 3',
        'gateway_requests_total{endpoint="messages",status="200",error_type="none"} 1',
        'gateway_requests_total{endpoint="chat_completions",status="429",error_type="rate_limit_exceeded"} 1',
      ].sort(),
    );
    expect(m.lines.filter((l) => l.startsWith('gateway_upstream_attempts_total')).sort()).toEqual(
      [
        'gateway_upstream_attempts_total{provider="fake-openai",outcome="success"} 1',
        'gateway_upstream_attempts_total{provider="fake-openai",outcome="provider_overloaded"} 1',
        'gateway_upstream_attempts_total{provider="fake-anthropic",outcome="success"} 2',
        'gateway_upstream_attempts_total{provider="local",outcome="success"} 1',
      ].sort(),
    );
    expect(m.lines.filter((l) => l.startsWith('gateway_budget_rejections_total')).sort()).toEqual(
      ['gateway_budget_rejections_total{reason="insufficient_credits",status="402"} 1', 'gateway_budget_rejections_total{reason="rate_limit_model",status="429"} 1'].sort(),
    );
    // Every request has a duration; those that reached an upstream an overhead; the stream a time to first token.
    expect(sample(m.lines, 'gateway_request_duration_seconds_count{endpoint="chat_completions"}')).toBe(5);
    expect(sample(m.lines, 'gateway_request_duration_seconds_count{endpoint="messages"}')).toBe(1);
    expect(sample(m.lines, 'gateway_overhead_seconds_count{endpoint="chat_completions"}')).toBe(3);
    expect(sample(m.lines, 'gateway_overhead_seconds_count{endpoint="messages"}')).toBe(1);
    expect(sample(m.lines, 'gateway_time_to_first_token_seconds_count{endpoint="messages"}')).toBe(1);
    expect(sample(m.lines, 'gateway_time_to_first_token_seconds_count{endpoint="chat_completions"}')).toBeUndefined();
    // The overhead is a part of the duration (here: well under it, the rest was upstream time).
    const overhead = sample(m.lines, 'gateway_overhead_seconds_sum{endpoint="chat_completions"}')!;
    const duration = sample(m.lines, 'gateway_request_duration_seconds_sum{endpoint="chat_completions"}')!;
    expect(overhead).toBeGreaterThan(0);
    expect(overhead).toBeLessThan(duration);
    // Breakers: the overloaded endpoint opened (threshold 1), the others are closed; every configured endpoint shows.
    expect(sample(m.lines, 'gateway_circuit_breaker_state{provider="fake-openai",upstream_model="gpt-flaky"}')).toBe(1);
    expect(sample(m.lines, 'gateway_circuit_breaker_state{provider="fake-anthropic",upstream_model="claude-upstream"}')).toBe(0);
    expect(sample(m.lines, 'gateway_circuit_breaker_state{provider="dead-openai",upstream_model="gpt-dead"}')).toBe(0);
    expect(sample(m.lines, 'gateway_in_flight_holds')).toBe(0);
    // Node and process metrics are there too.
    expect(m.lines.some((l) => l.startsWith('process_cpu_user_seconds_total'))).toBe(true);
    expect(m.lines.some((l) => l.startsWith('nodejs_heap_size_used_bytes'))).toBe(true);
    // No secret and nothing from a request body reaches a label.
    for (const secret of [g.key, g.managementKey, 'sk-upstream-openai-secret', 'sk-upstream-anthropic-secret', 'hi']) {
      expect(m.lines.some((l) => l.includes(secret))).toBe(false);
    }
  });

  it('a stream cut off by its upstream counts as a 200 that ended stream_failed, and its attempt as failed', async () => {
    const g = await t.start({ yaml: yaml() });
    await credit(g, 50);
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'midstream' }]);
    const r = await post(`${g.url}/chat/completions`, g.key, chat({ stream: true }));
    expect(r.status).toBe(200);
    const m = await scrape(g);
    expect(sample(m.lines, 'gateway_requests_total{endpoint="chat_completions",status="200",error_type="stream_failed"}')).toBe(1);
    expect(sample(m.lines, 'gateway_requests_total{endpoint="chat_completions",status="200",error_type="none"}')).toBeUndefined();
    expect(m.lines.filter((l) => l.startsWith('gateway_upstream_attempts_total'))).toEqual(['gateway_upstream_attempts_total{provider="fake-openai",outcome="provider_unavailable"} 1']);
    expect(sample(m.lines, 'gateway_time_to_first_token_seconds_count{endpoint="chat_completions"}')).toBe(1);
  });

  it('shows the spend holds of requests still running, read at scrape time', async () => {
    const g = await t.start({ yaml: yaml() });
    await credit(g, 50); // below spend.in_flight.applies_below_balance_usd: every paid request holds its estimate
    let release!: () => void;
    t.upstream.always.set('gpt-upstream', { kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const running = [post(`${g.url}/chat/completions`, g.key, chat()), post(`${g.url}/chat/completions`, g.key, chat())];
    await expect.poll(() => t.upstream.received.length).toBe(2);
    expect(sample((await scrape(g)).lines, 'gateway_in_flight_holds')).toBe(2);
    release();
    expect((await Promise.all(running)).map((r) => r.status)).toEqual([200, 200]);
    expect(sample((await scrape(g)).lines, 'gateway_in_flight_holds')).toBe(0);
  });

  it('shows the requests in flight, and counts the refusals of server.max_in_flight', async () => {
    const g = await t.start({ yaml: yaml('max_in_flight: 1') });
    await credit(g, 50);
    let release!: () => void;
    t.upstream.always.set('gpt-upstream', { kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const running = post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/gpt' }));
    await expect.poll(() => t.upstream.received.length).toBe(1);
    const refused = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    expect(refused.status).toBe(529);
    const during = await scrape(g);
    expect(sample(during.lines, 'gateway_requests_in_flight')).toBe(1);
    expect(sample(during.lines, 'gateway_overload_refusals_total')).toBe(1);
    release();
    await running;
    expect(sample((await scrape(g)).lines, 'gateway_requests_in_flight')).toBe(0);
  });

  it('two gateways in one process keep their own numbers', async () => {
    const a = await t.start({ yaml: yaml('metrics: { enabled: true }') });
    const b = await startTestGateway({ yaml: testConfigYaml(t.upstream.url) });
    try {
      // a: no credits, so its budget-check refuses; b runs without spend stages.
      for (let i = 0; i < 3; i++) expect((await post(`${a.url}/chat/completions`, a.key, chat())).status).toBe(402);
      expect((await post(`${b.url}/chat/completions`, b.key, chat({ model: 'sim/chat' }))).status).toBe(200);
      const ma = await scrape(a);
      const mb = await scrape(b);
      expect(sample(ma.lines, 'gateway_requests_total{endpoint="chat_completions",status="402",error_type="payment_required"}')).toBe(3);
      expect(sample(ma.lines, 'gateway_requests_total{endpoint="chat_completions",status="200",error_type="none"}')).toBeUndefined();
      expect(sample(mb.lines, 'gateway_requests_total{endpoint="chat_completions",status="200",error_type="none"}')).toBe(1);
      expect(sample(mb.lines, 'gateway_requests_total{endpoint="chat_completions",status="402",error_type="payment_required"}')).toBeUndefined();
      expect(sample(mb.lines, 'gateway_upstream_attempts_total{provider="local",outcome="success"}')).toBe(1);
      expect(sample(ma.lines, 'gateway_upstream_attempts_total{provider="local",outcome="success"}')).toBeUndefined();
    } finally {
      await b.close();
    }
  });

  it('an unknown endpoint error_type or status never becomes a label; requests without a body are counted too', async () => {
    const g = await t.start({ yaml: yaml() });
    expect((await fetch(`${g.url}/key`)).status).toBe(401);
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${g.key}` };
    const bad = await fetch(`${g.url}/chat/completions`, { method: 'POST', headers, body: '{not json' });
    expect(bad.status).toBe(400);
    const m = await scrape(g);
    expect(sample(m.lines, 'gateway_requests_total{endpoint="key",status="401",error_type="authentication"}')).toBe(1);
    expect(sample(m.lines, 'gateway_requests_total{endpoint="chat_completions",status="400",error_type="invalid_request"}')).toBe(1);
    expect(m.lines.some((l) => l.startsWith('gateway_overhead_seconds_count'))).toBe(false);
  });
});

describe('GET /metrics access', () => {
  it('server.metrics.auth token: a Bearer token compared in constant time; 401 without it', async () => {
    const token = 'metrics-token-0123456789abcdef';
    const g = await t.start({ yaml: yaml(`metrics: { auth: token, token: ${token} }`) });
    expect((await scrape(g)).status).toBe(401);
    const wrong = await scrape(g, { authorization: 'Bearer metrics-token-0123456789abcdeX' });
    expect(wrong.status).toBe(401);
    expect(JSON.parse(wrong.text).error.metadata.error_type).toBe('authentication');
    expect((await scrape(g, { authorization: `Bearer ${g.managementKey}` })).status).toBe(401);
    const ok = await scrape(g, { authorization: `Bearer ${token}` });
    expect(ok.status).toBe(200);
    expect(ok.text).toContain('# TYPE gateway_requests_total counter');
  });

  it('server.metrics.auth management_key: a management key passes, a regular key gets 403', async () => {
    const g = await t.start({ yaml: yaml('metrics: { auth: management_key }') });
    expect((await scrape(g)).status).toBe(401);
    expect((await scrape(g, { authorization: `Bearer ${g.key}` })).status).toBe(403);
    expect((await scrape(g, { authorization: `Bearer ${g.managementKey}` })).status).toBe(200);
  });

  it('server.metrics.enabled false: no /metrics route (404), nothing recorded', async () => {
    const g = await t.start({ yaml: yaml('metrics: { enabled: false }') });
    expect((await scrape(g)).status).toBe(404);
    expect(g.gateway.runtime().services.metrics).toBeNull();
  });

  it('auth token without a token is a config error naming the field', async () => {
    await expect(t.start({ yaml: yaml('metrics: { auth: token }') })).rejects.toThrow('server.metrics.token: is required');
  });
});
