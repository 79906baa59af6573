import { describe, expect, it } from 'vitest';
import { post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

/**
 * An endpoint that answers 2xx and then breaks its answer (a cut body, a body that is not JSON, a stream cut
 * before any output) has failed: the next endpoint of the plan is tried, the broken one is not called again
 * for the request, and its breaker counts the failure.
 */
const PAIRS = `
  - id: pair/chat
    endpoints:
      - { provider: fake-openai, upstream_model: first-chat, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-openai, upstream_model: second-chat, pricing: { prompt: 1, completion: 2 } }
  - id: pair/messages
    endpoints:
      - { provider: fake-anthropic, upstream_model: first-msg, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-anthropic, upstream_model: second-msg, pricing: { prompt: 1, completion: 2 } }
  - id: solo/chat
    endpoints: [{ provider: fake-openai, upstream_model: only-chat, pricing: { prompt: 1, completion: 2 } }]
`;
const yaml = () => `${testConfigYaml(t.upstream.url).replace('pipelines:', `${PAIRS}pipelines:`)}routing: { circuit_breaker: { failure_threshold: 100 } }\n`;
const ROLE_CHUNK = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'first-chat', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })}\n\n`;
const MESSAGE_START = `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_up', type: 'message', role: 'assistant', model: 'first-msg', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 6, output_tokens: 1 } } })}\n\n`;

let g: TestGateway;
const ask = (path: 'messages' | 'chat/completions', body: Record<string, unknown> = {}) =>
  post(`${g.url}/${path}`, g.key, { model: path === 'messages' ? 'pair/messages' : 'pair/chat', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], ...body });
const upstreamModels = () => t.upstream.received.map((r) => r.body.model);
const failures = (key: string) => g.gateway.health.snapshot()[key]?.failures ?? 0;

describe('an answer broken after the endpoint answered 2xx fails over to the next endpoint', () => {
  it('a JSON body cut off mid-way is not asked of the same endpoint again: the next one answers, the breaker counts it', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('first-chat', [{ kind: 'midstream' }, { kind: 'midstream' }]);
    const r = await ask('chat/completions');
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.content).toBe('Hello from the fake upstream.');
    expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);
    expect(failures('fake-openai/first-chat')).toBe(1);
  });

  it('a JSON body cut off mid-way and one that is not JSON are handled alike (the second had already failed over)', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: '{"id":"x","choi' }]);
    expect((await ask('chat/completions')).status).toBe(200);
    expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);
  });

  it('a stream cut before any output goes to the next endpoint, not to the same one again (chat and messages)', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK, destroy: true }, { kind: 'raw-stream', text: ROLE_CHUNK, destroy: true }]);
    const chat = await ask('chat/completions', { stream: true });
    expect(chat.status).toBe(200);
    expect(sseEvents(chat.text).some((e) => e.data.includes('"error"'))).toBe(false);
    expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);
    expect(failures('fake-openai/first-chat')).toBe(1);

    t.upstream.received.length = 0;
    t.upstream.scripts.set('first-msg', [{ kind: 'raw-stream', text: MESSAGE_START, destroy: true }, { kind: 'raw-stream', text: MESSAGE_START, destroy: true }]);
    const messages = await ask('messages', { stream: true });
    expect(sseEvents(messages.text).filter((e) => e.event === 'error')).toEqual([]);
    expect(upstreamModels()).toEqual(['first-msg', 'second-msg']);
    expect(failures('fake-anthropic/first-msg')).toBe(1);
  });

  it('an error a stream reports before any output, or in the JSON body sent instead of the stream, is not asked for again either', async () => {
    g = await t.start({ yaml: yaml() });
    const inBand = `data: ${JSON.stringify({ error: { code: 502, message: 'upstream exploded' } })}\n\n`;
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: ROLE_CHUNK + inBand }, { kind: 'raw-stream', text: ROLE_CHUNK + inBand }]);
    expect((await ask('chat/completions', { stream: true })).status).toBe(200);
    expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);

    t.upstream.received.length = 0;
    const jsonError = { kind: 'status', status: 200, body: { error: { code: 500, message: 'upstream exploded' } } } as const;
    t.upstream.scripts.set('first-chat', [jsonError, jsonError]);
    expect((await ask('chat/completions', { stream: true })).status).toBe(200);
    expect(upstreamModels()).toEqual(['first-chat', 'second-chat']);
  });

  it('the only endpoint is not called twice for a body it cut (a reset before its answer still is)', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('only-chat', [{ kind: 'midstream' }, { kind: 'midstream' }]);
    const r = await ask('chat/completions', { model: 'solo/chat' });
    expect(r.status).toBe(200);
    expect(r.json.error.metadata.error_type).toBe('provider_unavailable');
    expect(upstreamModels()).toEqual(['only-chat']);

    t.upstream.received.length = 0;
    t.upstream.scripts.set('only-chat', [{ kind: 'reset' }]);
    const retried = await ask('chat/completions', { model: 'solo/chat' });
    expect(retried.status).toBe(200);
    expect(retried.json.choices[0].message.content).toBe('Hello from the fake upstream.');
    expect(upstreamModels()).toEqual(['only-chat', 'only-chat']);
  });
});
