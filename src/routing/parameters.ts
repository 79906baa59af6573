/**
 * Request parameters against an endpoint's `supported_parameters` (README "Routing", provider preferences).
 *
 * An endpoint lists the parameters its upstream accepts by their names in its own API style: a
 * chat-completions provider says `stop`, `max_completion_tokens`, `reasoning_effort`, `response_format`; a
 * messages provider says `stop_sequences`, `thinking`, `output_config`. The list is read twice:
 * - `provider.require_parameters` keeps only the endpoints that take every parameter the request sets
 *   (`supportedThrough`); a request of the other style is compared through ACROSS, the names translation
 *   gives its parameters.
 * - every attempt: the parameters of the upstream body that the endpoint does not list are left out of that
 *   attempt's body (`fittedBody`), as OpenRouter ignores a parameter the chosen provider does not support;
 *   except a messages body's tools that its history needs, which go uncallable (`historyTools`).
 * An endpoint without a list takes everything (OpenAI-compatible servers ignore what they do not know).
 */
import { GATEWAY_ONLY_FIELDS } from '../dialects/common';
import type { Dialect } from '../providers/types';

/**
 * Upstream body fields that are no parameters: the request itself (`messages`, the messages `system`), how it
 * is answered (`stream`, `stream_options`, which billing needs), who asks (`user`, `metadata`, hashed), and the
 * messages `max_tokens` the Messages API requires. Sent whatever a list says, and never compared.
 */
const ALWAYS_SENT: Readonly<Record<Dialect, ReadonlySet<string>>> = {
  chat_completions: new Set(['model', 'messages', 'stream', 'stream_options', 'user', 'metadata']),
  messages: new Set(['model', 'messages', 'system', 'stream', 'max_tokens', 'metadata']),
};

/** Request fields that are not parameters: the ones above (client side), and the gateway's own, which never go upstream. */
const NOT_PARAMETERS: ReadonlySet<string> = new Set(['model', 'messages', 'system', 'stream', 'stream_options', 'user', 'metadata', ...GATEWAY_ONLY_FIELDS]);

/**
 * A parameter of a request in one style → the names it reaches an endpoint of the other style under, as
 * src/dialects/translate/request.ts carries it (the endpoint takes it when its list has one of them). A
 * parameter missing here does not survive translation (to messages: `seed`, `logprobs`, penalties, `min_p`,
 * `top_a`, `n`, `prediction`, …; to chat: `cache_control`, `context_management`, `container`, `mcp_servers`,
 * …): an endpoint reached through translation does not support it. `user` ⇄ `metadata.user_id` is not a
 * parameter (ALWAYS_SENT). Maps: `constructor` or `__proto__` in a body must find nothing.
 * test/unit/request-parameters.test.ts checks this table against the translator.
 */
const ACROSS: Readonly<Record<Dialect, ReadonlyMap<string, readonly string[]>>> = {
  // A chat-completions request to a messages endpoint.
  chat_completions: new Map([
    ['max_completion_tokens', ['max_tokens']],
    ['max_tokens', ['max_tokens']],
    ['temperature', ['temperature']],
    ['top_p', ['top_p']],
    ['top_k', ['top_k']],
    ['stop', ['stop_sequences']],
    ['tools', ['tools']],
    ['tool_choice', ['tool_choice']],
    ['parallel_tool_calls', ['tool_choice']], // as `tool_choice.disable_parallel_tool_use`
    ['reasoning', ['thinking']],
    ['reasoning_effort', ['thinking']],
    ['response_format', ['output_config']], // json_schema only
    ['service_tier', ['service_tier']],
    ['cache_control', ['cache_control']],
  ]),
  // A messages request to a chat-completions endpoint.
  messages: new Map([
    ['max_tokens', ['max_completion_tokens', 'max_tokens']],
    ['temperature', ['temperature']],
    ['top_p', ['top_p']],
    ['top_k', ['top_k']],
    ['stop_sequences', ['stop']],
    ['tools', ['tools']],
    ['tool_choice', ['tool_choice']],
    ['thinking', ['reasoning_effort', 'reasoning']], // disabled: `reasoning: {enabled: false}`
    ['output_config', ['reasoning_effort', 'response_format']], // `effort`, `format`
    ['service_tier', ['service_tier']],
  ]),
};

/**
 * Chat-completions has two spellings of the output limit; a server may know only one (older compatible
 * servers `max_tokens`, OpenAI's reasoning models `max_completion_tokens`). A list naming one takes the
 * limit under that name.
 */
const OTHER_SPELLING: ReadonlyMap<string, string> = new Map([
  ['max_tokens', 'max_completion_tokens'],
  ['max_completion_tokens', 'max_tokens'],
]);

/** Whether an endpoint of `dialect` whose list is `list` takes the parameter it knows as `name`. */
function takes(dialect: Dialect, list: readonly string[], name: string): boolean {
  if (ALWAYS_SENT[dialect].has(name) || list.includes(name)) return true;
  if (dialect !== 'chat_completions') return false;
  // A chat `reasoning` reaches an endpoint listing `reasoning_effort` as that, and back (see fittedBody).
  const other = name === 'reasoning' ? 'reasoning_effort' : name === 'reasoning_effort' ? 'reasoning' : OTHER_SPELLING.get(name);
  return other !== undefined && list.includes(other);
}

/** The parameters a request sets, by its own style's names (for `provider.require_parameters`). */
export function requestedParameters(body: Record<string, unknown>): string[] {
  return Object.keys(body).filter((k) => !NOT_PARAMETERS.has(k));
}

/**
 * Which of `requested` (the client's names) an endpoint takes as the request reaches it; undefined: all. An
 * endpoint of the client's style is read in those names; one of the other style takes what translation
 * carries (ACROSS) and its list has.
 *
 * @example supportedThrough({ dialect: 'chat_completions', list: ['stop'] }, 'messages', ['stop_sequences', 'top_k']) // ['stop_sequences']
 */
export function supportedThrough(endpoint: { dialect: Dialect; list: readonly string[] | undefined }, client: Dialect, requested: readonly string[]): string[] | undefined {
  const { dialect, list } = endpoint;
  if (dialect === client) return list && requested.filter((p) => takes(dialect, list, p));
  const across = ACROSS[client];
  return requested.filter((p) => {
    const names = across.get(p);
    return names !== undefined && (list === undefined || names.some((n) => takes(dialect, list, n)));
  });
}

/**
 * The upstream body (in the endpoint's style) fitted to the endpoint's list: the parameters it does not list
 * are left out (`dropped` names them); a chat endpoint that lists one spelling of the output limit gets the
 * other under it. `body` itself when nothing changes, else a new object: `body` is not touched, and each
 * attempt builds its own body anyway. Called only for endpoints that declare a list.
 *
 * @example fittedBody({ model: 'gpt-4o', messages, top_k: 5, stop: ['x'] }, 'chat_completions', ['stop']) // { body: { model, messages, stop }, dropped: ['top_k'] }
 */
export function fittedBody(body: Record<string, unknown>, dialect: Dialect, list: readonly string[]): { body: Record<string, unknown>; dropped: string[] | undefined } {
  const always = ALWAYS_SENT[dialect];
  const history = dialect === 'messages' && !list.includes('tools') && historyTools(body);
  let unlisted: string[] | undefined;
  for (const k in body) if (!always.has(k) && !list.includes(k) && !(history && (k === 'tools' || k === 'tool_choice'))) (unlisted ??= []).push(k);
  const offered = history && !noToolCalls(body.tool_choice);
  if (unlisted === undefined && !offered) return { body, dropped: undefined };
  const out: Record<string, unknown> = {};
  for (const k in body) if (!unlisted?.includes(k)) out[k] = k === 'tool_choice' && offered ? { type: 'none' } : body[k];
  const dropped: string[] = [];
  if (offered) {
    out.tool_choice ??= { type: 'none' };
    // The tools were offered for calling, and the model can call none of them here: that offer is left out.
    dropped.push(...['tools', 'tool_choice'].filter((k) => k in body));
  }
  for (const k of unlisted ?? []) {
    const other = dialect === 'chat_completions' ? OTHER_SPELLING.get(k) : undefined;
    // The other spelling already in the body carries its own value: this one is dropped.
    if (other !== undefined && list.includes(other) && !(other in body)) out[other] = body[k];
    else if (k === 'reasoning' && dialect === 'chat_completions' && effortAsArgument(body, list, out)) continue;
    else if (k === 'reasoning_effort' && dialect === 'chat_completions' && effortAsObject(body, list, out)) continue;
    else dropped.push(k);
  }
  return { body: out, dropped: dropped.length > 0 ? dropped : undefined };
}

/**
 * Whether a messages body's history needs its `tools`: the history holds `tool_use` or `tool_result` blocks,
 * which the Messages API refuses in a request without tools (400 "Requests which include `tool_use` or
 * `tool_result` blocks must define tools"). Such tools go to an endpoint whose list leaves `tools` out, with
 * `tool_choice: none` (fittedBody), so they cannot shape the answer: left out they had the history refused.
 * They are the history's own when `tool_choice` is already none (translation declares a chat history's tools
 * so, for a chat request that offers none); tools offered for calling go the same way, uncallable (they had
 * been left out, and the history refused with them).
 */
function historyTools(body: Record<string, unknown>): boolean {
  if (!Array.isArray(body.tools) || body.tools.length === 0 || !Array.isArray(body.messages)) return false;
  return body.messages.some(
    (m) => Array.isArray(m?.content) && m.content.some((b: { type?: unknown } | null) => b?.type === 'tool_use' || b?.type === 'tool_result'),
  );
}

const noToolCalls = (choice: unknown): boolean => (choice as { type?: unknown } | null | undefined)?.type === 'none';

/**
 * The effort of a chat body's `reasoning` object (the spec's, OpenRouter's) put in `out` as `reasoning_effort`,
 * for a chat endpoint that lists `reasoning_effort` but not `reasoning`: OpenAI's Chat Completions API has
 * only the top-level argument, and refuses `reasoning` (400 "Unrecognized request argument supplied"), so
 * such an endpoint had `reasoning` left out and the effort lost. The spec's values (`max` … `none`) are
 * OpenAI's own. `enabled: false` is effort `none` whatever else it says, as translation to a messages
 * provider reads it (thinking disabled): it had been left out, so the model reasoned at its default.
 * True when the effort was carried (or the body's own `reasoning_effort` already says it).
 */
function effortAsArgument(body: Record<string, unknown>, list: readonly string[], out: Record<string, unknown>): boolean {
  const reasoning = body.reasoning as { effort?: unknown; enabled?: unknown } | null;
  const effort = reasoning?.enabled === false ? 'none' : reasoning?.effort;
  if (typeof effort !== 'string' || !list.includes('reasoning_effort')) return false;
  if (body.reasoning_effort == null || effort === 'none') out.reasoning_effort = effort;
  return true;
}

/**
 * A chat body's `reasoning_effort` put in `out` as `reasoning.effort`, for a chat endpoint that lists `reasoning`
 * but not `reasoning_effort` (OpenRouter's style: the spec's shorthand equals `reasoning.effort`): it had been
 * left out, and with it a messages client's thinking, which translation sends as `reasoning_effort`. The
 * body's own `reasoning` stands over it: one that names an effort or turns reasoning off already says it;
 * one with a `max_tokens` budget instead has the effort left out (false); another gets the effort added.
 * True when the effort was carried (or the body's own `reasoning` already says it).
 */
function effortAsObject(body: Record<string, unknown>, list: readonly string[], out: Record<string, unknown>): boolean {
  const effort = body.reasoning_effort;
  const reasoning = body.reasoning as { effort?: unknown; enabled?: unknown; max_tokens?: unknown } | null | undefined;
  if (typeof effort !== 'string' || !list.includes('reasoning')) return false;
  if (reasoning == null) out.reasoning = { effort };
  else if (typeof reasoning !== 'object' || Array.isArray(reasoning)) return false;
  else if (reasoning.enabled === false || typeof reasoning.effort === 'string') return true;
  else if (reasoning.max_tokens != null) return false;
  else out.reasoning = { ...reasoning, effort };
  return true;
}
