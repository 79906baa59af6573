import { createContextKey, type Context, type Span } from '@opentelemetry/api';

/** The API's key for the active span (`createContextKey` is `Symbol.for`, so it is the API's own). */
const SPAN_KEY = createContextKey('OpenTelemetry Context Key SPAN');

/**
 * An OpenTelemetry `Context` that is its parent plus one value. The API's own context copies its whole `Map`
 * on every `setValue`, and a request sets one per span it opens (four: the request and each stage); this one
 * allocates one small object and reads up the chain (a handful of links). Values it does not hold come from
 * the parent, so the caller's context (a `traceparent`, baggage) is still there.
 *
 * @example const ctx = withSpan(parent, span); trace.getSpan(ctx) === span; trace.setSpan(ctx, child) // a LinkedContext too
 */
export class LinkedContext implements Context {
  constructor(
    private readonly parent: Context,
    private readonly key: symbol,
    private readonly value: unknown,
  ) {}

  getValue(key: symbol): unknown {
    return key === this.key ? this.value : this.parent.getValue(key);
  }

  setValue(key: symbol, value: unknown): Context {
    return new LinkedContext(this, key, value);
  }

  /** As the API's context: the key then reads as unset. */
  deleteValue(key: symbol): Context {
    return new LinkedContext(this, key, undefined);
  }
}

/** `parent` with `span` as its active span (what `trace.setSpan` gives, without copying the parent). */
export function withSpan(parent: Context, span: Span): Context {
  return new LinkedContext(parent, SPAN_KEY, span);
}
