import type { Attributes, HrTime, Link, SpanContext } from '@opentelemetry/api';
import type { InstrumentationScope } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { TimedEvent } from '@opentelemetry/sdk-trace-base';
import { msToHrTime, type LeanSpan } from './lean-span';

/**
 * The OTLP/protobuf encoding of spans (opentelemetry-proto `trace/v1`, `ExportTraceServiceRequest`), one
 * pass per span, written when the span ends. Field order and presence are those of the official
 * serializer (`@opentelemetry/otlp-transformer`'s `ProtobufTraceSerializer`), so that a batch encoded here is
 * byte for byte what it would send for the same spans (test/unit/otlp-proto.test.ts checks exactly that).
 * The official serializer measures every batch in a first pass and writes it in a second, from
 * `ReadableSpan`s that must stay alive until the batch is sent; here each span is written once, at its end,
 * and can be collected at once.
 */
/** Hex digit (char code) → its value. */
const HEX = new Uint8Array(128);
for (let i = 0; i < 10; i++) HEX[48 + i] = i;
for (let i = 0; i < 6; i++) HEX[97 + i] = HEX[65 + i] = 10 + i;

export class ProtoWriter {
  buf: Buffer;
  pos = 0;

  constructor(size = 16 * 1024) {
    this.buf = Buffer.allocUnsafe(size);
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  /** The bytes written so far (a view, valid until the next write). */
  view(): Buffer {
    return this.buf.subarray(0, this.pos);
  }

  reset(): void {
    this.pos = 0;
  }

  /** A varint: unsigned below 2^32, otherwise 64-bit (negative integers in two's complement, 10 bytes). */
  varint(value: number): void {
    if (value >= 0 && value < 0x80) {
      if (this.pos >= this.buf.length) this.room(1);
      this.buf[this.pos++] = value;
      return;
    }
    this.room(10);
    if (value >= 0 && value <= 0xffffffff) {
      let v = value >>> 0;
      while (v > 0x7f) {
        this.buf[this.pos++] = (v & 0x7f) | 0x80;
        v >>>= 7;
      }
      this.buf[this.pos++] = v;
      return;
    }
    let low: number;
    let high: number;
    if (value >= 0) {
      low = value >>> 0;
      high = (value / 0x100000000) >>> 0;
    } else {
      const abs = -value;
      low = ~(abs >>> 0) >>> 0;
      high = ~((abs / 0x100000000) >>> 0) >>> 0;
      low = (low + 1) >>> 0;
      if (low === 0) high = (high + 1) >>> 0;
    }
    while (high > 0 || low > 0x7f) {
      this.buf[this.pos++] = (low & 0x7f) | 0x80;
      low = ((low >>> 7) | (high << 25)) >>> 0;
      high >>>= 7;
    }
    this.buf[this.pos++] = low;
  }

  /** A field's key; the keys used here fit one byte, written without the varint loop (and small enough to inline). */
  tag(field: number, wireType: number): void {
    const key = (field << 3) | wireType;
    if (key > 0x7f) return this.varint(key);
    // Written out here and in varint: a shared one-byte helper measured ~1.5 % more instructions per span.
    if (this.pos >= this.buf.length) this.room(1);
    this.buf[this.pos++] = key;
  }

  string(s: string): void {
    const n = s.length;
    this.room(n + 5);
    // ASCII (the common case) is copied char by char; anything else goes through Buffer's UTF-8 encoder.
    const lenAt = this.pos;
    this.varint(n);
    const start = this.pos;
    for (let i = 0; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c > 0x7f) {
        this.pos = lenAt;
        const bytes = Buffer.byteLength(s);
        this.varint(bytes);
        this.room(bytes);
        this.pos += this.buf.write(s, this.pos, bytes, 'utf8');
        return;
      }
      this.buf[start + i] = c;
    }
    this.pos = start + n;
  }

  /** A `bytes` field from a hex id (lowercase or uppercase; ids are 16 or 32 hex digits). */
  hex(h: string): void {
    const n = h.length >>> 1;
    this.varint(n);
    this.room(n);
    // A table lookup per digit: cheaper for an 8- or 16-byte id than Buffer's hex decoder behind `write`.
    for (let i = 0; i < n; i++) this.buf[this.pos + i] = (HEX[h.charCodeAt(2 * i)] << 4) | HEX[h.charCodeAt(2 * i + 1)];
    this.pos += n;
  }

  raw(bytes: Uint8Array): void {
    this.room(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  fixed32(v: number): void {
    this.room(4);
    this.buf.writeUInt32LE(v >>> 0, this.pos);
    this.pos += 4;
  }

  double(v: number): void {
    this.room(8);
    this.buf.writeDoubleLE(v, this.pos);
    this.pos += 8;
  }

  /** `[seconds, nanoseconds]` as fixed64 nanoseconds, exact (the products stay below 2^53). */
  hrTime(t: HrTime): void {
    const [seconds, nanos] = t;
    const fromLow = (seconds & 0xffff) * 1e9;
    const fromHigh = ((seconds / 0x10000) >>> 0) * 1e9;
    const low = (fromLow >>> 0) + (((fromHigh & 0xffff) * 0x10000) >>> 0) + nanos;
    const high = Math.floor(fromLow / 0x100000000) + ((fromHigh / 0x10000) >>> 0) + Math.floor(low / 0x100000000);
    this.fixed32(low >>> 0);
    this.fixed32(high >>> 0);
  }

  /** Starts a length-delimited message: one byte is reserved for its length (most are shorter than 128). */
  begin(): number {
    this.room(1);
    return this.pos++;
  }

  /** Ends the message begun at `at`, moving its bytes if the length needs more than the one byte. */
  end(at: number): void {
    const len = this.pos - at - 1;
    if (len < 0x80) {
      this.buf[at] = len;
      return;
    }
    let size = 1;
    for (let v = len >>> 7; v > 0; v >>>= 7) size++;
    this.room(size - 1);
    this.buf.copy(this.buf, at + size, at + 1, this.pos);
    const end = this.pos + size - 1;
    this.pos = at;
    this.varint(len);
    this.pos = end;
  }
}

const SPAN_FLAGS_HAS_IS_REMOTE = 0x100;
const SPAN_FLAGS_IS_REMOTE = 0x200;
const MIN_INT64 = -(2 ** 63);
const MAX_INT64 = 2 ** 63;

/** One span as a `ScopeSpans.spans` entry (field 2, length-delimited). */
export function writeSpan(w: ProtoWriter, span: LeanSpan): void {
  w.tag(2, 2);
  const at = w.begin();
  const ctx = span.spanContext();
  writeContext(w, ctx);
  const parent = span.parentSpanContext;
  if (parent?.spanId) {
    w.tag(4, 2);
    w.hex(parent.spanId);
  }
  w.tag(5, 2);
  w.string(span.name);
  w.tag(6, 0);
  w.varint(span.kind + 1); // the API has no value for "unspecified": OTLP's kinds are one higher
  w.tag(7, 1);
  w.hrTime(msToHrTime(span.startMs));
  w.tag(8, 1);
  w.hrTime(msToHrTime(span.endMs));
  writeAttributeList(w, span.attributeKeys, span.attributeValues, 9);
  w.tag(10, 0);
  w.varint(span.droppedAttributesCount);
  for (const event of span.events) writeEvent(w, event);
  w.tag(12, 0);
  w.varint(span.droppedEventsCount);
  for (const link of span.links) writeLink(w, link);
  w.tag(14, 0);
  w.varint(span.droppedLinksCount);
  w.tag(15, 2);
  const status = w.begin();
  if (span.status.message) {
    w.tag(2, 2);
    w.string(span.status.message);
  }
  w.tag(3, 0);
  w.varint(span.status.code);
  w.end(status);
  w.tag(16, 5);
  w.fixed32(flagsOf(ctx, parent?.isRemote));
  w.end(at);
}

/** `trace_id`, `span_id` and `trace_state` (fields 1–3 of both a span and a link). */
function writeContext(w: ProtoWriter, ctx: SpanContext): void {
  w.tag(1, 2);
  w.hex(ctx.traceId);
  w.tag(2, 2);
  w.hex(ctx.spanId);
  const traceState = ctx.traceState?.serialize();
  if (traceState) {
    w.tag(3, 2);
    w.string(traceState);
  }
}

function flagsOf(ctx: SpanContext, isRemote: boolean | undefined): number {
  return (ctx.traceFlags & 0xff) | SPAN_FLAGS_HAS_IS_REMOTE | (isRemote ? SPAN_FLAGS_IS_REMOTE : 0);
}

function writeEvent(w: ProtoWriter, event: TimedEvent): void {
  w.tag(11, 2);
  const at = w.begin();
  w.tag(1, 1);
  w.hrTime(event.time);
  w.tag(2, 2);
  w.string(event.name);
  if (event.attributes) writeAttributes(w, event.attributes, 3);
  w.tag(4, 0);
  w.varint(event.droppedAttributesCount ?? 0);
  w.end(at);
}

function writeLink(w: ProtoWriter, link: Link): void {
  w.tag(13, 2);
  const at = w.begin();
  const ctx = link.context;
  writeContext(w, ctx);
  if (link.attributes) writeAttributes(w, link.attributes, 4);
  w.tag(5, 0);
  w.varint(link.droppedAttributesCount ?? 0);
  w.tag(6, 5);
  w.fixed32(flagsOf(ctx, ctx.isRemote));
  w.end(at);
}

/** `attributes` as repeated `KeyValue` in field `field`. */
export function writeAttributes(w: ProtoWriter, attributes: Attributes, field: number): void {
  for (const key in attributes) if (Object.prototype.hasOwnProperty.call(attributes, key)) writeKeyValue(w, field, key, attributes[key]);
}

/** A span's attributes (`LeanSpan`'s two lists) as repeated `KeyValue` in field `field`. */
function writeAttributeList(w: ProtoWriter, keys: string[], values: unknown[], field: number): void {
  for (let i = 0; i < keys.length; i++) writeKeyValue(w, field, keys[i], values[i]);
}

/** One `KeyValue` message in field `field`. */
function writeKeyValue(w: ProtoWriter, field: number, key: string, value: unknown): void {
  w.tag(field, 2);
  const kv = w.begin();
  w.tag(1, 2);
  w.string(key);
  w.tag(2, 2);
  const at = w.begin();
  writeAnyValue(w, value);
  w.end(at);
  w.end(kv);
}

function writeAnyValue(w: ProtoWriter, value: unknown): void {
  if (typeof value === 'string') {
    w.tag(1, 2);
    w.string(value);
  } else if (typeof value === 'boolean') {
    w.tag(2, 0);
    w.varint(value ? 1 : 0);
  } else if (typeof value === 'number') {
    if (Number.isInteger(value) && value >= MIN_INT64 && value < MAX_INT64) {
      w.tag(3, 0);
      w.varint(value);
    } else {
      w.tag(4, 1);
      w.double(value);
    }
  } else if (value instanceof Uint8Array) {
    w.tag(7, 2);
    w.varint(value.length);
    w.raw(value);
  } else if (Array.isArray(value)) {
    w.tag(5, 2);
    const list = w.begin();
    for (const item of value) {
      w.tag(1, 2);
      const at = w.begin();
      writeAnyValue(w, item);
      w.end(at);
    }
    w.end(list);
  } else if (value !== null && typeof value === 'object') {
    w.tag(6, 2);
    const list = w.begin();
    writeAttributes(w, value as Attributes, 1); // a KeyValueList: its `values`, field 1
    w.end(list);
  }
}

/**
 * The parts of an `ExportTraceServiceRequest` around its spans, for one resource and one scope: the
 * request is `before(spansLength) + spans + after`. Built once per tracer (the resource does not change).
 */
export interface RequestFrame {
  /** The resource and scope messages, encoded. */
  resource: Buffer;
  scope: Buffer;
  /** `schema_url` fields that follow the spans (empty when the resource and scope have none). */
  scopeTail: Buffer;
  resourceTail: Buffer;
}

export function requestFrame(resource: Resource, scope: InstrumentationScope): RequestFrame {
  const w = new ProtoWriter(1024);
  w.tag(1, 2);
  const r = w.begin();
  writeAttributes(w, resource.attributes, 1);
  w.tag(2, 0);
  w.varint(0);
  w.end(r);
  const resourceBytes = Buffer.from(w.view());
  w.reset();
  w.tag(1, 2);
  const s = w.begin();
  w.tag(1, 2);
  w.string(scope.name);
  if (scope.version) {
    w.tag(2, 2);
    w.string(scope.version);
  }
  w.end(s);
  const scopeBytes = Buffer.from(w.view());
  return { resource: resourceBytes, scope: scopeBytes, scopeTail: schemaUrl(scope.schemaUrl), resourceTail: schemaUrl(resource.schemaUrl) };
}

function schemaUrl(url: string | undefined): Buffer {
  if (!url) return Buffer.alloc(0);
  const w = new ProtoWriter(url.length + 8);
  w.tag(3, 2);
  w.string(url);
  return Buffer.from(w.view());
}

/** A whole `ExportTraceServiceRequest` around already encoded spans (`writeSpan` output, concatenated). */
export function exportRequest(frame: RequestFrame, spans: Buffer): Buffer {
  const scopeSpansLength = frame.scope.length + spans.length + frame.scopeTail.length;
  const head = new ProtoWriter(64);
  head.tag(2, 2);
  head.varint(scopeSpansLength);
  const scopeHead = Buffer.from(head.view());
  const resourceSpansLength = frame.resource.length + scopeHead.length + scopeSpansLength + frame.resourceTail.length;
  head.reset();
  head.tag(1, 2);
  head.varint(resourceSpansLength);
  return Buffer.concat([head.view(), frame.resource, scopeHead, frame.scope, spans, frame.scopeTail, frame.resourceTail]);
}
