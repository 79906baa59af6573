import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, TEXT, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, sseEvents, startTestGateway, type TestGateway } from '../fixtures/gateway';

/**
 * Routing through one scripted fake upstream: two OpenAI-compatible providers (pa cheap, pb dear) on the
 * same fake, told per upstream model name how to misbehave.
 */
function yaml(url: string): string {
  return `
server: { port: 0, watch_config: false }
storage: { driver: sqlite, path: ':memory:' }
routing: { retry_wait_max_ms: 1000, circuit_breaker: { failure_threshold: 2, cooldown_ms: 60000 } }
providers:
  - { id: pa, kind: openai, base_url: '${url}', first_token_timeout_ms: 300, idle_timeout_ms: 400, headers_timeout_ms: 400 }
  - { id: pb, kind: openai, base_url: '${url}', region: europe, data_collection: allow }
models:
  - id: r/pair
    endpoints:
      - { provider: pb, upstream_model: up-b, pricing: { prompt: 5, completion: 10 } }
      - { provider: pa, upstream_model: up-a, pricing: { prompt: 1, completion: 2 } }
  - id: r/small
    context_length: 8000
    endpoints: [{ provider: pa, upstream_model: up-small, pricing: { prompt: 1, completion: 1 } }]
  - id: r/big
    context_length: 200000
    endpoints: [{ provider: pb, upstream_model: up-big, pricing: { prompt: 2, completion: 2 } }]
  - id: r/solo
    endpoints: [{ provider: pa, upstream_model: up-solo, pricing: { prompt: 1, completion: 1 } }]
  - id: r/tools
    endpoints:
      - { provider: pa, upstream_model: up-notools, pricing: { prompt: 1, completion: 1 }, supported_parameters: [temperature, max_tokens] }
      - { provider: pb, upstream_model: up-tools, pricing: { prompt: 5, completion: 5 } }
  - id: r/capped
    max_output_tokens: 100
    endpoints: [{ provider: pa, upstream_model: up-capped, pricing: { prompt: 1, completion: 1 } }]
  - id: r/speedy
    endpoints:
      - { provider: pa, upstream_model: up-plain, pricing: { prompt: 1, completion: 1 } }
      - { provider: pb, upstream_model: up-std, pricing: { prompt: 2, completion: 2 }, fast: { upstream_model: up-fast, pricing: { prompt: 6, completion: 6 } } }
pipelines:
  default: [auth, validate, upstream]
`;
}

let upstream: FakeUpstream;
let gw: TestGateway;
beforeAll(async () => {
  upstream = await startFakeUpstream();
});
afterAll(() => upstream.close());
afterEach(async () => {
  await gw?.close();
  upstream.scripts.clear();
  upstream.always.clear();
  upstream.faults.length = 0;
});

const fresh = async () => (gw = await startTestGateway({ yaml: yaml(upstream.url) }));
const ask = (body: object, key = gw.key, headers: Record<string, string> = {}) =>
  post(`${gw.url}/chat/completions`, key, { messages: [{ role: 'user', content: 'hi' }], ...body }, headers);
/** The upstream models the fake saw since `from`. */
const seen = (from: number) => upstream.received.slice(from).map((r) => r.body.model);

describe('provider preferences', () => {
  it('orders a model\'s endpoints by price by default, and by provider.order when given', async () => {
    await fresh();
    let n = upstream.received.length;
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pa');
    expect(seen(n)).toEqual(['up-a']);
    n = upstream.received.length;
    expect((await ask({ model: 'r/pair', provider: { order: ['pb'] } })).json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-b']);
  });

  it('only, ignore and data_collection filter providers', async () => {
    await fresh();
    expect((await ask({ model: 'r/pair', provider: { only: ['pb'] } })).json.provider).toBe('pb');
    expect((await ask({ model: 'r/pair', provider: { ignore: ['pa'] } })).json.provider).toBe('pb');
    expect((await ask({ model: 'r/pair', provider: { data_collection: 'deny' } })).json.provider).toBe('pa');
    // A model with one endpoint is filtered too (route planning skips its work only when there are no preferences).
    const solo = await ask({ model: 'r/solo', provider: { ignore: ['pa', 'pb', 'pc'] } });
    expect(solo.status).toBe(503);
    expect(solo.json.error.metadata).toMatchObject({ error_type: 'provider_unavailable', reason: 'ignore' });
  });

  it('answers 503 (spec 7.2: no provider meets the routing requirements) saying why when max_price leaves nothing', async () => {
    await fresh();
    const n = upstream.received.length;
    const res = await ask({ model: 'r/pair', provider: { max_price: { prompt: 0.5 } } });
    expect(res.status).toBe(503);
    expect(res.json.error.metadata).toMatchObject({ error_type: 'provider_unavailable', reason: 'max_price' });
    // The SDKs retry a 503; this one would fail the same way every time.
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect(seen(n)).toEqual([]);
  });

  it('the deprecated route maps onto the sort partition, for a sort given as an object too (it was read only beside a string)', async () => {
    await fresh();
    // Across both models by price, r/small's endpoint (1 + 1) is the cheapest; within r/pair first, pa (1 + 2).
    const across = { model: 'r/pair', models: ['r/small'], route: 'sort' };
    expect((await ask({ ...across, provider: { sort: 'price' } })).json.model).toBe('r/small');
    expect((await ask({ ...across, provider: { sort: { by: 'price' } } })).json.model).toBe('r/small');
    expect((await ask({ ...across, provider: { sort: { by: 'price', partition: 'model' } } })).json.model).toBe('r/pair'); // its own partition stands
    expect((await ask({ ...across, route: 'fallback', provider: { sort: { by: 'price' } } })).json.model).toBe('r/pair');
  });

  it('allow_fallbacks: false stops after the first endpoint', async () => {
    await fresh();
    upstream.always.set('up-a', { kind: 'status', status: 503 });
    const n = upstream.received.length;
    const res = await ask({ model: 'r/pair', provider: { allow_fallbacks: false } });
    expect(res.status).toBe(503);
    expect(seen(n)).toEqual(['up-a']);
  });

  it('a key restricted to a data region only reaches endpoints in it', async () => {
    await fresh();
    const eu = await gw.createKey({ allowedDataRegions: ['europe'] });
    expect((await ask({ model: 'r/pair' }, eu.secret)).json.provider).toBe('pb');
    const res = await ask({ model: 'r/solo' }, eu.secret);
    expect(res.status).toBe(503);
    expect(res.json.error.message).toMatch(/region/);
  });
});

describe('speed and service tier', () => {
  it('speed: fast uses the fast configuration at its premium price; standard uses the cheapest', async () => {
    await fresh();
    let n = upstream.received.length;
    const fast = await post(`${gw.url}/messages`, gw.key, { model: 'r/speedy', max_tokens: 8, speed: 'fast', messages: [{ role: 'user', content: 'x' }] });
    expect(seen(n)).toEqual(['up-fast']);
    expect(upstream.received.at(-1)!.body).not.toHaveProperty('speed');
    // 10 prompt (4 cached, no cached price: prompt price) + 5 completion tokens at 6 USD / 1M
    expect(fast.json.usage.cost).toBeCloseTo((15 * 6) / 1e6, 12);
    n = upstream.received.length;
    await post(`${gw.url}/messages`, gw.key, { model: 'r/speedy', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] });
    expect(seen(n)).toEqual(['up-plain']);
  });

  it('forwards service_tier, with fast as an alias of priority', async () => {
    await fresh();
    await ask({ model: 'r/solo', service_tier: 'fast' });
    expect(upstream.received.at(-1)!.body.service_tier).toBe('priority');
    await ask({ model: 'r/solo', service_tier: 'flex' });
    expect(upstream.received.at(-1)!.body.service_tier).toBe('flex');
  });
});

describe('attempt policy', () => {
  it('fails over on 429 without retrying the same endpoint', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'status', status: 429 }]);
    const n = upstream.received.length;
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-a', 'up-b']);
  });

  it('an endpoint that answered 429 with a Retry-After is tried after the others until it passes (the next request had asked it first again)', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'status', status: 429, headers: { 'retry-after': '30' } }]);
    let n = upstream.received.length;
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-a', 'up-b']);
    n = upstream.received.length;
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-b']);
    expect(gw.gateway.health.resting('pa/up-a')).toBe(true);
    // A session on that endpoint waits too (it had been put first again).
    await gw.close();
    await fresh();
    expect((await ask({ model: 'r/pair', session_id: 's1' })).json.provider).toBe('pa');
    upstream.scripts.set('up-a', [{ kind: 'status', status: 429, headers: { 'retry-after': '30' } }]);
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pb');
    n = upstream.received.length;
    expect((await ask({ model: 'r/pair', session_id: 's1' })).json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-b']);
    // Without a hint, a 429 only fails over: the next request asks the cheaper endpoint first again.
    await gw.close();
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'status', status: 429 }]);
    await ask({ model: 'r/pair' });
    n = upstream.received.length;
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pa');
    expect(seen(n)).toEqual(['up-a']);
  });

  it('retries a reset connection once on the same endpoint', async () => {
    await fresh();
    upstream.scripts.set('up-solo', [{ kind: 'reset' }]);
    const n = upstream.received.length;
    expect((await ask({ model: 'r/solo' })).status).toBe(200);
    expect(seen(n)).toEqual(['up-solo', 'up-solo']);
  });

  it('waits out a short Retry-After on the last endpoint, then retries it', async () => {
    await fresh();
    upstream.scripts.set('up-solo', [{ kind: 'status', status: 429, headers: { 'retry-after': '0.3' } }]);
    const n = upstream.received.length;
    const t0 = Date.now();
    expect((await ask({ model: 'r/solo' })).status).toBe(200);
    expect(seen(n)).toEqual(['up-solo', 'up-solo']);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(280);
  });

  it('does not wait out a long Retry-After', async () => {
    await fresh();
    upstream.scripts.set('up-solo', [{ kind: 'status', status: 429, headers: { 'retry-after': '30' } }]);
    const res = await ask({ model: 'r/solo' });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('30');
  });

  it("gives the caller a provider's Retry-After in whole seconds, rounded up; one no one can read is none", async () => {
    await fresh();
    upstream.scripts.set('up-solo', [{ kind: 'status', status: 429, headers: { 'retry-after': '31.2' } }]);
    const fraction = await ask({ model: 'r/solo' });
    expect(fraction.status).toBe(429);
    expect(fraction.headers.get('retry-after')).toBe('32'); // HTTP's delta-seconds has no fraction
    upstream.scripts.set('up-solo', [{ kind: 'status', status: 429, headers: { 'retry-after': new Date(Date.now() + 40_000).toUTCString() } }]);
    const date = await ask({ model: 'r/solo' });
    expect(Number(date.headers.get('retry-after'))).toBeGreaterThanOrEqual(38);
    expect(Number(date.headers.get('retry-after'))).toBeLessThanOrEqual(41);
    upstream.scripts.set('up-solo', [{ kind: 'status', status: 429, headers: { 'retry-after': 'soon' } }]);
    const unreadable = await ask({ model: 'r/solo' });
    expect(unreadable.status).toBe(429);
    expect(unreadable.headers.get('retry-after')).toBeNull();
  });

  it('moves to a model with a larger context on context_length_exceeded', async () => {
    await fresh();
    upstream.scripts.set('up-small', [{ kind: 'status', status: 400, body: { error: { message: 'maximum context length is 8000 tokens' } } }]);
    const n = upstream.received.length;
    const res = await ask({ model: 'r/small', models: ['r/small', 'r/big'] });
    expect(res.json.model).toBe('r/big');
    expect(seen(n)).toEqual(['up-small', 'up-big']);
  });

  it('an error a provider reports in a 2xx body or in its stream is classified by its message as an HTTP error is', async () => {
    await fresh();
    const tooLong = { error: { code: 400, message: "This model's maximum context length is 8000 tokens" } };
    upstream.scripts.set('up-small', [{ kind: 'status', status: 200, body: tooLong }]);
    let n = upstream.received.length;
    const json = await ask({ model: 'r/small', models: ['r/big'] });
    expect(json.json.model).toBe('r/big');
    expect(seen(n)).toEqual(['up-small', 'up-big']);
    upstream.scripts.set('up-small', [{ kind: 'raw-stream', text: `data: ${JSON.stringify(tooLong)}\n\n` }]);
    n = upstream.received.length;
    const streamed = await ask({ model: 'r/small', models: ['r/big'], stream: true });
    expect(sseEvents(streamed.text).map((e) => e.data).join('')).toContain(TEXT[0]);
    expect(seen(n)).toEqual(['up-small', 'up-big']);
    // 7.4 rule 1: a content filter is content_policy_violation (403) whatever status the provider gave it.
    upstream.scripts.set('up-solo', [{ kind: 'raw-stream', text: `data: ${JSON.stringify({ error: { code: 400, message: 'Your input was flagged by the content filter' } })}\n\n` }]);
    const filtered = await ask({ model: 'r/solo', stream: true });
    const error = JSON.parse(sseEvents(filtered.text)[0].data).error;
    expect(error).toMatchObject({ code: 403, metadata: { error_type: 'content_policy_violation' } });
  });

  it('a provider that never answers costs one headers timeout, then the next endpoint answers', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'hang' }]);
    const n = upstream.received.length;
    const t0 = Date.now();
    const res = await ask({ model: 'r/pair' });
    expect(res.json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-a', 'up-b']);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(380);
  });

  it('a slow provider within its timeouts is waited for, not abandoned', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'slow', ms: 150 }]);
    const n = upstream.received.length;
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pa');
    expect(seen(n)).toEqual(['up-a']);
  });

  it('a provider rejecting assistant prefill is a caller-facing 400, not retried elsewhere', async () => {
    await fresh();
    upstream.always.set('up-a', { kind: 'reject-prefill' });
    const n = upstream.received.length;
    const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'r/pair', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'Sure,' }] });
    expect(res.status).toBe(400);
    expect(res.json.error.message).toMatch(/prefill/);
    expect(seen(n)).toEqual(['up-a']);
    expect((await ask({ model: 'r/pair' })).status).toBe(200); // without prefill the same provider answers
  });

  it('never retries a caller mistake', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'status', status: 400, body: { error: { message: 'bad tool schema' } } }]);
    const n = upstream.received.length;
    const res = await ask({ model: 'r/pair' });
    expect(res.status).toBe(400);
    expect(seen(n)).toEqual(['up-a']);
  });
});

describe('circuit breaker and sticky sessions', () => {
  it('skips an endpoint whose breaker opened, then tries it last', async () => {
    await fresh();
    upstream.always.set('up-a', { kind: 'status', status: 503 });
    await ask({ model: 'r/pair' });
    await ask({ model: 'r/pair' }); // two failures: the breaker of pa/up-a opens
    upstream.always.clear();
    const n = upstream.received.length;
    expect((await ask({ model: 'r/pair' })).json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-b']);
    expect(gw.gateway.health.state('pa/up-a')).toBe('open');
  });

  it('keeps a session on the endpoint that served it', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'status', status: 503 }]);
    expect((await ask({ model: 'r/pair', session_id: 's1' })).json.provider).toBe('pb'); // failed over, remembered
    expect((await ask({ model: 'r/pair', session_id: 's1' })).json.provider).toBe('pb'); // sticky, though pa is cheaper
    expect((await ask({ model: 'r/pair' }, gw.key, { 'x-session-id': 's1' })).json.provider).toBe('pb'); // header form
    expect((await ask({ model: 'r/pair', session_id: 's2' })).json.provider).toBe('pa');
    expect((await ask({ model: 'r/pair', session_id: 's1', provider: { order: ['pa'] } })).json.provider).toBe('pa'); // order wins
  });

  it('a half-open breaker lets one probe through; the requests meanwhile go to the other endpoint (all had waited on the dead one)', async () => {
    gw = await startTestGateway({ yaml: yaml(upstream.url).replace('cooldown_ms: 60000', 'cooldown_ms: 50') });
    upstream.always.set('up-a', { kind: 'status', status: 503 });
    await ask({ model: 'r/pair' });
    await ask({ model: 'r/pair' }); // the breaker of pa/up-a opens
    upstream.always.clear();
    await new Promise((r) => setTimeout(r, 80)); // past the cooldown: half-open
    expect(gw.gateway.health.state('pa/up-a')).toBe('half_open');
    // A probe out expires after one cooldown: made long (as a reload would), so on a loaded machine the held
    // probe is still out while the others are served.
    gw.gateway.health.configure({ failureThreshold: 2, cooldownMs: 60_000 });
    let release!: () => void;
    upstream.scripts.set('up-a', [{ kind: 'hold', until: new Promise<void>((r) => (release = r)) }]);
    const n = upstream.received.length;
    const probe = ask({ model: 'r/pair' });
    await expect.poll(() => seen(n)).toEqual(['up-a']); // the probe is out before the others are sent
    const others = await Promise.all([ask({ model: 'r/pair' }), ask({ model: 'r/pair' })]);
    // While the probe is held, the two others were served by pb; pa saw the probe alone.
    expect(others.map((r) => r.json.provider)).toEqual(['pb', 'pb']);
    expect(seen(n).filter((m) => m === 'up-a')).toEqual(['up-a']);
    release();
    expect((await probe).json.provider).toBe('pa');
    expect(gw.gateway.health.state('pa/up-a')).toBe('closed');
  });

  it('a half-open probe that tells nothing about the endpoint (the provider blames the caller) is given back: the next request probes', async () => {
    gw = await startTestGateway({ yaml: yaml(upstream.url).replace('cooldown_ms: 60000', 'cooldown_ms: 300') });
    upstream.always.set('up-a', { kind: 'status', status: 503 });
    await ask({ model: 'r/pair' });
    await ask({ model: 'r/pair' }); // the breaker of pa/up-a opens
    upstream.always.clear();
    await new Promise((r) => setTimeout(r, 350)); // past the cooldown: half-open
    upstream.scripts.set('up-a', [{ kind: 'status', status: 400 }]);
    const probe = await ask({ model: 'r/pair' });
    expect(probe.status).toBe(400);
    // The endpoint answered; the caller was at fault. It had kept the probe out for another cooldown (300 ms
    // here, 30 s by default), every request meanwhile sent elsewhere.
    expect(gw.gateway.health.state('pa/up-a')).toBe('half_open');
    expect(gw.gateway.health.tryAcquire('pa/up-a')).not.toBeNull();
  });

  it('a stream the provider cuts after its answer began counts against the endpoint (it was recorded a success at its first token)', async () => {
    await fresh();
    upstream.always.set('up-a', { kind: 'midstream' });
    for (let i = 0; i < 2; i++) {
      const r = await ask({ model: 'r/pair', stream: true });
      expect(r.status).toBe(200);
      expect(sseEvents(r.text).some((e) => e.data.includes('"finish_reason":"error"'))).toBe(true);
    }
    expect(gw.gateway.health.state('pa/up-a')).toBe('open');
    const n = upstream.received.length;
    const r = await ask({ model: 'r/pair', stream: true });
    expect(r.text).toContain('"provider":"pb"');
    expect(seen(n)).toEqual(['up-b']);
  });

  it('a stream that ends cleanly before its finish counts against the endpoint too (its end was recorded a success)', async () => {
    await fresh();
    upstream.always.set('up-a', { kind: 'no-done' });
    for (let i = 0; i < 2; i++) {
      const r = await ask({ model: 'r/pair', stream: true });
      expect(sseEvents(r.text).some((e) => e.data.includes('"finish_reason":"error"'))).toBe(true);
    }
    expect(gw.gateway.health.state('pa/up-a')).toBe('open');
  });

  it('a session remembers the endpoint of a stream when the stream ends whole, not one the provider cut after its first output', async () => {
    // A breaker that stays closed here: an open one would keep the session off the cut endpoint anyway.
    gw = await startTestGateway({ yaml: yaml(upstream.url).replace('failure_threshold: 2', 'failure_threshold: 10') });
    upstream.scripts.set('up-a', [{ kind: 'status', status: 503 }]);
    expect((await ask({ model: 'r/pair', session_id: 'st' })).json.provider).toBe('pb'); // failed over, remembered
    // pb fails before output; pa begins its answer and cuts it: the session had been moved to pa at its first token.
    upstream.scripts.set('up-b', [{ kind: 'status', status: 503 }]);
    upstream.scripts.set('up-a', [{ kind: 'midstream' }]);
    const cut = await ask({ model: 'r/pair', session_id: 'st', stream: true });
    expect(sseEvents(cut.text).some((e) => e.data.includes('"finish_reason":"error"'))).toBe(true);
    let n = upstream.received.length;
    expect((await ask({ model: 'r/pair', session_id: 'st' })).json.provider).toBe('pb');
    expect(seen(n)).toEqual(['up-b']);
    // A whole stream is remembered: pb fails before output, pa serves all of it.
    upstream.scripts.set('up-b', [{ kind: 'status', status: 503 }]);
    const whole = await ask({ model: 'r/pair', session_id: 'st', stream: true });
    expect(whole.text).toContain('"provider":"pa"');
    n = upstream.received.length;
    upstream.scripts.set('up-a', [{ kind: 'status', status: 503 }]); // pa first now: it fails, pb serves
    await ask({ model: 'r/pair', session_id: 'st' });
    expect(seen(n)).toEqual(['up-a', 'up-b']);
  });

  it('a session sticks per model it names, and a fallback model that served it is not remembered', async () => {
    await fresh();
    // r/small fails once: r/big (the fallback) serves the session; then r/small works again and serves it.
    upstream.scripts.set('up-small', [{ kind: 'status', status: 503 }]);
    expect((await ask({ model: 'r/small', models: ['r/big'], session_id: 'm1' })).json.model).toBe('r/big');
    expect((await ask({ model: 'r/small', models: ['r/big'], session_id: 'm1' })).json.model).toBe('r/small');
    // r/pair's session endpoint survives a request of another model in the same session.
    upstream.scripts.set('up-a', [{ kind: 'status', status: 503 }]);
    expect((await ask({ model: 'r/pair', session_id: 'm2' })).json.provider).toBe('pb');
    expect((await ask({ model: 'r/solo', session_id: 'm2' })).json.provider).toBe('pa');
    expect((await ask({ model: 'r/pair', session_id: 'm2' })).json.provider).toBe('pb');
  });

  it('puts the endpoints that take the tools, tool_choice or response_format a request sets ahead of those that would drop them', async () => {
    await fresh();
    const tools = [{ type: 'function', function: { name: 'get', parameters: { type: 'object' } } }];
    const n = upstream.received.length;
    expect((await ask({ model: 'r/tools' })).json.provider).toBe('pa'); // the cheaper, when nothing would be dropped
    expect((await ask({ model: 'r/tools', tools, tool_choice: 'required' })).json.provider).toBe('pb');
    expect((await ask({ model: 'r/tools', response_format: { type: 'json_object' } })).json.provider).toBe('pb');
    // The caller's own order still stands (and the endpoint then drops what it does not list).
    expect((await ask({ model: 'r/tools', tools, provider: { order: ['pa'] } })).json.provider).toBe('pa');
    expect(upstream.received.slice(n).map((r) => r.body.model)).toEqual(['up-notools', 'up-tools', 'up-tools', 'up-notools']);
    // An empty order orders nothing (as in planning): the tools still go where they are taken (they were dropped).
    expect((await ask({ model: 'r/tools', tools, tool_choice: 'required', provider: { order: [] } })).json.provider).toBe('pb');
  });

  it("asks the provider for no more than the model's max_output_tokens (the spend hold held that much; 90 000 were billed)", async () => {
    await fresh();
    const n = upstream.received.length;
    expect((await ask({ model: 'r/capped', max_tokens: 100000 })).status).toBe(200);
    expect((await ask({ model: 'r/capped', max_completion_tokens: 50 })).status).toBe(200);
    expect(upstream.received.slice(n).map((r) => r.body.max_tokens ?? r.body.max_completion_tokens)).toEqual([100, 50]);
  });

  it("Retry-After only when every failed endpoint gave one (spec 7.10), the longest; an operator's account error fails over", async () => {
    await fresh();
    upstream.always.set('up-a', { kind: 'status', status: 429, headers: { 'retry-after': '30' } });
    upstream.always.set('up-b', { kind: 'status', status: 429 });
    const none = await ask({ model: 'r/pair' });
    expect(none.status).toBe(429);
    expect(none.headers.get('retry-after')).toBeNull();
    upstream.always.set('up-b', { kind: 'status', status: 429, headers: { 'retry-after': '20' } });
    const both = await ask({ model: 'r/pair' });
    expect(both.status).toBe(429);
    expect(both.headers.get('retry-after')).toBe('30');
    upstream.always.clear();
    // Anthropic words an empty operator account as a 400; it is no caller mistake: the next endpoint serves.
    upstream.always.set('up-a', { kind: 'status', status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: 'Your credit balance is too low to access the Anthropic API.' } } });
    const served = await ask({ model: 'r/pair' });
    expect(served.status).toBe(200);
    expect(served.json.provider).toBe('pb');
  });

  it('x-should-retry: false only when every failed endpoint refused for good (an overloaded one may serve a retry)', async () => {
    await fresh();
    upstream.always.set('up-a', { kind: 'status', status: 503 });
    upstream.always.set('up-b', { kind: 'status', status: 401 });
    const mixed = await ask({ model: 'r/pair' });
    expect(mixed.status).toBe(502);
    expect(mixed.json.error.metadata.provider_code).toBe(401);
    expect(mixed.headers.get('x-should-retry')).toBeNull();
    upstream.always.set('up-a', { kind: 'status', status: 404 });
    const both = await ask({ model: 'r/pair' });
    expect(both.status).toBe(502);
    expect(both.headers.get('x-should-retry')).toBe('false');
  });
});

describe('sticky sessions in Redis', () => {
  it('a session sticks to its endpoint across gateway processes sharing the Redis state', async () => {
    const prefix = `gwtest:${Math.random().toString(36).slice(2, 10)}:`;
    const shared = `${yaml(upstream.url)}state: { driver: redis, url: '${process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379/0'}', prefix: '${prefix}' }\n`;
    const a = await startTestGateway({ yaml: shared });
    const b = await startTestGateway({ yaml: shared, store: a.store });
    try {
      upstream.scripts.set('up-a', [{ kind: 'status', status: 503 }]);
      const first = await post(`${a.url}/chat/completions`, a.key, { model: 'r/pair', session_id: 'shared-1', messages: [{ role: 'user', content: 'hi' }] });
      expect(first.json.provider).toBe('pb');
      // The other process has never seen this session, and pa is cheaper: only the shared state sends it to pb.
      const second = await post(`${b.url}/chat/completions`, a.key, { model: 'r/pair', session_id: 'shared-1', messages: [{ role: 'user', content: 'hi' }] });
      expect(second.json.provider).toBe('pb');
      const other = await post(`${b.url}/chat/completions`, a.key, { model: 'r/pair', session_id: 'shared-2', messages: [{ role: 'user', content: 'hi' }] });
      expect(other.json.provider).toBe('pa');
    } finally {
      await b.close();
      await a.close();
      const { default: Redis } = await import('ioredis');
      const redis = new Redis(process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379/0');
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      await redis.quit();
    }
  });
});

describe('the stream-failure contract (7.5)', () => {
  const stream = (body: object = {}) => ask({ model: 'r/pair', stream: true, ...body });

  it('a provider silent after its headers costs one first-token timeout, then fails over', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'stall-first' }]);
    const n = upstream.received.length;
    const res = await stream();
    expect(res.status).toBe(200);
    const chunks = sseEvents(res.text).slice(0, -1).map((e) => JSON.parse(e.data));
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello from the fake upstream.');
    expect(chunks[0].provider).toBe('pb');
    expect(seen(n)).toEqual(['up-a', 'up-b']);
  });

  it('a stall after output ends with the in-band error chunk (no failover once output was sent)', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'stall' }]);
    const n = upstream.received.length;
    const res = await stream();
    const events = sseEvents(res.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    const last = JSON.parse(events.at(-2)!.data);
    expect(last.choices[0].finish_reason).toBe('error');
    expect(last.error.metadata.error_type).toBe('timeout');
    expect(seen(n)).toEqual(['up-a']);
  });

  it('a stream that ends without finish_reason or [DONE] does not look like a success', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'no-done' }]);
    const events = sseEvents((await stream()).text);
    const last = JSON.parse(events.at(-2)!.data);
    expect(last.choices[0].finish_reason).toBe('error');
    expect(last.error.metadata.error_type).toBe('provider_unavailable');
  });

  it('a malformed chunk ends the stream with the in-band error', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'malformed' }]);
    const events = sseEvents((await stream()).text);
    const last = JSON.parse(events.at(-2)!.data);
    expect(last.error.message).toMatch(/malformed/);
    // What came before the bad chunk (in the same upstream read) was delivered first.
    const before = events.slice(0, -2).map((e) => JSON.parse(e.data).choices[0].delta.content);
    expect(before).toEqual(['', TEXT[0]]);
  });

  it('a non-streaming request whose provider fails after its headers gets 200 with only id and error (7.5.4)', async () => {
    await fresh();
    upstream.scripts.set('up-solo', [{ kind: 'midstream' }]);
    const n = upstream.received.length;
    const res = await ask({ model: 'r/solo' });
    expect(res.status).toBe(200);
    expect(Object.keys(res.json).sort()).toEqual(['error', 'id']);
    expect(res.json.id).toMatch(/^gen-/);
    expect(res.json.error.metadata.error_type).toBe('provider_unavailable');
    expect(seen(n)).toEqual(['up-solo']); // an answer cut after its headers is not asked for again
    // A failed request all the same: its access line (and the metrics) name the error, not a plain 200.
    const line = () => gw.logs.map((l) => JSON.parse(l)).find((l) => l.msg === 'request' && l.generation_id === res.json.id);
    await expect.poll(line).toMatchObject({ status: 200, error_type: 'provider_unavailable' });
    // A caller mistake the provider reported in its 2xx body: the same 200 (it was the one answered 400), not retried.
    upstream.scripts.set('up-solo', [{ kind: 'status', status: 200, body: { error: { code: 400, message: 'Invalid value for temperature' } } }]);
    const mistake = await ask({ model: 'r/solo' });
    expect(mistake.status).toBe(200);
    expect(Object.keys(mistake.json).sort()).toEqual(['error', 'id']);
    expect(mistake.json.error).toMatchObject({ code: 400, message: 'Invalid value for temperature', metadata: { error_type: 'invalid_request' } });
    // With routing metadata asked for, it rides along, as on other error bodies after routing (it had none).
    upstream.scripts.set('up-solo', [{ kind: 'midstream' }]);
    const described = await ask({ model: 'r/solo' }, gw.key, { 'x-gateway-metadata': 'enabled' });
    expect(described.status).toBe(200);
    expect(described.json.gateway_metadata.attempts.map((a: { provider: string }) => a.provider)).toEqual(['pa']);
    // Messages callers get the real status; the flag routing reads is not in what they see.
    upstream.scripts.set('up-solo', [{ kind: 'midstream' }]);
    const messages = await post(`${gw.url}/messages`, gw.key, { model: 'r/solo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    expect(messages.status).toBe(502);
    expect(messages.json.metadata).not.toHaveProperty('after_headers');
    expect(messages.json.error.error_type).toBe('provider_unavailable');
  });

  it('a client that goes away mid-stream aborts the upstream call at once, and what was delivered is billed', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'stall' }]);
    const before = upstream.abandoned();
    const controller = new AbortController();
    const res = await fetch(`${gw.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.key}` },
      body: JSON.stringify({ model: 'r/pair', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const id = JSON.parse(first.split('\n\n')[0].replace(/^data: /, '')).id;
    controller.abort();
    for (let i = 0; i < 200 && upstream.abandoned() === before; i++) await new Promise((r) => setTimeout(r, 10));
    expect(upstream.abandoned()).toBe(before + 1);
    let row = null;
    for (let i = 0; i < 200 && !row; i++) {
      row = await gw.ledgerRow(id);
      if (!row) await new Promise((r) => setTimeout(r, 10));
    }
    expect(row?.status).toBe('cancelled');
  });

  it('feeds stream throughput into endpoint health (for sort: throughput)', async () => {
    await fresh();
    upstream.scripts.set('up-a', []);
    await stream({ stream_options: { include_usage: true } });
    expect(gw.gateway.health.stats('pa/up-a').throughput).toBeGreaterThan(0);
  });

  it('require_parameters excludes an endpoint whose style cannot carry a parameter the caller set', async () => {
    await fresh();
    const res = await post(`${gw.url}/messages`, gw.key, { model: 'r/solo', max_tokens: 8, context_management: { edits: [] }, provider: { require_parameters: true }, messages: [{ role: 'user', content: 'x' }] });
    expect(res.status).toBe(503);
    expect(res.json.error).toMatchObject({ type: 'api_error', error_type: 'provider_unavailable' });
    expect(res.json.metadata ?? res.json.error).toBeTruthy();
    expect(JSON.stringify(res.json)).toMatch(/require_parameters/);
    const ok = await post(`${gw.url}/messages`, gw.key, { model: 'r/solo', max_tokens: 8, context_management: { edits: [] }, messages: [{ role: 'user', content: 'x' }] });
    expect(ok.status).toBe(200);
  });

  it('echoes each attempted upstream body first when debug.echo_upstream_body is set, without secrets', async () => {
    await fresh();
    upstream.scripts.set('up-a', [{ kind: 'status', status: 503 }]);
    const res = await stream({ debug: { echo_upstream_body: true } });
    const events = sseEvents(res.text).map((e) => (e.data === '[DONE]' ? e.data : JSON.parse(e.data)));
    const debug = events.filter((e: any) => e.debug);
    expect(debug.map((d: any) => d.debug.echo_upstream_body.model)).toEqual(['up-a', 'up-b']);
    // Each debug chunk names the provider of its attempt, not the one that finally served.
    expect(debug.map((d: any) => d.provider)).toEqual(['pa', 'pb']);
    expect(debug.every((d: any) => Array.isArray(d.choices) && d.choices.length === 0)).toBe(true);
    expect(JSON.stringify(debug)).not.toContain(gw.key);
    expect(events.indexOf(debug[0])).toBe(0);
  });
});
