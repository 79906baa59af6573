import { randomBytes } from 'node:crypto';
import { SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { startTelemetry, type Telemetry } from '../../src/telemetry/otel';

/**
 * The span tree of real requests (spec 4.2 `trace`): OpenTelemetry runs in-process with an in-memory
 * exporter, the gateway listens on a loopback port and is called over HTTP.
 */

const exporter = new InMemorySpanExporter();
let telemetry: Telemetry;
let upstream: FakeUpstream;
let gw: TestGateway;

const HEX32 = /^[0-9a-f]{32}$/;
const HEX16 = /^[0-9a-f]{16}$/;
const CHAT = { model: 'sim/chat', messages: [{ role: 'user', content: 'hello spans' }] };

beforeAll(async () => {
  telemetry = startTelemetry({ exporter: 'none', service_name: 't', max_queue: 4096 }, [new SimpleSpanProcessor(exporter)]);
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: testConfigYaml(upstream.url), tracer: telemetry.tracer });
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  await telemetry?.shutdown();
});

function spans(): ReadableSpan[] {
  return exporter.getFinishedSpans();
}

/** Polls the exporter (spans of a stream end after the last byte is sent) until `pick` finds something. */
async function waitForSpans<T>(pick: (all: ReadableSpan[]) => T | undefined, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = pick(spans());
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(`span not exported within ${timeoutMs} ms; have: ${spans().map((s) => s.name).join(', ')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The finished request span carrying `generationId`, and every span of its trace. */
async function traceOfGeneration(generationId: string) {
  const request = await waitForSpans((all) => all.find((s) => s.attributes['gateway.generation_id'] === generationId));
  const traceId = request.spanContext().traceId;
  return { request, inTrace: spans().filter((s) => s.spanContext().traceId === traceId) };
}

const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

function byName(list: ReadableSpan[], name: string): ReadableSpan {
  const found = list.filter((s) => s.name === name);
  expect(found.map((s) => s.name), `exactly one span "${name}"`).toEqual([name]);
  return found[0];
}

describe('span tree of a chat request', () => {
  it('nests request → auth → validate → upstream stage → upstream attempt in one trace', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, CHAT);
    expect(res.status).toBe(200);
    const { request, inTrace } = await traceOfGeneration(res.json.id);

    expect(request.name).toBe('gateway.request chat_completions');
    expect(request.parentSpanContext).toBeUndefined();
    const auth = byName(inTrace, 'gateway.stage auth');
    const validate = byName(inTrace, 'gateway.stage validate');
    const stage = byName(inTrace, 'gateway.stage upstream');
    const attempt = byName(inTrace, 'gateway.upstream local');
    expect(parentOf(auth)).toBe(idOf(request));
    expect(parentOf(validate)).toBe(idOf(auth));
    expect(parentOf(stage)).toBe(idOf(validate));
    expect(parentOf(attempt)).toBe(idOf(stage));
    expect(inTrace).toHaveLength(5);

    expect(request.attributes).toMatchObject({
      'gateway.generation_id': res.json.id,
      'gateway.key_id': gw.keyRecord.id,
      'gateway.workspace_id': gw.keyRecord.workspaceId,
      'gateway.requested_model': 'sim/chat',
      'http.request.method': 'POST',
      'url.path': '/api/v1/chat/completions',
      'http.response.status_code': 200,
    });
    expect(request.attributes['gateway.cost_usd']).toBeCloseTo(res.json.usage.cost, 12);
    expect(request.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(auth.attributes['gateway.stage']).toBe('auth');
    expect(attempt.attributes).toMatchObject({
      'gateway.provider': 'local',
      'gateway.model': 'sim/chat',
      'gateway.upstream_model': 'sim-1',
      'gateway.attempt': 1,
    });
    expect(attempt.status.code).not.toBe(SpanStatusCode.ERROR);
  });

  it('ends the request span of a stream with the cost and outcome set', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, stream: true });
    expect(res.status).toBe(200);
    expect(res.text).toContain('data: [DONE]');
    const generationId = JSON.parse(res.text.split('\n').find((l) => l.startsWith('data: {'))!.slice(6)).id as string;
    const { request, inTrace } = await traceOfGeneration(generationId);
    expect(request.name).toBe('gateway.request chat_completions');
    expect(request.attributes['gateway.outcome']).toBe('completed');
    expect(typeof request.attributes['gateway.cost_usd']).toBe('number');
    expect(request.attributes['gateway.cost_usd'] as number).toBeGreaterThan(0);
    const attempt = byName(inTrace, 'gateway.upstream local');
    expect(attempt.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(attempt.ended).toBe(true);
  });

  it('ends every span inside its parent: a stream\'s stage spans cover the relay, and a trace\'s spans share one clock', async () => {
    for (const stream of [true, false]) {
      const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, stream });
      expect(res.status).toBe(200);
      const generationId = stream ? (JSON.parse(res.text.split('\n').find((l) => l.startsWith('data: {'))!.slice(6)).id as string) : res.json.id;
      const { inTrace } = await traceOfGeneration(generationId);
      expect(inTrace).toHaveLength(5);
      const byId = new Map(inTrace.map((s) => [idOf(s), s]));
      const nanos = (t: [number, number]) => BigInt(t[0]) * 1_000_000_000n + BigInt(t[1]);
      for (const child of inTrace) {
        const parent = byId.get(parentOf(child) ?? '');
        if (!parent) continue; // the request span
        expect(nanos(child.startTime), `${child.name} starts after ${parent.name} (stream: ${stream})`).toBeGreaterThanOrEqual(nanos(parent.startTime));
        expect(nanos(child.endTime), `${child.name} ends by ${parent.name}'s end (stream: ${stream})`).toBeLessThanOrEqual(nanos(parent.endTime));
      }
    }
  });
});

describe('the body `trace` object', () => {
  it('makes the request span a child of trace_id + parent_span_id', async () => {
    const traceId = 'AB'.repeat(16); // upper case: ids are compared in lower case
    const parentSpanId = '0123456789abcdef';
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, trace: { trace_id: traceId, parent_span_id: parentSpanId } });
    expect(res.status).toBe(200);
    const { request, inTrace } = await traceOfGeneration(res.json.id);
    expect(request.spanContext().traceId).toMatch(HEX32);
    expect(request.spanContext().traceId).toBe(traceId.toLowerCase());
    expect(request.parentSpanContext?.spanId).toMatch(HEX16);
    expect(request.parentSpanContext?.spanId).toBe(parentSpanId);
    // The whole tree joins the caller's trace.
    expect(inTrace.map((s) => s.name).sort()).toEqual(
      ['gateway.request chat_completions', 'gateway.stage auth', 'gateway.stage upstream', 'gateway.stage validate', 'gateway.upstream local'],
    );
  });

  it('keeps at most 4096 characters of any span value and status message (a 3 MB model name was copied into ten spans)', async () => {
    const span = telemetry.tracer.startSpan('long values');
    span.setAttribute('long', 'x'.repeat(3_000_000));
    span.setAttributes({ list: ['y'.repeat(10_000)] });
    span.setStatus({ code: 2, message: 'z'.repeat(10_000) });
    span.end();
    const done = await waitForSpans((all) => all.find((s) => s.name === 'long values'));
    expect((done.attributes.long as string).length).toBe(4096);
    expect((done.attributes.list as string[])[0].length).toBe(4096);
    expect(done.status.message!.length).toBe(4096);
  });

  it('renames the request span (span_name) and the attempt span (generation_name)', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, {
      ...CHAT,
      trace: { span_name: 'my-request', generation_name: 'my-generation' },
    });
    expect(res.status).toBe(200);
    const { request, inTrace } = await traceOfGeneration(res.json.id);
    expect(request.name).toBe('my-request');
    const attempt = byName(inTrace, 'my-generation');
    expect(attempt.attributes['gateway.provider']).toBe('local');
    expect(inTrace.some((s) => s.name.startsWith('gateway.upstream'))).toBe(false);
    expect(inTrace.some((s) => s.name.startsWith('gateway.request'))).toBe(false);
  });

  it('turns extra keys into gateway.trace.<key> attributes, and known keys into none', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, {
      ...CHAT,
      trace: { trace_name: 'nightly', environment: 'staging', run: 7, canary: true, tags: ['a', 'b'], generation_name: 'g' },
    });
    expect(res.status).toBe(200);
    const { request } = await traceOfGeneration(res.json.id);
    expect(request.attributes).toMatchObject({
      'gateway.trace.environment': 'staging',
      'gateway.trace.run': 7,
      'gateway.trace.canary': true,
      'gateway.trace.tags': '["a","b"]',
      'gateway.trace_name': 'nightly',
    });
    expect(request.name).toBe('nightly'); // trace_name names the span when span_name is absent
    expect(Object.keys(request.attributes).filter((k) => k.startsWith('gateway.trace.')).sort()).toEqual(
      ['gateway.trace.canary', 'gateway.trace.environment', 'gateway.trace.run', 'gateway.trace.tags'],
    );
  });

  it('cuts what a request puts in its span: values and names to 256 characters, at most 32 trace fields', async () => {
    const trace: Record<string, string> = { trace_name: 'n'.repeat(5000), big: 'v'.repeat(5000) };
    for (let i = 0; i < 50; i++) trace[`f${i}`] = 'x';
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, trace });
    expect(res.status).toBe(200);
    const { request } = await traceOfGeneration(res.json.id);
    expect(request.name).toBe('n'.repeat(256));
    expect(request.attributes['gateway.trace.big']).toBe('v'.repeat(256));
    expect(Object.keys(request.attributes).filter((k) => k.startsWith('gateway.trace.'))).toHaveLength(32);
  });
});

describe('failures', () => {
  it('marks the request span of a 401 with error status and error_type authentication (the key is checked before the body is read)', async () => {
    const marker = `unauthenticated-${Date.now()}`;
    const traceId = randomBytes(16).toString('hex');
    const traceparent = `00-${traceId}-${randomBytes(8).toString('hex')}-01`;
    const res = await post(`${gw.url}/chat/completions`, 'sk-gw-v1-' + '0'.repeat(48), { ...CHAT, trace: { marker } }, { traceparent });
    expect(res.status).toBe(401);
    const request = await waitForSpans((all) => all.find((s) => s.spanContext().traceId === traceId && s.name.startsWith('gateway.request')));
    expect(request.name).toBe('gateway.request chat_completions');
    // The body was never read: nothing of its `trace` object reaches the span.
    expect(request.attributes['gateway.trace.marker']).toBeUndefined();
    expect(request.attributes['gateway.requested_model']).toBeUndefined();
    expect(request.status.code).toBe(SpanStatusCode.ERROR);
    expect(request.attributes['gateway.error_type']).toBe('authentication');
    expect(request.attributes['http.response.status_code']).toBe(401);
    expect(request.attributes['gateway.key_id']).toBeUndefined();
    const inTrace = spans().filter((s) => s.spanContext().traceId === request.spanContext().traceId);
    const auth = byName(inTrace, 'gateway.stage auth');
    expect(parentOf(auth)).toBe(idOf(request));
    expect(auth.status.code).toBe(SpanStatusCode.ERROR);
    expect(auth.attributes['gateway.error_type']).toBe('authentication');
    expect(inTrace.map((s) => s.name)).not.toContain('gateway.stage validate');
  });

  it('gives a request refused while its body is read (no JSON) its request span, with error status (it had none)', async () => {
    const traceId = randomBytes(16).toString('hex');
    const traceparent = `00-${traceId}-${randomBytes(8).toString('hex')}-01`;
    const res = await fetch(`${gw.url}/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${gw.key}`, 'content-type': 'application/json', traceparent }, body: '{"model":' });
    expect(res.status).toBe(400);
    const request = await waitForSpans((all) => all.find((s) => s.spanContext().traceId === traceId && s.name.startsWith('gateway.request')));
    expect(request.name).toBe('gateway.request chat_completions');
    expect(request.status.code).toBe(SpanStatusCode.ERROR);
    expect(request.attributes['gateway.error_type']).toBe('invalid_request');
    expect(request.attributes['http.response.status_code']).toBe(400);
  });

  it('records one attempt span per endpoint when the first one is dead (fake/failover)', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, model: 'fake/failover' });
    expect(res.status).toBe(200);
    expect(res.json.provider).toBe('fake-openai');
    const { request, inTrace } = await traceOfGeneration(res.json.id);
    const stage = byName(inTrace, 'gateway.stage upstream');
    const dead = byName(inTrace, 'gateway.upstream dead-openai');
    const live = byName(inTrace, 'gateway.upstream fake-openai');
    expect(parentOf(dead)).toBe(idOf(stage));
    expect(parentOf(live)).toBe(idOf(stage));
    expect(dead.status.code).toBe(SpanStatusCode.ERROR);
    expect(typeof dead.attributes['gateway.error_type']).toBe('string');
    expect(dead.attributes['gateway.attempt']).toBe(1);
    expect(live.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(live.attributes['gateway.attempt']).toBe(2);
    expect(live.attributes['gateway.upstream_model']).toBe('gpt-upstream');
    // The caller got an answer: the request itself is not an error.
    expect(request.status.code).not.toBe(SpanStatusCode.ERROR);
  });
});

describe('what a request span says at its end (found by a telemetry audit)', () => {
  it('the routed model and provider and the token counts', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, model: 'fake/gpt' });
    const { request } = await traceOfGeneration(res.json.id);
    expect(request.attributes).toMatchObject({
      'gateway.model': 'fake/gpt',
      'gateway.provider': 'fake-openai',
      'gen_ai.usage.input_tokens': res.json.usage.prompt_tokens,
      'gen_ai.usage.output_tokens': res.json.usage.completion_tokens,
    });
  });

  it('a stream that failed after its 200 is an error span (it was UNSET, the metrics said stream_failed)', async () => {
    upstream.faults.push({ kind: 'midstream' });
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, model: 'fake/gpt', stream: true });
    const id = JSON.parse(res.text.split('\n').find((l) => l.startsWith('data: {'))!.slice(6)).id as string;
    const { request } = await traceOfGeneration(id);
    expect(request.attributes['gateway.outcome']).toBe('failed');
    expect(request.status.code).toBe(SpanStatusCode.ERROR);
    expect(request.attributes['gateway.error_type']).toBe('stream_failed');
  });

  it('generation_name is cut to 256 characters like every name a request sets', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, trace: { generation_name: 'g'.repeat(10_000) } });
    expect(res.status).toBe(200);
    const { inTrace } = await traceOfGeneration(res.json.id);
    expect(inTrace.some((s) => s.name === 'g'.repeat(256))).toBe(true);
  });

  it('an all-zero parent_span_id joins the caller\'s trace under a stand-in parent (it started a new trace)', async () => {
    const traceId = 'cd'.repeat(16);
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, trace: { trace_id: traceId, parent_span_id: '0'.repeat(16) } });
    const { request } = await traceOfGeneration(res.json.id);
    expect(request.spanContext().traceId).toBe(traceId);
    expect(request.parentSpanContext?.spanId).toMatch(HEX16);
    expect(request.parentSpanContext?.spanId).not.toBe('0'.repeat(16));
  });
});

describe('secrets', () => {
  it('a gateway key pasted into `model` is masked in span attributes and error messages', async () => {
    const pasted = 'sk-gw-v1-' + 'ab12'.repeat(12);
    const marker = `pasted-${Date.now()}`;
    const res = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, model: pasted, trace: { marker } });
    expect(res.status).toBe(404);
    const request = await waitForSpans((all) => all.find((s) => s.attributes['gateway.trace.marker'] === marker));
    const inTrace = spans().filter((s) => s.spanContext().traceId === request.spanContext().traceId);
    const text = JSON.stringify(inTrace.map((s) => [s.name, s.attributes, s.status.message ?? '']));
    expect(text).not.toContain(pasted);
    expect(request.attributes['gateway.requested_model']).toBe('sk-gw-v1-...ab12');
    expect(request.status.message).toContain('sk-gw-v1-...ab12');
  });

  it('never puts a plaintext API key (gateway or upstream) into a span attribute', async () => {
    // One more request with the management key, so both gateway keys have been presented.
    const res = await post(`${gw.url}/chat/completions`, gw.managementKey, { ...CHAT, model: 'fake/gpt' });
    expect(res.status).toBe(200);
    await traceOfGeneration(res.json.id);
    const secrets = [gw.key, gw.managementKey, 'sk-upstream-openai-secret', 'sk-upstream-anthropic-secret'];
    const all = spans();
    expect(all.length).toBeGreaterThan(5);
    for (const span of all) {
      const values = [
        span.name,
        ...Object.values(span.attributes).map((v) => (typeof v === 'string' ? v : JSON.stringify(v))),
        ...span.events.flatMap((e) => Object.values(e.attributes ?? {}).map((v) => String(v))),
        span.status.message ?? '',
      ];
      for (const secret of secrets) {
        expect(values.filter((v) => v.includes(secret)), `span "${span.name}" leaks a key`).toEqual([]);
      }
    }
  });
});
