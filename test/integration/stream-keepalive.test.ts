import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { STAGES } from '../../plugins';
import { GatewayError } from '../../src/errors/gateway-error';
import type { StageDefinition } from '../../src/pipeline/types';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { TEXT } from '../fixtures/fake-upstream';
import { perTestGateways } from '../fixtures/per-test';
import { gate, openRaw } from '../fixtures/raw-stream';

const t = perTestGateways();

/** Providers whose first output may take 300 ms at most, and a model per dialect that fails over between two of them. */
const SLOW = `
  - { id: slow-openai, kind: openai, base_url: UPSTREAM, api_key: sk-upstream-openai-secret, first_token_timeout_ms: 300 }
  - { id: slow-anthropic, kind: anthropic, base_url: UPSTREAM, api_key: sk-upstream-anthropic-secret, first_token_timeout_ms: 300 }
models:
  - id: pair/chat
    endpoints:
      - { provider: slow-openai, upstream_model: first-chat, pricing: { prompt: 1, completion: 2 } }
      - { provider: slow-openai, upstream_model: second-chat, pricing: { prompt: 1, completion: 2 } }
  - id: pair/messages
    endpoints:
      - { provider: slow-anthropic, upstream_model: first-msg, pricing: { prompt: 1, completion: 2 } }
      - { provider: slow-anthropic, upstream_model: second-msg, pricing: { prompt: 1, completion: 2 } }
`;

function yaml(keepaliveMs: number): string {
  return testConfigYaml(t.upstream.url)
    .replace('watch_config: false }', `watch_config: false, stream_keepalive_ms: ${keepaliveMs} }`)
    .replace('models:\n', SLOW.replaceAll('UPSTREAM', t.upstream.url));
}

/** A promise and its resolve: what the fake upstream waits for before the answer begins. */


/** A fetch for the SDKs that tells when the response body has carried `marker` (the body itself is passed on untouched). */
function watchingFetch(marker: string, onSeen: () => void): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (!res.body) return res;
    const decoder = new TextDecoder();
    let text = '';
    const body = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, out) {
          text += decoder.decode(chunk, { stream: true });
          if (text.includes(marker)) onSeen();
          out.enqueue(chunk);
        },
      }),
    );
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

describe('a stream whose answer is slow to begin gets its headers and SSE comments (server.stream_keepalive_ms)', () => {
  it('chat: the 200, the headers and ": keepalive" comments arrive while the provider thinks; then the answer, with its role chunk once', async () => {
    const g = await t.start({ yaml: yaml(20) });
    const first = gate();
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'slow-start', until: first.until }]);
    const s = await openRaw(g, 'chat/completions', { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
    // fetch resolved: the status and headers came before the provider's first token (it is still held).
    expect(s.res.status).toBe(200);
    expect(s.res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(s.res.headers.get('x-request-id')).toMatch(/^gen-/);
    await s.seen(': keepalive\n\n');
    // Nothing of the provider's yet: the role chunk stays held until the answer begins (failover stays silent).
    expect(s.soFar().replaceAll(': keepalive\n\n', '')).toBe('');
    first.open();
    const text = await s.done;
    const chunks = sseEvents(text.replaceAll(': keepalive\n\n', '')).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chunks.filter((c) => c.choices[0]?.delta?.role === 'assistant')).toHaveLength(1);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(TEXT.join(''));
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const row = await ledgerRowSoon(g, chunks[0].id);
    expect(row).toMatchObject({ status: 'completed' });
  });

  it('the official SDKs read such a stream as usual (comments are skipped): OpenAI chat and Anthropic messages', async () => {
    const g = await t.start({ yaml: yaml(20) });
    const chatGate = gate();
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'slow-start', until: chatGate.until }]);
    const openai = new OpenAI({ apiKey: g.key, baseURL: g.url, maxRetries: 0, fetch: watchingFetch(': keepalive', chatGate.open) });
    const stream = await openai.chat.completions.create({ model: 'fake/gpt', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toBe(TEXT.join(''));

    const msgGate = gate();
    t.upstream.scripts.set('claude-upstream', [{ kind: 'slow-start', until: msgGate.until }]);
    const anthropic = new Anthropic({ apiKey: g.key, baseURL: g.url.replace(/\/v1$/, ''), maxRetries: 0, fetch: watchingFetch(': keepalive', msgGate.open) });
    const message = await anthropic.messages.stream({ model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(message.content.map((b) => (b.type === 'text' ? b.text : b.type))).toEqual([TEXT.join('')]);
    expect(message.stop_reason).toBe('end_turn');
  });

  it('messages: one message_start (the one of the endpoint that answered), after a failover that came after the comments', async () => {
    const g = await t.start({ yaml: `${yaml(20)}routing: { circuit_breaker: { failure_threshold: 100 } }\n` });
    // The first endpoint accepts, sends message_start and a ping, then nothing: its first-token limit (300 ms) runs out.
    const start = `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_up', type: 'message', role: 'assistant', model: 'first-msg', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 6, output_tokens: 1 } } })}\n\n`;
    t.upstream.always.set('first-msg', { kind: 'raw-stream', text: `${start}event: ping\ndata: {"type":"ping"}\n\n`, hold: true });
    const s = await openRaw(g, 'messages', { model: 'pair/messages', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
    expect(s.res.status).toBe(200);
    const text = await s.done;
    // A 20 ms interval fires before a 300 ms timeout: comments came before the second endpoint's answer.
    expect(text.startsWith(': keepalive\n\n')).toBe(true);
    const events = sseEvents(text.replaceAll(': keepalive\n\n', ''));
    expect(events.filter((e) => e.event === 'message_start')).toHaveLength(1);
    expect(JSON.parse(events.find((e) => e.event === 'message_start')!.data).message.model).toBe('pair/messages');
    expect(events.filter((e) => e.event === 'error')).toEqual([]);
    expect(t.upstream.received.map((r) => r.body.model).at(-1)).toBe('second-msg');
  });

  it('every endpoint fails before output after the comments: the stream ends with the in-band error and [DONE], billed failed (as without comments)', async () => {
    const g = await t.start({ yaml: yaml(20) });
    t.upstream.always.set('first-chat', { kind: 'stall-first' });
    t.upstream.always.set('second-chat', { kind: 'stall-first' });
    const s = await openRaw(g, 'chat/completions', { model: 'pair/chat', messages: [{ role: 'user', content: 'hi' }] });
    expect(s.res.status).toBe(200);
    const text = await s.done;
    expect(text.startsWith(': keepalive\n\n')).toBe(true);
    const events = sseEvents(text.replaceAll(': keepalive\n\n', ''));
    const error = JSON.parse(events.at(-2)!.data);
    expect(error.error.metadata.error_type).toBe('timeout');
    expect(error.choices[0].finish_reason).toBe('error');
    expect(events.at(-1)!.data).toBe('[DONE]');
    const row = await ledgerRowSoon(g, error.id);
    expect(row).toMatchObject({ status: 'failed' });
  });

  it('a client that leaves during the comments: the comments stop, the provider call is dropped, the row says cancelled', async () => {
    const g = await t.start({ yaml: yaml(20) });
    const first = gate();
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'slow-start', until: first.until }]);
    const s = await openRaw(g, 'chat/completions', { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
    const id = s.res.headers.get('x-request-id')!;
    await s.seen(': keepalive\n\n');
    s.abort();
    await s.done;
    const row = await ledgerRowSoon(g, id);
    expect(row).toMatchObject({ status: 'cancelled' });
    expect(g.gateway.inFlight()).toBe(0);
    first.open();
  });

  it('a stage that refuses the answer after the comments sent the 200: the refusal ends the stream in-band (no JSON after the headers), billed failed', async () => {
    const refuseAfter: StageDefinition = {
      id: 'refuse-after',
      configSchema: { type: 'object' },
      create: () => async (_ctx, next) => {
        await next();
        throw new GatewayError('invalid_request', 'refused after the provider answered');
      },
    };
    const registry = new Map([...STAGES, refuseAfter].map((d) => [d.id, d]));
    const g = await t.start({ registry, yaml: yaml(20).replace('default: [auth, validate, upstream]', 'default: [auth, validate, refuse-after, upstream]') });
    const first = gate();
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'slow-start', until: first.until }]);
    const s = await openRaw(g, 'chat/completions', { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
    expect(s.res.status).toBe(200);
    await s.seen(': keepalive\n\n');
    first.open();
    const events = sseEvents((await s.done).replaceAll(': keepalive\n\n', ''));
    expect(events).toHaveLength(2);
    const failure = JSON.parse(events[0].data);
    expect(failure.choices[0].finish_reason).toBe('error');
    expect(failure.error).toMatchObject({ code: 400, message: 'refused after the provider answered', metadata: { error_type: 'invalid_request' } });
    expect(events[1].data).toBe('[DONE]');
    expect(await ledgerRowSoon(g, s.res.headers.get('x-request-id')!)).toMatchObject({ status: 'failed' });
  });

  it('such a refusal carries what the caller opted in to, as a provider failing before output does: chat the debug echo and metadata chunks, messages gateway_metadata in its error event', async () => {
    const refuseAfter: StageDefinition = {
      id: 'refuse-after',
      configSchema: { type: 'object' },
      create: () => async (_ctx, next) => {
        await next();
        throw new GatewayError('invalid_request', 'refused after the provider answered');
      },
    };
    const registry = new Map([...STAGES, refuseAfter].map((d) => [d.id, d]));
    const g = await t.start({ registry, yaml: yaml(20).replace('default: [auth, validate, upstream]', 'default: [auth, validate, refuse-after, upstream]') });
    const META = { 'x-gateway-metadata': 'enabled' };

    const chatGate = gate();
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'slow-start', until: chatGate.until }]);
    const c = await openRaw(g, 'chat/completions', { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }], debug: { echo_upstream_body: true } }, META);
    await c.seen(': keepalive\n\n');
    chatGate.open();
    const chunks = sseEvents((await c.done).replaceAll(': keepalive\n\n', ''));
    expect(chunks.at(-1)!.data).toBe('[DONE]');
    const parsed = chunks.slice(0, -1).map((e) => JSON.parse(e.data));
    expect(parsed).toHaveLength(3);
    expect(parsed[0]).toMatchObject({ choices: [], provider: 'fake-openai', debug: { echo_upstream_body: { model: 'gpt-upstream' } } });
    expect(parsed[1]).toMatchObject({ choices: [], gateway_metadata: { endpoints: { available: [{ provider: 'fake-openai', selected: true }] } } });
    expect(parsed[2]).toMatchObject({ error: { code: 400, metadata: { error_type: 'invalid_request' } }, choices: [{ finish_reason: 'error' }] });

    const msgGate = gate();
    t.upstream.scripts.set('claude-upstream', [{ kind: 'slow-start', until: msgGate.until }]);
    const m = await openRaw(g, 'messages', { model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }, META);
    await m.seen(': keepalive\n\n');
    msgGate.open();
    const events = sseEvents((await m.done).replaceAll(': keepalive\n\n', ''));
    const error = events.find((e) => e.event === 'error')!;
    expect(JSON.parse(error.data)).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', error_type: 'invalid_request' },
      gateway_metadata: { endpoints: { available: [{ provider: 'fake-anthropic', selected: true }] } },
    });
  });

  it('stream_keepalive_ms: 0 turns it off: nothing is written before the answer begins', async () => {
    const g = await t.start({ yaml: yaml(0) });
    const first = gate();
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'slow-start', until: first.until }]);
    const pending = post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    // Held for 100 ms: with keep-alive on at 20 ms that would have been several comments.
    setTimeout(first.open, 100);
    const r = await pending;
    expect(r.status).toBe(200);
    expect(r.text).not.toContain('keepalive');
    expect(r.text.startsWith('data: ')).toBe(true);
  });
});
