import { propagation, trace, type Tracer } from '@opentelemetry/api';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { GatewayConfig } from '../config/types';
import { LeanTracer, type SpanSink } from './lean-tracer';
import { otlpSink } from './otlp-export';
import { SPAN_VALUE_MAX } from './span-text';

export interface Telemetry {
  tracer: Tracer;
  /**
   * Sends the spans still queued, for at most `limitMs` (FINAL_FLUSH_MS); resolves with false when that
   * passed first (what was still queued or in flight is dropped).
   */
  shutdown(limitMs?: number): Promise<boolean>;
}

/**
 * How long the last spans may take to reach the collector at shutdown (README "Shutdown and probes"). The
 * exporter's own timeout is 10 s, and a collector that does not answer held a SIGTERM'd gateway that long
 * (an export per batch, two at a time: longer with many spans queued) after everything else was done.
 */
export const FINAL_FLUSH_MS = 2000;

/**
 * Starts OpenTelemetry tracing with the exporter from `telemetry` in gateway.yaml. With `exporter: none`
 * and no extra processors the SDK is not even loaded and the API's no-op tracer costs nothing. Tests pass
 * `extraProcessors` (an in-memory exporter) to assert the span tree.
 *
 * Spans come from the gateway's own tracer (`lean-tracer.ts`: the SDK's sampler, limits and processors,
 * cheaper spans), and OTLP export from `otlp-batch.ts` (each span encoded when it ends, sent by the OTLP
 * exporter's own HTTP delegate, so `OTEL_EXPORTER_OTLP_*` settings, retries and timeouts are the SDK's).
 * Not `@opentelemetry/sdk-node`'s NodeSDK: it loads every exporter it could be configured for (gRPC,
 * Zipkin, Prometheus, logs, metrics) and the instrumentation hooks, ~25 MiB of resident memory for code
 * this gateway never runs. What NodeSDK set up that the gateway uses is set up here: the resource (service
 * name, plus the `OTEL_RESOURCE_ATTRIBUTES`, host and process attributes), the W3C trace-context and
 * baggage propagators (the gateway extracts a caller's `traceparent`), `OTEL_TRACES_SAMPLER` and the span
 * limits (`OTEL_SPAN_*_LIMIT`, read by the SDK's own `loadDefaultConfig`).
 *
 * Export is bounded: at most `max_queue` spans wait and at most two exports are in flight; under overload
 * new spans are dropped rather than memory growing.
 *
 * @example const telemetry = startTelemetry(config.telemetry); … await telemetry.shutdown();
 */
export function startTelemetry(config: GatewayConfig['telemetry'], extraProcessors: SpanProcessor[] = []): Telemetry {
  if (config.exporter === 'none' && extraProcessors.length === 0) {
    return { tracer: trace.getTracer('model-gateway'), shutdown: async () => true };
  }
  /* eslint-disable @typescript-eslint/no-require-imports -- loaded only when telemetry is on */
  const { BatchSpanProcessor, ConsoleSpanExporter } = require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  // The SDK's own reading of OTEL_TRACES_SAMPLER and the span limits (not in its index; version pinned).
  const { loadDefaultConfig } = require('@opentelemetry/sdk-trace-base/build/src/config') as typeof import('@opentelemetry/sdk-trace-base/build/src/config');
  const res = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const core = require('@opentelemetry/core') as typeof import('@opentelemetry/core');
  const detected = res.detectResources({ detectors: [res.envDetector, res.hostDetector, res.processDetector] });
  const resource = res.defaultResource().merge(detected).merge(res.resourceFromAttributes({ 'service.name': config.service_name }));
  const scope = { name: 'model-gateway' };
  const batch = { maxQueueSize: config.max_queue, maxExportBatchSize: 512, scheduledDelayMillis: 1000 };
  const sinks: SpanSink[] = [...extraProcessors];
  if (config.exporter === 'console') sinks.push(new BatchSpanProcessor(new ConsoleSpanExporter(), batch));
  if (config.exporter === 'otlp') {
    sinks.push(otlpSink({ endpoint: config.endpoint, maxQueue: config.max_queue, resource, scope }));
  }
  const defaults = loadDefaultConfig();
  const sampler = (process.env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on') === 'parentbased_always_on' ? null : defaults.sampler;
  const limits = defaults.spanLimits as Required<typeof defaults.spanLimits>;
  // At most SPAN_VALUE_MAX characters a value, whatever OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT says (its default is
  // none): a 3 MB model name in a request was copied into ten spans, and queued spans held gigabytes while a
  // collector was slow (found by a security audit).
  limits.attributeValueLengthLimit = Math.min(limits.attributeValueLengthLimit ?? SPAN_VALUE_MAX, SPAN_VALUE_MAX);
  const tracer = new LeanTracer({ resource, scope, sampler, limits, sinks });
  // Code that asks the API for a tracer (`trace.getTracer(…)`) gets this one too.
  trace.setGlobalTracerProvider({ getTracer: () => tracer });
  // No context manager: no AsyncLocalStorage. On Node 20 it runs promise hooks on every promise of every
  // request; the gateway hands the trace context along explicitly (GatewayState.traceContext) instead.
  propagation.setGlobalPropagator(
    new core.CompositePropagator({ propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()] }),
  );
  return {
    tracer,
    shutdown: async (limitMs = FINAL_FLUSH_MS) => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), limitMs)));
      const sent = await Promise.race([tracer.shutdown().then(() => true), late]);
      clearTimeout(timer);
      trace.disable();
      propagation.disable();
      return sent;
    },
  };
}
