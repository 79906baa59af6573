import { describe, expect, it } from 'vitest';
import { post, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

/** Router test models, all on the fake OpenAI upstream with their own upstream name (`up-<id>`). */
const ROUTER_MODELS = `
  - { id: r/small, tier: 1, quality: 0.5, context_length: 1000, endpoints: [{ provider: fake-openai, upstream_model: up-small, pricing: { prompt: 0.1, completion: 0.2 } }] }
  - { id: r/coder, tier: 2, capabilities: [code, tools], quality: 0.7, endpoints: [{ provider: fake-openai, upstream_model: up-coder, pricing: { prompt: 1, completion: 2 } }] }
  - { id: r/vision, tier: 2, capabilities: [vision, tools], quality: 0.75, endpoints: [{ provider: fake-openai, upstream_model: up-vision, pricing: { prompt: 2, completion: 4 } }] }
  - { id: r/big, tier: 3, capabilities: [code, tools, vision, reasoning], quality: 0.9, endpoints: [{ provider: fake-openai, upstream_model: up-big, pricing: { prompt: 5, completion: 15 } }] }
  - { id: r/reasoner, tier: 3, capabilities: [reasoning], quality: 0.85, endpoints: [{ provider: fake-openai, upstream_model: up-reasoner, pricing: { prompt: 3, completion: 12 } }] }
`;

function yaml(): string {
  return (
    testConfigYaml(t.upstream.url, '[auth, validate, auto-router, pareto-router, upstream]').replace('pipelines:', `${ROUTER_MODELS}pipelines:`) +
    `plugins:
  auto-router: { allowed_models: ['r/*'], long_prompt_tokens: 200, very_long_prompt_tokens: 5000 }
  pareto-router: { allowed_models: ['r/*'] }
`
  );
}

const user = (content: unknown) => [{ role: 'user', content }];
const long = (words: number) => Array.from({ length: words }, (_, i) => `word${i % 50}`).join(' ');
const META = { 'x-gateway-metadata': 'enabled' };

describe('auto-router: choices on a table of requests (chat completions)', () => {
  const cases: { name: string; body: Record<string, unknown>; want: string }[] = [
    { name: 'short plain prompt → tier 1', body: { model: 'auto', messages: user('Hi there') }, want: 'r/small' },
    { name: 'code → a tier-2 model declaring code', body: { model: 'auto', messages: user('Fix this:\n```js\nconst x = 1\n```') }, want: 'r/coder' },
    { name: 'image → the lowest tier declaring vision', body: { model: 'auto', messages: user([{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }]) }, want: 'r/vision' },
    { name: 'reasoning, medium → the best-quality reasoning model', body: { model: 'auto', reasoning_effort: 'high', messages: user('Prove it') }, want: 'r/big' },
    {
      name: 'reasoning, cost_tier low → the cheapest reasoning model',
      body: { model: 'auto', reasoning_effort: 'high', messages: user('Prove it'), plugins: [{ id: 'auto-router', cost_tier: 'low' }] },
      want: 'r/reasoner',
    },
    {
      name: 'tools → tier 2 declaring tools, best quality',
      body: { model: 'auto', messages: user('Weather?'), tools: [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: {} } } }] },
      want: 'r/vision',
    },
    { name: 'cost_tier high lifts a plain prompt to tier 2', body: { model: 'auto', messages: user('Hi'), plugins: [{ id: 'auto-router', cost_tier: 'high' }] }, want: 'r/vision' },
    { name: 'pin_model pins', body: { model: 'auto', messages: user('Hi'), plugins: [{ id: 'auto-router', pin_model: 'r/big' }] }, want: 'r/big' },
    {
      name: 'request allowed_models narrows the pool',
      body: { model: 'auto', messages: user('```py\ndef f(): pass\n```'), plugins: [{ id: 'auto-router', allowed_models: ['r/small', 'r/reasoner'] }] },
      want: 'r/reasoner', // neither declares code: the lowest tier at or above the target (2) wins
    },
    {
      name: 'request excluded_models removes a model',
      body: { model: 'auto', messages: user('```py\ndef f(): pass\n```'), plugins: [{ id: 'auto-router', excluded_models: ['r/coder'] }] },
      want: 'r/big',
    },
    {
      name: 'long prompt that does not fit the small model, cost_tier low → cheapest fitting tier 2',
      body: { model: 'auto', messages: user(long(1200)), plugins: [{ id: 'auto-router', cost_tier: 'low' }] },
      want: 'r/coder',
    },
    { name: 'the plugin entry routes even with a concrete model', body: { model: 'fake/gpt', messages: user('Hi'), plugins: [{ id: 'auto-router' }] }, want: 'r/small' },
    {
      name: 'operator allowed set: a request cannot widen it',
      body: { model: 'auto', messages: user('Hi'), plugins: [{ id: 'auto-router', allowed_models: ['r/big', 'fake/gpt'] }] },
      want: 'r/big',
    },
  ];

  for (const c of cases) {
    it(c.name, async () => {
      const g = await t.start({ yaml: yaml() });
      const res = await post(`${g.url}/chat/completions`, g.key, c.body, META);
      expect(res.status, res.text).toBe(200);
      expect(res.json.model).toBe(c.want);
      expect(t.upstream.received.at(-1)!.body.model).toBe(`up-${c.want.slice(2)}`);
      const record = res.json.gateway_metadata.pipeline.find((p: { name: string }) => p.name === 'auto-router');
      expect(record).toMatchObject({ type: 'router', data: { model: c.want } });
      expect(record.summary).toContain(c.want);
    });
  }

  it('messages style: thinking asks for reasoning', async () => {
    const g = await t.start({ yaml: yaml() });
    const res = await post(`${g.url}/messages`, g.key, { model: 'auto', max_tokens: 50, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: user('Prove it') }, META);
    expect(res.status, res.text).toBe(200);
    expect(res.json.model).toBe('r/big');
    expect(res.json.gateway_metadata.pipeline[0]).toMatchObject({ name: 'auto-router', data: { model: 'r/big', features: { reasoning: true } } });
  });

  it('reasoning turned off (reasoning.enabled false, whatever effort is named) asks for none (it had counted +2)', async () => {
    const g = await t.start({ yaml: yaml() });
    for (const off of [{ reasoning: { enabled: false, effort: 'high' } }, { reasoning_effort: 'high', reasoning: { enabled: false } }]) {
      const res = await post(`${g.url}/chat/completions`, g.key, { model: 'auto', messages: user('Hi'), ...off }, META);
      expect(res.status, res.text).toBe(200);
      expect(res.json.model).toBe('r/small');
      expect(res.json.gateway_metadata.pipeline[0]).toMatchObject({ name: 'auto-router', data: { features: { reasoning: false }, demand_points: 0 } });
    }
  });

  it('models: ["auto"] without model routes as model: "auto" does (it was a 404 for the unknown model "auto")', async () => {
    const g = await t.start({ yaml: yaml() });
    const res = await post(`${g.url}/chat/completions`, g.key, { models: ['auto'], messages: user('Hi there') }, META);
    expect(res.status, res.text).toBe(200);
    expect(res.json.model).toBe('r/small');
    expect(t.upstream.received.at(-1)!.body.model).toBe('up-small');
    expect(res.json.gateway_metadata.pipeline[0]).toMatchObject({ name: 'auto-router', data: { requested: 'auto', model: 'r/small' } });
  });

  it('"auto" later in models keeps its place: the models before it are tried first, then the choice', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.always.set('gpt-upstream', { kind: 'status', status: 500 });
    const res = await post(`${g.url}/chat/completions`, g.key, { models: ['fake/gpt', 'auto'], messages: user('Hi there') }, META);
    expect(res.status, res.text).toBe(200);
    expect(res.json.model).toBe('r/small');
    expect(t.upstream.received.map((r) => r.body.model)).toEqual(expect.arrayContaining(['gpt-upstream', 'up-small']));
    expect(t.upstream.received[0].body.model).toBe('gpt-upstream');
    expect(t.upstream.received.at(-1)!.body.model).toBe('up-small');
  });

  it('the next-ranked models follow the choice: when its endpoint fails, the next one serves (it was a 502)', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.always.set('up-small', { kind: 'status', status: 500 });
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'auto', messages: user('Hi there') }, META);
    expect(res.status, res.text).toBe(200);
    expect(res.json.model).toBe('r/vision');
    expect(t.upstream.received[0].body.model).toBe('up-small');
    expect(t.upstream.received.at(-1)!.body.model).toBe('up-vision');
    expect(res.json.gateway_metadata.pipeline[0]).toMatchObject({ name: 'auto-router', data: { model: 'r/small', fallbacks: ['r/vision', 'r/coder'] } });
  });

  it('fallback_models: 0 sets none; pin_model never has any', async () => {
    const g = await t.start({ yaml: yaml().replace("auto-router: { allowed_models: ['r/*']", "auto-router: { fallback_models: 0, allowed_models: ['r/*']") });
    t.upstream.always.set('up-small', { kind: 'status', status: 500 });
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'auto', messages: user('Hi there') }, META);
    expect(res.status).toBe(502);
    expect(t.upstream.received.every((r) => r.body.model === 'up-small')).toBe(true);
    const pinned = await post(`${g.url}/chat/completions`, g.key, { model: 'auto', messages: user('Hi'), plugins: [{ id: 'auto-router', pin_model: 'r/small' }] }, META);
    expect(pinned.status).toBe(502);
  });

  it('a model whose endpoints are all known down (breaker open) is skipped', async () => {
    const base = yaml().replace("auto-router: { allowed_models: ['r/*']", "auto-router: { fallback_models: 0, allowed_models: ['r/*']");
    const g = await t.start({ yaml: `${base}routing: { circuit_breaker: { failure_threshold: 1, cooldown_ms: 600000 } }\n` });
    t.upstream.always.set('up-small', { kind: 'status', status: 500 });
    const first = await post(`${g.url}/chat/completions`, g.key, { model: 'auto', messages: user('Hi there') }, META);
    expect(first.status).toBe(502);
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'auto', messages: user('Hi there') }, META);
    expect(res.status, res.text).toBe(200);
    expect(res.json.model).toBe('r/vision');
    expect(t.upstream.received.at(-1)!.body.model).toBe('up-vision');
  });

  it('without model auto or the plugin, the request is untouched', async () => {
    const g = await t.start({ yaml: yaml() });
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: user('Hi') }, META);
    expect(res.status).toBe(200);
    expect(res.json.model).toBe('fake/gpt');
    expect(res.json.gateway_metadata.pipeline).toBeUndefined();
  });

  const refusals: { name: string; plugin: Record<string, unknown>; field: string }[] = [
    { name: 'pin_model outside the allowed set', plugin: { id: 'auto-router', pin_model: 'fake/gpt' }, field: 'plugins[0].pin_model' },
    { name: 'unknown cost_tier', plugin: { id: 'auto-router', cost_tier: 'cheap' }, field: 'plugins[0].cost_tier' },
    { name: 'allowed_models matching nothing allowed', plugin: { id: 'auto-router', allowed_models: ['fake/*'] }, field: 'plugins[0].allowed_models' },
  ];
  for (const r of refusals) {
    it(`400 for ${r.name}`, async () => {
      const g = await t.start({ yaml: yaml() });
      const res = await post(`${g.url}/chat/completions`, g.key, { model: 'auto', messages: user('Hi'), plugins: [r.plugin] });
      expect(res.status).toBe(400);
      expect(res.json.error.metadata.field).toBe(r.field);
      expect(t.upstream.received).toHaveLength(0);
    });
  }
});

describe('pareto-router', () => {
  const cases: { minQuality: number; want: string }[] = [
    { minQuality: 0.7, want: 'r/coder' },
    { minQuality: 0.8, want: 'r/reasoner' },
    { minQuality: 0.88, want: 'r/big' },
    { minQuality: 0, want: 'r/small' },
  ];
  for (const c of cases) {
    it(`min_quality ${c.minQuality} → the cheapest model meeting it: ${c.want}`, async () => {
      const g = await t.start({ yaml: yaml() });
      const res = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: user('Hi'), plugins: [{ id: 'pareto-router', min_quality: c.minQuality }] }, META);
      expect(res.status, res.text).toBe(200);
      expect(res.json.model).toBe(c.want);
      expect(res.json.gateway_metadata.pipeline[0]).toMatchObject({ type: 'router', name: 'pareto-router', data: { model: c.want, min_quality: c.minQuality } });
    });
  }

  it('messages style too', async () => {
    const g = await t.start({ yaml: yaml() });
    const res = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 20, messages: user('Hi'), plugins: [{ id: 'pareto-router', min_quality: 0.8 }] });
    expect(res.status, res.text).toBe(200);
    expect(res.json.model).toBe('r/reasoner');
  });

  it('no model meets the minimum → 400 naming min_quality', async () => {
    const g = await t.start({ yaml: yaml() });
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: user('Hi'), plugins: [{ id: 'pareto-router', min_quality: 0.95 }] });
    expect(res.status).toBe(400);
    expect(res.json.error.metadata.field).toBe('plugins[0].min_quality');
  });

  it('min_quality out of range → 400', async () => {
    const g = await t.start({ yaml: yaml() });
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: user('Hi'), plugins: [{ id: 'pareto-router', min_quality: 2 }] });
    expect(res.status).toBe(400);
    expect(res.json.error.metadata.field).toBe('plugins[0].min_quality');
  });
});
