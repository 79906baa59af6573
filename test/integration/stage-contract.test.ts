import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STAGES } from '../../plugins';
import type { SseEvent, StageDefinition } from '../../src/pipeline/types';
import { GatewayError } from '../../src/errors/gateway-error';
import { startFakeUpstream } from '../fixtures/fake-upstream';
import { post, sseEvents, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

/**
 * A plugin written the way a plugin author would: pre-work before next(), post-work after it, and a
 * stream transformed as it flows (text deltas upper-cased), without touching the core.
 */
const shout: StageDefinition<{ header: string }> = {
  id: 'shout',
  configSchema: { type: 'object', additionalProperties: false, properties: { header: { type: 'string', default: 'x-shout' } } },
  create(config) {
    return async (ctx, next) => {
      ctx.set(config.header, 'before');
      await next();
      // A stage may answer with a content type of its own (the endpoint keeps it).
      const ownType = ctx.get('x-test-content-type');
      if (ownType) ctx.set('Content-Type', ownType);
      // …or send the status and headers itself before the body.
      if (ctx.get('x-test-flush')) {
        ctx.status = 200;
        ctx.res.flushHeaders();
      }
      const response = ctx.state.gateway.response;
      if (response?.kind === 'json') {
        const body = response.body as any;
        body.choices[0].message.content = String(body.choices[0].message.content).toUpperCase();
      } else if (response?.kind === 'sse') {
        const inner = response.events;
        response.events = (async function* (): AsyncGenerator<SseEvent> {
          for await (const ev of inner) {
            if (ev.data === '[DONE]') yield ev;
            else {
              const chunk = JSON.parse(ev.data);
              for (const c of chunk.choices ?? []) if (c.delta?.content) c.delta.content = c.delta.content.toUpperCase();
              yield { ...ev, data: JSON.stringify(chunk) };
            }
          }
        })();
      }
    };
  },
};

let gw: TestGateway;
beforeAll(async () => {
  const registry = new Map([...STAGES, shout].map((s) => [s.id, s]));
  gw = await startTestGateway({
    registry,
    yaml: testConfigYaml(undefined, '[auth, validate, shout, upstream]') + 'plugins:\n  shout: { header: x-test-shout }\n',
  });
});
afterAll(() => gw.close());

describe('the stage contract', () => {
  it('lets a configured plugin act before and after next() on a JSON answer', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'sim/chat', messages: [{ role: 'user', content: 'hello you' }] });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-test-shout')).toBe('before');
    expect(res.json.choices[0].message.content).toBe('SIMULATED REPLY FROM SIM-1. YOU SAID: HELLO YOU');
  });

  it('gets a JSON answer whose length counts UTF-8 bytes, with the content type a stage set kept', async () => {
    const body = { model: 'sim/chat', messages: [{ role: 'user', content: 'grüße 🦊' }] };
    const plain = await post(`${gw.url}/chat/completions`, gw.key, body);
    expect(plain.status).toBe(200);
    expect(plain.json.choices[0].message.content).toBe('SIMULATED REPLY FROM SIM-1. YOU SAID: GRÜSSE 🦊');
    expect(plain.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(Number(plain.headers.get('content-length'))).toBe(Buffer.byteLength(plain.text));
    expect(plain.headers.get('x-test-shout')).toBe('before');
    const own = await post(`${gw.url}/chat/completions`, gw.key, body, { 'x-test-content-type': 'application/vnd.test+json' });
    expect(own.status).toBe(200);
    expect(own.headers.get('content-type')).toBe('application/vnd.test+json');
    expect(Number(own.headers.get('content-length'))).toBe(Buffer.byteLength(own.text));
    expect(own.json.choices[0].message.content).toBe(plain.json.choices[0].message.content);
    const flushed = await post(`${gw.url}/chat/completions`, gw.key, body, { 'x-test-flush': '1' });
    expect(flushed.status).toBe(200);
    expect(flushed.json.choices[0].message.content).toBe(plain.json.choices[0].message.content);
  });

  it('lets a plugin transform a stream as it flows, and the request is still billed', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'sim/chat', stream: true, messages: [{ role: 'user', content: 'hello you' }] });
    const events = sseEvents(res.text);
    const text = events.slice(0, -1).map((e) => JSON.parse(e.data).choices[0]?.delta?.content ?? '').join('');
    expect(text).toBe('SIMULATED REPLY FROM SIM-1. YOU SAID: HELLO YOU');
    const id = JSON.parse(events[0].data).id;
    expect((await gw.ledgerRow(id))?.completionTokens).toBe(8);
    // A stage that sent the status and headers itself: the events still follow them.
    const flushed = await post(`${gw.url}/chat/completions`, gw.key, { model: 'sim/chat', stream: true, messages: [{ role: 'user', content: 'hello you' }] }, { 'x-test-flush': '1' });
    expect(flushed.status).toBe(200);
    const again = sseEvents(flushed.text);
    expect(again.slice(0, -1).map((e) => JSON.parse(e.data).choices[0]?.delta?.content ?? '').join('')).toBe(text);
    expect(again.at(-1)?.data).toBe('[DONE]');
  });
});

describe('secrets stay out of logs', () => {
  it('no log line contains a gateway key or an upstream provider key', async () => {
    await post(`${gw.url}/chat/completions`, gw.key, { model: 'sim/chat', messages: [{ role: 'user', content: 'x' }] });
    await post(`${gw.url}/chat/completions`, 'sk-gw-v1-wrong-key-for-logging-test', { model: 'sim/chat', messages: [] });
    const all = gw.logs.join('');
    expect(all).toContain('"msg":"request"');
    for (const secret of [gw.key, gw.managementKey, 'sk-gw-v1-wrong-key-for-logging-test', 'sk-upstream-openai-secret', 'sk-upstream-anthropic-secret']) {
      expect(all).not.toContain(secret);
    }
  });
});

describe('a stage that refuses a stream after upstream answered', () => {
  const refuse: StageDefinition<Record<string, never>> = {
    id: 'refuse-after',
    configSchema: { type: 'object', additionalProperties: false },
    create() {
      return async (_ctx, next) => {
        await next();
        throw new GatewayError('invalid_request', 'refused after the answer');
      };
    },
  };

  it('gets its error answer, and the provider stream it never read is closed at once (no pooled connection held)', async () => {
    const upstream = await startFakeUpstream();
    const registry = new Map([...STAGES, refuse].map((s) => [s.id, s]));
    const g = await startTestGateway({ registry, yaml: testConfigYaml(upstream.url, '[auth, validate, refuse-after, upstream]') });
    try {
      upstream.faults.push({ kind: 'stall' }); // a few events, then the connection stays open
      const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'hi' }] });
      expect(r.status).toBe(400);
      expect(r.json).toMatchObject({ type: 'error', error: { message: 'refused after the answer' } });
      await expect.poll(() => upstream.abandoned()).toBe(1);
      expect(await g.ledgerRow(r.json.request_id)).toMatchObject({ status: 'failed' });
    } finally {
      await g.close();
      await upstream.close();
    }
  });
});
