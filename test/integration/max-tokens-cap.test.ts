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

  it('its config is validated against its schema at load', async () => {
    await expect(start('{ max: 0 }')).rejects.toThrow(/plugins\.max-tokens-cap\.max/);
  });
});
