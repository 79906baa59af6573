import { describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/errors/gateway-error';
import { nextStep, retryAfterMs } from '../../src/routing/attempt-policy';

const ctx = { retriedSame: false, lastCandidate: false, retryWaitMaxMs: 2000 };
const err = (type: ConstructorParameters<typeof GatewayError>[0], metadata?: Record<string, unknown>, headers?: Record<string, string>) =>
  new GatewayError(type, 'x', { metadata, headers });

describe('attempt policy', () => {
  it('never retries a caller mistake', () => {
    for (const t of ['invalid_request', 'unprocessable', 'payload_too_large'] as const) expect(nextStep(err(t), ctx)).toEqual({ kind: 'stop' });
  });

  it('moves to a larger context on context_length_exceeded, and off the model on a content-policy block or refusal', () => {
    expect(nextStep(err('context_length_exceeded'), ctx)).toEqual({ kind: 'larger_context' });
    expect(nextStep(err('content_policy_violation'), ctx)).toEqual({ kind: 'next_model' });
    expect(nextStep(err('refusal'), ctx)).toEqual({ kind: 'next_model' });
  });

  it('retries a transient 5xx or a reset once on the same endpoint, then fails over', () => {
    expect(nextStep(err('provider_unavailable', { provider_code: 500 }), ctx)).toEqual({ kind: 'retry_same', waitMs: 0 });
    expect(nextStep(err('provider_unavailable', { network: 'reset' }), ctx)).toEqual({ kind: 'retry_same', waitMs: 0 });
    expect(nextStep(err('provider_unavailable', { network: 'unreachable' }), ctx)).toEqual({ kind: 'next_endpoint' });
    expect(nextStep(err('provider_unavailable', { provider_code: 500 }), { ...ctx, retriedSame: true })).toEqual({ kind: 'next_endpoint' });
    expect(nextStep(err('provider_unavailable', { provider_code: 401 }), ctx)).toEqual({ kind: 'next_endpoint' });
  });

  it('fails over, never asking the same endpoint again, when it broke an answer it had begun (2xx)', () => {
    expect(nextStep(err('provider_unavailable', { network: 'reset', after_headers: true }), ctx)).toEqual({ kind: 'next_endpoint' });
    expect(nextStep(err('provider_unavailable', { provider_code: 500, after_headers: true }), ctx)).toEqual({ kind: 'next_endpoint' });
    expect(nextStep(err('provider_unavailable', { network: 'reset', accepted: true }), { ...ctx, lastCandidate: true })).toEqual({ kind: 'next_endpoint' });
    expect(nextStep(err('provider_unavailable', { provider_code: 502, accepted: true }), ctx)).toEqual({ kind: 'next_endpoint' });
  });

  it('fails over on 429 and overload; waits out a short Retry-After only on the last endpoint', () => {
    expect(nextStep(err('rate_limit_exceeded', {}, { 'retry-after': '1' }), ctx)).toEqual({ kind: 'next_endpoint' });
    expect(nextStep(err('rate_limit_exceeded', {}, { 'retry-after': '1' }), { ...ctx, lastCandidate: true })).toEqual({ kind: 'retry_same', waitMs: 1000 });
    expect(nextStep(err('provider_overloaded', {}, { 'retry-after': '30' }), { ...ctx, lastCandidate: true })).toEqual({ kind: 'next_endpoint' });
    expect(nextStep(err('rate_limit_exceeded'), { ...ctx, lastCandidate: true })).toEqual({ kind: 'next_endpoint' });
  });

  it('fails over at once after a timeout', () => {
    expect(nextStep(err('timeout'), { ...ctx, lastCandidate: true })).toEqual({ kind: 'next_endpoint' });
  });

  it('reads Retry-After as seconds or an HTTP date', () => {
    expect(retryAfterMs('2')).toBe(2000);
    expect(retryAfterMs('0.5')).toBe(500);
    expect(retryAfterMs(new Date(10_000).toUTCString(), 4_000)).toBe(6_000);
    expect(retryAfterMs('soon')).toBeNull();
    expect(retryAfterMs(undefined)).toBeNull();
  });
});
