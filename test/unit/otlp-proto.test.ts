import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { diag, DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Span } from '@opentelemetry/api';
import { suppressTracing, TraceState } from '@opentelemetry/core';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOffSampler, InMemorySpanExporter, SimpleSpanProcessor, TraceIdRatioBasedSampler, type ReadableSpan, type Sampler } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import { LeanSpan, type SpanLimits } from '../../src/telemetry/lean-span';
import { LeanTracer, type SpanSink } from '../../src/telemetry/lean-tracer';
import { OtlpBatch, type BatchSender, type EncodedBatch } from '../../src/telemetry/otlp-batch';
import { exportRequest, ProtoWriter, requestFrame, writeSpan } from '../../src/telemetry/otlp-proto';
import { startTelemetry, type Telemetry } from '../../src/telemetry/otel';
import { LinkedContext, withSpan } from '../../src/telemetry/linked-context';

/**
 * The gateway's own span encoding against the official one: the same spans must give the same bytes as
 * `@opentelemetry/otlp-transformer`'s ProtobufTraceSerializer (what the SDK's OTLP exporter would send).
 */

const LIMITS: SpanLimits = { attributeCountLimit: 128, attributeValueLengthLimit: Infinity, eventCountLimit: 128, linkCountLimit: 128, attributePerEventCountLimit: 128 };
const resource = resourceFromAttributes({ 'service.name': 'gw-test', 'host.name': 'hôte-1', 'process.pid': 4242, 'deployment.ratio': 0.25 });
const scope = { name: 'model-gateway' };

function tracerWith(sinks: SpanSink[], sampler: Sampler | null = null) {
  return new LeanTracer({ resource, scope, sampler, limits: LIMITS, sinks });
}

/** Spans that exercise every field: nesting, a remote parent with trace state, every attribute type, events, links, errors. */
function manySpans(tracer: LeanTracer): void {
  const root = tracer.startSpan('gateway.request chat_completions', { attributes: { 'http.request.method': 'POST', 'url.path': '/api/v1/chat/completions' } }, ROOT_CONTEXT);
  const ctx = withSpan(ROOT_CONTEXT, root);
  const stage = tracer.startSpan('gateway.stage auth', { attributes: { 'gateway.stage': 'auth' } }, ctx);
  stage.setStatus({ code: SpanStatusCode.ERROR, message: 'Invalid API key — “quoted”' });
  stage.setAttribute('gateway.error_type', 'authentication');
  stage.end();
  const attempt = tracer.startSpan('gateway.upstream sim', { kind: SpanKind.CLIENT, attributes: { 'gateway.attempt': 1, 'gateway.byok': false, 'gateway.cost': 0.000123, 'big.int': 2 ** 40, 'neg.int': -7, tags: ['a', 'b'], nums: [1, 2.5], flags: [true, false] } }, ctx);
  attempt.addEvent('first token', { 'gen_ai.output_tokens': 3 });
  attempt.recordException(new Error('socket hang up'));
  attempt.addLink({ context: { traceId: 'aa'.repeat(16), spanId: 'bb'.repeat(8), traceFlags: TraceFlags.SAMPLED, isRemote: true }, attributes: { why: 'fusion' } });
  attempt.end();
  root.setAttribute('http.response.status_code', 200);
  root.setAttribute('http.request.method', 'PUT'); // set again: keeps its first place, as an object's key does
  root.setAttribute('long.text', 'x'.repeat(300));
  root.end();
  const remote = trace.setSpanContext(ROOT_CONTEXT, { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: TraceFlags.SAMPLED, isRemote: true, traceState: new TraceState('vendor=abc,other=1') });
  tracer.startSpan('child of remote', {}, remote).end();
}

function encoded(spans: ReadableSpan[]): Buffer {
  const w = new ProtoWriter(16);
  for (const s of spans) writeSpan(w, s as LeanSpan);
  return exportRequest(requestFrame(resource, scope), Buffer.from(w.view()));
}

describe('OTLP protobuf encoding', () => {
  it('gives byte for byte what the official serializer gives for the same spans', () => {
    const memory = new InMemorySpanExporter();
    manySpans(tracerWith([new SimpleSpanProcessor(memory)]));
    const spans = memory.getFinishedSpans();
    expect(spans).toHaveLength(4);
    const official = Buffer.from(ProtobufTraceSerializer.serializeRequest(spans)!);
    expect(encoded(spans).equals(official)).toBe(true);
  });

  it('writes lengths of 128 bytes and more as multi-byte varints', () => {
    const memory = new InMemorySpanExporter();
    const tracer = tracerWith([new SimpleSpanProcessor(memory)]);
    const span = tracer.startSpan('n'.repeat(200), { attributes: { long: 'é'.repeat(5000) } }, ROOT_CONTEXT);
    span.end();
    const official = Buffer.from(ProtobufTraceSerializer.serializeRequest(memory.getFinishedSpans())!);
    expect(encoded(memory.getFinishedSpans()).equals(official)).toBe(true);
  });

  it('encodes times exactly: [seconds, nanoseconds] read back from the span give the same fixed64', () => {
    const w = new ProtoWriter(8);
    w.hrTime([1_790_000_000, 123_456_789]);
    expect(w.view().readBigUInt64LE(0)).toBe(1_790_000_000_123_456_789n);
  });
});

describe('the lean tracer', () => {
  it('nests spans under their parent context and follows an unsampled parent (no recording)', () => {
    const memory = new InMemorySpanExporter();
    const tracer = tracerWith([new SimpleSpanProcessor(memory)]);
    const root = tracer.startSpan('root', {}, ROOT_CONTEXT);
    const child = tracer.startSpan('child', {}, trace.setSpan(ROOT_CONTEXT, root));
    child.end();
    root.end();
    const [c, r] = memory.getFinishedSpans();
    expect(c.parentSpanContext?.spanId).toBe(r.spanContext().spanId);
    expect(c.spanContext().traceId).toBe(r.spanContext().traceId);
    const unsampled = trace.setSpanContext(ROOT_CONTEXT, { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: TraceFlags.NONE, isRemote: true });
    const quiet = tracer.startSpan('quiet', {}, unsampled);
    expect(quiet.isRecording()).toBe(false);
    expect(quiet.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
  });

  it('asks the configured sampler: always_off records nothing, ratio 0 records no root', () => {
    const memory = new InMemorySpanExporter();
    for (const sampler of [new AlwaysOffSampler(), new TraceIdRatioBasedSampler(0)]) {
      const span: Span = tracerWith([new SimpleSpanProcessor(memory)], sampler).startSpan('off', {}, ROOT_CONTEXT);
      expect(span.isRecording()).toBe(false);
      span.end();
    }
    expect(memory.getFinishedSpans()).toHaveLength(0);
  });

  it('startActiveSpan runs the function with the span and returns its result; root ignores the parent', () => {
    const memory = new InMemorySpanExporter();
    const tracer = tracerWith([new SimpleSpanProcessor(memory)]);
    const parent = tracer.startSpan('parent', {}, ROOT_CONTEXT);
    const result = tracer.startActiveSpan('active', { attributes: { a: 1 } }, trace.setSpan(ROOT_CONTEXT, parent), (span) => {
      span.end();
      return 42;
    });
    expect(result).toBe(42);
    expect(tracer.startActiveSpan('bare', (span) => (span.end(), 'ok'))).toBe('ok');
    tracer.startSpan('rooted', { root: true }, trace.setSpan(ROOT_CONTEXT, parent)).end();
    parent.end();
    const byName = Object.fromEntries(memory.getFinishedSpans().map((s) => [s.name, s]));
    expect(byName.active.parentSpanContext?.spanId).toBe(parent.spanContext().spanId);
    expect(byName.active.attributes).toEqual({ a: 1 });
    expect(byName.rooted.parentSpanContext).toBeUndefined();
    expect(byName.rooted.spanContext().traceId).not.toBe(parent.spanContext().traceId);
  });

  it('takes start and end times as epoch ms, Date, [s, ns] or performance timestamps, never ending before it starts', () => {
    const memory = new InMemorySpanExporter();
    const tracer = tracerWith([new SimpleSpanProcessor(memory)]);
    tracer.startSpan('epoch', { startTime: 1_790_000_000_000 }, ROOT_CONTEXT).end(new Date(1_790_000_000_250));
    tracer.startSpan('hr', { startTime: [1_790_000_000, 500_000_000] }, ROOT_CONTEXT).end([1_790_000_001, 0]);
    // A number not later than performance.now() is a performance timestamp (as in the SDK).
    const perfStart = performance.now() - 10;
    tracer.startSpan('perf', { startTime: perfStart }, ROOT_CONTEXT).end(perfStart + 5);
    tracer.startSpan('backwards', { startTime: 1_790_000_000_000 }, ROOT_CONTEXT).end(1_789_999_999_000);
    const byName = Object.fromEntries(memory.getFinishedSpans().map((s) => [s.name, s]));
    expect(byName.epoch.startTime).toEqual([1_790_000_000, 0]);
    expect(byName.epoch.duration).toEqual([0, 250_000_000]);
    expect(byName.hr.duration).toEqual([0, 500_000_000]);
    expect(Math.abs(byName.perf.startTime[0] * 1e3 - Date.now())).toBeLessThan(60_000);
    expect(byName.perf.duration).toEqual([0, 5_000_000]);
    expect(byName.backwards.duration).toEqual([0, 0]);
  });

  it('records nothing under the suppressTracing context of the SDK', () => {
    const memory = new InMemorySpanExporter();
    const span = tracerWith([new SimpleSpanProcessor(memory)]).startSpan('hidden', {}, suppressTracing(ROOT_CONTEXT));
    expect(span.isRecording()).toBe(false);
    span.end();
    expect(memory.getFinishedSpans()).toHaveLength(0);
  });

  it('takes OTEL_TRACES_SAMPLER from the environment through startTelemetry', async () => {
    const memory = new InMemorySpanExporter();
    const before = process.env.OTEL_TRACES_SAMPLER;
    process.env.OTEL_TRACES_SAMPLER = 'always_off';
    try {
      const t = startTelemetry({ exporter: 'none', service_name: 't', max_queue: 10 }, [new SimpleSpanProcessor(memory)]);
      t.tracer.startSpan('sampled out', {}, ROOT_CONTEXT).end();
      await t.shutdown();
    } finally {
      if (before === undefined) delete process.env.OTEL_TRACES_SAMPLER;
      else process.env.OTEL_TRACES_SAMPLER = before;
    }
    expect(memory.getFinishedSpans()).toHaveLength(0);
  });

  it('keeps the SDK span rules: attribute count limit, first OK status wins, one end only', () => {
    const memory = new InMemorySpanExporter();
    const tracer = new LeanTracer({ resource, scope, sampler: null, limits: { ...LIMITS, attributeCountLimit: 2 }, sinks: [new SimpleSpanProcessor(memory)] });
    const span = tracer.startSpan('limits', { attributes: { a: 1, b: 2, c: 3 } }, ROOT_CONTEXT);
    span.setAttribute('a', 10);
    span.setStatus({ code: SpanStatusCode.OK });
    span.setStatus({ code: SpanStatusCode.ERROR, message: 'late' });
    span.end();
    span.end();
    span.setAttribute('after', 'end');
    const [s] = memory.getFinishedSpans();
    expect(s.attributes).toEqual({ a: 10, b: 2 });
    expect(s.droppedAttributesCount).toBe(1);
    expect(s.status).toEqual({ code: SpanStatusCode.OK });
    expect(memory.getFinishedSpans()).toHaveLength(1);
  });
});

describe('the linked context', () => {
  it('is its parent plus one value: the span it was made with, everything else from the parent', () => {
    const tracer = tracerWith([]);
    const key = Symbol('caller value');
    const parent = ROOT_CONTEXT.setValue(key, 'from the caller');
    const span = tracer.startSpan('root', {}, parent);
    const ctx = withSpan(parent, span);
    expect(ctx).toBeInstanceOf(LinkedContext);
    expect(trace.getSpan(ctx)).toBe(span);
    expect(ctx.getValue(key)).toBe('from the caller');
    expect(trace.getSpan(parent)).toBeUndefined();
    // trace.setSpan on a linked context links on: the child sees its own span, the parent keeps its own.
    const child = tracer.startSpan('child', {}, ctx);
    const inner = trace.setSpan(ctx, child);
    expect(inner).toBeInstanceOf(LinkedContext);
    expect(trace.getSpan(inner)).toBe(child);
    expect(trace.getSpan(ctx)).toBe(span);
    expect(inner.getValue(key)).toBe('from the caller');
    // deleteValue: the key reads as unset from there on, and only there.
    const without = inner.deleteValue(key);
    expect(without.getValue(key)).toBeUndefined();
    expect(inner.getValue(key)).toBe('from the caller');
    expect(trace.getSpan(without)).toBe(child);
  });

  it('makes the child a child of the span it holds, in the same trace', () => {
    const memory = new InMemorySpanExporter();
    const tracer = tracerWith([new SimpleSpanProcessor(memory)]);
    const remote = trace.setSpanContext(ROOT_CONTEXT, { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: TraceFlags.SAMPLED, isRemote: true });
    const root = tracer.startSpan('root', {}, remote);
    const stage = tracer.startSpan('stage', {}, withSpan(remote, root));
    stage.end();
    root.end();
    const [s, r] = memory.getFinishedSpans();
    expect(r.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(s.parentSpanContext?.spanId).toBe(r.spanContext().spanId);
    expect(s.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
  });
});

/** A sender that keeps every batch, and can hold them (as if the collector were slow). */
function keepingSender() {
  const sent: EncodedBatch[] = [];
  const held: Array<() => void> = [];
  let hold = false;
  const sender: BatchSender = {
    export: (batch, done) => {
      sent.push(batch);
      if (hold) held.push(() => done({ code: 0 }));
      else done({ code: 0 });
    },
    forceFlush: async () => undefined,
    shutdown: async () => undefined,
  };
  return { sender, sent, hold: (on: boolean) => (hold = on), release: () => held.splice(0).forEach((f) => f()) };
}

describe('the OTLP batch', () => {
  it('sends a batch once batchSize spans wait, as the request the official serializer would make', () => {
    const memory = new InMemorySpanExporter();
    const s = keepingSender();
    const batch = new OtlpBatch({ resource, scope, sender: s.sender, maxQueue: 100, batchSize: 4 });
    manySpans(tracerWith([new SimpleSpanProcessor(memory), batch]));
    expect(s.sent).toHaveLength(1);
    expect(s.sent[0].count).toBe(4);
    expect(s.sent[0].bytes.equals(Buffer.from(ProtobufTraceSerializer.serializeRequest(memory.getFinishedSpans())!))).toBe(true);
  });

  it('holds spans while two exports are in flight and drops beyond maxQueue', async () => {
    const s = keepingSender();
    const batch = new OtlpBatch({ resource, scope, sender: s.sender, maxQueue: 3, batchSize: 1 });
    const tracer = tracerWith([batch]);
    s.hold(true);
    for (let i = 0; i < 7; i++) tracer.startSpan(`s${i}`, {}, ROOT_CONTEXT).end();
    // Two single-span exports are out; three spans wait; two were dropped.
    expect(s.sent.map((b) => b.count)).toEqual([1, 1]);
    expect(batch.dropped).toBe(2);
    s.hold(false);
    s.release();
    await batch.forceFlush();
    expect(s.sent.map((b) => b.count)).toEqual([1, 1, 3]);
  });
});

describe('startTelemetry with exporter otlp', () => {
  let server: Server | undefined;
  let telemetry: Telemetry | undefined;
  afterEach(async () => {
    await telemetry?.shutdown();
    await new Promise((r) => server?.close(r));
  });

  it('posts application/x-protobuf to the endpoint on shutdown, with the service name in the resource', async () => {
    const bodies: Array<{ type: string | undefined; body: Buffer }> = [];
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        bodies.push({ type: req.headers['content-type'], body: Buffer.concat(chunks) });
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
    telemetry = startTelemetry({ exporter: 'otlp', endpoint: url, service_name: 'svc-under-test', max_queue: 100 });
    // The API's global tracer is the gateway's while telemetry runs.
    expect(trace.getTracer('any')).toBe(telemetry.tracer);
    const span = telemetry.tracer.startSpan('exported', { attributes: { k: 'v' } }, ROOT_CONTEXT);
    span.end();
    expect(await telemetry.shutdown()).toBe(true);
    telemetry = undefined;
    expect(bodies).toHaveLength(1);
    expect(bodies[0].type).toBe('application/x-protobuf');
    const text = bodies[0].body.toString('latin1');
    expect(text).toContain('svc-under-test');
    expect(text).toContain('exported');
    expect(bodies[0].body.includes(Buffer.from(span.spanContext().spanId, 'hex'))).toBe(true);
  });
  it('gives the last spans at most the limit when the collector does not answer (shutdown waited for the exporter\'s 10 s timeout)', async () => {
    server = createServer(() => undefined); // takes the request, never answers
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
    const hung = startTelemetry({ exporter: 'otlp', endpoint: url, service_name: 'svc-under-test', max_queue: 100 });
    hung.tracer.startSpan('never-taken', {}, ROOT_CONTEXT).end();
    const started = Date.now();
    expect(await hung.shutdown(200)).toBe(false);
    // Generous: the limit is 200 ms, the exporter's own timeout 10 s.
    expect(Date.now() - started).toBeLessThan(5000);
    server.closeAllConnections();
  });

  it("reads a collector's partial-success answer (the deserializer loaded on the first answer with a body) and warns through diag", async () => {
    // ExportTraceServiceResponse { partial_success: { rejected_spans: 2, error_message: "over quota" } }
    const message = Buffer.concat([Buffer.from([0x08, 0x02, 0x12, 10]), Buffer.from('over quota')]);
    const answer = Buffer.concat([Buffer.from([0x0a, message.length]), message]);
    let answered = 0;
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        answered += 1;
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(answer);
      });
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const warnings: string[] = [];
    const record = (...args: unknown[]) => warnings.push(args.map(String).join(' '));
    diag.setLogger({ error: record, warn: record, info: () => undefined, debug: () => undefined, verbose: () => undefined }, DiagLogLevel.WARN);
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
      telemetry = startTelemetry({ exporter: 'otlp', endpoint: url, service_name: 'svc-under-test', max_queue: 100 });
      telemetry.tracer.startSpan('exported', {}, ROOT_CONTEXT).end();
      await telemetry.shutdown();
      telemetry = undefined;
    } finally {
      diag.disable();
    }
    expect(answered).toBe(1);
    expect(warnings.join('\n')).toMatch(/partial success[\s\S]*rejectedSpans[\s\S]*2[\s\S]*over quota/i);
  });
});
