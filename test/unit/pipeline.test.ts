import { afterAll, beforeEach, describe, it, expect } from 'vitest';
import { ROOT_CONTEXT, trace, SpanStatusCode, type Context, type Tracer } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { buildPipeline } from '../../src/pipeline/build';
import type { GatewayContext, Stage, StageDefinition, StageRegistry } from '../../src/pipeline/types';
import { GatewayError } from '../../src/errors/gateway-error';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer: Tracer = provider.getTracer('t');

afterAll(async () => {
  await provider.shutdown();
});

beforeEach(() => exporter.reset());

/** The runner reads and sets the trace context on `ctx.state.gateway.traceContext` (no AsyncLocalStorage). */
function fakeCtx(parent: Context = ROOT_CONTEXT): GatewayContext {
  return { state: { gateway: { traceContext: parent } } } as unknown as GatewayContext;
}

/** The span of the code running now, as a stage sees it. */
const currentSpanId = (ctx: GatewayContext) => trace.getSpan(ctx.state.gateway.traceContext)?.spanContext().spanId;

/** A stage that records `<id>:pre` before next() and `<id>:post` after it. */
function recording(id: string, order: string[]): StageDefinition {
  return {
    id,
    configSchema: {},
    create: () => async (_ctx, next) => {
      order.push(`${id}:pre`);
      await Promise.resolve(); // an await before next(), like real stages doing I/O
      await next();
      order.push(`${id}:post`);
    },
  };
}

function registryOf(...defs: StageDefinition[]): StageRegistry {
  return new Map(defs.map((d) => [d.id, d]));
}

function build(stageIds: string[], reg: StageRegistry, extra: { tail?: Stage[]; stageConfigs?: Record<string, unknown>; services?: unknown } = {}) {
  return buildPipeline({ stageIds, registry: reg, stageConfigs: extra.stageConfigs ?? {}, services: extra.services ?? {}, tracer, tail: extra.tail });
}

function spanByName(spans: ReadableSpan[], name: string): ReadableSpan {
  const found = spans.filter((s) => s.name === name);
  expect(found, name).toHaveLength(1);
  return found[0];
}

describe('buildPipeline: order', () => {
  it('runs stages in the configured order, pre-work before next() and post-work after it, tail last', async () => {
    const order: string[] = [];
    const reg = registryOf(recording('a', order), recording('b', order), recording('c', order));
    const tail: Stage = async () => {
      order.push('tail');
    };
    await build(['a', 'b', 'c'], reg, { tail: [tail] })(fakeCtx());
    expect(order).toEqual(['a:pre', 'b:pre', 'c:pre', 'tail', 'c:post', 'b:post', 'a:post']);
  });

  it('follows the configured order, not the registry order, and skips stages not listed', async () => {
    const order: string[] = [];
    const reg = registryOf(recording('a', order), recording('b', order), recording('c', order));
    await build(['c', 'a'], reg)(fakeCtx());
    expect(order).toEqual(['c:pre', 'a:pre', 'a:post', 'c:post']);
  });

  it('runs several tail handlers in order after the stages', async () => {
    const order: string[] = [];
    const t1: Stage = async (_ctx, next) => {
      order.push('t1');
      await next();
    };
    const t2: Stage = async () => {
      order.push('t2');
    };
    await build(['a'], registryOf(recording('a', order)), { tail: [t1, t2] })(fakeCtx());
    expect(order).toEqual(['a:pre', 't1', 't2', 'a:post']);
  });

  it('a stage that does not call next() stops the pipeline (no later stage, no tail)', async () => {
    const order: string[] = [];
    const stop: StageDefinition = {
      id: 'stop',
      configSchema: {},
      create: () => async () => {
        order.push('stop');
      },
    };
    const tail: Stage = async () => {
      order.push('tail');
    };
    await build(['a', 'stop', 'b'], registryOf(recording('a', order), stop, recording('b', order)), { tail: [tail] })(fakeCtx());
    expect(order).toEqual(['a:pre', 'stop', 'a:post']);
  });

  it('passes the same ctx to every stage', async () => {
    const seen: unknown[] = [];
    const def = (id: string): StageDefinition => ({
      id,
      configSchema: {},
      create: () => async (ctx, next) => {
        seen.push(ctx);
        await next();
      },
    });
    const ctx = fakeCtx();
    await build(['a', 'b'], registryOf(def('a'), def('b')), { tail: [async (c) => void seen.push(c)] })(ctx);
    expect(seen).toHaveLength(3);
    for (const c of seen) expect(c).toBe(ctx);
  });

  it('creates each stage once at build time with its config and the services', async () => {
    const calls: { config: unknown; services: unknown }[] = [];
    const def: StageDefinition = {
      id: 'a',
      configSchema: {},
      create: (config, services) => {
        calls.push({ config, services });
        return async (_ctx, next) => next();
      },
    };
    const services = { store: 'S' };
    const run = build(['a'], registryOf(def), { stageConfigs: { a: { limit: 3 } }, services });
    expect(calls).toEqual([{ config: { limit: 3 }, services }]);
    expect(calls[0].services).toBe(services);
    await run(fakeCtx());
    await run(fakeCtx());
    expect(calls).toHaveLength(1);
  });

  it('gives a stage without config an empty object', () => {
    const configs: unknown[] = [];
    const def: StageDefinition = { id: 'a', configSchema: {}, create: (config) => (configs.push(config), async (_c, n) => n()) };
    build(['a'], registryOf(def));
    expect(configs).toEqual([{}]);
  });

  it('throws at build time for an unknown stage id', () => {
    const order: string[] = [];
    expect(() => build(['a', 'no-such-stage'], registryOf(recording('a', order)))).toThrow(/no-such-stage/);
    expect(order).toEqual([]);
  });

  it('propagates an error thrown by a stage; later stages and post-work do not run', async () => {
    const order: string[] = [];
    const boom = new GatewayError('invalid_request', 'bad');
    const failing: StageDefinition = {
      id: 'boom',
      configSchema: {},
      create: () => async () => {
        order.push('boom');
        throw boom;
      },
    };
    const run = build(['a', 'boom', 'b'], registryOf(recording('a', order), failing, recording('b', order)));
    await expect(run(fakeCtx())).rejects.toBe(boom);
    expect(order).toEqual(['a:pre', 'boom']);
  });

  it('propagates an error thrown by the tail', async () => {
    const err = new Error('tail failed');
    const run = build(['a'], registryOf(recording('a', [])), {
      tail: [
        async () => {
          throw err;
        },
      ],
    });
    await expect(run(fakeCtx())).rejects.toBe(err);
  });
});

describe('buildPipeline: spans', () => {
  it('gives each stage a `gateway.stage <id>` span, nested in the previous stage span', async () => {
    const order: string[] = [];
    const reg = registryOf(recording('auth', order), recording('validate', order), recording('upstream', order));
    let tailSpanId: string | undefined;
    const tail: Stage = async (ctx) => {
      tailSpanId = currentSpanId(ctx);
    };
    const run = build(['auth', 'validate', 'upstream'], reg, { tail: [tail] });

    const request = tracer.startSpan('request');
    await run(fakeCtx(trace.setSpan(ROOT_CONTEXT, request)));
    request.end();

    const spans = exporter.getFinishedSpans();
    const auth = spanByName(spans, 'gateway.stage auth');
    const validate = spanByName(spans, 'gateway.stage validate');
    const upstream = spanByName(spans, 'gateway.stage upstream');
    expect(spans).toHaveLength(4); // three stages and the request; the tail gets no span of its own

    const reqId = request.spanContext();
    expect(auth.parentSpanContext?.spanId).toBe(reqId.spanId);
    expect(validate.parentSpanContext?.spanId).toBe(auth.spanContext().spanId);
    expect(upstream.parentSpanContext?.spanId).toBe(validate.spanContext().spanId);
    for (const s of [auth, validate, upstream]) expect(s.spanContext().traceId).toBe(reqId.traceId);
    // The tail runs inside the last stage's span.
    expect(tailSpanId).toBe(upstream.spanContext().spanId);

    expect(auth.attributes['gateway.stage']).toBe('auth');
    for (const s of [auth, validate, upstream]) expect(s.status.code).toBe(SpanStatusCode.UNSET);
  });

  it('each stage span covers the post-work of its stage', async () => {
    let activeInPost: string | undefined;
    const def: StageDefinition = {
      id: 'outer',
      configSchema: {},
      create: () => async (ctx, next) => {
        await next();
        activeInPost = currentSpanId(ctx);
      },
    };
    await build(['outer', 'inner'], registryOf(def, recording('inner', [])))(fakeCtx());
    const spans = exporter.getFinishedSpans();
    const outer = spanByName(spans, 'gateway.stage outer');
    expect(activeInPost).toBe(outer.spanContext().spanId);
  });

  it('starts stage spans at the root when no span is active', async () => {
    await build(['a', 'b'], registryOf(recording('a', []), recording('b', [])))(fakeCtx());
    const spans = exporter.getFinishedSpans();
    const a = spanByName(spans, 'gateway.stage a');
    const b = spanByName(spans, 'gateway.stage b');
    expect(a.parentSpanContext).toBeUndefined();
    expect(b.parentSpanContext?.spanId).toBe(a.spanContext().spanId);
  });

  it('marks the span of a throwing stage (and the stages it unwinds through) with error status', async () => {
    const failing: StageDefinition = {
      id: 'boom',
      configSchema: {},
      create: () => async () => {
        throw new GatewayError('rate_limit_exceeded', 'slow down');
      },
    };
    const run = build(['a', 'boom'], registryOf(recording('a', []), failing));
    await expect(run(fakeCtx())).rejects.toBeInstanceOf(GatewayError);

    const spans = exporter.getFinishedSpans();
    const boom = spanByName(spans, 'gateway.stage boom');
    const a = spanByName(spans, 'gateway.stage a');
    expect(boom.status.code).toBe(SpanStatusCode.ERROR);
    expect(boom.attributes['gateway.error_type']).toBe('rate_limit_exceeded');
    expect(boom.parentSpanContext?.spanId).toBe(a.spanContext().spanId);
    expect(a.status.code).toBe(SpanStatusCode.ERROR);
  });

  it('records error_type server for a plain Error', async () => {
    const failing: StageDefinition = {
      id: 'boom',
      configSchema: {},
      create: () => async () => {
        throw new Error('kaput');
      },
    };
    await expect(build(['boom'], registryOf(failing))(fakeCtx())).rejects.toThrow('kaput');
    const boom = spanByName(exporter.getFinishedSpans(), 'gateway.stage boom');
    expect(boom.status.code).toBe(SpanStatusCode.ERROR);
    expect(boom.attributes['gateway.error_type']).toBe('server');
  });

  it('concurrent runs keep their spans apart', async () => {
    const slow: StageDefinition = {
      id: 'slow',
      configSchema: {},
      create: () => async (_ctx, next) => {
        await new Promise((r) => setTimeout(r, 5));
        await next();
      },
    };
    const run = build(['slow', 'b'], registryOf(slow, recording('b', [])));
    await Promise.all([run(fakeCtx()), run(fakeCtx())]);
    const spans = exporter.getFinishedSpans();
    const slows = spans.filter((s) => s.name === 'gateway.stage slow');
    const bs = spans.filter((s) => s.name === 'gateway.stage b');
    expect(slows).toHaveLength(2);
    expect(bs).toHaveLength(2);
    const parents = bs.map((b) => b.parentSpanContext?.spanId).sort();
    expect(parents).toEqual(slows.map((s) => s.spanContext().spanId).sort());
    for (const b of bs) {
      const parent = slows.find((s) => s.spanContext().spanId === b.parentSpanContext?.spanId)!;
      expect(b.spanContext().traceId).toBe(parent.spanContext().traceId);
    }
  });
});
