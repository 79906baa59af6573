import type { ModelConfig } from '../config/types';
import type { GatewayState } from '../pipeline/types';
import type { Dialect, Provider } from '../providers/types';
import { candidatesFor, requestedModels, type Candidate } from './candidates';
import type { EndpointHealth } from './health';
import { requestedParameters, supportedThrough } from './parameters';
import { planRoute, type ProviderPreferences } from './preferences';

/** What route planning reads: the loaded models and providers, and what traffic taught (health, sessions). */
export interface PlanDeps {
  models: ReadonlyMap<string, ModelConfig>;
  providers: ReadonlyMap<string, Provider>;
  health: EndpointHealth;
}

/** An endpoint's key in health and sticky-session records: `<provider>/<upstream model>`. */
export const endpointKeyOf = (providerId: string, upstreamModel: string): string => `${providerId}/${upstreamModel}`;

/** `endpointKeyOf` for a routing candidate. */
export const endpointKey = (c: Candidate): string => endpointKeyOf(c.provider.id, c.endpoint.upstream_model);

/**
 * The sticky-routing key of a request: its session, per key (sessions of different keys never mix) and per
 * requested model (the first it names): an agent that mixes a main model and a helper in one session keeps
 * each one's endpoint, where the helper's request had overwritten the main model's.
 */
export function sessionKey(state: GatewayState): string | null {
  if (!state.session) return null;
  return `${state.key?.id ?? ''}:${state.session}\n${primaryModel(state) ?? ''}`;
}

/** The model a session's sticky record is for: the first the request names (a fallback that served it is not remembered). */
export function primaryModel(state: GatewayState): string | undefined {
  return requestedModels(state.body ?? {})[0];
}

const NONE: readonly string[] = [];

/**
 * The endpoints to try, in order: the request's models and their endpoints, filtered and ordered by the
 * provider preferences and endpoint health, with the session's sticky endpoint (`stuck`) first when it is still a
 * healthy candidate and the caller set no explicit `provider.order`.
 */
export function planFor(state: GatewayState, deps: PlanDeps, stuck: string | undefined): Candidate[] {
  const body = state.body!;
  const candidates = candidatesFor({ body, dialect: state.endpoint as Dialect, models: deps.models, providers: deps.providers });
  const preferences = preferencesOf(body);
  const allowedRegions = state.key?.allowedDataRegions ?? [];
  // One endpoint, no provider preferences, no region limit: no filter applies and there is nothing to order
  // (planRoute would give the same one-element plan, open breaker or not).
  if (candidates.length === 1 && preferences === undefined && allowedRegions.length === 0) return candidates;
  // What the request sets and each endpoint takes matters to `require_parameters` alone.
  const requireAll = preferences?.require_parameters === true;
  const requested = requireAll ? requestedParameters(body) : NONE;
  const plan = planRoute({
    candidates,
    preferences,
    health: deps.health,
    keyOf: endpointKey,
    facts: (c) => ({
      provider: c.provider.id,
      model: c.model.id,
      region: c.provider.region,
      pricing: { prompt: c.endpoint.pricing.prompt, completion: c.endpoint.pricing.completion, request: c.endpoint.pricing.request },
      dataCollection: c.provider.dataCollection,
      supportedParameters: requireAll ? supportedThrough({ dialect: c.dialect, list: c.endpoint.supported_parameters }, state.endpoint as Dialect, requested) : undefined,
    }),
    requestedParameters: requested,
    allowedRegions,
  });
  // The caller's own provider order stands as given; `require_parameters` has filtered already. An empty one
  // orders nothing (as planRoute reads it): it had switched off the session's endpoint and the tools-first order.
  if (preferences?.order?.length) return plan;
  const sticky = stuck === undefined ? plan : withStuckFirst(plan, stuck, deps);
  return requireAll ? sticky : withShapingFirst(sticky, body, state.endpoint as Dialect);
}

/**
 * The parameters that decide what an answer is (tools, a forced tool choice, structured output): an endpoint
 * whose `supported_parameters` leaves one out would be sent the request without it and answer with prose
 * (found by a routing audit: tools and `tool_choice: "required"` dropped for the cheapest endpoint while
 * the next took them).
 */
const SHAPING: Readonly<Record<Dialect, readonly string[]>> = {
  chat_completions: ['tools', 'tool_choice', 'response_format'],
  messages: ['tools', 'tool_choice', 'output_config'],
};

/**
 * `plan` with, within each model, the endpoints that take every answer-shaping parameter the request sets
 * ahead of those that would drop one (otherwise in plan order; none is left out: without
 * `provider.require_parameters` an endpoint that drops a parameter still serves when nothing else can).
 */
function withShapingFirst(plan: Candidate[], body: Record<string, unknown>, client: Dialect): Candidate[] {
  const asked = SHAPING[client].filter((p) => body[p] !== undefined && body[p] !== null);
  if (asked.length === 0 || plan.length < 2 || plan.every((c) => c.endpoint.supported_parameters === undefined && c.dialect === client)) return plan;
  const takesAll = (c: Candidate) => (supportedThrough({ dialect: c.dialect, list: c.endpoint.supported_parameters }, client, asked) ?? asked).length === asked.length;
  const out: Candidate[] = [];
  for (let i = 0; i < plan.length; ) {
    let j = i;
    while (j < plan.length && plan[j].model.id === plan[i].model.id) j++;
    const group = plan.slice(i, j);
    out.push(...group.filter(takesAll), ...group.filter((c) => !takesAll(c)));
    i = j;
  }
  return out;
}

function withStuckFirst(plan: Candidate[], stuck: string, deps: PlanDeps): Candidate[] {
  const index = plan.findIndex((c) => endpointKey(c) === stuck);
  // Within its own model only: the session's endpoint never jumps ahead of the model the request names first.
  if (index <= 0 || plan[index].model.id !== plan[0].model.id || deps.health.down(stuck)) return plan;
  return [plan[index], ...plan.slice(0, index), ...plan.slice(index + 1)];
}

/**
 * `provider` preferences, with the deprecated `route` mapped onto the sort partition (spec 4.2), whether the
 * sort is a string or an object without its own partition (which stands: `route` is only its old name).
 */
function preferencesOf(body: Record<string, unknown>): ProviderPreferences | undefined {
  const prefs = body.provider && typeof body.provider === 'object' ? ({ ...(body.provider as ProviderPreferences) }) : undefined;
  const route = body.route;
  if (!prefs?.sort || (route !== 'fallback' && route !== 'sort')) return prefs;
  const partition = route === 'sort' ? 'none' : 'model';
  if (typeof prefs.sort === 'string') prefs.sort = { by: prefs.sort, partition };
  else if (typeof prefs.sort === 'object' && prefs.sort.partition === undefined) prefs.sort = { ...prefs.sort, partition };
  return prefs;
}

