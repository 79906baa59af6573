/**
 * Request translation between the chat-completions and messages styles (issue 4, part 1). Both functions
 * build a new body from the fields they know; everything else is dropped (listed below). Content parts
 * are mapped in content.ts.
 *
 * Decisions:
 * - System prompts: every chat `system`/`developer` message, wherever it stands, is folded into the
 *   top-level messages `system`, in order (messages has no system turn, and a later instruction is still
 *   an instruction). One plain text → a string, otherwise an array of text blocks (cache_control kept).
 *   messages → chat: one leading `system` message (a string; several blocks joined, see chatContent);
 *   cache_control is dropped (chat providers cache on their own).
 * - Turns: messages needs alternating roles, so consecutive chat messages of one role are merged; `tool`
 *   messages become `tool_result` blocks of a user turn. A trailing assistant message stays last
 *   (assistant prefill). Empty assistant messages are skipped.
 * - Reasoning, chat → messages: `reasoning.max_tokens` is the budget; else `reasoning_effort` (or
 *   `reasoning.effort`) maps by EFFORT_BUDGET: minimal/low 1024, medium 4096, high 16384, xhigh 32768,
 *   max 65536; `reasoning.enabled: true` alone = medium. Budgets are raised to messages' minimum of 1024.
 *   The budget must stay below max_tokens: with no client limit max_tokens becomes budget + default; with a
 *   client limit the budget shrinks to max_tokens - 1, and thinking is left off when that is below 1024.
 *   `effort: none` / `enabled: false` → thinking disabled; `reasoning.exclude` → `display: omitted`.
 *   With thinking on, `temperature` and `top_k` are dropped and `top_p` below 0.95 is dropped (messages
 *   rejects them together with thinking). Thinking is also left off when the request is inside a tool loop
 *   whose last assistant turn has no signed thinking block (messages would reject it; chat clients rarely
 *   keep signatures), when `tool_choice` forces a tool, and when the last turn is an assistant prefill
 *   (messages rejects thinking with either).
 * - Reasoning, messages → chat: disabled thinking → `reasoning: {enabled: false}` (over any effort), what a
 *   chat client says to turn reasoning off; the endpoint's `supported_parameters` decide how it goes on
 *   (`reasoning_effort: "none"` where only that is listed, nothing where neither is: routing/parameters.ts).
 *   Else `output_config.effort` → `reasoning_effort` as is; else thinking enabled → `reasoning_effort` by
 *   budget: ≤ 2048 low, ≤ 8192 medium, above high. Adaptive or between_tools thinking alone → nothing (provider
 *   default). `display` and `block_binding` have no chat form and are dropped.
 * - History reasoning: chat assistant `reasoning_details` (or LiteLLM's `thinking_blocks`) entries of Claude's
 *   format (`anthropic-claude-v1`, or none named) of type `reasoning.text` with a signature
 *   become thinking blocks (`reasoning.encrypted` → redacted_thinking); unsigned reasoning text is dropped.
 *   messages thinking/redacted_thinking blocks are dropped going to chat (chat has no input form).
 * - temperature: chat 0..2 → messages 0..1 by clamping values above 1 to 1 (no rescaling).
 * - max tokens: chat `max_completion_tokens`, else `max_tokens`, else options.defaultMaxTokens → `max_tokens`;
 *   messages `max_tokens` → `max_completion_tokens`.
 * - Structured output: `response_format` json_schema ⇄ `output_config.format` (name and strict dropped;
 *   back in chat name `output`, strict true because messages outputs always follow the schema).
 *   `json_object` has no official messages equivalent and is dropped.
 * - user: chat `user` ⇄ messages `metadata.user_id` (messages' own `user` field is used when metadata has none).
 * - `tool_result.is_error: true` has no chat form: the tool message's text says it, `Error: ` before it;
 *   images in tool results go to a user message right after the tool messages (chat tool messages carry text only).
 *
 * Refused chat → messages (400, or the next endpoint that speaks chat): `n` > 1, the deprecated `functions` /
 * `function_call` (its client reads `function_call` back, which a messages answer cannot give).
 * Dropped chat → messages: `n` (1), `seed`, `logprobs`, `top_logprobs`, `logit_bias`,
 * `frequency_penalty`, `presence_penalty`, `repetition_penalty`, `min_p`, `top_a`, `prediction`,
 * `modalities`, `audio`, `image_config`, `store`, `metadata`, `stream_options`, `verbosity`,
 * `web_search_options`, `prompt_cache_key`, `safety_identifier`, message `name`, image `detail`, `response_format` text/json_object, non-function tools.
 * Dropped messages → chat: `cache_control` (top level, blocks, tools), `context_management`, `container`,
 * `mcp_servers`, `clear_at`, `citations`, `thinking` blocks, server tools and their blocks
 * (server_tool_use, *_tool_result), `metadata` other than user_id.
 * `model` and `stream` pass unchanged in both directions; `service_tier` is named in the provider's values
 * (chat `auto`, `default`, `flex`, `scale`, `priority` ⇄ messages `auto`, `standard_only`: see tierForMessages).
 */
import { GatewayError } from '../../errors/gateway-error';
import { isObj, type Obj } from '../common';
import { blockToChatParts, chatContent, chatPartToBlock, chatTextBlocks, invalid } from './content';
import { claudeDetailsOf, isClaudeDetail } from './response';

/** Reasoning effort → thinking budget (messages → chat uses budgetToEffort). */
export const EFFORT_BUDGET: Readonly<Record<string, number>> = {
  minimal: 1024,
  low: 1024,
  medium: 4096,
  high: 16384,
  xhigh: 32768,
  max: 65536,
};
/** The Messages API's least thinking budget. */
export const MIN_BUDGET = 1024;

export function budgetToEffort(budget: number): 'low' | 'medium' | 'high' {
  return budget <= 2048 ? 'low' : budget <= 8192 ? 'medium' : 'high';
}

export const posInt = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v > 0;

// ───────────────────────────── chat → messages ─────────────────────────────

/** A chat-completions request body → a messages request body. */
export function chatToMessagesRequest(body: Record<string, unknown>, options: { defaultMaxTokens: number }): Record<string, unknown> {
  const b = body as Obj;
  if (typeof b.n === 'number' && b.n > 1) {
    throw new GatewayError('invalid_request', "`n` > 1 is not supported by this model's provider", { metadata: { field: 'n' } });
  }
  // The deprecated function calling has no messages form the answer could come back in (its client reads
  // `message.function_call`, not `tool_calls`): refused rather than dropped (a forced call answered with text).
  for (const field of ['functions', 'function_call'] as const) {
    if (b[field] !== undefined && b[field] !== null && !(Array.isArray(b[field]) && b[field].length === 0)) {
      throw new GatewayError('invalid_request', `\`${field}\` (deprecated function calling) cannot be sent to this model's provider: use \`tools\` and \`tool_choice\``, { metadata: { field } });
    }
  }
  const out: Obj = {};
  if (b.model !== undefined) out.model = b.model;
  const { system, messages } = chatMessagesToMessages(b.messages);
  if (system !== undefined) out.system = system;
  out.messages = messages;

  const clientMax = posInt(b.max_completion_tokens) ? b.max_completion_tokens : posInt(b.max_tokens) ? b.max_tokens : undefined;
  out.max_tokens = clientMax ?? options.defaultMaxTokens;
  if (typeof b.temperature === 'number') out.temperature = Math.min(b.temperature, 1);
  if (typeof b.top_p === 'number') out.top_p = b.top_p;
  if (typeof b.top_k === 'number') out.top_k = b.top_k;
  // The Messages API refuses a stop sequence that is only whitespace ("\n" is common in chat requests): left out.
  const stop = (typeof b.stop === 'string' ? [b.stop] : Array.isArray(b.stop) ? b.stop : []).filter((s: unknown) => typeof s === 'string' && s.trim() !== '');
  if (stop.length) out.stop_sequences = stop;
  if (b.stream !== undefined) out.stream = b.stream;
  if (typeof b.user === 'string') out.metadata = { user_id: b.user };
  const tier = tierForMessages(b.service_tier);
  if (tier !== undefined) out.service_tier = tier;
  if (isObj(b.cache_control)) out.cache_control = b.cache_control;

  Object.assign(out, chatToolsToMessages(b.tools, b.tool_choice, b.parallel_tool_calls));
  if (out.tools === undefined) Object.assign(out, historyTools(out.messages));

  const rf = b.response_format;
  if (isObj(rf) && rf.type === 'json_schema' && isObj(rf.json_schema) && isObj(rf.json_schema.schema)) {
    out.output_config = { format: { type: 'json_schema', schema: rf.json_schema.schema } };
  }

  applyThinking(out, b, clientMax !== undefined, options.defaultMaxTokens);
  return out;
}

function chatMessagesToMessages(list: unknown): { system: string | Obj[] | undefined; messages: Obj[] } {
  if (!Array.isArray(list)) throw invalid('`messages` must be an array', 'messages');
  const system: Obj[] = [];
  const out: Obj[] = [];
  const push = (role: 'user' | 'assistant', blocks: Obj[]) => {
    if (!blocks.length) return;
    const last = out[out.length - 1];
    if (last?.role === role) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  };
  list.forEach((m: unknown, i: number) => {
    const where = `messages[${i}]`;
    if (!isObj(m)) throw invalid(`${where} must be an object`, where);
    switch (m.role) {
      case 'system':
      case 'developer':
        system.push(...chatTextBlocks(m.content, where));
        break;
      case 'user':
        push('user', typeof m.content === 'string' ? chatTextBlocks(m.content, where) : userBlocks(m.content, where));
        break;
      case 'assistant':
        push('assistant', assistantBlocks(m, i));
        break;
      case 'tool': {
        // An empty result (a tool with no output) leaves `content` out, as the Messages API documents an empty
        // tool result; `content: ""` has been reported refused (zed-industries/zed#27130).
        const blocks = chatTextBlocks(m.content, where);
        const result: Obj = { type: 'tool_result', tool_use_id: toolUseIdOf(m.tool_call_id) };
        if (blocks.length) result.content = blocks.length === 1 && isPlainText(blocks[0]) ? blocks[0].text : blocks;
        push('user', [result]);
        break;
      }
      default:
        throw invalid(`${where}.role ${JSON.stringify(m.role)} cannot be sent to this model's provider`, `${where}.role`);
    }
  });
  if (!out.length) throw invalid("At least one user or assistant message is required by this model's provider", 'messages');
  // The Messages API wants a user turn's tool results before anything else in it: a user message followed by
  // tool messages (merged into one turn) had its text first, which it refuses.
  for (const m of out) {
    if (m.role !== 'user' || m.content.length < 2) continue;
    const results = m.content.filter((b: Obj) => b.type === 'tool_result');
    if (results.length > 0 && m.content[0].type !== 'tool_result') m.content = [...results, ...m.content.filter((b: Obj) => b.type !== 'tool_result')];
  }
  // A trailing assistant turn is a prefill, and the Messages API refuses one whose text ends in whitespace
  // (400 "final assistant content cannot end with trailing whitespace"): the model goes on from its last word.
  const last = out[out.length - 1];
  const tail = last.role === 'assistant' ? last.content[last.content.length - 1] : undefined;
  if (tail?.type === 'text') tail.text = tail.text.trimEnd();
  // A single plain text block reads better (and round-trips) as a string.
  for (const m of out) if (m.content.length === 1 && isPlainText(m.content[0])) m.content = m.content[0].text;
  const sys = system.length === 0 ? undefined : system.length === 1 && isPlainText(system[0]) ? system[0].text : system;
  return { system: sys, messages: out };
}

const isPlainText = (b: Obj) => b.type === 'text' && b.cache_control === undefined;

/**
 * A chat tool call id as a messages `tool_use` id: the Messages API takes `[a-zA-Z0-9_-]` only, and some chat
 * providers make ids of other characters (Kimi's `functions.get_weather:0`); each other character becomes `_`,
 * the same way for the call and its result, so they still pair.
 */
function toolUseIdOf(id: unknown): string {
  return String(id ?? '').replace(/[^a-zA-Z0-9_-]/g, '_');
}

function userBlocks(content: unknown, where: string): Obj[] {
  if (content == null) return [];
  if (!Array.isArray(content)) throw invalid(`${where}.content must be a string or an array of parts`, `${where}.content`);
  return content.map((p, j) => chatPartToBlock(p, `${where}.content[${j}]`)).filter((b) => b.type !== 'text' || b.text !== '');
}

function assistantBlocks(m: Obj, i: number): Obj[] {
  const where = `messages[${i}]`;
  const blocks: Obj[] = [];
  // Claude's signed reasoning only (`reasoning_details`, or LiteLLM's `thinking_blocks`): another model's
  // signature (Gemini's, OpenAI's encrypted reasoning) had been replayed as a thinking block, which the Messages
  // API refuses (it checks a signature it did not make), and LiteLLM's shape had been dropped.
  for (const d of claudeDetailsOf(m)) {
    if (!isClaudeDetail(d)) continue;
    if (d.type === 'reasoning.text' && typeof d.text === 'string' && typeof d.signature === 'string' && d.signature) {
      blocks.push({ type: 'thinking', thinking: d.text, signature: d.signature });
    } else if (d.type === 'reasoning.encrypted' && typeof d.data === 'string') {
      blocks.push({ type: 'redacted_thinking', data: d.data });
    }
  }
  // Assistant parts are text or refusal; a refusal part is not something to replay. Text that is only
  // whitespace is left out: the Messages API refuses it (400 "text content blocks must contain non-whitespace
  // text"), and models write it before a tool call ("\n\n", Claude's too), which chat clients send back.
  const parts = Array.isArray(m.content) ? m.content.filter((p: unknown) => !(isObj(p) && p.type === 'refusal')) : m.content;
  blocks.push(...chatTextBlocks(parts, where).filter((b) => b.text.trim() !== ''));
  if (Array.isArray(m.tool_calls)) {
    m.tool_calls.forEach((c: unknown, j: number) => {
      if (!isObj(c) || (c.type !== undefined && c.type !== 'function')) return; // custom tools: no messages form
      const fn = isObj(c.function) ? c.function : {};
      blocks.push({ type: 'tool_use', id: toolUseIdOf(c.id), name: String(fn.name ?? ''), input: parseArguments(fn.arguments, i, j) });
    });
  }
  return blocks;
}

function parseArguments(args: unknown, i: number, j: number): Obj {
  const field = `messages[${i}].tool_calls[${j}].function.arguments`;
  if (args === undefined || args === null || (typeof args === 'string' && args.trim() === '')) return {};
  if (isObj(args)) return args;
  let parsed: unknown;
  try {
    parsed = typeof args === 'string' ? JSON.parse(args) : undefined;
  } catch {
    throw invalid(`Message ${i}: ${field} is not valid JSON`, field);
  }
  if (!isObj(parsed)) throw invalid(`Message ${i}: ${field} must be a JSON object`, field);
  return parsed;
}

function chatToolsToMessages(tools: unknown, choice: unknown, parallel: unknown): Obj {
  let list: Obj[] = (Array.isArray(tools) ? tools : [])
    .filter((t: unknown) => isObj(t) && t.type === 'function' && isObj(t.function) && typeof t.function.name === 'string')
    .map((t: Obj) => {
      const f = t.function;
      const tool: Obj = { name: f.name };
      if (typeof f.description === 'string') tool.description = f.description;
      tool.input_schema = inputSchemaOf(f.parameters);
      if (typeof f.strict === 'boolean') tool.strict = f.strict;
      if (isObj(t.cache_control)) tool.cache_control = t.cache_control;
      return tool;
    });
  let tc: Obj | undefined;
  if (choice === 'none') tc = { type: 'none' };
  else if (choice === 'auto') tc = { type: 'auto' };
  else if (choice === 'required') tc = { type: 'any' };
  else if (isObj(choice) && choice.type === 'function' && isObj(choice.function)) tc = { type: 'tool', name: choice.function.name };
  else if (isObj(choice) && choice.type === 'allowed_tools' && isObj(choice.allowed_tools)) {
    const allowed = new Set(
      (Array.isArray(choice.allowed_tools.tools) ? choice.allowed_tools.tools : []).map((t: Obj) => t?.function?.name).filter(Boolean),
    );
    list = list.filter((t) => allowed.has(t.name));
    tc = { type: choice.allowed_tools.mode === 'required' ? 'any' : 'auto' };
  }
  if (!list.length) return {};
  if (parallel === false && tc?.type !== 'none') tc = { ...(tc ?? { type: 'auto' }), disable_parallel_tool_use: true };
  return tc ? { tools: list, tool_choice: tc } : { tools: list };
}

/**
 * `tools` for a request whose history calls tools but that offers none (a chat client that stopped offering
 * them, to have the model answer in text): the Messages API refuses `tool_use` and `tool_result` blocks in a
 * request without tools (400 "Requests which include `tool_use` or `tool_result` blocks must define tools").
 * Each tool the history calls is declared by its name with an open object schema, and `tool_choice: none`
 * keeps the model from calling any, as the client asked by offering none; the conversation is sent as it was.
 *
 * @example historyTools([{ role: 'assistant', content: [{ type: 'tool_use', id: 'c', name: 'f', input: {} }] }]) // { tools: [{ name: 'f', input_schema: { type: 'object' } }], tool_choice: { type: 'none' } }
 */
function historyTools(messages: Obj[]): Obj {
  const names = new Set<string>();
  for (const m of messages) {
    if (m.role !== 'assistant' || !Array.isArray(m.content)) continue;
    for (const b of m.content) if (b.type === 'tool_use' && typeof b.name === 'string' && b.name) names.add(b.name);
  }
  if (names.size === 0) return {};
  return { tools: [...names].map((name) => ({ name, input_schema: { type: 'object' } })), tool_choice: { type: 'none' } };
}

/**
 * A chat function's `parameters` as a messages `input_schema`. The Messages API requires its `type` (400
 * "tools.0.custom.input_schema.type: Field required"), which chat leaves optional: `parameters: {}` (a tool
 * without arguments, as many MCP bridges declare it) or a schema giving only `properties` is an object schema.
 */
function inputSchemaOf(parameters: unknown): Obj {
  if (!isObj(parameters)) return { type: 'object', properties: {} };
  return parameters.type === undefined ? { type: 'object', ...parameters } : parameters;
}

/**
 * The thinking budget a chat request's reasoning asks for: `reasoning.max_tokens`, else its effort
 * (`reasoning_effort` or `reasoning.effort`) by EFFORT_BUDGET, else medium for `reasoning.enabled: true`;
 * undefined when it asks for none or turns reasoning off. Not yet raised to messages' least budget (1024).
 *
 * @example chatThinkingBudget({ reasoning_effort: 'high' }) // 16384
 */
export function chatThinkingBudget(b: Record<string, unknown>): number | undefined {
  const r = isObj(b.reasoning) ? b.reasoning : {};
  const effort = b.reasoning_effort ?? r.effort;
  if (r.enabled === false || effort === 'none') return undefined;
  if (posInt(r.max_tokens)) return r.max_tokens;
  if (typeof effort === 'string') return EFFORT_BUDGET[effort];
  return r.enabled === true ? EFFORT_BUDGET.medium : undefined;
}

function applyThinking(out: Obj, b: Obj, clientSetMax: boolean, defaultMax: number): void {
  const r = isObj(b.reasoning) ? b.reasoning : {};
  const effort = b.reasoning_effort ?? r.effort;
  if (r.enabled === false || effort === 'none') {
    out.thinking = { type: 'disabled' };
    return;
  }
  let budget = chatThinkingBudget(b);
  if (budget === undefined) return;
  budget = Math.max(MIN_BUDGET, budget);
  if (!clientSetMax && budget >= out.max_tokens) out.max_tokens = budget + defaultMax;
  if (budget >= out.max_tokens) budget = out.max_tokens - 1;
  // The Messages API refuses thinking with a forced tool (`tool_choice` any or tool) and with a prefilled
  // assistant turn: the request goes without it rather than fail.
  if (budget < MIN_BUDGET || inUnsignedToolLoop(out.messages) || forcesTool(out.tool_choice) || out.messages[out.messages.length - 1]?.role === 'assistant') return;
  out.thinking = { type: 'enabled', budget_tokens: budget, ...(r.exclude === true ? { display: 'omitted' } : {}) };
  delete out.temperature;
  delete out.top_k;
  if (typeof out.top_p === 'number' && out.top_p < 0.95) delete out.top_p;
}

function forcesTool(choice: unknown): boolean {
  return isObj(choice) && (choice.type === 'any' || choice.type === 'tool');
}

/** The last turn answers tool calls of an assistant turn that has no thinking block. */
function inUnsignedToolLoop(messages: Obj[]): boolean {
  const last = messages[messages.length - 1];
  const prev = messages[messages.length - 2];
  if (last?.role !== 'user' || !Array.isArray(last.content) || !last.content.some((c: Obj) => c.type === 'tool_result')) return false;
  if (prev?.role !== 'assistant' || !Array.isArray(prev.content)) return false;
  return !prev.content.some((c: Obj) => c.type === 'thinking' || c.type === 'redacted_thinking');
}

/**
 * A chat request's service tier as the Messages API names it (`auto` | `standard_only`): chat `default`, `flex`
 * and `scale` ask for the standard tier only; `auto` and `priority` (the aliases `fast`/`ultrafast` are already
 * `priority`) let the provider use its priority capacity when the account has it. Anything else is dropped.
 */
function tierForMessages(tier: unknown): string | undefined {
  if (tier === 'auto' || tier === 'priority') return 'auto';
  if (tier === 'default' || tier === 'flex' || tier === 'scale') return 'standard_only';
  return undefined;
}

/** A messages request's service tier as chat names it: `auto` stays, `standard_only` is `default`; anything else is dropped. */
function tierForChat(tier: unknown): string | undefined {
  if (tier === 'auto') return 'auto';
  if (tier === 'standard_only') return 'default';
  return undefined;
}

// ───────────────────────────── messages → chat ─────────────────────────────

/** A messages request body → a chat-completions request body. */
export function messagesToChatRequest(body: Record<string, unknown>): Record<string, unknown> {
  const b = body as Obj;
  const out: Obj = {};
  if (b.model !== undefined) out.model = b.model;
  out.messages = [...systemToChat(b.system), ...messagesToChatMessages(b.messages)];
  if (posInt(b.max_tokens)) out.max_completion_tokens = b.max_tokens;
  if (typeof b.temperature === 'number') out.temperature = b.temperature;
  if (typeof b.top_p === 'number') out.top_p = b.top_p;
  if (typeof b.top_k === 'number') out.top_k = b.top_k;
  if (Array.isArray(b.stop_sequences) && b.stop_sequences.length) out.stop = b.stop_sequences;
  if (b.stream !== undefined) out.stream = b.stream;
  if (b.stream === true) out.stream_options = { include_usage: true };
  const user = isObj(b.metadata) && typeof b.metadata.user_id === 'string' ? b.metadata.user_id : b.user;
  if (typeof user === 'string') out.user = user;
  const tier = tierForChat(b.service_tier);
  if (tier !== undefined) out.service_tier = tier;

  Object.assign(out, messagesToolsToChat(b.tools, b.tool_choice));

  const oc = isObj(b.output_config) ? b.output_config : {};
  const t = isObj(b.thinking) ? b.thinking : {};
  // Disabled thinking is reasoning turned off, as chat says it: routing/parameters.ts sends it on as the
  // endpoint takes it (`reasoning_effort: "none"` where it lists only that). It wins over an effort beside it.
  if (t.type === 'disabled') out.reasoning = { enabled: false };
  else if (typeof oc.effort === 'string') out.reasoning_effort = oc.effort;
  else if (t.type === 'enabled' && typeof t.budget_tokens === 'number') out.reasoning_effort = budgetToEffort(t.budget_tokens);
  if (isObj(oc.format) && oc.format.type === 'json_schema' && isObj(oc.format.schema)) {
    out.response_format = { type: 'json_schema', json_schema: { name: 'output', schema: oc.format.schema, strict: true } };
  }
  return out;
}

function systemToChat(system: unknown): Obj[] {
  if (typeof system === 'string') return system ? [{ role: 'system', content: system }] : [];
  if (!Array.isArray(system)) return [];
  const parts = system
    .filter((s: unknown) => isObj(s) && s.type === 'text' && typeof s.text === 'string' && s.text)
    .map((s: Obj) => ({ type: 'text', text: s.text }));
  return parts.length ? [{ role: 'system', content: chatContent(parts) }] : [];
}

function messagesToChatMessages(list: unknown): Obj[] {
  if (!Array.isArray(list)) throw invalid('`messages` must be an array', 'messages');
  const out: Obj[] = [];
  list.forEach((m: unknown, i: number) => {
    const where = `messages[${i}]`;
    if (!isObj(m)) throw invalid(`${where} must be an object`, where);
    if (m.role === 'user') out.push(...userToChat(m.content, where));
    else if (m.role === 'assistant') {
      const a = assistantToChat(m.content, where);
      if (a) out.push(a);
    } else throw invalid(`${where}.role ${JSON.stringify(m.role)} must be user or assistant`, `${where}.role`);
  });
  return out;
}

/** A messages user turn → chat `tool` messages (first, as chat requires) then one user message. */
function userToChat(content: unknown, where: string): Obj[] {
  if (typeof content === 'string') return [{ role: 'user', content }];
  if (!Array.isArray(content)) throw invalid(`${where}.content must be a string or an array of blocks`, `${where}.content`);
  const tools: Obj[] = [];
  const parts: Obj[] = [];
  content.forEach((block: unknown, j: number) => {
    const w = `${where}.content[${j}]`;
    if (!(isObj(block) && block.type === 'tool_result')) {
      parts.push(...blockToChatParts(block, w));
      return;
    }
    const inner = block.content;
    const failed = block.is_error === true;
    if (inner === undefined || typeof inner === 'string') {
      tools.push({ role: 'tool', tool_call_id: block.tool_use_id, content: toolResultText(inner ?? '', failed) });
      return;
    }
    const converted = (Array.isArray(inner) ? inner : []).flatMap((b: unknown, k: number) => blockToChatParts(b, `${w}.content[${k}]`));
    const texts = converted.filter((p) => p.type === 'text');
    parts.push(...converted.filter((p) => p.type !== 'text')); // chat tool messages carry text only
    const joined = texts.length ? (chatContent(texts) as string) : ''; // text parts only: one string
    tools.push({ role: 'tool', tool_call_id: block.tool_use_id, content: toolResultText(joined, failed) });
  });
  return parts.length ? [...tools, { role: 'user', content: chatContent(parts) }] : tools;
}

/**
 * A tool result's text for a chat `tool` message. Chat has no error flag, so a failed call (`is_error: true`)
 * is said in its text, `Error: ` before it (`Error` alone when it has none): dropped, the model read a failed
 * call's output as a good one.
 *
 * @example toolResultText('not found', true) // 'Error: not found'
 */
function toolResultText(text: string, failed: boolean): string {
  if (!failed) return text;
  return text ? `Error: ${text}` : 'Error';
}

function assistantToChat(content: unknown, where: string): Obj | null {
  if (typeof content === 'string') return content ? { role: 'assistant', content } : null;
  if (!Array.isArray(content)) throw invalid(`${where}.content must be a string or an array of blocks`, `${where}.content`);
  const texts: Obj[] = [];
  const calls: Obj[] = [];
  for (const block of content) {
    if (!isObj(block)) continue;
    if (block.type === 'text' && typeof block.text === 'string' && block.text) texts.push({ type: 'text', text: block.text });
    else if (block.type === 'tool_use') {
      calls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) } });
    }
    // thinking, redacted_thinking, server_tool_use and server tool results have no chat input form.
  }
  if (!texts.length && !calls.length) return null;
  const msg: Obj = { role: 'assistant', content: texts.length ? chatContent(texts) : null };
  if (calls.length) msg.tool_calls = calls;
  return msg;
}

/**
 * A messages `input_schema` as chat function `parameters`. OpenAI refuses an object schema without
 * `properties` (400 "object schema missing properties"; `{type: "object"}` is how a tool without arguments is
 * often declared, valid for the Messages API) and a `required` that is not an array (spec 4.1 allows null).
 */
function parametersOf(schema: unknown): Obj {
  if (!isObj(schema)) return { type: 'object', properties: {} };
  if (schema.type !== 'object' || (isObj(schema.properties) && schema.required !== null)) return schema;
  const { required, ...rest } = schema;
  return { ...rest, properties: isObj(schema.properties) ? schema.properties : {}, ...(required != null ? { required } : {}) };
}

function messagesToolsToChat(tools: unknown, choice: unknown): Obj {
  const list = (Array.isArray(tools) ? tools : [])
    .filter((t: unknown) => isObj(t) && (t.type === undefined || t.type === null || t.type === 'custom') && typeof t.name === 'string')
    .map((t: Obj) => {
      const fn: Obj = { name: t.name };
      if (typeof t.description === 'string') fn.description = t.description;
      fn.parameters = parametersOf(t.input_schema);
      if (typeof t.strict === 'boolean') fn.strict = t.strict;
      return { type: 'function', function: fn };
    });
  if (!list.length) return {};
  const out: Obj = { tools: list };
  if (!isObj(choice)) return out;
  if (choice.type === 'none') out.tool_choice = 'none';
  else if (choice.type === 'auto') out.tool_choice = 'auto';
  else if (choice.type === 'any') out.tool_choice = 'required';
  else if (choice.type === 'tool' && typeof choice.name === 'string') out.tool_choice = { type: 'function', function: { name: choice.name } };
  if (choice.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  return out;
}
