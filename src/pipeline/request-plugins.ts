import { GatewayError } from '../errors/gateway-error';
import type { GatewayConfig } from '../config/types';
import type { EndpointId, GatewayState } from './types';

/** One entry of a request's `plugins: [{id, …}]`. */
export type RequestPlugin = Record<string, unknown> & { id: string; enabled?: boolean };

/**
 * The request's entry for plugin `id`, if it names one. Stages read their per-request options from it,
 * within what their operator config allows; `enabled: false` asks a stage to stand aside for this request.
 *
 * @example const opts = requestPlugin(state.body, 'web'); if (opts?.enabled === false) return next();
 */
export function requestPlugin(body: Record<string, unknown> | null, id: string): RequestPlugin | undefined {
  const list = body?.plugins;
  if (!Array.isArray(list)) return undefined;
  return list.find((p): p is RequestPlugin => !!p && typeof p === 'object' && (p as { id?: unknown }).id === id);
}

/** The stage ids the operator runs for an endpoint. */
export function pipelineOf(config: GatewayConfig, endpoint: EndpointId): readonly string[] {
  const named = endpoint === 'messages' ? config.pipelines.messages : endpoint === 'chat_completions' ? config.pipelines.chat_completions : undefined;
  return named ?? config.pipelines.default;
}

/**
 * A request may only ask for plugins the operator runs on this endpoint: naming another (one the request
 * schema knows, since unknown ids are refused there) is a 400 that says so, rather than silently ignored.
 * Each plugin may be named once: stages read the first entry for their id (`requestPlugin`), so a second
 * one would be ignored whatever it asked (`enabled: false`, other options); it is a 400 naming both places.
 */
export function checkRequestPlugins(state: GatewayState, config: GatewayConfig): void {
  const list = state.body?.plugins;
  if (!Array.isArray(list)) return;
  const enabled = new Set(pipelineOf(config, state.endpoint));
  const seen = new Map<string, number>();
  list.forEach((p, i) => {
    const id = (p as { id?: unknown })?.id;
    if (typeof id !== 'string') return;
    const first = seen.get(id);
    if (first !== undefined) {
      throw new GatewayError('invalid_request', `Plugin \`${id}\` is listed twice in \`plugins\` (plugins[${first}] and plugins[${i}]); name each plugin once`, {
        metadata: { field: `plugins[${i}].id` },
      });
    }
    seen.set(id, i);
    if (!enabled.has(id)) {
      throw new GatewayError('invalid_request', `Plugin \`${id}\` is not enabled on this gateway (the operator's pipeline does not run it)`, {
        metadata: { field: `plugins[${i}].id` },
      });
    }
  });
}

/** Gateway server tools (`tools[]` entries `{type: "gateway:…"}`) and the stage that runs each. */
const SERVER_TOOLS: Readonly<Record<string, string>> = { 'gateway:web_fetch': 'web-fetch' };

/**
 * A `gateway:` server tool must be one this gateway has and its stage must run on this endpoint: otherwise
 * the entry would reach a provider that cannot run it. A 400 that names the tool.
 */
export function checkServerTools(state: GatewayState, config: GatewayConfig): void {
  const tools = state.body?.tools;
  if (!Array.isArray(tools)) return;
  const enabled = new Set(pipelineOf(config, state.endpoint));
  tools.forEach((t, i) => {
    const type = (t as { type?: unknown })?.type;
    if (typeof type !== 'string' || !type.startsWith('gateway:')) return;
    const stage = SERVER_TOOLS[type];
    const field = { metadata: { field: `tools[${i}].type` } };
    if (!stage) throw new GatewayError('invalid_request', `\`${type}\` is not a server tool of this gateway (${Object.keys(SERVER_TOOLS).join(', ')})`, field);
    if (!enabled.has(stage)) throw new GatewayError('invalid_request', `Server tool \`${type}\` is not enabled on this gateway (the operator's pipeline does not run ${stage})`, field);
  });
}

/** The body of an inference request (`/messages`, `/chat/completions`), or null on any other endpoint. */
export function inferenceBody(state: GatewayState): Record<string, unknown> | null {
  return state.body && (state.endpoint === 'messages' || state.endpoint === 'chat_completions') ? state.body : null;
}
