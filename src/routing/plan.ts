import type { ModelConfig } from '../config/types';
import type { GatewayState } from '../pipeline/types';
import type { Dialect, Provider } from '../providers/types';
import { candidatesFor, type Candidate } from './candidates';
import type { EndpointHealth } from './health';
import { planRoute, type ProviderPreferences } from './preferences';

/** What route planning reads: the loaded models and providers, and what traffic taught (health, sessions). */
export interface PlanDeps {
  models: ReadonlyMap<string, ModelConfig>;
  providers: ReadonlyMap<string, Provider>;
  health: EndpointHealth;
}

/** An endpoint's key in health and sticky-session records: `<provider>/<upstream model>`. */
export const endpointKey = (c: Candidate): string => `${c.provider.id}/${c.endpoint.upstream_model}`;

/** The sticky-routing key of a request: its session, per key (sessions of different keys never mix). */
export function sessionKey(state: GatewayState): string | null {
  return state.session ? `${state.key?.id ?? ''}:${state.session}` : null;
}

/** Body fields that are not "parameters" for `provider.require_parameters`. */
const NOT_PARAMETERS = new Set(['model', 'models', 'messages', 'stream', 'stream_options', 'fallbacks', 'provider', 'plugins', 'route', 'session_id', 'trace', 'debug', 'user', 'metadata', 'system', 'preset', 'usage', 'transforms']);

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
  const requested = Object.keys(body).filter((k) => !NOT_PARAMETERS.has(k));
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
      supportedParameters: supportedThrough(c, state.endpoint as Dialect, requested),
    }),
    requestedParameters: requested,
    allowedRegions,
  });
  if (stuck === undefined || preferences?.order) return plan;
  const index = plan.findIndex((c) => endpointKey(c) === stuck);
  if (index <= 0 || deps.health.state(stuck!) === 'open') return plan;
  return [plan[index], ...plan.slice(0, index), ...plan.slice(index + 1)];
}

/**
 * Request parameters a translated call cannot carry (the translator drops them). For
 * `provider.require_parameters`, an endpoint reached through translation does not support them.
 */
const UNTRANSLATABLE: Record<Dialect, ReadonlySet<string>> = {
  chat_completions: new Set(['seed', 'logprobs', 'top_logprobs', 'logit_bias', 'frequency_penalty', 'presence_penalty', 'repetition_penalty', 'min_p', 'top_a', 'prediction', 'modalities', 'n', 'audio', 'image_config', 'verbosity', 'web_search_options']),
  messages: new Set(['context_management', 'container', 'mcp_servers', 'cache_control', 'deferred_tools']),
};

/** The parameters an endpoint honours as the client's request reaches it (undefined: all). */
function supportedThrough(c: Candidate, client: Dialect, requested: string[]): string[] | undefined {
  if (c.dialect === client) return c.endpoint.supported_parameters;
  const base = c.endpoint.supported_parameters ?? requested;
  return base.filter((p) => !UNTRANSLATABLE[client].has(p));
}

/** `provider` preferences, with the deprecated `route` mapped onto the sort partition (spec 4.2). */
function preferencesOf(body: Record<string, unknown>): ProviderPreferences | undefined {
  const prefs = body.provider && typeof body.provider === 'object' ? ({ ...(body.provider as ProviderPreferences) }) : undefined;
  const route = body.route;
  if (prefs && typeof prefs.sort === 'string' && (route === 'fallback' || route === 'sort')) {
    prefs.sort = { by: prefs.sort, partition: route === 'sort' ? 'none' : 'model' };
  }
  return prefs;
}

