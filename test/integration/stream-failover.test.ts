import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

/** One model per dialect with two endpoints: the first one misbehaves (scripted per test), the second answers. */
const PAIRS = `
  - id: pair/chat
    endpoints:
      - { provider: fake-openai, upstream_model: first-chat, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-openai, upstream_model: second-chat, pricing: { prompt: 1, completion: 2 } }
  - id: mixed/chat
    endpoints:
      - { provider: fake-openai, upstream_model: first-chat, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-anthropic, upstream_model: second-msg, pricing: { prompt: 5, completion: 10 } }
  - id: pair/messages
    endpoints:
      - { provider: fake-anthropic, upstream_model: first-msg, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-anthropic, upstream_model: second-msg, pricing: { prompt: 1, completion: 2 } }
`;
const yaml = () => testConfigYaml(t.upstream.url).replace('pipelines:', `${PAIRS}pipelines:`);

const sse = (event: string | null, data: unknown) => `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
const MESSAGE_START = sse('message_start', { type: 'message_start', message: { id: 'msg_up', type: 'message', role: 'assistant', model: 'first-msg', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 6, output_tokens: 1 } } });
const OVERLOADED = sse('error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
const ROLE_CHUNK = sse(null, { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'first-chat', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
const chatText = (text: string) => sse(null, { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'first-chat', choices: [{ index: 0, delta: { content: text }, finish_reason: null }] });

let g: TestGateway;
const ask = (path: 'messages' | 'chat/completions') =>
  post(`${g.url}/${path}`, g.key, { model: path === 'messages' ? 'pair/messages' : 'pair/chat', max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'hi' }] }, { 'x-gateway-metadata': 'enabled' });
const upstreamModels = () => t.upstream.received.map((r) => r.body.model);

describe('streams fail over until the answer begins (spec 7.5.2)', () => {
  it('messages: a 200 whose first event is an error (overloaded) goes to the next endpoint; the client sees only its answer', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('first-msg', [{ kind: 'raw-stream', text: MESSAGE_START + OVERLOADED }]);
    const r = await ask('messages');
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(events.filter((e) => e.event === 'error')).toEqual([]);
    expect(events.filter((e) => e.event === 'message_start')).toHaveLength(1);
    expect(events.at(-1)!.data).toBe('[DONE]');
    expect(upstreamModels()).toEqual(['first-msg', 'second-msg']);
    const start = JSON.parse(events.find((e) => e.event === 'message_start')!.data);
    expect(start.message.gateway_metadata.attempts).toEqual([
      expect.objectContaining({ attempt: 1, outcome: 'error', error_type: 'provider_overloaded' }),
      expect.objectContaining({ attempt: 2, outcome: 'success' }),
    ]);
  });

  it('a chat client of a messages provider that fails after output: the in-band error names no provider_code (the provider sent none)', async () => {
    g = await t.start({ yaml: yaml() });
    const text = sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }) +
      sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Partial' } });
    t.upstream.scripts.set('first-msg', [{ kind: 'raw-stream', text: MESSAGE_START + text + OVERLOADED }]);
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'pair/messages', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const chunks = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    const failure = chunks.find((c) => c.error)!;
    expect(failure.error.metadata.error_type).toBe('provider_overloaded');
    expect(failure.error.metadata).not.toHaveProperty('provider_code');
  });

  it('chat: a role chunk and then a dropped connection, a stream that ends, or [DONE] before any output, fail over', async () => {
    // Each fault is a failure of the first endpoint: its breaker must stay closed for the next fault's turn.
    g = await t.start({ yaml: `${yaml()}routing: { circuit_breaker: { failure_threshold: 100 } }\n` });
    const faults = [
      { kind: 'raw-stream', text: ROLE_CHUNK, destroy: true },
      { kind: 'raw-stream', text: ROLE_CHUNK },
      { kind: 'raw-stream', text: ROLE_CHUNK + sse(null, '[DONE]') },
      { kind: 'raw-stream', text: sse(null, '[DONE]') },
    ] as const;
    for (const fault of faults) {
      t.upstream.received.length = 0;
      t.upstream.always.set('first-chat', fault);
      const r = await ask('chat/completions');
      expect(r.status).toBe(200);
      const chunks = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
      expect(chunks.some((c) => c.error)).toBe(false);
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello from the fake upstream.');
      // The endpoint that broke the answer it had begun is not asked again: the next one answers.
      expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);
    }
  });

  it("when every endpoint fails, the in-band error is the failure of the endpoint it names (it had been another endpoint's)", async () => {
    g = await t.start({ yaml: yaml() });
    // fake-openai accepts the stream and breaks it before output; fake-anthropic then answers 503.
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK, destroy: true }]);
    t.upstream.scripts.set('second-msg', [{ kind: 'status', status: 503 }]);
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'mixed/chat', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(200);
    expect(upstreamModels()).toEqual(['first-chat', 'second-msg']);
    const failure = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data)).find((c) => c.error)!;
    expect(failure.provider).toBe('fake-openai');
    expect(failure.error).toMatchObject({ code: 502, message: 'Provider fake-openai broke off its answer (connection lost)', metadata: { error_type: 'provider_unavailable' } });
    expect(failure.error.metadata).not.toHaveProperty('provider_code');
    // The row names that endpoint too: failed, nothing delivered.
    const row = await ledgerRowSoon(g, failure.id);
    expect(row).toMatchObject({ status: 'failed', provider: 'fake-openai' });
  });

  it('when every endpoint fails before output, the stream still carries the debug echoes and routing metadata asked for (it had only the error)', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK, destroy: true }]);
    t.upstream.scripts.set('second-msg', [{ kind: 'status', status: 503 }]);
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'mixed/chat', stream: true, debug: { echo_upstream_body: true }, messages: [{ role: 'user', content: 'hi' }] }, { 'x-gateway-metadata': 'enabled' });
    expect(r.status).toBe(200);
    const chunks = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    // Spec 6.1: one debug chunk per attempted provider, then the metadata chunk, as a stream that succeeds has.
    expect(chunks.map((c) => (c.debug ? `debug ${c.provider}` : c.gateway_metadata ? 'metadata' : c.error ? 'error' : 'other'))).toEqual(['debug fake-openai', 'debug fake-anthropic', 'metadata', 'error']);
    expect(chunks[2].gateway_metadata.attempts).toEqual([
      expect.objectContaining({ attempt: 1, provider: 'fake-openai', outcome: 'error' }),
      expect.objectContaining({ attempt: 2, provider: 'fake-anthropic', outcome: 'error', error_type: 'provider_overloaded', status: 503 }),
    ]);
    expect(chunks[2].gateway_metadata.summary).toBe('no endpoint answered after 2 attempt(s)');

    // Messages: no message_start is sent, so the metadata rides in the error event, as in the messages error envelope (7.3).
    t.upstream.always.set('first-msg', { kind: 'raw-stream', text: MESSAGE_START + OVERLOADED });
    t.upstream.always.set('second-msg', { kind: 'raw-stream', text: MESSAGE_START + OVERLOADED });
    const m = sseEvents((await ask('messages')).text);
    expect(m.map((e) => e.event ?? null)).toEqual(['error', null]);
    const error = JSON.parse(m[0].data);
    expect(error.error.error_type).toBe('provider_overloaded');
    expect(error.gateway_metadata.attempts.map((a: { outcome: string }) => a.outcome)).toEqual(['error', 'error']);
  });

  it('messages: a provider sending over 10 000 pings before any output fails over (the pings were held without bound)', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('first-msg', { kind: 'raw-stream', text: MESSAGE_START + sse('ping', { type: 'ping' }).repeat(10_001), hold: true });
    const r = await ask('messages');
    expect(r.status).toBe(200);
    // None of the first endpoint's pings reach the client (the second's own stream has its one).
    expect(sseEvents(r.text).filter((e) => e.event === 'ping').length).toBeLessThan(2);
    expect(upstreamModels()).toEqual(['first-msg', 'second-msg']);
    const start = sseEvents(r.text).find((e) => e.event === 'message_start')!;
    expect(JSON.parse(start.data).message.gateway_metadata.attempts[0]).toMatchObject({ outcome: 'error', error_type: 'provider_unavailable' });
  });

  it('a body that ends inside an event (cut just after a `}`) fails over before output and ends in the in-band error after it; the broken chunk never reaches the client', async () => {
    g = await t.start({ yaml: `${yaml()}routing: { circuit_breaker: { failure_threshold: 100 } }\n` });
    const cutText = chatText('Hel').trimEnd().replace(/,"finish_reason":null\}\]\}$/, '}');
    expect(cutText.endsWith('}')).toBe(true);
    // Before output: the first content chunk is the cut one.
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK + cutText }]);
    const before = await ask('chat/completions');
    const chunks = sseEvents(before.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chunks.some((c) => c.error)).toBe(false);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello from the fake upstream.');
    expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);
    // After output: the chunk before the cut went out; the stream ends with the error chunk, every data line JSON.
    t.upstream.received.length = 0;
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK + chatText('Hel') + cutText }]);
    const after = sseEvents((await ask('chat/completions')).text);
    const parsed = after.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(parsed.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hel');
    expect(parsed.filter((c) => c.error)).toEqual([expect.objectContaining({ error: expect.objectContaining({ metadata: expect.objectContaining({ error_type: 'provider_unavailable' }) }) })]);
    expect(after.at(-1)!.data).toBe('[DONE]');
    expect(upstreamModels()).toEqual(['first-chat']);
    // Messages: a content_block_delta cut the same way after output.
    t.upstream.received.length = 0;
    const blockStart = sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    const delta = sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } });
    const cutDelta = delta.trimEnd().slice(0, -1);
    expect(cutDelta.endsWith('}')).toBe(true);
    t.upstream.scripts.set('first-msg', [{ kind: 'raw-stream', text: MESSAGE_START + blockStart + delta + cutDelta }]);
    const messages = sseEvents((await ask('messages')).text);
    for (const e of messages) if (e.data !== '[DONE]') expect(() => JSON.parse(e.data), e.data).not.toThrow();
    expect(messages.filter((e) => e.event === 'content_block_delta')).toHaveLength(1);
    expect(messages.filter((e) => e.event === 'error')).toHaveLength(1);
    expect(upstreamModels()).toEqual(['first-msg']);
  });

  it('once output has reached the client, a provider error ends the stream with one well-formed error (no failover)', async () => {
    g = await t.start({ yaml: yaml() });
    const upstreamError = sse(null, { error: { message: 'upstream exploded', code: 502 } });
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK + chatText('Hel') + upstreamError }]);
    const chat = sseEvents((await ask('chat/completions')).text);
    const errors = chat.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data)).filter((c) => c.error);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({
      object: 'chat.completion.chunk',
      model: 'pair/chat',
      error: { code: 502, metadata: { error_type: 'provider_unavailable', provider_code: 502 } },
      choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
    });
    expect(chat.at(-1)!.data).toBe('[DONE]');
    expect(upstreamModels()).toEqual(['first-chat']);

    t.upstream.received.length = 0;
    const delta = sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } });
    const blockStart = sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    t.upstream.scripts.set('first-msg', [{ kind: 'raw-stream', text: MESSAGE_START + blockStart + delta + OVERLOADED }]);
    const messages = sseEvents((await ask('messages')).text);
    const errorEvents = messages.filter((e) => e.event === 'error');
    expect(errorEvents).toHaveLength(1);
    expect(JSON.parse(errorEvents[0].data)).toEqual({ type: 'error', error: { type: 'overloaded_error', message: expect.any(String), error_type: 'provider_overloaded' } });
    expect(messages.at(-1)!.data).toBe('[DONE]');
    expect(upstreamModels()).toEqual(['first-msg']);
  });

  it('chat: a choice finished "error" without an error member is a failure, not a finish: failover before output, the error chunk after', async () => {
    g = await t.start({ yaml: yaml() });
    const errorFinish = sse(null, { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'first-chat', choices: [{ index: 0, delta: {}, finish_reason: 'error' }] });
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK + errorFinish + sse(null, '[DONE]') }]);
    const before = sseEvents((await ask('chat/completions')).text);
    expect(before.some((e) => e.data.includes('"finish_reason":"error"'))).toBe(false);
    expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);

    t.upstream.received.length = 0;
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK + chatText('Hel') + errorFinish + sse(null, '[DONE]') }]);
    const res = await ask('chat/completions');
    const chunks = sseEvents(res.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    // Spec 7.5.3: the error chunk carries `error` with its error_type (it had gone out bare, billed completed).
    expect(chunks.at(-1)).toMatchObject({ error: { code: 502, metadata: { error_type: 'provider_unavailable' } }, choices: [{ finish_reason: 'error' }] });
    expect(chunks.filter((c) => c.choices?.[0]?.finish_reason === 'error')).toHaveLength(1);
    expect(upstreamModels()).toEqual(['first-chat']);
    expect((await ledgerRowSoon(g, res.headers.get('x-request-id')!))?.status).toBe('failed');
  });

  it('messages: message_start and then [DONE] (no answer) fails over', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('first-msg', { kind: 'raw-stream', text: MESSAGE_START + sse(null, '[DONE]') });
    const r = await ask('messages');
    const events = sseEvents(r.text);
    expect(events.filter((e) => e.event === 'error')).toEqual([]);
    expect(events.filter((e) => e.event === 'message_stop')).toHaveLength(1);
    expect(upstreamModels().at(-1)).toBe('second-msg');
  });

  it('messages: a record without an event name (not a messages event) is not passed on', async () => {
    g = await t.start({ yaml: yaml() });
    const garbage = sse(null, '{garbage');
    const rest = [
      sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
      sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } }),
      sse('content_block_stop', { type: 'content_block_stop', index: 0 }),
      sse('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 1 } }),
      sse('message_stop', { type: 'message_stop' }),
    ].join('');
    t.upstream.scripts.set('first-msg', [{ kind: 'raw-stream', text: MESSAGE_START + garbage + rest }]);
    const r = await ask('messages');
    const events = sseEvents(r.text);
    expect(events.map((e) => e.event ?? null)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop', null]);
    expect(events.at(-1)!.data).toBe('[DONE]');
  });
});
