import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

/**
 * What a provider reports as used is billed only within what the request allowed, and an answer with text is
 * never billed as no output (found by a billing audit: 10^15 output tokens were billed $3·10^10; a negative
 * or zero output count gave 2 000 characters away).
 */
const t = perTestGateways();

const MODELS = `
  - id: b/capped
    max_output_tokens: 100
    context_length: 1000
    endpoints: [{ provider: fake-openai, upstream_model: up-capped, pricing: { prompt: 10, completion: 30 } }]
  - id: b/claude
    max_output_tokens: 100
    context_length: 1000
    endpoints: [{ provider: fake-anthropic, upstream_model: up-claude, pricing: { prompt: 10, completion: 30 } }]
  - id: b/open
    endpoints: [{ provider: fake-openai, upstream_model: up-open, pricing: { prompt: 10, completion: 30 } }]
  - id: b/wide
    context_length: 1000
    endpoints: [{ provider: fake-openai, upstream_model: up-wide, pricing: { prompt: 10, completion: 30 } }]
`;
const yaml = () => testConfigYaml(t.upstream.url).replace('pipelines:', `${MODELS}pipelines:`);

const TEXT = 'word '.repeat(400); // 2 000 characters
const answer = (model: string, usage: Record<string, unknown>) => ({
  id: 'chatcmpl-x', object: 'chat.completion', created: 1, model,
  choices: [{ index: 0, message: { role: 'assistant', content: TEXT }, finish_reason: 'stop' }],
  usage,
});
const chunk = (o: Record<string, unknown>) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', ...o })}\n\n`;

async function rowOf(g: TestGateway, res: { json: any; headers: Headers }) {
  const id = res.json?.id ?? res.headers.get('x-request-id');
  return g.ledgerRow(id);
}

describe('provider usage is billed within what the request allowed', () => {
  it('JSON: output above the limit the provider was given (the client max_tokens within the model ceiling) is billed at that limit; input at the context', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('up-capped', [{ kind: 'status', status: 200, body: answer('up-capped', { prompt_tokens: 5000, completion_tokens: 1e15 }) }]);
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'b/capped', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    const row = await rowOf(g, res);
    expect(row).toMatchObject({ promptTokens: 1000, completionTokens: 50 });
    expect(row!.costUsd).toBeCloseTo((1000 * 10 + 50 * 30) / 1e6, 12);
    // The answer says what is billed.
    expect(res.json.usage).toMatchObject({ prompt_tokens: 1000, completion_tokens: 50, cost: row!.costUsd });
  });

  it('JSON: with no limit anywhere, the absurd is still cut (100 M tokens)', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('up-open', [{ kind: 'status', status: 200, body: answer('up-open', { prompt_tokens: 10, completion_tokens: 1e15 }) }]);
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'b/open', messages: [{ role: 'user', content: 'hi' }] });
    expect((await rowOf(g, res))!.completionTokens).toBe(100_000_000);
  });

  it("JSON: a client's huge max_tokens on a model without max_output_tokens does not lift the bound: the context, else 100 M tokens", async () => {
    const g = await t.start({ yaml: yaml() });
    const ask = { max_tokens: 1e19, messages: [{ role: 'user', content: 'hi' }] };
    t.upstream.scripts.set('up-wide', [{ kind: 'status', status: 200, body: answer('up-wide', { prompt_tokens: 10, completion_tokens: 1e19 }) }]);
    const wide = await post(`${g.url}/chat/completions`, g.key, { model: 'b/wide', ...ask });
    expect(wide.status).toBe(200);
    const wideRow = await rowOf(g, wide);
    expect(wideRow).toMatchObject({ promptTokens: 10, completionTokens: 1000 });
    expect(wide.json.usage).toMatchObject({ completion_tokens: 1000, cost: wideRow!.costUsd });

    t.upstream.scripts.set('up-open', [{ kind: 'status', status: 200, body: answer('up-open', { prompt_tokens: 10, completion_tokens: 1e19 }) }]);
    const open = await post(`${g.url}/chat/completions`, g.key, { model: 'b/open', n: 2, ...ask });
    expect(open.status).toBe(200);
    expect((await rowOf(g, open))!.completionTokens).toBe(2 * 100_000_000);
  });

  it('JSON: a negative, non-numeric or zero output count for an answer with text is billed from the text', async () => {
    const g = await t.start({ yaml: yaml() });
    for (const completion of [-1_000_000, '500', 0]) {
      t.upstream.scripts.set('up-open', [{ kind: 'status', status: 200, body: answer('up-open', { prompt_tokens: 10, completion_tokens: completion }) }]);
      const res = await post(`${g.url}/chat/completions`, g.key, { model: 'b/open', messages: [{ role: 'user', content: 'hi' }] });
      const row = await rowOf(g, res);
      expect(row, String(completion)).toMatchObject({ promptTokens: 10, completionTokens: 500 });
      expect(res.json.usage.completion_tokens).toBe(500);
    }
  });

  it('a missing, zero, negative or non-numeric input count is billed the request\'s input (the prompt had been free), JSON and stream', async () => {
    const g = await t.start({ yaml: yaml() });
    const prompt = 'word '.repeat(400); // ~400 tokens
    const ask = (stream: boolean) => ({ model: 'b/open', stream, messages: [{ role: 'user', content: prompt }] });
    for (const input of [undefined, 0, -1_000_000, '400']) {
      const usage = { prompt_tokens: input, completion_tokens: 500 };
      t.upstream.scripts.set('up-open', [{ kind: 'status', status: 200, body: answer('up-open', usage) }]);
      const res = await post(`${g.url}/chat/completions`, g.key, ask(false));
      const row = await rowOf(g, res);
      expect(row!.promptTokens, `JSON ${input}`).toBeGreaterThan(390);
      expect(res.json.usage, `JSON ${input}`).toMatchObject({ prompt_tokens: row!.promptTokens, cost: row!.costUsd });

      const text = chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: TEXT }, finish_reason: 'stop' }] }) + chunk({ choices: [], usage }) + 'data: [DONE]\n\n';
      t.upstream.scripts.set('up-open', [{ kind: 'raw-stream', text }]);
      const streamed = await post(`${g.url}/chat/completions`, g.key, { ...ask(true), stream_options: { include_usage: true } });
      const shown = sseEvents(streamed.text).filter((e) => e.data.includes('"usage":{')).map((e) => JSON.parse(e.data).usage)[0];
      const streamedRow = await ledgerRowSoon(g, streamed.headers.get('x-request-id')!);
      expect(streamedRow, `stream ${input}`).toMatchObject({ status: 'completed', promptTokens: row!.promptTokens, completionTokens: 500 });
      expect(shown, `stream ${input}`).toMatchObject({ prompt_tokens: row!.promptTokens, cost: streamedRow!.costUsd });
    }
  });

  it('streams: a reported zero output for relayed text is billed from the text; output above the limit is billed at it', async () => {
    const g = await t.start({ yaml: yaml() });
    const stream = (usage: Record<string, unknown>) =>
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }) +
      chunk({ choices: [{ index: 0, delta: { content: TEXT }, finish_reason: null }] }) +
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
      chunk({ choices: [], usage }) +
      'data: [DONE]\n\n';
    t.upstream.scripts.set('up-open', [{ kind: 'raw-stream', text: stream({ prompt_tokens: 10, completion_tokens: 0 }) }]);
    const zero = await post(`${g.url}/chat/completions`, g.key, { model: 'b/open', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(zero.status).toBe(200);
    const zeroRow = await ledgerRowSoon(g, zero.headers.get('x-request-id')!);
    expect(zeroRow).toMatchObject({ status: 'completed', promptTokens: 10, completionTokens: 500 });

    t.upstream.scripts.set('up-capped', [{ kind: 'raw-stream', text: stream({ prompt_tokens: 10, completion_tokens: 1e12 }) }]);
    const big = await post(`${g.url}/chat/completions`, g.key, { model: 'b/capped', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const bigRow = await ledgerRowSoon(g, big.headers.get('x-request-id')!);
    expect(bigRow).toMatchObject({ status: 'completed', completionTokens: 100 });
    expect(bigRow!.costUsd).toBeCloseTo((10 * 10 + 100 * 30) / 1e6, 12);
  });

  it("streams: a messages provider whose message_delta reports no output (none, or 0) is billed from the text, not message_start's opening 1", async () => {
    const g = await t.start({ yaml: yaml() });
    const ev = (name: string, o: Record<string, unknown>) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...o })}\n\n`;
    const stream = (final: Record<string, unknown>) =>
      ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-upstream', content: [], stop_reason: null, usage: { input_tokens: 10, output_tokens: 1 } } }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: TEXT } }) +
      ev('content_block_stop', { index: 0 }) +
      ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, ...final }) +
      ev('message_stop', {});
    for (const final of [{}, { usage: { output_tokens: 0 } }]) {
      for (const path of ['messages', 'chat/completions']) {
        t.upstream.scripts.set('claude-upstream', [{ kind: 'raw-stream', text: stream(final) }]);
        const res = await post(`${g.url}/${path}`, g.key, { model: 'fake/claude', max_tokens: 1000, stream: true, messages: [{ role: 'user', content: 'hi' }] });
        const first = JSON.parse(sseEvents(res.text)[0].data);
        const row = await ledgerRowSoon(g, first.id ?? first.message.id);
        expect(row, `${path} ${JSON.stringify(final)}`).toMatchObject({ status: 'completed', promptTokens: 10, completionTokens: 500 });
      }
    }
  });

  it('streams: the usage chunk and message_delta say what is billed, not the figures the provider reported', async () => {
    const g = await t.start({ yaml: yaml() });
    const stream = (usage: Record<string, unknown>) =>
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: TEXT }, finish_reason: null }] }) +
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
      chunk({ choices: [], usage }) +
      'data: [DONE]\n\n';
    const cases = [
      { model: 'capped', usage: { prompt_tokens: 10, completion_tokens: 1e12 }, completion: 100 }, // above the model's max_output_tokens
      { model: 'open', usage: { prompt_tokens: 10, completion_tokens: 0 }, completion: 500 }, // no output for 2 000 characters
    ];
    for (const { model, usage, completion } of cases) {
      for (const path of ['chat/completions', 'messages']) {
        t.upstream.scripts.set(`up-${model}`, [{ kind: 'raw-stream', text: stream(usage) }]);
        const body = { model: `b/${model}`, max_tokens: 1000, stream: true, stream_options: path === 'messages' ? undefined : { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] };
        const res = await post(`${g.url}/${path}`, g.key, body);
        const events = sseEvents(res.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
        const id = events[0].id ?? events[0].message.id;
        const shown = path === 'messages' ? events.find((e) => e.type === 'message_delta').usage : events.find((e) => e.usage).usage;
        const row = await ledgerRowSoon(g, id);
        const what = `${path} ${JSON.stringify(usage)}`;
        expect(row, what).toMatchObject({ status: 'completed', promptTokens: 10, completionTokens: completion });
        expect(shown.cost, what).toBe(row!.costUsd);
        expect(shown[path === 'messages' ? 'output_tokens' : 'completion_tokens'], what).toBe(completion);
      }
    }
  });

  it('streams: the usage chunk a client asked for says what is billed, as a JSON answer does (it gave the reported figures and their cost)', async () => {
    const g = await t.start({ yaml: yaml() });
    const usage = { prompt_tokens: 10, completion_tokens: 5000, total_tokens: 5010, prompt_tokens_details: { cached_tokens: 0 } };
    const text =
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' }, finish_reason: null }] }) +
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'length' }] }) +
      chunk({ choices: [], usage }) +
      'data: [DONE]\n\n';
    t.upstream.scripts.set('up-capped', [{ kind: 'raw-stream', text }]);
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'b/capped', max_tokens: 50, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] });
    const row = await ledgerRowSoon(g, res.headers.get('x-request-id')!);
    expect(row).toMatchObject({ status: 'completed', completionTokens: 50 });
    const last = JSON.parse(res.text.split('\n\n').filter((b) => b.startsWith('data: {')).at(-1)!.slice(6));
    expect(last.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 50, total_tokens: 60, cost: row!.costUsd });
    // Within the bound, the provider's usage object is passed on as it is.
    t.upstream.scripts.set('up-capped', [{ kind: 'raw-stream', text: text.replace('"completion_tokens":5000,"total_tokens":5010', '"completion_tokens":40,"total_tokens":50') }]);
    const fine = await post(`${g.url}/chat/completions`, g.key, { model: 'b/capped', max_tokens: 50, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] });
    const fineLast = JSON.parse(fine.text.split('\n\n').filter((b) => b.startsWith('data: {')).at(-1)!.slice(6));
    expect(fineLast.usage).toEqual({ prompt_tokens: 10, completion_tokens: 40, total_tokens: 50, prompt_tokens_details: { cached_tokens: 0 }, cost: (10 * 10 + 40 * 30) / 1e6, is_byok: false });
  });

  it("an Anthropic server-side loop's usage (usage.iterations: one entry per model call) is bounded per call, when the request let the provider loop", async () => {
    const g = await t.start({ yaml: yaml() });
    const iteration = { type: 'message', input_tokens: 800, output_tokens: 50, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
    const usage = { input_tokens: 2400, output_tokens: 150, iterations: [iteration, iteration, iteration] };
    const reply = { id: 'msg_1', type: 'message', role: 'assistant', model: 'up-claude', content: [{ type: 'text', text: 'Hi.' }], stop_reason: 'end_turn', stop_sequence: null, usage };
    const ask = async (extra: Record<string, unknown>) => {
      t.upstream.scripts.set('up-claude', [{ kind: 'status', status: 200, body: reply }]);
      const res = await post(`${g.url}/messages`, g.key, { model: 'b/claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], ...extra });
      expect(res.status).toBe(200);
      return rowOf(g, res);
    };
    // Three calls of a web search loop: each within the context and the output limit, billed whole.
    const looped = await ask({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] });
    expect(looped).toMatchObject({ promptTokens: 2400, completionTokens: 150 });
    expect(looped!.costUsd).toBeCloseTo((2400 * 10 + 150 * 30) / 1e6, 12);
    // A request that lets the provider make no more than one call is bounded as one, whatever it claims.
    expect(await ask({})).toMatchObject({ promptTokens: 1000, completionTokens: 100 });
  });

  it("a messages provider's stream: message_delta says what is billed when the provider reported more than the request allowed", async () => {
    const g = await t.start({ yaml: yaml() });
    const ev = (type: string, o: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...o })}\n\n`;
    const text = [
      ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } } }),
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi.' } }),
      ev('content_block_stop', { index: 0 }),
      ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 1e12 } }),
      ev('message_stop', {}),
    ].join('');
    t.upstream.scripts.set('up-claude', [{ kind: 'raw-stream', text }]);
    const res = await post(`${g.url}/messages`, g.key, { model: 'b/claude', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const events = sseEvents(res.text);
    const delta = JSON.parse(events.find((e) => e.event === 'message_delta')!.data);
    const row = await ledgerRowSoon(g, JSON.parse(events[0].data).message.id);
    expect(row).toMatchObject({ status: 'completed', promptTokens: 10, completionTokens: 100 });
    expect(delta.usage).toMatchObject({ input_tokens: 10, output_tokens: 100, cost: row!.costUsd });
  });
});
