import type { GatewayState } from '../pipeline/types';
import { withoutGatewayKeys } from '../telemetry/span-text';

/**
 * `gateway_metadata` for callers that send `X-Gateway-Metadata: enabled` (spec 4.1, 7.8): what was asked
 * for, which endpoints were considered, which one answered, and every attempt on the way.
 */
export function routingMetadata(state: GatewayState): Record<string, unknown> {
  // A route with no successful attempt served nothing: a request that failed after calls were made keeps a
  // route for its ledger row only (fusion whose judge failed bills a candidate's), and read as served it
  // said "served by … on attempt 0".
  const answeredAt = state.attempts.findIndex((a) => a.outcome === 'success');
  const route = answeredAt >= 0 ? state.route : undefined;
  const served = route ? state.candidates.find((c) => c.provider === route.provider && c.model === route.model) : undefined;
  const attempts = state.attempts.map((a, i) => ({
    attempt: i + 1,
    provider: a.provider,
    model: a.model,
    outcome: a.outcome,
    ...(a.errorType ? { error_type: a.errorType, status: a.status } : {}),
    ...(a.droppedParameters ? { dropped_parameters: a.droppedParameters } : {}),
  }));
  const attempt = route ? answeredAt + 1 : state.attempts.length;
  const asked: unknown = typeof state.body?.model === 'string' ? state.body.model : Array.isArray(state.body?.models) ? state.body.models[0] : null;
  // A gateway key pasted where a model goes is shown as its label, as in error messages and spans.
  const requested = typeof asked === 'string' ? withoutGatewayKeys(asked) : asked;
  return {
    ...(state.pipeline.length > 0 ? { pipeline: state.pipeline } : {}),
    requested,
    strategy: 'ordered',
    region: served?.region ?? null,
    summary: route
      ? `served by ${route.provider} (${route.model}) on attempt ${attempt} (${state.candidates.length} candidate endpoint(s); an endpoint may be tried twice)`
      : state.attempts.length > 0
        ? `no endpoint answered after ${state.attempts.length} attempt(s)`
        : notSent(state),
    attempt,
    generation_time: Math.round(performance.now() - state.startedAt),
    is_byok: route?.isByok ?? false,
    endpoints: {
      total: state.candidates.length,
      available: state.candidates.map((c) => ({ provider: c.provider, model: c.model, selected: !!route && c.provider === route.provider && c.model === route.model })),
    },
    attempts,
  };
}

/**
 * The summary of a request no endpoint was tried for. A guardrail's 403 had read "no endpoint answered
 * after 0 attempt(s)", as if endpoints had been tried and failed: the stage that refused it is named.
 */
function notSent(state: GatewayState): string {
  const refused = state.pipeline.findLast((r) => r.data?.action === 'block');
  return refused ? `not sent to any endpoint: ${refused.type} "${refused.name}" blocked the request` : 'not sent to any endpoint: no endpoint was tried';
}
