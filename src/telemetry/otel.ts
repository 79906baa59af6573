import { trace, type Tracer } from '@opentelemetry/api';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { GatewayConfig } from '../config/types';

export interface Telemetry {
  tracer: Tracer;
  shutdown(): Promise<void>;
}

/**
 * Starts the OpenTelemetry NodeSDK with the exporter from `telemetry` in gateway.yaml. With
 * `exporter: none` and no extra processors the SDK is not even loaded (it is ~15 MiB of modules) and the
 * API's no-op tracer costs nothing. Tests pass `extraProcessors` (an in-memory exporter) to assert the
 * span tree.
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
  const { NodeSDK } = require('@opentelemetry/sdk-node') as typeof import('@opentelemetry/sdk-node');
  const { BatchSpanProcessor, ConsoleSpanExporter } = require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  const batch = { maxQueueSize: config.max_queue, maxExportBatchSize: 512, scheduledDelayMillis: 1000 };
  const processors = [...extraProcessors];
  if (config.exporter === 'console') processors.push(new BatchSpanProcessor(new ConsoleSpanExporter(), batch));
  if (config.exporter === 'otlp') {
    const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto') as typeof import('@opentelemetry/exporter-trace-otlp-proto');
    const exporter = new OTLPTraceExporter({ ...(config.endpoint ? { url: config.endpoint } : {}), concurrencyLimit: 2 });
    processors.push(new BatchSpanProcessor(exporter, batch));
  }
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
