import { propagation, trace, type Tracer } from '@opentelemetry/api';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { GatewayConfig } from '../config/types';

export interface Telemetry {
  tracer: Tracer;
  shutdown(): Promise<void>;
}

/**
 * Starts OpenTelemetry tracing with the exporter from `telemetry` in gateway.yaml. With `exporter: none`
 * and no extra processors the SDK is not even loaded and the API's no-op tracer costs nothing. Tests pass
 * `extraProcessors` (an in-memory exporter) to assert the span tree.
 *
 * The tracer provider is built from the trace SDK's own parts, not with `@opentelemetry/sdk-node`'s
 * NodeSDK: NodeSDK loads every exporter it could be configured for (gRPC, Zipkin, Prometheus, logs,
 * metrics) and the instrumentation hooks, ~25 MiB of resident memory for code this gateway never runs.
 * What NodeSDK set up that the gateway uses is set up here: the resource (service name, plus the
 * `OTEL_RESOURCE_ATTRIBUTES`, host and process attributes) and the W3C trace-context and baggage
 * propagators (the gateway extracts a caller's `traceparent`).
 *
 * The batch processor is bounded: at most `max_queue` spans wait for export and at most two exports are
 * in flight; under overload new spans are dropped rather than memory growing.
 *
 * @example const telemetry = startTelemetry(config.telemetry); … await telemetry.shutdown();
 */
export function startTelemetry(config: GatewayConfig['telemetry'], extraProcessors: SpanProcessor[] = []): Telemetry {
  if (config.exporter === 'none' && extraProcessors.length === 0) {
    return { tracer: trace.getTracer('model-gateway'), shutdown: async () => undefined };
  }
  /* eslint-disable @typescript-eslint/no-require-imports -- loaded only when telemetry is on */
  const { BasicTracerProvider, BatchSpanProcessor, ConsoleSpanExporter } = require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  const res = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const core = require('@opentelemetry/core') as typeof import('@opentelemetry/core');
  const batch = { maxQueueSize: config.max_queue, maxExportBatchSize: 512, scheduledDelayMillis: 1000 };
  const processors = [...extraProcessors];
  if (config.exporter === 'console') processors.push(new BatchSpanProcessor(new ConsoleSpanExporter(), batch));
  if (config.exporter === 'otlp') {
    const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto') as typeof import('@opentelemetry/exporter-trace-otlp-proto');
    const exporter = new OTLPTraceExporter({ ...(config.endpoint ? { url: config.endpoint } : {}), concurrencyLimit: 2 });
    processors.push(new BatchSpanProcessor(exporter, batch));
  }
  const detected = res.detectResources({ detectors: [res.envDetector, res.hostDetector, res.processDetector] });
  const resource = res.defaultResource().merge(detected).merge(res.resourceFromAttributes({ 'service.name': config.service_name }));
  // No context manager: no AsyncLocalStorage. On Node 20 it runs promise hooks on every promise of every
  // request; the gateway hands the trace context along explicitly (GatewayState.traceContext) instead.
  const provider = new BasicTracerProvider({ resource, spanProcessors: processors });
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(
    new core.CompositePropagator({ propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()] }),
  );
  return {
    tracer: provider.getTracer('model-gateway'),
    shutdown: async () => {
      await provider.shutdown();
      trace.disable();
      propagation.disable();
    },
  };
}
