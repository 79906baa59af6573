import type { InstrumentationScope } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import { OtlpBatch, type EncodedBatch } from './otlp-batch';

/**
 * The collector's answer, read with the official deserializer, loaded on the first answer that has a body:
 * a collector that accepts every span answers with an empty message, and `@opentelemetry/otlp-transformer`
 * (with the metrics SDK it loads) is ~0.7 MiB of heap otherwise.
 */
function deserializeResponse(data: Uint8Array): unknown {
  if (data.length === 0) return {};
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded on the first answer with a body
  const { ProtobufTraceSerializer } = require('@opentelemetry/otlp-transformer') as typeof import('@opentelemetry/otlp-transformer');
  return ProtobufTraceSerializer.deserializeResponse(data);
}

/**
 * The OTLP/HTTP protobuf sink: `OtlpBatch` sending through the OTLP exporter's own HTTP delegate, set up as
 * `@opentelemetry/exporter-trace-otlp-proto`'s `OTLPTraceExporter` sets up its own (endpoint and headers
 * from `OTEL_EXPORTER_OTLP_*` when not given, retries with backoff, timeouts, at most two requests in
 * flight); only the encoding is the gateway's (`otlp-proto.ts`). The collector's answer is read with the
 * official deserializer (partial success is logged through `diag`).
 */
export function otlpSink(o: { endpoint?: string; maxQueue: number; resource: Resource; scope: InstrumentationScope }): OtlpBatch {
  /* eslint-disable @typescript-eslint/no-require-imports -- loaded only when OTLP export is on */
  // The package's `node-http` entry point (types from its file: TypeScript's `node` resolution does not read `exports`).
  const { convertLegacyHttpOptions, createOtlpHttpExportDelegate } = require('@opentelemetry/otlp-exporter-base/node-http') as typeof import('@opentelemetry/otlp-exporter-base/build/src/index-node-http');
  const options = convertLegacyHttpOptions({ ...(o.endpoint ? { url: o.endpoint } : {}), concurrencyLimit: 2 }, 'TRACES', 'v1/traces', {
    'Content-Type': 'application/x-protobuf',
  });
  const sender = createOtlpHttpExportDelegate<EncodedBatch, unknown>(
    options,
    { serializeRequest: (batch) => batch.bytes, deserializeResponse },
    'otlp_http_span_exporter',
    { name: 'span', countItems: (batch) => batch.count },
    undefined,
  );
  return new OtlpBatch({ resource: o.resource, scope: o.scope, sender, maxQueue: o.maxQueue });
}
