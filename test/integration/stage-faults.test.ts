import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STAGES } from '../../plugins';
import { configReloader } from '../../src/config/reload';
import { GatewayError } from '../../src/errors/gateway-error';
import type { SseEvent, StageDefinition } from '../../src/pipeline/types';
import { ledgerRowSoon, post, sseEvents, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { gate } from '../fixtures/raw-stream';

/**
 * A plugin with the bugs a plugin author makes, one per `x-mb` header value: what the client, the log and the
 * ledger get. Found by a plugin-author audit (each case failed before its fix).
 */
/** `slow-after`: opened once the stage, the provider having answered, begins its 600 ms sleep (a new one per test). */
let slowAfterSleeps = gate();

const misbehave: StageDefinition<{ label: string }> = {
  id: 'misbehave',
  configSchema: { type: 'object', additionalProperties: false, properties: { label: { type: 'string', default: '' } } },
  create(config, services) {
    // A stage must not use the services while it is being created (README "Writing a plugin").
    if (config.label === 'use-store') void (services as { store: { findAccount(id: string): unknown } }).store.findAccount('default');
    return async (ctx, next) => {
      const mode = ctx.get('x-mb');
      if (mode === 'throw-key') throw new Error(`boom; auth was ${ctx.get('authorization')}`);
      if (mode === 'throw-object') throw { code: 42, secret: ctx.get('authorization') };
      if (mode === 'bad-type') throw new GatewayError('nonsense' as never, 'x');
      if (mode === 'bad-status') throw new GatewayError('invalid_request', 'x', { status: 42 });
      if (mode === 'bad-header') throw new GatewayError('rate_limit_exceeded', 'x', { headers: { 'Retry-After': 'a\nb' } });
      if (mode === 'hang') await new Promise(() => undefined);
      if (mode === 'model-number') ctx.state.gateway.body!.model = 42;
      if (mode === 'bigint-metadata') throw new GatewayError('invalid_request', 'x', { metadata: { n: 10n } });
      if (mode === 'cyclic-record') {
        const record: Record<string, unknown> = { stage: 'misbehave' };
        record.self = record;
        ctx.state.gateway.pipeline.push(record as never);
      }
      await next();
      if (mode === 'throw-after') throw new GatewayError('invalid_request', 'refused after the provider answered');
      if (mode === 'slow-after') {
        slowAfterSleeps.open();
        await new Promise((r) => setTimeout(r, 600));
      }
      if (mode === 'status-999') ctx.state.gateway.response!.status = 999;
      if (mode === 'kind-xml') (ctx.state.gateway.response as { kind: string }).kind = 'xml';
      const response = ctx.state.gateway.response;
      if (response?.kind === 'sse' && mode.startsWith('stream-throw')) {
        const inner = response.events;
        const after = Number(mode.slice('stream-throw-'.length) || 0);
        response.events = (async function* (): AsyncGenerator<SseEvent> {
          let n = 0;
          for await (const ev of inner) {
            if (n++ === after) throw new Error('the wrapper broke');
            yield ev;
          }
        })();
      }
    };
  },
};

const registry = new Map([...STAGES, misbehave].map((s) => [s.id, s]));
const pipeline = '[auth, validate, misbehave, upstream]';
let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ registry, yaml: testConfigYaml(undefined, pipeline) });
});
afterAll(() => gw.close());

const chat = (mode: string, extra: Record<string, unknown> = {}) =>
  post(`${gw.url}/chat/completions`, gw.key, { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }], ...extra }, { 'x-mb': mode });
const messages = (mode: string, extra: Record<string, unknown> = {}) =>
  post(`${gw.url}/messages`, gw.key, { model: 'sim/chat', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }], ...extra }, { 'x-mb': mode });

describe('a stage that misbehaves', () => {
  it('sets the model to a number: the 404 names it (it read "Model `` is not available")', async () => {
    const res = await chat('model-number');
    expect(res.status).toBe(404);
    expect(res.json.error.message).toBe('Model `42` is not available on this gateway (see GET /models)');
  });

  it('sets a response the gateway cannot send (status 999, kind "xml"): a 500 in the envelope (it went out as "999 unknown", or as a stream)', async () => {
    for (const mode of ['status-999', 'kind-xml']) {
      for (const ask of [chat, messages]) {
        const res = await ask(mode);
        expect(res.status).toBe(500);
        expect(res.headers.get('content-type')).toMatch(/^application\/json/);
        expect(res.json.error.message).toBe('Internal server error');
      }
    }
  });

  it('answers a 500 after routing without the routing metadata asked for (spec 7.4 rule 3), in both envelopes', async () => {
    for (const ask of [chat, messages]) {
      const path = ask === chat ? 'chat/completions' : 'messages';
      const res = await post(`${gw.url}/${path}`, gw.key, { model: 'sim/chat', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }, { 'x-mb': 'status-999', 'x-gateway-metadata': 'enabled' });
      expect(res.status).toBe(500);
      expect(res.json).not.toHaveProperty('gateway_metadata');
      expect(res.headers.get(ask === chat ? 'x-request-id' : 'request-id')).toMatch(/^gen-/);
    }
  });

  it('puts what JSON cannot hold (a BigInt, a cycle) in an error or the records: an enveloped 500 with the request id, not a bare text/plain one', async () => {
    for (const ask of [chat, messages]) {
      const bigint = await ask('bigint-metadata');
      expect(bigint.status).toBe(500);
      expect(bigint.headers.get('content-type')).toMatch(/^application\/json/);
      expect(bigint.json.error.message).toBe('Internal server error');
      // A record that cannot be encoded, asked for with the metadata header, after the provider answered.
      const cyclic = await post(`${gw.url}/${ask === chat ? 'chat/completions' : 'messages'}`, gw.key, { model: 'sim/chat', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }, { 'x-mb': 'cyclic-record', 'x-gateway-metadata': 'enabled' });
      expect(cyclic.status).toBe(500);
      expect(cyclic.headers.get('content-type')).toMatch(/^application\/json/);
      expect(cyclic.json.error.message).toBe('Internal server error');
      const id = cyclic.headers.get(ask === chat ? 'x-request-id' : 'request-id');
      expect(id).toMatch(/^gen-/);
      if (ask === messages) expect(cyclic.json.request_id).toBe(id);
    }
  });

  it('throws an error quoting the key: the log line masks the key, as the error body and spans do', async () => {
    const before = gw.logs.length;
    for (const mode of ['throw-key', 'throw-object']) {
      const res = await chat(mode);
      expect(res.status).toBe(500);
      expect(res.json.error.message).toBe('Internal server error');
    }
    const lines = gw.logs.slice(before).join('');
    expect(lines).toMatch(/boom; auth was Bearer sk-gw-v1-\.\.\.[0-9a-f]{4}/);
    expect(lines).toMatch(/"secret":"Bearer sk-gw-v1-\.\.\.[0-9a-f]{4}"/);
    expect(lines).not.toContain(gw.key);
  });

  it('throws a GatewayError that cannot be written (unknown type, status 42, a header with a line break): a 500 in the client own envelope, and the request is finished', async () => {
    for (const mode of ['bad-type', 'bad-status', 'bad-header']) {
      const before = gw.logs.length;
      const c = await chat(mode);
      expect(c.status).toBe(500);
      expect(c.json.error).toMatchObject({ code: 500, message: 'Internal server error' });
      const m = await messages(mode);
      expect(m.status).toBe(500);
      expect(m.json).toMatchObject({ type: 'error', error: { type: 'api_error', message: 'Internal server error' } });
      // The access line is written: the error handling ran to its end (it threw half-way before).
      const access = gw.logs.slice(before).filter((l) => l.includes('"msg":"request"'));
      expect(access.length).toBe(2);
      expect(gw.gateway.inFlight()).toBe(0);
    }
  });

  it('refuses an answer after the provider gave it: the client gets the error, the row says failed with the provider usage', async () => {
    const res = await chat('throw-after');
    expect(res.status).toBe(400);
    const id = res.headers.get('x-request-id')!;
    expect(id).toBeTruthy();
    const row = await ledgerRowSoon(gw, id);
    expect(row).toMatchObject({ status: 'failed' });
    expect(row!.promptTokens).toBeGreaterThan(0);
  });

  it('refuses a stream after the provider began it, before any event went out: the row says failed with what the provider had sent (the input counted), not 0', async () => {
    for (const ask of [chat, messages]) {
      const res = await ask('throw-after', { stream: true });
      expect(res.status).toBe(400);
      const id = res.headers.get(ask === chat ? 'x-request-id' : 'request-id')!;
      const row = await ledgerRowSoon(gw, id);
      expect(row).toMatchObject({ status: 'failed', provider: 'local' });
      expect(row!.promptTokens).toBeGreaterThan(0);
      expect(row!.costUsd).toBeGreaterThan(0);
    }
  });

  it('breaks the stream it wraps: the stream ends with its dialect in-band error and [DONE], billed as failed', async () => {
    for (const after of [0, 2]) {
      const c = await chat(`stream-throw-${after}`, { stream: true });
      expect(c.status).toBe(200);
      const events = sseEvents(c.text);
      expect(events.at(-1)!.data).toBe('[DONE]');
      const failure = JSON.parse(events.at(-2)!.data);
      expect(failure.choices[0].finish_reason).toBe('error');
      expect(failure.error).toMatchObject({ code: 500, message: 'Internal server error' });
      expect(events.length).toBe(after + 2);
      expect((await ledgerRowSoon(gw, c.headers.get('x-request-id')!))?.status).toBe('failed');

      const m = await messages(`stream-throw-${after}`, { stream: true });
      expect(m.status).toBe(200);
      const mEvents = sseEvents(m.text);
      expect(mEvents.at(-1)!.data).toBe('[DONE]');
      expect(mEvents.at(-2)!.event).toBe('error');
      expect(JSON.parse(mEvents.at(-2)!.data)).toMatchObject({ type: 'error', error: { type: 'api_error', message: 'Internal server error' } });
    }
  });

  it('is slow after the provider answered while the client leaves: logged 499 cancelled, not 200 completed, and no error line', async () => {
    const before = gw.logs.length;
    slowAfterSleeps = gate();
    const id = await new Promise<string>((resolve, reject) => {
      const body = JSON.stringify({ model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }] });
      const url = new URL(`${gw.url}/chat/completions`);
      const req = request(
        { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.key}`, 'x-mb': 'slow-after' } },
        () => reject(new Error('an answer came')),
      );
      req.on('error', () => undefined);
      req.end(body);
      // Gone once the provider has answered and the stage is sleeping (a fixed 250 ms had come too early or too late on a loaded machine).
      void slowAfterSleeps.until.then(() => {
        req.destroy();
        resolve('');
      });
    });
    expect(id).toBe('');
    let access: string | undefined;
    for (let i = 0; i < 100 && !access; i++) {
      await new Promise((r) => setTimeout(r, 20));
      access = gw.logs.slice(before).find((l) => l.includes('"msg":"request"'));
    }
    expect(JSON.parse(access!)).toMatchObject({ status: 499, outcome: 'cancelled', error_type: 'cancelled' });
    expect(gw.logs.slice(before).join('')).not.toContain('unexpected error');
  });

  it('is slow after a stream began while the client leaves: the stream is never written, and its row is cancelled with what the provider had sent (it was 0)', async () => {
    const before = gw.logs.length;
    slowAfterSleeps = gate();
    const url = new URL(`${gw.url}/chat/completions`);
    const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.key}`, 'x-mb': 'slow-after' } });
    req.on('error', () => undefined);
    req.end(JSON.stringify({ model: 'sim/chat', stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    await slowAfterSleeps.until; // the stream has begun and the stage is sleeping
    req.destroy();
    let access: string | undefined;
    for (let i = 0; i < 100 && !access; i++) {
      await new Promise((r) => setTimeout(r, 20));
      access = gw.logs.slice(before).find((l) => l.includes('"msg":"request"'));
    }
    const line = JSON.parse(access!);
    expect(line).toMatchObject({ status: 499, outcome: 'cancelled' });
    const row = await ledgerRowSoon(gw, line.generation_id);
    expect(row).toMatchObject({ status: 'cancelled', provider: 'local' });
    expect(row!.promptTokens).toBeGreaterThan(0);
    expect(row!.costUsd).toBeGreaterThan(0);
  });
});

describe('a fusion stream a later stage refuses before it is written', () => {
  it('is billed for the candidates and for what the judge had sent (it was the candidates alone)', async () => {
    const models = `  - id: sim/two
    endpoints: [{ provider: local, upstream_model: sim-2, pricing: { prompt: 1, completion: 2 } }]
pipelines:`;
    const yaml = `${testConfigYaml(undefined, '[auth, validate, misbehave, fusion, upstream]').replace('pipelines:', models)}plugins:\n  fusion: { models: [sim/chat, sim/two], judge: sim/chat, min_answers: 2 }\n`;
    const one = await startTestGateway({ registry, yaml });
    try {
      const ask = { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }] };
      const plain = await post(`${one.url}/chat/completions`, one.key, ask);
      const candidatePrompt = (await one.ledgerRow(plain.json.id))!.promptTokens;
      const res = await post(`${one.url}/chat/completions`, one.key, { ...ask, stream: true, plugins: [{ id: 'fusion' }] }, { 'x-mb': 'throw-after' });
      expect(res.status).toBe(400);
      const row = await ledgerRowSoon(one, res.headers.get('x-request-id')!);
      expect(row).toMatchObject({ status: 'failed' });
      // Two candidates with the client's prompt, and the judge's prompt (which holds their answers) on top.
      expect(row!.promptTokens).toBeGreaterThan(2 * candidatePrompt);
    } finally {
      await one.close();
    }
  });
});

describe('a stage that hangs', () => {
  it('holds no max_in_flight slot once its client has gone (the slots were held for good: every request a 503)', async () => {
    const yaml = testConfigYaml(undefined, pipeline).replace('server: { port: 0, max_body_bytes: 65536, watch_config: false }', 'server: { port: 0, watch_config: false, max_in_flight: 1, drain_timeout_ms: 200 }');
    expect(yaml).toContain('max_in_flight: 1');
    const one = await startTestGateway({ registry, yaml });
    try {
      const url = new URL(`${one.url}/chat/completions`);
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${one.key}`, 'x-mb': 'hang' } });
      req.on('error', () => undefined);
      req.end(JSON.stringify({ model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }] }));
      await expect.poll(() => one.gateway.inFlight(), { timeout: 5000 }).toBe(1);
      expect((await post(`${one.url}/chat/completions`, one.key, { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }] })).status).toBe(503);
      req.destroy();
      await expect.poll(() => one.gateway.inFlight(), { timeout: 5000 }).toBe(0);
      expect((await post(`${one.url}/chat/completions`, one.key, { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }] })).status).toBe(200);
    } finally {
      await Promise.race([one.close(), new Promise((r) => setTimeout(r, 3000))]);
    }
  });
});

describe('a reload', () => {
  it('refuses a config whose stage uses the services while it is created, as serve and config check do', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gw-stage-faults-'));
    try {
      const file = path.join(dir, 'gateway.yaml');
      const lines: string[] = [];
      const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) } as never);
      const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger });
      writeFileSync(file, testConfigYaml(undefined, pipeline));
      expect(await reload('test')).toBe(true);
      writeFileSync(file, `${testConfigYaml(undefined, pipeline)}plugins:\n  misbehave: { label: use-store }\n`);
      expect(await reload('test')).toBe(false);
      expect(lines.join('')).toMatch(/config reload refused/);
      expect(lines.join('')).toMatch(/a stage used services\.store\.findAccount while being created/);
      expect((await chat('')).status).toBe(200);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
