import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

/**
 * Providers that send a whole answer and then keep the connection open. Their idle timeout is short, so a
 * gateway that went on reading after the terminal event would end the client's stream with a timeout error
 * (and bill the answer as failed) instead of ending it at once.
 */
const yaml = () =>
  testConfigYaml(t.upstream.url)
    .replace('providers:', `providers:
  - { id: held-openai, kind: openai, base_url: ${t.upstream.url}, api_key: sk-held-openai-secret, idle_timeout_ms: 1500 }
  - { id: held-anthropic, kind: anthropic, base_url: ${t.upstream.url}, api_key: sk-held-anthropic-secret, idle_timeout_ms: 1500 }`)
    .replace('pipelines:', `  - { id: held/chat, endpoints: [{ provider: held-openai, upstream_model: held-chat, pricing: { prompt: 1, completion: 2 } }] }
  - { id: held/messages, endpoints: [{ provider: held-anthropic, upstream_model: held-msg, pricing: { prompt: 1, completion: 2 } }] }
pipelines:`);

const sse = (event: string | null, data: unknown) => `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
const chunk = (delta: object, finish: string | null = null, extra: object = {}) =>
  sse(null, { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'held-chat', choices: [{ index: 0, delta, finish_reason: finish }], ...extra });
const CHAT_ANSWER = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hi there' }),
  chunk({}, 'stop'),
  sse(null, { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'held-chat', choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }),
  sse(null, '[DONE]'),
].join('');
const MESSAGES_ANSWER = [
  sse('message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'held-msg', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
  sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
  sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi there' } }),
  sse('content_block_stop', { type: 'content_block_stop', index: 0 }),
  sse('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } }),
  sse('message_stop', { type: 'message_stop' }),
].join('');

let g: TestGateway;
const ask = (path: 'messages' | 'chat/completions', model: string) =>
  post(`${g.url}/${path}`, g.key, { model, max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'hi' }] });

const rowOf = (id: string) => ledgerRowSoon(g, id);

describe('a stream ends at its terminal event, even if the provider keeps the connection open', () => {
  it.each([
    ['chat from a chat provider', 'chat/completions', 'held/chat', 'held-chat', CHAT_ANSWER],
    ['messages from a messages provider', 'messages', 'held/messages', 'held-msg', MESSAGES_ANSWER],
    ['messages from a chat provider (translated)', 'messages', 'held/chat', 'held-chat', CHAT_ANSWER],
    ['chat from a messages provider (translated)', 'chat/completions', 'held/messages', 'held-msg', MESSAGES_ANSWER],
  ] as const)('%s', async (_name, path, model, upstreamModel, text) => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set(upstreamModel, { kind: 'raw-stream', text, hold: true });
    const before = t.upstream.abandoned();
    const r = await ask(path, model);
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    expect(events.filter((e) => e.data === '[DONE]')).toHaveLength(1);
    const data = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    // No in-band error (a timeout after the answer would have added one).
    expect(data.filter((d) => d.error || d.type === 'error')).toEqual([]);
    const text_ = path === 'messages' ? data.filter((d) => d.type === 'content_block_delta').map((d) => d.delta.text).join('') : data.map((d) => d.choices?.[0]?.delta?.content ?? '').join('');
    expect(text_).toBe('Hi there');
    // The gateway closed the provider's held connection itself.
    for (let i = 0; i < 200 && t.upstream.abandoned() === before; i++) await new Promise((res) => setTimeout(res, 10));
    expect(t.upstream.abandoned()).toBe(before + 1);
    const id = data.find((d) => d.id ?? d.message?.id)!;
    const row = await rowOf(id.id ?? id.message.id);
    expect(row?.status).toBe('completed');
    expect(row?.completionTokens).toBe(2);
  });
});

describe('a provider that stalls after the answer finished, before its usage and end', () => {
  // Until the idle timeout (1.5 s here) a stalled tail is waited for; then the whole answer ends as a
  // normal stream, billed from what it relayed (it had ended with an in-band timeout error, billed failed).
  const CHAT_TAIL_STALLED = CHAT_ANSWER.slice(0, CHAT_ANSWER.indexOf('data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"held-chat","choices":[],"usage"'));
  const MESSAGES_TAIL_STALLED = MESSAGES_ANSWER.slice(0, MESSAGES_ANSWER.indexOf('event: message_stop'));
  it.each([
    ['chat from a chat provider', 'chat/completions', 'held/chat', 'held-chat', CHAT_TAIL_STALLED],
    ['chat from a messages provider (translated)', 'chat/completions', 'held/messages', 'held-msg', MESSAGES_TAIL_STALLED],
    ['messages from a messages provider', 'messages', 'held/messages', 'held-msg', MESSAGES_TAIL_STALLED],
    ['messages from a chat provider (translated)', 'messages', 'held/chat', 'held-chat', CHAT_TAIL_STALLED],
  ] as const)('%s', async (_name, path, model, upstreamModel, text) => {
    expect(text.length).toBeGreaterThan(0);
    expect(text).toContain('Hi there');
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set(upstreamModel, { kind: 'raw-stream', text, hold: true });
    const r = await ask(path, model);
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    const data = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(data.filter((d) => d.error || d.type === 'error')).toEqual([]);
    if (path === 'chat/completions') {
      expect(data.map((d) => d.choices?.[0]?.delta?.content ?? '').join('')).toBe('Hi there');
      expect(data.some((d) => d.choices?.[0]?.finish_reason === 'stop')).toBe(true);
    } else {
      expect(data.filter((d) => d.type === 'content_block_delta').map((d) => d.delta.text).join('')).toBe('Hi there');
      expect(data.find((d) => d.type === 'message_delta')?.delta.stop_reason).toBe('end_turn');
      expect(data.at(-1).type).toBe('message_stop');
      expect(data.filter((d) => d.type === 'message_stop')).toHaveLength(1);
    }
    const first = data[0];
    const row = await rowOf(first.id ?? first.message.id);
    expect(row?.status).toBe('completed');
    expect(row?.completionTokens).toBe(2);
  });

  it('a stall before any finish_reason still ends with the in-band error', async () => {
    g = await t.start({ yaml: yaml() });
    const unfinished = CHAT_ANSWER.slice(0, CHAT_ANSWER.indexOf('"finish_reason":"stop"'));
    t.upstream.always.set('held-chat', { kind: 'raw-stream', text: unfinished.slice(0, unfinished.lastIndexOf('data:')), hold: true });
    const r = await ask('chat/completions', 'held/chat');
    const data = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(data.at(-1).error.metadata.error_type).toBe('timeout');
    expect(data.at(-1).choices[0].finish_reason).toBe('error');
    expect((await rowOf(data[0].id))?.status).toBe('failed');
  });
});

describe('a translated stream whose chat provider reported no usage', () => {
  it('is billed from what it relayed (as a chat client is), not as zero tokens', async () => {
    g = await t.start({ yaml: yaml() });
    const noUsage = [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Sixteen chars!!!' }), chunk({}, 'stop'), sse(null, '[DONE]')].join('');
    t.upstream.always.set('held-chat', { kind: 'raw-stream', text: noUsage });
    const rows = [];
    for (const path of ['messages', 'chat/completions'] as const) {
      const events = sseEvents((await ask(path, 'held/chat')).text);
      const data = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
      expect(data.filter((d) => d.error || d.type === 'error')).toEqual([]);
      const first = data[0];
      rows.push(await rowOf(first.id ?? first.message.id));
    }
    const [messages, chat] = rows;
    expect(messages?.status).toBe('completed');
    expect(messages?.completionTokens).toBe(4); // 16 characters at 4 per token
    expect(messages?.promptTokens).toBeGreaterThan(0); // the request, counted with the tokenizer
    expect(messages?.costUsd).toBeGreaterThan(0);
    // The same answer costs a messages client what it costs a chat client.
    expect({ p: messages?.promptTokens, c: messages?.completionTokens, usd: messages?.costUsd }).toEqual({ p: chat?.promptTokens, c: chat?.completionTokens, usd: chat?.costUsd });
  });
});

describe('a JSON answer whose provider reported no usage', () => {
  it('is billed from the request and the answer, in either client style (was free)', async () => {
    g = await t.start({ yaml: yaml() });
    const answer = { id: 'c1', object: 'chat.completion', created: 1, model: 'held-chat', choices: [{ index: 0, message: { role: 'assistant', content: 'Sixteen chars!!!' }, finish_reason: 'stop' }] };
    t.upstream.always.set('held-chat', { kind: 'status', status: 200, body: answer });
    const rows = [];
    for (const path of ['chat/completions', 'messages'] as const) {
      const r = await post(`${g.url}/${path}`, g.key, { model: 'held/chat', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
      expect(r.status).toBe(200);
      const row = await rowOf(r.json.id);
      rows.push(row);
      // The answer shows what is billed (it had zeros, or no usage, while the ledger held the estimate).
      const u = r.json.usage;
      const shown = path === 'chat/completions' ? [u.prompt_tokens, u.completion_tokens] : [u.input_tokens, u.output_tokens];
      expect([...shown, u.cost]).toEqual([row!.promptTokens, row!.completionTokens, row!.costUsd]);
    }
    const [chat, messages] = rows;
    expect(chat).toMatchObject({ status: 'completed', completionTokens: 4 });
    expect(chat!.promptTokens).toBeGreaterThan(0);
    expect(chat!.costUsd).toBeGreaterThan(0);
    expect({ p: messages?.promptTokens, c: messages?.completionTokens, usd: messages?.costUsd }).toEqual({ p: chat!.promptTokens, c: chat!.completionTokens, usd: chat!.costUsd });
  });
});

describe('a chat stream translated from a messages provider that dies mid-stream', () => {
  it("is billed the input count the provider's message_start gave, not the tokenizer's", async () => {
    g = await t.start({ yaml: yaml() });
    const start = sse('message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'held-msg', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1234, output_tokens: 1 } } });
    const text = [
      sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
      sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Sixteen chars!!!' } }),
    ].join('');
    t.upstream.always.set('held-msg', { kind: 'raw-stream', text: start + text, destroy: true });
    const events = sseEvents((await ask('chat/completions', 'held/messages')).text);
    const data = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(data.some((d) => d.error)).toBe(true); // the in-band error of a stream cut short
    const row = await rowOf(data[0].id);
    expect(row).toMatchObject({ status: 'failed', promptTokens: 1234, completionTokens: 4 });
  });
});

describe('what a same-style stream passes on', () => {
  it('a write of 16 KB or more that drains at once does not hang the stream (the drain was awaited after it came)', async () => {
    g = await t.start({ yaml: yaml() });
    const big = 'x'.repeat(20_000);
    const parts = [chunk({ role: 'assistant', content: '' }), chunk({ content: big }), chunk({ content: 'y' }), chunk({}, 'stop'), sse(null, '[DONE]')];
    t.upstream.always.set('held-chat', { kind: 'raw-parts', parts, gapMs: 30 });
    const r = await ask('chat/completions', 'held/chat');
    const data = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(data.map((d) => d.choices?.[0]?.delta?.content ?? '').join('')).toBe(`${big}y`);
    expect(data.some((d) => d.error)).toBe(false);
    expect((await rowOf(data[0].id))?.status).toBe('completed');
  });

  it('chat: a named event (event: ping) and data that is no chunk are not passed on', async () => {
    g = await t.start({ yaml: yaml() });
    const ping = 'event: ping\ndata: {}\n\n';
    t.upstream.always.set('held-chat', { kind: 'raw-stream', text: [chunk({ role: 'assistant', content: '' }), ping, chunk({ content: 'Hi' }), sse(null, {}), chunk({}, 'stop'), sse(null, '[DONE]')].join('') });
    const data = sseEvents((await ask('chat/completions', 'held/chat')).text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    for (const d of data) expect(d.object).toBe('chat.completion.chunk');
    expect(data.map((d) => d.choices?.[0]?.delta?.content ?? '').join('')).toBe('Hi');
  });

  it('[DONE] after output but before any finish ends with the in-band error and a failed row, in both styles', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('held-chat', { kind: 'raw-stream', text: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hel' }), sse(null, '[DONE]')].join('') });
    const chat = sseEvents((await ask('chat/completions', 'held/chat')).text);
    const chatData = chat.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chatData.filter((d) => d.error)).toHaveLength(1);
    expect((await rowOf(chatData[0].id))?.status).toBe('failed');

    const start = sse('message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'held-msg', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } });
    const block = sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    const delta = sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } });
    t.upstream.always.set('held-msg', { kind: 'raw-stream', text: start + block + delta + sse(null, '[DONE]') });
    const messages = sseEvents((await ask('messages', 'held/messages')).text);
    expect(messages.filter((e) => e.event === 'error')).toHaveLength(1);
    expect(messages.filter((e) => e.event === 'message_stop')).toHaveLength(0);
    const id = JSON.parse(messages.find((e) => e.event === 'message_start')!.data).message.id;
    expect((await rowOf(id))?.status).toBe('failed');
  });
});

describe('a chat stream with n > 1 choices', () => {
  const choice = (index: number, delta: object, finish: string | null = null) =>
    sse(null, { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'held-chat', choices: [{ index, delta, finish_reason: finish }] });
  const askTwo = () => post(`${g.url}/chat/completions`, g.key, { model: 'held/chat', n: 2, stream: true, messages: [{ role: 'user', content: 'hi' }] });
  const begun = [choice(0, { role: 'assistant', content: 'A' }), choice(1, { role: 'assistant', content: 'B' }), choice(0, {}, 'stop')].join('');

  it.each([
    ['the connection is cut', { kind: 'raw-stream', text: begun, destroy: true }],
    ['the provider sends [DONE]', { kind: 'raw-stream', text: begun + sse(null, '[DONE]') }],
  ] as const)('is not whole while a choice that began has no finish_reason: %s', async (_name, fault) => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('held-chat', fault);
    const data = sseEvents((await askTwo()).text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    // It had ended as a clean [DONE], billed completed, with choice 1 unfinished.
    expect(data.filter((d) => d.error)).toHaveLength(1);
    expect(data.at(-1).choices[0].finish_reason).toBe('error');
    expect((await rowOf(data[0].id))?.status).toBe('failed');
  });

  it('is whole once every choice finished (and when the provider gave only one choice)', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('held-chat', { kind: 'raw-stream', text: begun + choice(1, {}, 'length'), destroy: true });
    const data = sseEvents((await askTwo()).text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(data.filter((d) => d.error)).toEqual([]);
    expect(data.map((d) => [d.choices[0].index, d.choices[0].finish_reason])).toEqual([[0, null], [1, null], [0, 'stop'], [1, 'length']]);
    expect((await rowOf(data[0].id))?.status).toBe('completed');
    t.upstream.always.set('held-chat', { kind: 'raw-stream', text: choice(0, { role: 'assistant', content: 'A' }) + choice(0, {}, 'stop') + sse(null, '[DONE]') });
    const one = sseEvents((await askTwo()).text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(one.filter((d) => d.error)).toEqual([]);
    expect((await rowOf(one[0].id))?.status).toBe('completed');
  });
});
