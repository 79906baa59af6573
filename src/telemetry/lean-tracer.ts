import {
  context as contextApi,
  SpanKind,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type SpanContext,
  type SpanOptions,
  type Tracer,
} from '@opentelemetry/api';
import type { InstrumentationScope } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { Sampler } from '@opentelemetry/sdk-trace-base';
import { randomHex } from '../random';
import { LeanSpan, type SpanHome, type SpanLimits } from './lean-span';

// Only types come from the SDK packages: this module is loaded with the gateway, the SDK only when
// telemetry is on. Their values, as the SDK defines them:
/** `NOT_RECORD` and `RECORD_AND_SAMPLED` of sdk-trace-base. */
const NOT_RECORD = 0;
const RECORD_AND_SAMPLED = 2;
/** The context key of `@opentelemetry/core`'s `suppressTracing` (`createContextKey` is `Symbol.for`). */
const SUPPRESS_TRACING = Symbol.for('OpenTelemetry SDK Context Key SUPPRESS_TRACING');

/** Where ended spans go: the SDK's span processors fit (they read `LeanSpan` as a `ReadableSpan`). */
export interface SpanSink {
  onStart?(span: LeanSpan, parentContext: Context): void;
  onEnd(span: LeanSpan): void;
  shutdown(): Promise<void>;
}

export interface LeanTracerOptions {
  resource: Resource;
  scope: InstrumentationScope;
  /** The SDK's sampler from `OTEL_TRACES_SAMPLER`; null for its default (parent-based, always on). */
  sampler: Sampler | null;
  limits: SpanLimits;
  sinks: SpanSink[];
}

/**
 * The gateway's tracer, in place of the trace SDK's `Tracer` and `Span`: same API, same sampling (the
 * SDK's own sampler from `OTEL_TRACES_SAMPLER`), same limits, same span processors, at a fraction of the
 * cost. Measured under load (README "Performance"), the SDK's spans cost ~60 µs of CPU per request (five
 * spans: span objects built and sanitised, times kept as `[s, ns]` pairs, held until a batch is
 * serialised in two passes) and their export ~50 µs more. Here a span is a small object whose times are
 * numbers, ids come from the pooled random bytes, and the OTLP sink (`otlp-batch.ts`) encodes it the
 * moment it ends.
 *
 * @example const tracer = new LeanTracer({ resource, scope: { name: 'model-gateway' }, sampler: null, limits, sinks });
 */
export class LeanTracer implements Tracer, SpanHome {
  readonly resource: Resource;
  readonly scope: InstrumentationScope;
  readonly limits: SpanLimits;
  private readonly sampler: Sampler | null;
  private readonly sinks: SpanSink[];

  constructor(options: LeanTracerOptions) {
    this.resource = options.resource;
    this.scope = options.scope;
    this.sampler = options.sampler;
    this.limits = options.limits;
    this.sinks = options.sinks;
  }

  startSpan(name: string, options: SpanOptions = {}, ctx: Context = contextApi.active()): Span {
    const spanId = randomHex(8);
    if (ctx.getValue(SUPPRESS_TRACING) === true) return trace.wrapSpanContext({ traceId: randomHex(16), spanId, traceFlags: TraceFlags.NONE });
    const parentSpan = options.root ? undefined : trace.getSpan(ctx);
    // A parent of ours has valid ids by construction; any other (a remote one, a caller's) is checked.
    const found = parentSpan?.spanContext();
    const parent = found && (parentSpan instanceof LeanSpan || trace.isSpanContextValid(found)) ? found : undefined;
    const traceId = parent ? parent.traceId : randomHex(16);
    const kind = options.kind ?? SpanKind.INTERNAL;
    let traceState = parent?.traceState;
    let attributes = options.attributes;
    let flags: TraceFlags;
    if (this.sampler) {
      const result = this.sampler.shouldSample(ctx, traceId, name, kind, attributes ?? {}, options.links ?? []);
      traceState = result.traceState ?? traceState;
      if (result.decision === NOT_RECORD) return trace.wrapSpanContext({ traceId, spanId, traceFlags: TraceFlags.NONE, traceState });
      flags = result.decision === RECORD_AND_SAMPLED ? TraceFlags.SAMPLED : TraceFlags.NONE;
      if (result.attributes) attributes = { ...attributes, ...result.attributes };
    } else {
      // The SDK's default sampler without the call: a root is sampled, a child follows its parent.
      if (parent && (parent.traceFlags & TraceFlags.SAMPLED) === 0) return trace.wrapSpanContext({ traceId, spanId, traceFlags: TraceFlags.NONE, traceState });
      flags = TraceFlags.SAMPLED;
    }
    const spanContext: SpanContext = traceState ? { traceId, spanId, traceFlags: flags, traceState } : { traceId, spanId, traceFlags: flags };
    const clock = parentSpan instanceof LeanSpan ? parentSpan.clockOffset : undefined;
    const span = new LeanSpan(this, spanContext, name, kind, parent, attributes, options.links, options.startTime, clock);
    for (const sink of this.sinks) sink.onStart?.(span, ctx);
    return span;
  }

  startActiveSpan<F extends (span: Span) => unknown>(name: string, fn: F): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(name: string, options: SpanOptions, fn: F): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(name: string, options: SpanOptions, ctx: Context, fn: F): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(name: string, a?: SpanOptions | F, b?: Context | F, c?: F): ReturnType<F> {
    const fn = (c ?? (typeof b === 'function' ? b : a)) as F;
    const options = typeof a === 'object' ? a : {};
    const ctx = typeof b === 'object' ? b : contextApi.active();
    const span = this.startSpan(name, options, ctx);
    return contextApi.with(trace.setSpan(ctx, span), fn as (span: Span) => ReturnType<F>, undefined, span);
  }

  ended(span: LeanSpan): void {
    for (const sink of this.sinks) sink.onEnd(span);
  }

  async shutdown(): Promise<void> {
    await Promise.all(this.sinks.map((s) => s.shutdown()));
  }
}
