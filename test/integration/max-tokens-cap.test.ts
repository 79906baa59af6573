import { describe, expect, it } from 'vitest';
import { post, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

/** The README's example plugin, tested the way the guide says: through the real server. */

const t = perTestGateways();
const PIPELINE = '[auth, validate, max-tokens-cap, upstream]';
const start = (config: string) => t.start({ yaml: `${testConfigYaml(t.upstream.url, PIPELINE)}plugins:\n  max-tokens-cap: ${config}\n` });
const chat = (over: Record<string, unknown> = {}) => ({ model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }], ...over });

describe('max-tokens-cap', () => {
  it('clamps a request over the cap, per model, and records it', async () => {
    const g = await start('{ max: 100, per_model: { fake/claude: 50 } }');
    const r = await post(`${g.url}/chat/completions`, g.key, chat({ max_completion_tokens: 1000 }), { 'x-gateway-metadata': 'enabled' });
    expect(r.status).toBe(200);
    expect(t.upstream.received.at(-1)!.body.max_completion_tokens).toBe(100);
    expect(r.json.gateway_metadata.pipeline).toEqual([
      { type: 'max-tokens-cap', name: 'max-tokens-cap', summary: 'lowered max_completion_tokens from 1000 to 100', data: { action: 'clamp', field: 'max_completion_tokens', asked: 1000, value: 100 } },
    ]);
    await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 80, messages: [{ role: 'user', content: 'hi' }] });
    expect(t.upstream.received.at(-1)!.body.max_tokens).toBe(50);
    await post(`${g.url}/chat/completions`, g.key, chat({ max_tokens: 7 }));
    expect(t.upstream.received.at(-1)!.body.max_tokens).toBe(7); // under the cap: untouched
  });

  it('a request that names other models (models, fallbacks) gets the tightest of their caps: any of them may answer', async () => {
    const g = await start('{ max: 100, per_model: { fake/claude: 50 } }');
    await post(`${g.url}/chat/completions`, g.key, chat({ models: ['fake/claude'], max_completion_tokens: 80 }));
    expect(t.upstream.received.at(-1)!.body.max_completion_tokens).toBe(50);
    await post(`${g.url}/messages`, g.key, { model: 'fake/gpt', fallbacks: [{ model: 'fake/claude' }], max_tokens: 80, messages: [{ role: 'user', content: 'hi' }] });
    expect(t.upstream.received.at(-1)!.body.max_completion_tokens ?? t.upstream.received.at(-1)!.body.max_tokens).toBe(50);
  });

  it('a chat request naming both max_tokens and max_completion_tokens has both capped (only the first was)', async () => {
    const g = await start('{ max: 100 }');
    await post(`${g.url}/chat/completions`, g.key, chat({ max_tokens: 10, max_completion_tokens: 5000 }));
    expect(t.upstream.received.at(-1)!.body).toMatchObject({ max_tokens: 10, max_completion_tokens: 100 });
  });

  it('reject mode answers 400 naming the field; nothing reaches the upstream', async () => {
    const g = await start('{ max: 100, mode: reject }');
    const r = await post(`${g.url}/chat/completions`, g.key, chat({ max_tokens: 101 }));
    expect(r.status).toBe(400);
    expect(r.json.error).toEqual({ code: 400, message: '`max_tokens` may be at most 100 on this gateway (asked 101)', metadata: { error_type: 'invalid_request', field: 'max_tokens' } });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('sets a default when the request asks for none', async () => {
    const g = await start('{ max: 100, default: 64 }');
    await post(`${g.url}/chat/completions`, g.key, chat());
    expect(t.upstream.received.at(-1)!.body.max_completion_tokens).toBe(64);
  });

  it('without a default, a request that asks for no limit gets the cap (it went uncapped: the provider default, or the model max_output_tokens)', async () => {
    const g = await start('{ max: 100, per_model: { fake/claude: 50 } }');
    await post(`${g.url}/chat/completions`, g.key, chat());
    expect(t.upstream.received.at(-1)!.body.max_completion_tokens).toBe(100);
    await post(`${g.url}/messages`, g.key, { model: 'fake/claude', messages: [{ role: 'user', content: 'hi' }] });
    expect(t.upstream.received.at(-1)!.body.max_tokens).toBe(50);
  });

  describe('a thinking budget stays below the limit the stage sets (budget_tokens >= max_tokens is a 400 upstream)', () => {
    const messages = (over: Record<string, unknown>) => ({ model: 'fake/claude', messages: [{ role: 'user', content: 'hi' }], ...over });
    const thinking = (budget: number) => ({ thinking: { type: 'enabled', budget_tokens: budget } });

    it('clamp: the budget is lowered to one below the capped max_tokens, or thinking is turned off under 1024', async () => {
      const g = await start('{ max: 2000, per_model: { fake/claude: 2000 } }');
      const r = await post(`${g.url}/messages`, g.key, messages({ max_tokens: 5000, ...thinking(3000) }), { 'x-gateway-metadata': 'enabled' });
      expect(r.status).toBe(200);
      expect(t.upstream.received.at(-1)!.body).toMatchObject({ max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 1999 } });
      expect(r.json.gateway_metadata.pipeline.at(-1)).toEqual({
        type: 'max-tokens-cap',
        name: 'max-tokens-cap',
        summary: 'lowered thinking.budget_tokens from 3000 to 1999',
        data: { action: 'clamp', field: 'thinking.budget_tokens', asked: 3000, value: 1999 },
      });
      await post(`${g.url}/messages`, g.key, messages({ max_tokens: 1500, ...thinking(1200) }));
      expect(t.upstream.received.at(-1)!.body).toMatchObject({ max_tokens: 1500, thinking: { type: 'enabled', budget_tokens: 1200 } }); // under the cap: untouched

      const small = await start('{ max: 1000 }');
      await post(`${small.url}/messages`, small.key, messages({ max_tokens: 5000, ...thinking(3000) }));
      expect(t.upstream.received.at(-1)!.body).toMatchObject({ max_tokens: 1000, thinking: { type: 'disabled' } });
    });

    it('default: a budget at or above the default gets the default on top of it, within the cap', async () => {
      const g = await start('{ max: 4096, default: 300 }');
      await post(`${g.url}/messages`, g.key, messages(thinking(1024)));
      expect(t.upstream.received.at(-1)!.body).toMatchObject({ max_tokens: 1324, thinking: { type: 'enabled', budget_tokens: 1024 } });
      await post(`${g.url}/messages`, g.key, messages(thinking(8000)));
      expect(t.upstream.received.at(-1)!.body).toMatchObject({ max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: 4095 } });
      await post(`${g.url}/messages`, g.key, messages({}));
      expect(t.upstream.received.at(-1)!.body.max_tokens).toBe(300);
    });

    it('reject: a budget that cannot fit below the limit is a 400 naming its field; nothing reaches the upstream', async () => {
      const g = await start('{ max: 1000, default: 300, mode: reject }');
      const r = await post(`${g.url}/messages`, g.key, messages(thinking(2000)));
      expect(r.status).toBe(400);
      expect(r.json.error).toMatchObject({ type: 'invalid_request_error' });
      expect(t.upstream.received).toHaveLength(0);
      const chat = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }], reasoning: { max_tokens: 2000 } });
      expect(chat.status).toBe(400);
      expect(chat.json.error.metadata).toEqual({ error_type: 'invalid_request', field: 'reasoning.max_tokens' });
    });

    it('chat: reasoning.max_tokens is kept below the capped limit; a reasoning effort raises the default as the translator reads it', async () => {
      const g = await start('{ max: 2000 }');
      await post(`${g.url}/chat/completions`, g.key, chat({ max_completion_tokens: 5000, reasoning: { max_tokens: 3000 } }));
      expect(t.upstream.received.at(-1)!.body).toMatchObject({ max_completion_tokens: 2000, reasoning: { max_tokens: 1999 } });
      const small = await start('{ max: 800 }');
      await post(`${small.url}/chat/completions`, small.key, chat({ max_completion_tokens: 5000, reasoning: { max_tokens: 3000 } }));
      expect(t.upstream.received.at(-1)!.body.reasoning).toEqual({ enabled: false });

      const d = await start('{ max: 20000, default: 300 }');
      await post(`${d.url}/chat/completions`, d.key, chat({ reasoning_effort: 'high' }));
      expect(t.upstream.received.at(-1)!.body.max_completion_tokens).toBe(16384 + 300); // 300 left a reasoning model no room to answer
    });
  });

  it('chat: thinking turned off reaches an endpoint that lists only reasoning_effort as reasoning_effort none (it had gone with no reasoning control at all)', async () => {
    const effortOnly = '  - id: fake/effort\n    endpoints: [{ provider: fake-openai, upstream_model: gpt-effort, pricing: { prompt: 1, completion: 2 }, supported_parameters: [max_completion_tokens, reasoning_effort] }]\n';
    const yaml = `${testConfigYaml(t.upstream.url, PIPELINE).replace('models:\n', `models:\n${effortOnly}`)}plugins:\n  max-tokens-cap: { max: 800 }\n`;
    const g = await t.start({ yaml });
    await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/effort', max_completion_tokens: 5000, reasoning: { max_tokens: 3000 } }));
    let got = t.upstream.received.at(-1)!.body;
    expect(got).toMatchObject({ model: 'gpt-effort', max_completion_tokens: 800, reasoning_effort: 'none' });
    expect(got).not.toHaveProperty('reasoning');
    // The client's own reasoning_effort went with the budget the stage turned off.
    await post(`${g.url}/chat/completions`, g.key, chat({ model: 'fake/effort', max_completion_tokens: 5000, reasoning_effort: 'high', reasoning: { max_tokens: 3000 } }));
    got = t.upstream.received.at(-1)!.body;
    expect(got).toMatchObject({ max_completion_tokens: 800, reasoning_effort: 'none' });
  });

  it('its config is validated against its schema at load', async () => {
    await expect(start('{ max: 0 }')).rejects.toThrow(/plugins\.max-tokens-cap\.max/);
  });
});
