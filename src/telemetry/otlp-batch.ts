import { diag, TraceFlags } from '@opentelemetry/api';
import type { InstrumentationScope } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { LeanSpan } from './lean-span';
import type { SpanSink } from './lean-tracer';
import { exportRequest, ProtoWriter, requestFrame, writeSpan, type RequestFrame } from './otlp-proto';

/** A batch ready to send: the whole `ExportTraceServiceRequest` and how many spans it holds. */
export interface EncodedBatch {
  bytes: Buffer;
  count: number;
}

/** What sends a batch: the OTLP exporter's HTTP delegate (retries, timeouts, `OTEL_EXPORTER_OTLP_*`). */
export interface BatchSender {
  export(batch: EncodedBatch, done: (result: { code: number; error?: Error }) => void): void;
  forceFlush(): Promise<void>;
  shutdown(): Promise<void>;
}

export interface OtlpBatchOptions {
  resource: Resource;
  scope: InstrumentationScope;
  sender: BatchSender;
  /** Spans waiting to be sent, at most; beyond it new spans are dropped. */
  maxQueue: number;
  /** Spans that make a batch be sent at once (else it goes after `delayMs`). */
  batchSize?: number;
  delayMs?: number;
  /** Exports in flight, at most; while that many are, spans wait (up to `maxQueue`). */
  maxInFlight?: number;
}

/**
 * The OTLP span sink: each sampled span is encoded when it ends (`otlp-proto.ts`) and appended to the
 * pending bytes; the pending spans are sent as one request when `batchSize` of them wait or `delayMs` after
 * the first, with at most `maxInFlight` requests in flight. Bounded like the SDK's batch processor was: at
 * most `maxQueue` spans wait, and new spans are dropped beyond that (counted in `dropped`).
 */
/** The most encoded span bytes that wait for an export (past it new spans are dropped, as past `maxQueue`). */
export const MAX_PENDING_BYTES = 64 * 1024 * 1024;

export class OtlpBatch implements SpanSink {
  private readonly pending = new ProtoWriter(64 * 1024);
  private count = 0;
  private inFlight = 0;
  private timer: NodeJS.Timeout | undefined;
  private frame: RequestFrame | undefined;
  private stopped = false;
  dropped = 0;
  failed = 0;
  private readonly batchSize: number;
  private readonly delayMs: number;
  private readonly maxInFlight: number;

  constructor(private readonly options: OtlpBatchOptions) {
    this.batchSize = options.batchSize ?? 512;
    this.delayMs = options.delayMs ?? 1000;
    this.maxInFlight = options.maxInFlight ?? 2;
  }

  onEnd(span: LeanSpan): void {
    if (this.stopped || (span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    // By count and by bytes: spans waiting for a slow collector must not hold unbounded memory.
    if (this.count >= this.options.maxQueue || this.pending.pos >= MAX_PENDING_BYTES) {
      // Said in the log (at most once a minute, telemetry/diag-log.ts): spans are being lost.
      if (this.dropped++ % 1000 === 0) diag.warn(`span queue full (telemetry.max_queue ${this.options.maxQueue}): spans dropped`);
      return;
    }
    writeSpan(this.pending, span);
    this.count++;
    if (this.count >= this.batchSize) this.send();
    else if (!this.timer) this.timer = setTimeout(() => this.send(), this.delayMs).unref();
  }

  /** Sends what waits now, unless `maxInFlight` requests are already out (it goes when one returns). */
  private send(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.count === 0 || this.inFlight >= this.maxInFlight) return;
    // The resource's detected attributes (host id) may still be on their way: the first batch waits for them.
    if (!this.frame) {
      if (this.options.resource.asyncAttributesPending) {
        this.inFlight++;
        void (this.options.resource.waitForAsyncAttributes?.() ?? Promise.resolve()).finally(() => {
          this.inFlight--;
          this.frame = requestFrame(this.options.resource, this.options.scope);
          this.send();
        });
        return;
      }
      this.frame = requestFrame(this.options.resource, this.options.scope);
    }
    const batch = { bytes: exportRequest(this.frame, this.pending.view()), count: this.count };
    this.pending.reset();
    this.count = 0;
    this.inFlight++;
    this.options.sender.export(batch, (result) => {
      this.inFlight--;
      if (result.code !== 0) {
        this.failed += batch.count;
        diag.error('OTLP span export failed', result.error);
      }
      if (this.count >= this.batchSize) this.send();
      else if (this.count > 0 && !this.timer) this.timer = setTimeout(() => this.send(), this.delayMs).unref();
    });
  }

  /** Sends everything waiting and waits for every request in flight. */
  async forceFlush(): Promise<void> {
    for (let round = 0; round < 100 && (this.count > 0 || this.inFlight > 0); round++) {
      this.send();
      await this.options.sender.forceFlush();
      if (this.inFlight > 0) await new Promise((r) => setTimeout(r, 5));
    }
  }

  async shutdown(): Promise<void> {
    await this.forceFlush();
    this.stopped = true;
    clearTimeout(this.timer);
    await this.options.sender.shutdown();
  }
}
