import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

/** A model whose first endpoint is the openai-style fake and whose second is the anthropic-style one. */
const yaml = () =>
  testConfigYaml(t.upstream.url).replace(
    'pipelines:',
    `  - id: json/failover
    endpoints:
      - { provider: fake-openai, upstream_model: gpt-first, pricing: { prompt: 1, completion: 2 } }
      - { provider: fake-anthropic, upstream_model: claude-second, pricing: { prompt: 3, completion: 15 } }
pipelines:`,
  );

const CHAT_JSON = {
  id: 'chatcmpl-json',
  object: 'chat.completion',
  created: 1,
  model: 'gpt-upstream',
  choices: [{ index: 0, message: { role: 'assistant', content: 'A whole answer at once.' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 11, completion_tokens: 6, total_tokens: 17 },
};
const MESSAGES_JSON = {
  id: 'msg_json',
  type: 'message',
  role: 'assistant',
  model: 'claude-upstream',
  content: [{ type: 'text', text: 'A whole answer at once.' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 11, output_tokens: 6 },
};

let g: TestGateway;
const ask = (path: 'messages' | 'chat/completions', model: string) =>
  post(`${g.url}/${path}`, g.key, { model, max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'hi' }] });

const rowOf = (id: string) => ledgerRowSoon(g, id);

const chatText = (text: string) =>
  sseEvents(text)
    .filter((e) => e.data !== '[DONE]')
    .map((e) => JSON.parse(e.data))
    .map((c) => c.choices?.[0]?.delta?.content ?? '')
    .join('');

describe('a provider that answers a streaming request with JSON', () => {
  it.each([
    ['chat from a chat provider', 'chat/completions', 'fake/gpt', CHAT_JSON],
    ['chat from a messages provider (translated)', 'chat/completions', 'fake/claude', MESSAGES_JSON],
  ] as const)('a whole answer reaches a chat client as a stream, billed from its usage: %s', async (_name, path, model, body) => {
    g = await t.start({ yaml: yaml() });
    t.upstream.faults.push({ kind: 'status', status: 200, body });
    const r = await ask(path, model);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(chatText(r.text)).toBe('A whole answer at once.');
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
    expect(chunks.some((c) => c.choices?.[0]?.finish_reason === 'stop')).toBe(true);
    expect(chunks.some((c) => c.error)).toBe(false);
    const row = await rowOf(chunks[0].id);
    expect(row).toMatchObject({ status: 'completed', promptTokens: 11, completionTokens: 6 });
  });

  it.each([
    ['messages from a messages provider', 'fake/claude', MESSAGES_JSON],
    ['messages from a chat provider (translated)', 'fake/gpt', CHAT_JSON],
  ] as const)('a whole answer reaches a messages client as its events: %s', async (_name, model, body) => {
    g = await t.start({ yaml: yaml() });
    t.upstream.faults.push({ kind: 'status', status: 200, body });
    const client = new Anthropic({ apiKey: g.key, baseURL: g.url.replace(/\/v1$/, ''), maxRetries: 0 });
    const stream = client.messages.stream({ model, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
    const message = await stream.finalMessage();
    expect(message.content).toEqual([expect.objectContaining({ type: 'text', text: 'A whole answer at once.' })]);
    expect(message.stop_reason).toBe('end_turn');
    expect(message.usage).toMatchObject({ input_tokens: 11, output_tokens: 6 });
    expect(await rowOf(message.id)).toMatchObject({ status: 'completed', promptTokens: 11, completionTokens: 6 });
  });

  it("a refusal's stop_details reaches the SDK's finalMessage (the Messages API streams it in message_delta)", async () => {
    g = await t.start({ yaml: yaml() });
    const stopDetails = { type: 'refusal', category: 'cyber', explanation: 'Declined.' };
    t.upstream.faults.push({ kind: 'status', status: 200, body: { ...MESSAGES_JSON, content: [], stop_reason: 'refusal', stop_details: stopDetails } });
    const client = new Anthropic({ apiKey: g.key, baseURL: g.url.replace(/\/v1$/, ''), maxRetries: 0 });
    const message = await client.messages.stream({ model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(message.stop_reason).toBe('refusal');
    expect(message.stop_details).toEqual(stopDetails);
  });

  it("a thinking block opens as the Messages API opens it (signature: ''), its signature then in a signature_delta", async () => {
    g = await t.start({ yaml: yaml() });
    const thinking = { type: 'thinking', thinking: 'Let me see.', signature: 'SIG' };
    t.upstream.faults.push({ kind: 'status', status: 200, body: { ...MESSAGES_JSON, content: [thinking, ...MESSAGES_JSON.content] } });
    const r = await ask('messages', 'fake/claude');
    const starts = sseEvents(r.text).filter((e) => e.event === 'content_block_start').map((e) => JSON.parse(e.data).content_block);
    // The start had no signature at all (the ThinkingBlock the SDKs type requires one).
    expect(starts[0]).toEqual({ type: 'thinking', thinking: '', signature: '' });
    const deltas = sseEvents(r.text).filter((e) => e.event === 'content_block_delta').map((e) => JSON.parse(e.data).delta);
    expect(deltas).toContainEqual({ type: 'signature_delta', signature: 'SIG' });
  });

  it('every choice of an answer with n > 1 is streamed, each under its index', async () => {
    g = await t.start({ yaml: yaml() });
    const two = { ...CHAT_JSON, choices: [0, 1].map((index) => ({ index, message: { role: 'assistant', content: `Choice ${index}.` }, finish_reason: 'stop' })) };
    t.upstream.faults.push({ kind: 'status', status: 200, body: two, headers: { 'content-type': 'application/json; charset=utf-8' } });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', n: 2, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const chunks = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    const text = (i: number) => chunks.map((c) => (c.choices?.[0]?.index === i ? (c.choices[0].delta?.content ?? '') : '')).join('');
    expect([text(0), text(1)]).toEqual(['Choice 0.', 'Choice 1.']);
    expect(chunks.filter((c) => c.choices?.[0]?.finish_reason === 'stop').map((c) => c.choices[0].index)).toEqual([0, 1]);
  });

  it('nothing of the answer is lost: system_fingerprint, service_tier, logprobs, audio, reasoning, annotations (the openai SDK assembles them)', async () => {
    g = await t.start({ yaml: yaml() });
    const logprobs = { content: [{ token: 'Hi', logprob: -0.5, bytes: [72, 105], top_logprobs: [] }], refusal: null };
    const message = {
      role: 'assistant', content: 'Hi', refusal: null, reasoning_content: 'thought', audio: { id: 'audio_1', data: 'AAAA', transcript: 'Hi', expires_at: 9 },
      annotations: [{ type: 'url_citation', url_citation: { url: 'https://a.test', title: 'A', start_index: 0, end_index: 2 } }],
    };
    const answer = { ...CHAT_JSON, system_fingerprint: 'fp_json', service_tier: 'flex', choices: [{ index: 0, message, logprobs, finish_reason: 'stop' }] };
    t.upstream.faults.push({ kind: 'status', status: 200, body: answer });
    const client = new OpenAI({ apiKey: g.key, baseURL: g.url, maxRetries: 0 });
    const final = await client.chat.completions.stream({ model: 'fake/gpt', logprobs: true, messages: [{ role: 'user', content: 'hi' }] }).finalChatCompletion();
    expect(final).toMatchObject({ system_fingerprint: 'fp_json', service_tier: 'flex' });
    expect(final.choices[0].logprobs).toEqual(logprobs);
    expect(final.choices[0].message).toMatchObject(message);
  });

  it('a 2xx JSON error keeps its type and fails over to the next endpoint; the client sees only the answer', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.scripts.set('gpt-first', [{ kind: 'status', status: 200, body: { error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded' } } }]);
    const client = new OpenAI({ apiKey: g.key, baseURL: g.url, maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: 'json/failover', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
    expect(text.length).toBeGreaterThan(0);
    expect(t.upstream.received.map((r) => r.body.model)).toEqual(['gpt-first', 'claude-second']);
  });

  it.each([
    ['an Anthropic overload', 'fake/claude', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }, 'provider_overloaded'],
    ['an OpenAI rate limit', 'fake/gpt', { error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded' } }, 'rate_limit_exceeded'],
  ] as const)('with no endpoint left, %s in a 2xx JSON body is answered with its own status and type', async (_name, model, body, type) => {
    g = await t.start({ yaml: yaml() });
    t.upstream.faults.push({ kind: 'status', status: 200, body });
    const r = await ask('chat/completions', model);
    expect(r.json?.error?.metadata?.error_type).toBe(type);
    expect(r.status).toBe(type === 'provider_overloaded' ? 503 : 429);
  });

  it('JSON that is neither an answer nor an error is a failed attempt naming the provider', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.faults.push({ kind: 'status', status: 200, body: { hello: 'world' } });
    const r = await ask('chat/completions', 'fake/gpt');
    expect(r.status).toBe(502);
    expect(r.json.error.message).toBe('Provider fake-openai answered a streaming request with JSON without choices');
  });
});

describe('a provider that breaks off its stream', () => {
  it('is reported as a cut answer, not as a provider that could not be reached', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.faults.push({ kind: 'midstream' });
    const r = await ask('chat/completions', 'fake/gpt');
    expect(r.status).toBe(200);
    const last = JSON.parse(sseEvents(r.text).at(-2)!.data);
    expect(last.error).toMatchObject({ code: 502, metadata: { error_type: 'provider_unavailable' } });
    expect(last.error.message).toBe('Provider fake-openai broke off its answer (connection lost)');
  });
});

describe('a provider whose 2xx JSON answer reports a failure (non-streaming)', () => {
  const ask = (path: 'messages' | 'chat/completions', model: string) =>
    post(`${g.url}/${path}`, g.key, { model, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });

  it('is a failed attempt: the next endpoint answers', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('gpt-first', { kind: 'status', status: 200, body: { id: 'gen-up', error: { code: 502, message: 'Upstream provider died' } } });
    const r = await ask('chat/completions', 'json/failover');
    expect(r.status).toBe(200);
    expect(r.json.error).toBeUndefined();
    expect(r.json.choices[0].message.content.length).toBeGreaterThan(0);
    const models = t.upstream.received.map((x) => x.body.model);
    expect(models.at(-1)).toBe('claude-second');
    expect(new Set(models.slice(0, -1))).toEqual(new Set(['gpt-first']));
  });

  it('with no endpoint left, a chat caller gets 200 with only id and error (7.5.4), not billed as an answer', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('gpt-upstream', { kind: 'status', status: 200, body: { id: 'gen-up', error: { code: 429, message: 'Slow down' } } });
    const r = await ask('chat/completions', 'fake/gpt');
    expect(r.status).toBe(200);
    expect(Object.keys(r.json).sort()).toEqual(['error', 'id']);
    expect(r.json.id).toMatch(/^gen-/);
    expect(r.json.error).toMatchObject({ code: 429, metadata: { error_type: 'rate_limit_exceeded' } });
    // A failed JSON request without output is not billed; it was billed `completed`, then had no row at all (the
    // client holds its id), where a stream failing the same way has a `failed` row.
    expect(await g.ledgerRow(r.json.id)).toMatchObject({ status: 'failed', model: 'fake/gpt', completionTokens: 0, costUsd: 0 });
  });

  it('a chat choice that ended with finish_reason "error" is a failure too', async () => {
    g = await t.start({ yaml: yaml() });
    const body = { ...CHAT_JSON, choices: [{ index: 0, message: { role: 'assistant', content: 'partial' }, finish_reason: 'error', error: { code: 502, message: 'died' } }] };
    t.upstream.always.set('gpt-upstream', { kind: 'status', status: 200, body });
    const r = await ask('chat/completions', 'fake/gpt');
    expect(r.status).toBe(200);
    expect(r.json.choices).toBeUndefined();
    expect(r.json.error).toMatchObject({ code: 502, metadata: { error_type: 'provider_unavailable' } });
  });

  it('a messages caller gets the real status, which its SDK raises, not a 200 it would read as a message', async () => {
    g = await t.start({ yaml: yaml() });
    t.upstream.always.set('gpt-upstream', { kind: 'status', status: 200, body: { id: 'gen-up', error: { code: 502, message: 'Upstream provider died' } } });
    const client = new Anthropic({ apiKey: g.key, baseURL: g.url.replace(/\/v1$/, ''), maxRetries: 0 });
    const err = await client.messages.create({ model: 'fake/gpt', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.InternalServerError);
    expect(err.status).toBe(502);
    expect(err.error).toMatchObject({ type: 'error', error: { type: 'api_error' } });
  });
});
