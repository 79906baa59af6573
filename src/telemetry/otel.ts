import { trace, type Tracer } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { BatchSpanProcessor, ConsoleSpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { GatewayConfig } from '../config/types';

export interface Telemetry {
  tracer: Tracer;
  shutdown(): Promise<void>;
}

/**
 * Starts the OpenTelemetry NodeSDK with the exporter from `telemetry` in gateway.yaml. With
 * `exporter: none` and no extra processors no SDK starts and the API's no-op tracer costs nothing.
 * Tests pass `extraProcessors` (an in-memory exporter) to assert the span tree.
 *
 * @example const telemetry = startTelemetry(config.telemetry); … await telemetry.shutdown();
 */
export function startTelemetry(config: GatewayConfig['telemetry'], extraProcessors: SpanProcessor[] = []): Telemetry {
  const processors = [...extraProcessors];
  if (config.exporter === 'console') processors.push(new BatchSpanProcessor(new ConsoleSpanExporter()));
  if (config.exporter === 'otlp') {
    processors.push(new BatchSpanProcessor(new OTLPTraceExporter(config.endpoint ? { url: config.endpoint } : {})));
  }
  if (processors.length === 0) return { tracer: trace.getTracer('model-gateway'), shutdown: async () => undefined };
  // contextManager null: no AsyncLocalStorage. On Node 20 it runs promise hooks on every promise of every
  // request; the gateway hands the trace context along explicitly (GatewayState.traceContext) instead.
  const sdk = new NodeSDK({
    serviceName: config.service_name,
    spanProcessors: processors,
    instrumentations: [],
    contextManager: null as unknown as undefined,
  });
  sdk.start();
  return { tracer: trace.getTracer('model-gateway'), shutdown: () => sdk.shutdown() };
}
