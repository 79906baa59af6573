import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

/**
 * Anthropic bills a prompt written to its 1-hour cache at 2× the input price, one written to the 5-minute cache
 * at 1.25× (`usage.cache_creation` splits `cache_creation_input_tokens` by lifetime). Both had been billed at
 * `cache_write`: a 1-hour write went for the price of a 5-minute one.
 */
const t = perTestGateways();

const MODELS = `
  - id: c/claude
    endpoints: [{ provider: fake-anthropic, upstream_model: up-claude, pricing: { prompt: 3, completion: 15, cached_read: 0.3, cache_write: 3.75, cache_write_1h: 6 } }]
  - id: c/five
    endpoints: [{ provider: fake-anthropic, upstream_model: up-five, pricing: { prompt: 3, completion: 15, cache_write: 3.75 } }]
`;
const yaml = () => testConfigYaml(t.upstream.url).replace('pipelines:', `${MODELS}pipelines:`);

// 100 plain, 200 read, 1 000 written (400 for 5 minutes, 600 for 1 hour), 50 out.
const USAGE = {
  input_tokens: 100,
  cache_read_input_tokens: 200,
  cache_creation_input_tokens: 1000,
  cache_creation: { ephemeral_5m_input_tokens: 400, ephemeral_1h_input_tokens: 600 },
  output_tokens: 50,
};
const COST = (100 * 3 + 200 * 0.3 + 400 * 3.75 + 600 * 6 + 50 * 15) / 1e6;
// Without cache_write_1h the 1-hour writes fall back to cache_write.
const COST_FIVE = (100 * 3 + 200 * 3 + 1000 * 3.75 + 50 * 15) / 1e6;

const reply = (model: string) => ({ id: 'msg_1', type: 'message', role: 'assistant', model, content: [{ type: 'text', text: 'Hi.' }], stop_reason: 'end_turn', stop_sequence: null, usage: USAGE });
const ev = (name: string, o: Record<string, unknown>) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...o })}\n\n`;
const stream = (model: string) =>
  ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model, content: [], stop_reason: null, usage: { ...USAGE, output_tokens: 1 } } }) +
  ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
  ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi.' } }) +
  ev('content_block_stop', { index: 0 }) +
  // As Anthropic sends it: message_delta's usage has the cumulative counts, no cache_creation.
  ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { input_tokens: 100, cache_read_input_tokens: 200, cache_creation_input_tokens: 1000, output_tokens: 50 } }) +
  ev('message_stop', {});

const ask = (model: string, path: string, streamed: boolean) => ({
  model,
  max_tokens: 100,
  messages: [{ role: 'user', content: 'hi' }],
  ...(streamed ? { stream: true, ...(path === 'chat/completions' ? { stream_options: { include_usage: true } } : {}) } : {}),
});

describe('1-hour cache writes are billed at cache_write_1h', () => {
  it('JSON and streams, messages and chat clients: the answer, the ledger and GET /key agree', async () => {
    const g = await t.start({ yaml: yaml() });
    let total = 0;
    for (const path of ['messages', 'chat/completions']) {
      for (const streamed of [false, true]) {
        const what = `${path} ${streamed ? 'stream' : 'JSON'}`;
        t.upstream.scripts.set('up-claude', [streamed ? { kind: 'raw-stream', text: stream('up-claude') } : { kind: 'status', status: 200, body: reply('up-claude') }]);
        const res = await post(`${g.url}/${path}`, g.key, ask('c/claude', path, streamed));
        expect(res.status, what).toBe(200);
        let shown: Record<string, any>;
        let id: string;
        if (streamed) {
          const events = sseEvents(res.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
          id = events[0].id ?? events[0].message.id;
          shown = path === 'messages' ? events.find((e) => e.type === 'message_delta').usage : events.find((e) => e.usage).usage;
        } else {
          id = res.json.id;
          shown = res.json.usage;
        }
        const row = await ledgerRowSoon(g, id);
        expect(row, what).toMatchObject({ status: 'completed', promptTokens: 1300, cachedTokens: 200, cacheWriteTokens: 1000, completionTokens: 50 });
        expect(row!.costUsd, what).toBeCloseTo(COST, 12);
        expect(shown.cost, what).toBe(row!.costUsd);
        // A chat client sees the split where the Messages API puts it, under prompt_tokens_details.
        if (path === 'chat/completions') {
          expect(shown.prompt_tokens_details, what).toMatchObject({ cache_write_tokens: 1000, cache_creation: { ephemeral_5m_input_tokens: 400, ephemeral_1h_input_tokens: 600 } });
        }
        total += row!.costUsd;
      }
    }
    const key = (await (await fetch(`${g.url}/key`, { headers: { authorization: `Bearer ${g.key}` } })).json()) as any;
    expect(key.data.usage).toBeCloseTo(total, 9);
  });

  it('without cache_write_1h, 1-hour writes are billed at cache_write', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('up-five', [{ kind: 'status', status: 200, body: reply('up-five') }]);
    const res = await post(`${g.url}/messages`, g.key, ask('c/five', 'messages', false));
    expect(res.json.usage.cost).toBeCloseTo(COST_FIVE, 12);
  });
});
