import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { ledgerRowSoon, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
  openai = new OpenAI({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
  // The Anthropic SDK appends /v1/messages to its base URL.
  anthropic = new Anthropic({ baseURL: gw.url.replace(/\/v1$/, ''), apiKey: gw.key, maxRetries: 0 });
});

afterAll(async () => {
  await gw.close();
  await upstream.close();
});

describe('official openai SDK', () => {
  for (const model of ['sim/chat', 'fake/gpt']) {
    it(`completes through ${model}`, async () => {
      const res = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hello' }] });
      expect(res.object).toBe('chat.completion');
      expect(res.id).toMatch(/^gen-\d+-[A-Za-z0-9]{20}$/);
      expect(res.model).toBe(model);
      expect(res.choices[0].message.content).toMatch(/\w+/);
      expect(res.usage!.total_tokens).toBeGreaterThan(0);
      expect((res.usage as any).cost).toBeGreaterThan(0);
    });

    it(`streams through ${model} with usage`, async () => {
      const stream = await openai.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Say hello' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = '';
      let usage: any;
      let finish: string | null = null;
      for await (const chunk of stream) {
        expect(chunk.object).toBe('chat.completion.chunk');
        text += chunk.choices[0]?.delta?.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text.length).toBeGreaterThan(5);
      expect(finish).toBe('stop');
      expect(usage.cost).toBeGreaterThan(0);
    });
  }

  it('n choices from the simulated provider, JSON and stream, each with the system_fingerprint', async () => {
    const res = await openai.chat.completions.create({ model: 'sim/chat', n: 3, messages: [{ role: 'user', content: 'Say hello' }] });
    expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(new Set(res.choices.map((c) => c.message.content)).size).toBe(1);
    expect(res.system_fingerprint).toBe('fp_simulated');
    const one = await openai.chat.completions.create({ model: 'sim/chat', messages: [{ role: 'user', content: 'Say hello' }] });
    expect(res.usage!.completion_tokens).toBe(3 * one.usage!.completion_tokens);
    const stream = openai.chat.completions.stream({ model: 'sim/chat', n: 2, messages: [{ role: 'user', content: 'Say hello' }], stream: true });
    const final = await stream.finalChatCompletion();
    expect(final.choices.map((c) => [c.index, c.message.content, c.finish_reason])).toEqual([
      [0, one.choices[0].message.content, 'stop'],
      [1, one.choices[0].message.content, 'stop'],
    ]);
  });

  it('streams without a usage chunk when the client did not ask for one', async () => {
    const stream = await openai.chat.completions.create({ model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }], stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.some((c) => c.usage)).toBe(false);
    expect(upstream.received.at(-1)!.body.stream_options).toEqual({ include_usage: true });
  });

  it('raises a typed APIError the SDK understands', async () => {
    const bad = new OpenAI({ baseURL: gw.url, apiKey: 'sk-gw-v1-nope', maxRetries: 0 });
    const err = await bad.chat.completions.create({ model: 'sim/chat', messages: [{ role: 'user', content: 'x' }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(err.status).toBe(401);
  });

  it('lists the configured models', async () => {
    const ids = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    expect(ids).toEqual(expect.arrayContaining(['sim/chat', 'fake/gpt', 'fake/claude']));
  });

  it('retrieves one model (GET /models/{id}, the id with its slash encoded by the SDK); an unknown one is a NotFoundError', async () => {
    const m = await openai.models.retrieve('fake/gpt');
    expect(m).toMatchObject({ id: 'fake/gpt', object: 'model', owned_by: 'fake' });
    const err = await openai.models.retrieve('nope/x').catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.error.metadata?.error_type ?? err.error.error_type).toBe('not_found');
    // The id as path segments works too, and the key is required as for GET /models.
    const raw = await fetch(`${gw.url}/models/fake/gpt`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(await raw.json()).toMatchObject({ id: 'fake/gpt' });
    expect((await fetch(`${gw.url}/models/fake/gpt`)).status).toBe(401);
    const long = await fetch(`${gw.url}/models/${'x'.repeat(5000)}`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(long.status).toBe(404);
    expect((await long.text()).length).toBeLessThan(1000);
  });
});

describe('official anthropic SDK', () => {
  for (const model of ['sim/chat', 'fake/claude']) {
    it(`creates a message through ${model}`, async () => {
      const msg = await anthropic.messages.create({ model, max_tokens: 64, messages: [{ role: 'user', content: 'Say hello' }] });
      expect(msg.type).toBe('message');
      expect(msg.id).toMatch(/^gen-/);
      expect(msg.model).toBe(model);
      expect(msg.content[0].type).toBe('text');
      expect((msg.usage as any).cost).toBeGreaterThan(0);
    });

    it(`streams a message through ${model}`, async () => {
      const stream = anthropic.messages.stream({ model, max_tokens: 64, messages: [{ role: 'user', content: 'Say hello' }] });
      let text = '';
      stream.on('text', (t) => (text += t));
      const final = await stream.finalMessage();
      expect(text.length).toBeGreaterThan(5);
      expect(final.content[0]).toMatchObject({ type: 'text', text });
      expect(final.stop_reason).toBe('end_turn');
      expect(final.usage.output_tokens).toBeGreaterThan(0);
    });
  }

  it("gives the SDKs the generation id as their request id (the header each reads), in answers, streams and errors", async () => {
    const msg = await anthropic.messages.create({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    expect(msg._request_id).toBe(msg.id);
    const stream = anthropic.messages.stream({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    const final = await stream.finalMessage();
    expect((await stream.withResponse()).response.headers.get('request-id')).toBe(final.id);
    upstream.faults.push({ kind: 'status', status: 400, body: { error: { message: 'bad thing', type: 'invalid_request_error' } } });
    const err = await anthropic.messages.create({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.requestID).toMatch(/^gen-/);
    expect(err.requestID).toBe(err.error.request_id);
    const chat = await openai.chat.completions.create({ model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
    expect(chat._request_id).toBe(chat.id);
  });

  it('does not retry a 503 for routing requirements no provider meets (it would fail the same way)', async () => {
    let calls = 0;
    const counting: typeof fetch = (input, init) => {
      calls++;
      return fetch(input, init);
    };
    const client = new Anthropic({ baseURL: gw.url.replace(/\/v1$/, ''), apiKey: gw.key, maxRetries: 2, fetch: counting });
    const err = await client.messages.create({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], provider: { only: ['nobody'] } } as any).catch((e) => e);
    expect(err.status).toBe(503);
    expect(calls).toBe(1);
    const chat = new OpenAI({ baseURL: gw.url, apiKey: gw.key, maxRetries: 2, fetch: counting });
    await chat.chat.completions.create({ model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }], provider: { only: ['nobody'] } } as any).catch((e) => e);
    expect(calls).toBe(2);
  });

  it("does not retry a provider's refusal of the gateway's own credentials or model name (a 502 that fails the same way until the config changes)", async () => {
    let calls = 0;
    const counting: typeof fetch = (input, init) => {
      calls++;
      return fetch(input, init);
    };
    const client = new Anthropic({ baseURL: gw.url.replace(/\/v1$/, ''), apiKey: gw.key, maxRetries: 2, fetch: counting });
    const chat = new OpenAI({ baseURL: gw.url, apiKey: gw.key, maxRetries: 2, fetch: counting });
    for (const status of [401, 403, 404]) {
      calls = 0;
      // Two faults each: the gateway's own retry of the endpoint sees the same refusal.
      upstream.faults.push({ kind: 'status', status, body: { error: { message: 'no', type: 'authentication_error' } } }, { kind: 'status', status, body: { error: { message: 'no', type: 'authentication_error' } } });
      const err = await client.messages.create({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
      expect(err.status).toBe(502);
      upstream.faults.length = 0;
      upstream.faults.push({ kind: 'status', status, body: { error: { message: 'no', type: 'invalid_request_error' } } }, { kind: 'status', status, body: { error: { message: 'no', type: 'invalid_request_error' } } });
      const chatErr = await chat.chat.completions.create({ model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
      expect(chatErr.status).toBe(502);
      upstream.faults.length = 0;
      expect(calls).toBe(2);
    }
  });

  it('authenticates with Authorization: Bearer too (authToken)', async () => {
    const client = new Anthropic({ baseURL: gw.url.replace(/\/v1$/, ''), authToken: gw.key, apiKey: null, maxRetries: 0 });
    const msg = await client.messages.create({ model: 'sim/chat', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    expect(msg.role).toBe('assistant');
  });

  it('raises a typed error with the messages envelope', async () => {
    const err = await anthropic.messages.create({ model: 'sim/chat', max_tokens: 8, messages: [], fallbacks: [{ model: 'a' }, { model: 'b' }, { model: 'c' }, { model: 'd' }] } as any).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', error_type: 'invalid_request' }, request_id: null });
  });

  it("a message thread (the tool runner's default) is refused as the Messages API refuses a request it cannot thread, and the SDK goes on without one", async () => {
    const sent: Record<string, unknown>[] = [];
    const recording: typeof fetch = (input, init) => {
      sent.push(JSON.parse(String(init?.body ?? '{}')));
      return fetch(input, init);
    };
    const client = new Anthropic({ baseURL: gw.url.replace(/\/v1$/, ''), apiKey: gw.key, maxRetries: 0, fetch: recording });
    for (const model of ['fake/claude', 'fake/gpt', 'sim/chat']) {
      sent.length = 0;
      const seen = upstream.received.length;
      const runner = client.beta.messages.toolRunner({
        model,
        max_tokens: 32,
        system: 'Be brief.',
        messages: [{ role: 'user', content: 'hi' }],
        tools: [{ name: 'noop', description: 'does nothing', input_schema: { type: 'object', properties: {} }, run: () => 'ok' } as any],
      });
      const final = await runner.runUntilDone();
      expect(final.role).toBe('assistant');
      // The first try carried `thread` (refused before any provider saw it); every later one the whole
      // conversation without it: the fake providers call the tool, so the next turn has the call and its result.
      const threads = sent.map((b) => (b.thread as { type?: string } | undefined)?.type ?? null);
      expect(threads[0]).toBe('create');
      expect(threads.slice(1).every((t) => t === null)).toBe(true);
      expect(sent[1]).toMatchObject({ system: 'Be brief.', messages: [{ role: 'user', content: 'hi' }] });
      if (model !== 'sim/chat') {
        expect(sent).toHaveLength(3);
        expect(sent[2]).toMatchObject({ system: 'Be brief.', tools: [{ name: 'noop' }] });
        expect((sent[2].messages as { role: string }[]).map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
        expect(upstream.received.length - seen).toBe(2);
        // Translated or not, the provider got the whole conversation of the second turn.
        expect(JSON.stringify(upstream.received.at(-1)!.body)).toContain('Be brief.');
      }
    }
    // A thread created directly (its default: 'error') gets the SDK's typed error.
    const err = await client.messages.create({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], thread: { type: 'create' } } as any).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.constructor.name).toBe('ThreadUnsupportedRequestError');
    expect(err.error.error).toMatchObject({ type: 'invalid_request_error', details: { error_code: 'thread_unsupported_request' } });
  });

  it("keeps an Anthropic-style provider's error details (the SDK's typed errors read their error_code) on an error that is the caller's", async () => {
    const details = { error_code: 'image_dimensions_too_large', max_side_length_pixels: 8000, paths: ['messages.0.content.1'] };
    upstream.faults.push({ kind: 'status', status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: 'image dimensions exceed max allowed size', details } } });
    const err = await anthropic.messages.create({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(err.status).toBe(400);
    expect(err.constructor.name).toBe('ImageDimensionsTooLargeError');
    expect(err.error.error.details).toEqual(details);
    // A provider's 404 is the operator's (a 502 here): its details are not passed on as if they were the caller's.
    upstream.faults.push({ kind: 'status', status: 404, body: { type: 'error', error: { type: 'not_found_error', message: 'Thread not found', details: { error_code: 'thread_not_found' } } } });
    const lost = await anthropic.messages.create({ model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(lost.status).toBe(502);
    expect(lost.error.error.details).toBeUndefined();
  });

  it("reads a provider's stream that carries no usage (the SDK reads message_start's usage and message_delta's output_tokens unguarded)", async () => {
    const ev = (type: string, o: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...o })}\n\n`;
    upstream.faults.push({
      kind: 'raw-stream',
      text: [
        ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null } }),
        ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi there.' } }),
        ev('content_block_stop', { index: 0 }),
        ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null } }),
        ev('message_stop', {}),
      ].join(''),
    });
    const final = await anthropic.messages.stream({ model: 'fake/claude', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: 'Hi there.' }]);
    // Its message_delta says the usage billed (the request's input counted, 9 characters of output at 4 a token).
    const row = await ledgerRowSoon(gw, final.id);
    expect([final.usage.input_tokens, final.usage.output_tokens]).toEqual([row!.promptTokens, row!.completionTokens]);
    expect(final.usage.output_tokens).toBe(3);
  });

  it('stop_details is null, not missing, when the provider gave none: simulated stream, a compatible provider JSON and stream', async () => {
    const sim = await anthropic.messages.stream({ model: 'sim/chat', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    // The SDK sets it from message_delta as it stands: without one there, it was undefined.
    expect(sim.stop_details).toBeNull();
    // The fake Anthropic-style provider sends none (as Anthropic-compatible servers do), JSON and streamed.
    const json = await anthropic.messages.create({ model: 'fake/claude', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    expect(json.stop_details).toBeNull();
    const streamed = await anthropic.messages.stream({ model: 'fake/claude', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(streamed.stop_details).toBeNull();
    expect(streamed.stop_reason).toBe('end_turn');
  });

  it('container is null, not missing, when the provider gave none: a compatible provider JSON and stream', async () => {
    const json = await anthropic.messages.create({ model: 'fake/claude', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    expect(json.container).toBeNull();
    // The SDK keeps message_start's (message_delta sets it only when not null).
    const streamed = await anthropic.messages.stream({ model: 'fake/claude', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(streamed.container).toBeNull();
  });

  it("reads a provider's stream whose message_start has no content list (the SDK appends each block to it)", async () => {
    const ev = (type: string, o: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...o })}\n\n`;
    upstream.faults.push({
      kind: 'raw-stream',
      text: [
        ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', usage: { input_tokens: 4, output_tokens: 0 } } }),
        ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi there.' } }),
        ev('content_block_stop', { index: 0 }),
        ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } }),
        ev('message_stop', {}),
      ].join(''),
    });
    // It had failed with "Cannot read properties of undefined (reading 'push')".
    const final = await anthropic.messages.stream({ model: 'fake/claude', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: 'Hi there.' }]);
    expect(final.stop_reason).toBe('end_turn');
  });

  it('reports a mid-stream provider failure as an error event', async () => {
    upstream.faults.push({ kind: 'midstream' });
    const stream = anthropic.messages.stream({ model: 'fake/claude', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    const err = await stream.finalMessage().catch((e) => e);
    expect(err).toBeInstanceOf(Error);
    expect(String(err.message)).toMatch(/provider|reach|error/i);
  });
});
