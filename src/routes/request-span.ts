/**
 * The request span's parent, name and attributes (from the caller's `trace` body fields or its `traceparent`
 * header), and the spans of a request refused before its body was read.
 */

import { randomBytes } from 'node:crypto';
import {
  propagation,
  ROOT_CONTEXT,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { toGatewayError } from '../errors/gateway-error';
import type { EndpointId, GatewayContext } from '../pipeline/types';
import { spanText } from '../telemetry/span-text';
import { withSpan } from '../telemetry/linked-context';
import { stageSpanName } from '../pipeline/build';

const HEX32 = /^[0-9a-f]{32}$/;
const HEX16 = /^[0-9a-f]{16}$/;
const ZERO_SPAN = '0000000000000000';

/** The caller's trace: `trace.trace_id` + `trace.parent_span_id` in the body win over a `traceparent` header. */
export function parentContext(ctx: GatewayContext, body: Record<string, unknown> | null): Context {
  const t = traceObject(body);
  const traceId = typeof t?.trace_id === 'string' ? t.trace_id.toLowerCase() : '';
  if (HEX32.test(traceId)) {
    // Without parent_span_id the request still joins the caller's trace, under a stand-in remote parent id.
    const given = typeof t?.parent_span_id === 'string' ? t.parent_span_id.toLowerCase() : '';
    // An all-zero id is no span (W3C): the stand-in parent then, as for a missing one, not a new trace.
    const spanId = HEX16.test(given) && given !== ZERO_SPAN ? given : randomBytes(8).toString('hex');
    return trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
  }
  if (ctx.get('traceparent')) return propagation.extract(ROOT_CONTEXT, ctx.headers);
  return ROOT_CONTEXT;
}

function traceObject(body: Record<string, unknown> | null): Record<string, unknown> | undefined {
  const t = body?.trace;
  return t && typeof t === 'object' && !Array.isArray(t) ? (t as Record<string, unknown>) : undefined;
}

/**
 * The spans of a request a stage's header check refused before the body was read: the request span (named
 * and parented from the headers alone: the body's `trace` fields are not read), and the refusing stage's
 * span under it marked with the error, as when the stage refuses in the pipeline. The request span is
 * ended by the caller with the answer's status.
 */
export function refusedSpan(ctx: GatewayContext, id: EndpointId, stage: string, err: unknown, tracer: Tracer): Span {
  const parent = parentContext(ctx, null);
  const span = tracer.startSpan(spanName(id, null), { attributes: spanAttributes(ctx, null) }, parent);
  const refusing = tracer.startSpan(stageSpanName(stage), { attributes: { 'gateway.stage': stage } }, withSpan(parent, span));
  refusing.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
  refusing.setAttribute('gateway.error_type', toGatewayError(err).errorType);
  refusing.end();
  return span;
}

export function spanName(id: EndpointId, body: Record<string, unknown> | null): string {
  const t = traceObject(body);
  if (typeof t?.span_name === 'string' && t.span_name) return clip(t.span_name);
  if (typeof t?.trace_name === 'string' && t.trace_name) return clip(t.trace_name);
  return `gateway.request ${id}`;
}

const KNOWN_TRACE_KEYS = new Set(['trace_id', 'parent_span_id', 'span_name', 'trace_name', 'generation_name']);
/** What a request may put in its span (read before the key is checked): values and names cut, keys counted. */
const SPAN_TRACE_KEYS_MAX = 32;
const clip = spanText;

/**
 * The request span's attributes from the body: the model asked for and the caller's `trace` fields. These
 * come from anyone (before authentication) and live in the export queue until sent: each value and name is
 * cut to 256 characters and at most 32 trace fields are taken, or a slow collector let unauthenticated
 * requests with a 9 MB `model` hold gigabytes.
 */
export function spanAttributes(ctx: GatewayContext, body: Record<string, unknown> | null): Record<string, string | number | boolean> {
  const attrs: Record<string, string | number | boolean> = { 'http.request.method': ctx.method, 'url.path': clip(ctx.path) };
  if (typeof body?.model === 'string') attrs['gateway.requested_model'] = clip(body.model);
  const t = traceObject(body);
  if (t) {
    if (typeof t.trace_name === 'string') attrs['gateway.trace_name'] = clip(t.trace_name);
    let taken = 0;
    for (const [k, v] of Object.entries(t)) {
      if (KNOWN_TRACE_KEYS.has(k)) continue;
      if (++taken > SPAN_TRACE_KEYS_MAX) break;
      const name = `gateway.trace.${clip(k)}`;
      if (typeof v === 'string') attrs[name] = clip(v);
      else if (typeof v === 'number' || typeof v === 'boolean') attrs[name] = v;
      else if (v !== null && v !== undefined) attrs[name] = clip(JSON.stringify(v));
    }
  }
  return attrs;
}
