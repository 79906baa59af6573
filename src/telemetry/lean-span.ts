import { SPAN_VALUE_MAX, withoutGatewayKeys } from './span-text';
import {
  diag,
  SpanStatusCode,
  type Attributes,
  type AttributeValue,
  type Exception,
  type HrTime,
  type Link,
  type Span,
  type SpanContext,
  type SpanKind,
  type SpanStatus,
  type TimeInput,
} from '@opentelemetry/api';
import type { InstrumentationScope } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace-base';

/** What every span of one tracer shares: where it reports its end, and the SDK's limits. */
export interface SpanHome {
  readonly resource: Resource;
  readonly scope: InstrumentationScope;
  readonly limits: SpanLimits;
  ended(span: LeanSpan): void;
}

/** The SDK's span limits (`OTEL_SPAN_*_LIMIT`), as `loadDefaultConfig()` of sdk-trace-base reads them. */
export interface SpanLimits {
  attributeCountLimit: number;
  attributeValueLengthLimit: number;
  eventCountLimit: number;
  linkCountLimit: number;
  attributePerEventCountLimit: number;
}

const UNSET: SpanStatus = Object.freeze({ code: SpanStatusCode.UNSET });
const NO_EVENTS: TimedEvent[] = Object.freeze([]) as unknown as TimedEvent[];
const NO_LINKS: Link[] = Object.freeze([]) as unknown as Link[];

/**
 * A span that is both the API's `Span` (what the gateway and plugins call) and the SDK's `ReadableSpan`
 * (what span processors and exporters read). Times are kept as epoch milliseconds (a float with
 * sub-microsecond resolution) and turned into the SDK's `[seconds, nanoseconds]` only when read; see
 * `lean-tracer.ts` for why the gateway does not use the SDK's own span class.
 */
export class LeanSpan implements Span, ReadableSpan {
  /**
   * The attributes as two lists in the order they were first set (what an object keeps too): the OTLP
   * encoder walks them, and no span carries an object whose shape depends on which attributes it got (the
   * encoder's property reads went megamorphic on those). `attributes` makes the object when read.
   */
  readonly attributeKeys: string[] = [];
  readonly attributeValues: AttributeValue[] = [];
  links: Link[];
  /** Shared and empty until the first event: most spans have none. */
  events: TimedEvent[] = NO_EVENTS;
  status: SpanStatus = UNSET;
  ended = false;
  /** Epoch ms; 0 until the span ends. */
  endMs = 0;
  droppedAttributesCount = 0;
  droppedEventsCount = 0;
  droppedLinksCount = 0;
  /**
   * Epoch ms = `performance.now()` + this offset, fixed when a trace's first local span starts (as the SDK
   * does, against clock drift) and shared by its children: `Date.now()` has whole milliseconds, so an offset
   * read per span differed by up to 1 ms between a parent and its child, and a child could end after its parent.
   */
  readonly clockOffset: number;
  readonly startMs: number;

  constructor(
    private readonly home: SpanHome,
    private readonly context: SpanContext,
    public name: string,
    readonly kind: SpanKind,
    readonly parentSpanContext: SpanContext | undefined,
    attributes: Attributes | undefined,
    links: Link[] | undefined,
    startTime: TimeInput | undefined,
    /** The local parent span's `clockOffset`, if the parent is one of ours. */
    parentClockOffset?: number,
  ) {
    const perf = performance.now();
    this.clockOffset = parentClockOffset ?? Date.now() - perf;
    this.startMs = startTime === undefined ? perf + this.clockOffset : this.toMs(startTime);
    if (attributes) this.setAttributes(attributes);
    this.links = links && links.length > 0 ? links.slice(0, home.limits.linkCountLimit) : NO_LINKS;
    if (links && links.length > this.links.length) this.droppedLinksCount = links.length - this.links.length;
  }

  spanContext(): SpanContext {
    return this.context;
  }

  get resource(): Resource {
    return this.home.resource;
  }

  get instrumentationScope(): InstrumentationScope {
    return this.home.scope;
  }

  /** The attributes as the SDK's `ReadableSpan` has them (a new object at each read). */
  get attributes(): Attributes {
    const out: Attributes = {};
    for (let i = 0; i < this.attributeKeys.length; i++) out[this.attributeKeys[i]] = this.attributeValues[i];
    return out;
  }

  get startTime(): HrTime {
    return msToHrTime(this.startMs);
  }

  get endTime(): HrTime {
    return msToHrTime(this.endMs);
  }

  get duration(): HrTime {
    const ns = Math.round((this.endMs - this.startMs) * 1e6);
    return [Math.floor(ns / 1e9), ns % 1e9];
  }

  setAttribute(key: string, value: AttributeValue | undefined): this {
    if (value == null || this.ended) return this;
    if (key.length === 0 || !isAttributeValue(value)) {
      diag.warn(`Invalid attribute ${key.length === 0 ? 'key' : `value set for key: ${key}`}`);
      return this;
    }
    const at = this.attributeKeys.indexOf(key);
    if (at < 0 && this.attributeKeys.length >= this.home.limits.attributeCountLimit) {
      this.droppedAttributesCount++;
      return this;
    }
    const kept = truncated(value, this.home.limits.attributeValueLengthLimit);
    if (at >= 0) this.attributeValues[at] = kept;
    else {
      this.attributeKeys.push(key);
      this.attributeValues.push(kept);
    }
    return this;
  }

  setAttributes(attributes: Attributes): this {
    for (const key in attributes) if (Object.prototype.hasOwnProperty.call(attributes, key)) this.setAttribute(key, attributes[key]);
    return this;
  }

  addEvent(name: string, attributesOrTime?: Attributes | TimeInput, time?: TimeInput): this {
    if (this.ended) return this;
    const { eventCountLimit, attributePerEventCountLimit, attributeValueLengthLimit } = this.home.limits;
    if (eventCountLimit === 0) {
      this.droppedEventsCount++;
      return this;
    }
    if (this.events === NO_EVENTS) this.events = [];
    if (this.events.length >= eventCountLimit) {
      this.events.shift();
      this.droppedEventsCount++;
    }
    let given: Attributes | undefined;
    if (isTimeInput(attributesOrTime)) time = isTimeInput(time) ? time : attributesOrTime;
    else given = attributesOrTime;
    const attributes: Attributes = {};
    let count = 0;
    let dropped = 0;
    for (const key in given) {
      const value = given[key];
      if (!Object.prototype.hasOwnProperty.call(given, key) || key.length === 0 || value == null || !isAttributeValue(value)) continue;
      if (count >= attributePerEventCountLimit) dropped++;
      else {
        attributes[key] = truncated(value, attributeValueLengthLimit);
        count++;
      }
    }
    this.events.push({ name, attributes, time: msToHrTime(time === undefined ? this.now() : this.toMs(time)), droppedAttributesCount: dropped });
    return this;
  }

  addLink(link: Link): this {
    if (this.ended) return this;
    if (this.links.length >= this.home.limits.linkCountLimit) this.droppedLinksCount++;
    else {
      if (this.links === NO_LINKS) this.links = [];
      this.links.push(link);
    }
    return this;
  }

  addLinks(links: Link[]): this {
    for (const link of links) this.addLink(link);
    return this;
  }

  setStatus(status: SpanStatus): this {
    if (this.ended || status.code === SpanStatusCode.UNSET || this.status.code === SpanStatusCode.OK) return this;
    // Error messages quote what a request named (a model, a preset): a gateway key pasted there is masked.
    this.status =
      status.code === SpanStatusCode.ERROR && typeof status.message === 'string'
        ? { code: status.code, message: withoutGatewayKeys(status.message.length > SPAN_VALUE_MAX ? status.message.slice(0, SPAN_VALUE_MAX) : status.message) }
        : { code: status.code };
    return this;
  }

  updateName(name: string): this {
    if (!this.ended) this.name = name;
    return this;
  }

  end(endTime?: TimeInput): void {
    if (this.ended) {
      diag.error(`${this.name} ${this.context.traceId}-${this.context.spanId} - You can only call end() on a span once.`);
      return;
    }
    const endMs = endTime === undefined ? this.now() : this.toMs(endTime);
    this.endMs = endMs < this.startMs ? this.startMs : endMs;
    this.ended = true;
    this.home.ended(this);
  }

  isRecording(): boolean {
    return !this.ended;
  }

  recordException(exception: Exception, time?: TimeInput): void {
    const attributes: Attributes = {};
    if (typeof exception === 'string') attributes['exception.message'] = exception;
    else if (exception) {
      if (exception.code) attributes['exception.type'] = exception.code.toString();
      else if (exception.name) attributes['exception.type'] = exception.name;
      if (exception.message) attributes['exception.message'] = exception.message;
      if (exception.stack) attributes['exception.stacktrace'] = exception.stack;
    }
    if (attributes['exception.type'] || attributes['exception.message']) this.addEvent('exception', attributes, time);
  }

  private now(): number {
    return performance.now() + this.clockOffset;
  }

  /** A time input in epoch ms: a number at or below `performance.now()` is a performance timestamp (as in the SDK). */
  private toMs(t: TimeInput): number {
    if (typeof t === 'number') return t <= performance.now() ? t + this.clockOffset : t;
    if (t instanceof Date) return t.getTime();
    return t[0] * 1e3 + t[1] / 1e6;
  }
}

/** Epoch ms → the SDK's `[seconds, nanoseconds]`. */
export function msToHrTime(ms: number): HrTime {
  let seconds = Math.floor(ms / 1000);
  let nanos = Math.round((ms - seconds * 1000) * 1e6);
  if (nanos >= 1e9) {
    seconds += 1;
    nanos -= 1e9;
  }
  return [seconds, nanos];
}

function isTimeInput(v: unknown): v is TimeInput {
  return typeof v === 'number' || v instanceof Date || (Array.isArray(v) && v.length === 2 && typeof v[0] === 'number' && typeof v[1] === 'number');
}

/** The API's attribute value: a primitive, or an array of one primitive type (nulls allowed). */
function isAttributeValue(v: unknown): v is AttributeValue {
  const t = typeof v;
  if (t === 'string' || t === 'number' || t === 'boolean') return true;
  if (!Array.isArray(v)) return false;
  let kind: string | undefined;
  for (const item of v) {
    if (item == null) continue;
    const it = typeof item;
    if (it !== 'string' && it !== 'number' && it !== 'boolean') return false;
    if (kind === undefined) kind = it;
    else if (it !== kind) return false;
  }
  return true;
}

function truncated(value: AttributeValue, limit: number): AttributeValue {
  if (limit === Infinity || limit < 0) return value;
  if (typeof value === 'string') return value.length > limit ? value.slice(0, limit) : value;
  if (Array.isArray(value)) return (value as unknown[]).map((v) => (typeof v === 'string' && v.length > limit ? v.slice(0, limit) : v)) as AttributeValue;
  return value;
}
