import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

/**
 * A chat client that sets `stream_options.include_usage` reads the usage from the stream's last chunk
 * (`choices: []`, `usage`). A provider that sent none (the gateway then bills from its own count) had left the
 * client without it: it now gets the billed usage's chunk before `[DONE]`.
 */
const t = perTestGateways();

const MODELS = `
  - id: u/gpt
    endpoints: [{ provider: fake-openai, upstream_model: up-gpt, pricing: { prompt: 10, completion: 30 } }]
  - id: u/claude
    endpoints: [{ provider: fake-anthropic, upstream_model: up-claude, pricing: { prompt: 10, completion: 30 } }]
`;
const yaml = () => testConfigYaml(t.upstream.url).replace('pipelines:', `${MODELS}pipelines:`);

const TEXT = 'word '.repeat(40); // 200 characters: 50 tokens
const chunk = (o: Record<string, unknown>) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', ...o })}\n\n`;
const noUsage = (done: boolean) =>
  chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: TEXT }, finish_reason: null }] }) +
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
  (done ? 'data: [DONE]\n\n' : '');
const ask = (model: string, includeUsage: boolean) => ({
  model,
  max_tokens: 100,
  stream: true,
  ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
  messages: [{ role: 'user', content: 'hello there' }],
});

/** The stream's data records, and the ledger row of its request. */
async function streamed(g: TestGateway, body: Record<string, unknown>) {
  const res = await post(`${g.url}/chat/completions`, g.key, body);
  expect(res.status).toBe(200);
  const data = sseEvents(res.text).map((e) => e.data);
  const row = await ledgerRowSoon(g, res.headers.get('x-request-id')!);
  return { data, row: row! };
}

describe('the usage chunk a chat client asked for, when the provider sent none', () => {
  it('comes before [DONE] with the billed usage and cost; a provider that also left out [DONE] too', async () => {
    const g = await t.start({ yaml: yaml() });
    for (const done of [true, false]) {
      t.upstream.scripts.set('up-gpt', [{ kind: 'raw-stream', text: noUsage(done) }]);
      const { data, row } = await streamed(g, ask('u/gpt', true));
      expect(data.at(-1), `[DONE] ${done}`).toBe('[DONE]');
      const last = JSON.parse(data.at(-2)!);
      expect(row, `[DONE] ${done}`).toMatchObject({ status: 'completed', completionTokens: 50 });
      expect(row.promptTokens).toBeGreaterThan(0);
      expect(last).toMatchObject({ id: row.generationId, object: 'chat.completion.chunk', model: 'u/gpt', provider: 'fake-openai', choices: [] });
      expect(last.usage, `[DONE] ${done}`).toMatchObject({
        prompt_tokens: row.promptTokens,
        completion_tokens: 50,
        total_tokens: row.promptTokens + 50,
        cost: row.costUsd,
        is_byok: false,
      });
      expect(row.costUsd).toBeCloseTo((row.promptTokens * 10 + 50 * 30) / 1e6, 12);
    }
  });

  it('a whole answer with no text and no usage is billed its input, and its chunk says so', async () => {
    const g = await t.start({ yaml: yaml() });
    const empty = chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: 'stop' }] }) + 'data: [DONE]\n\n';
    t.upstream.scripts.set('up-gpt', [{ kind: 'raw-stream', text: empty }]);
    const { data, row } = await streamed(g, ask('u/gpt', true));
    expect(row).toMatchObject({ status: 'completed', completionTokens: 0 });
    expect(row.promptTokens).toBeGreaterThan(0);
    expect(row.costUsd).toBeCloseTo((row.promptTokens * 10) / 1e6, 12);
    expect(JSON.parse(data.at(-2)!).usage).toMatchObject({ prompt_tokens: row.promptTokens, completion_tokens: 0, cost: row.costUsd });
  });

  it('not for a client that did not ask for usage', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('up-gpt', [{ kind: 'raw-stream', text: noUsage(true) }]);
    const { data } = await streamed(g, ask('u/gpt', false));
    expect(data.filter((d) => d.includes('"usage"'))).toEqual([]);
    expect(data.at(-1)).toBe('[DONE]');
  });

  it('through translation (an Anthropic-style provider that reported no usage), and as the openai SDK reads it', async () => {
    const g = await t.start({ yaml: yaml() });
    const ev = (name: string, o: Record<string, unknown>) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...o })}\n\n`;
    const text =
      ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'up-claude', content: [], stop_reason: null } }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: TEXT } }) +
      ev('content_block_stop', { index: 0 }) +
      ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null } }) +
      ev('message_stop', {});
    const openai = new OpenAI({ baseURL: g.url, apiKey: g.key, maxRetries: 0 });
    for (const model of ['u/claude', 'u/gpt']) {
      t.upstream.scripts.set(model === 'u/claude' ? 'up-claude' : 'up-gpt', [{ kind: 'raw-stream', text: model === 'u/claude' ? text : noUsage(true) }]);
      const stream = await openai.chat.completions.create({ model, max_tokens: 100, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hello there' }] });
      let usage: any;
      let id = '';
      for await (const c of stream) {
        id = c.id;
        if (c.usage) usage = c.usage;
      }
      const row = await ledgerRowSoon(g, id);
      expect(usage, model).toMatchObject({ prompt_tokens: row!.promptTokens, completion_tokens: 50, cost: row!.costUsd });
    }
  });
});
