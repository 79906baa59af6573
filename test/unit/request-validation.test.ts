import { describe, it, expect } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { checkSessionHeader, compileRequestValidators, dropNullFields, type RequestKind } from '../../src/validation/request-validators';

const validators = compileRequestValidators();

type Body = Record<string, unknown>;
/** [name, body overrides, expected field, fragment the message must contain] */
type FailingCase = [string, Body, string, string];

const minimalMessages: Body = { model: 'claude-x', messages: [{ role: 'user', content: 'hi' }] };
const minimalChat: Body = { model: 'gpt-x', messages: [{ role: 'user', content: 'hi' }] };

const richMessages: Body = {
  model: 'claude-x',
  messages: [
    { role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral', ttl: '1h' } }, { type: 'image', source: {} }] },
    { role: 'assistant', content: 'hello', clear_at: 3 },
  ],
  max_tokens: 1024,
  system: [{ type: 'text', text: 'be brief', cache_control: { type: 'ephemeral' } }],
  temperature: 0.7,
  top_p: 0.9,
  top_k: 40,
  stop_sequences: ['END'],
  stream: true,
  metadata: { user_id: null },
  user: 'u'.repeat(256),
  session_id: 's'.repeat(256),
  service_tier: 'auto',
  speed: 'fast',
  fallbacks: [{ model: 'a' }, { model: 'b' }, { model: 'c' }],
  cache_control: { type: 'ephemeral', ttl: '5m' },
  thinking: { type: 'enabled', budget_tokens: 2048, display: 'summarized' },
  tool_choice: { type: 'tool', name: 'lookup', disable_parallel_tool_use: true },
  tools: [
    { name: 'lookup', description: 'd', input_schema: { type: 'object', properties: {}, required: null }, strict: true },
    { type: 'custom', name: 'c', input_schema: {} },
    { type: 'bash_20250124', name: 'bash', cache_control: { type: 'ephemeral' } },
    { type: 'text_editor_20250124', name: 'str_replace_editor' },
    { type: 'web_search_20250305', name: 'web_search', allowed_domains: ['a.com'], blocked_domains: null, max_uses: 3 },
    { type: 'web_search_20260209', name: 'web_search', allowed_callers: ['direct'], max_uses: null },
    { type: 'advisor_20260301', name: 'advisor', model: 'big', max_uses: 2, caching: {} },
    { type: 'datetime', anything: true },
  ],
  context_management: {
    edits: [
      {
        type: 'clear_tool_uses_20250919',
        clear_at_least: { type: 'input_tokens', value: 1000 },
        clear_tool_inputs: ['bash'],
        exclude_tools: null,
        keep: { type: 'tool_uses', value: 3 },
        trigger: { type: 'tool_uses', value: 10 },
      },
      { type: 'clear_thinking_20251015', keep: 'all' },
      { type: 'clear_thinking_20251015', keep: { type: 'thinking_turns', value: 2 } },
      { type: 'compact_20260112', instructions: null, pause_after_compaction: false, trigger: null },
    ],
  },
  deferred_tools: { protocol: 'v1', profile: 'portable', validation: 'runtime', search: { type: 'bm25', max_results: 5 } },
  plugins: [{ id: 'auto-router', enabled: true, allowed_models: ['a'] }, { id: 'web-fetch', urls: ['https://example.com/'] }, { id: 'context-compression', engine: 'middle-out' }, { id: 'file-parser', pdf: { engine: 'pdf-text' } }],
  stop_server_tools_when: [{ type: 'step_count_is', step_count: 5 }, { type: 'max_cost', max_cost_in_dollars: 0.5 }],
  provider: { allow_fallbacks: false },
  route: 'fallback',
  output_config: { effort: 'high', format: { type: 'json_schema', schema: {} } },
  safeguards: { pii: true },
  trace: { trace_id: 't', trace_name: 'n', span_name: 's', generation_name: 'g', parent_span_id: 'p', custom: 1 },
  some_future_field: { anything: [1, 2] },
};

const richChat: Body = {
  models: ['gpt-x', 'gpt-y'],
  messages: [
    { role: 'system', content: 'be brief' },
    { role: 'developer', content: null },
    { role: 'user', content: [{ type: 'text', text: 'hi' }, { type: 'image_url', image_url: { url: 'x' } }], name: 'ann' },
    { role: 'assistant', tool_calls: [{ id: '1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', content: '42', tool_call_id: '1' },
    { role: 'function', content: '42', name: 'f' },
  ],
  max_tokens: 16,
  max_completion_tokens: 1,
  temperature: 2,
  top_p: 0,
  top_k: 5,
  stop: ['a', 'b', 'c', 'd'],
  seed: -3,
  stream: true,
  stream_options: { include_usage: true },
  tools: [
    { type: 'function', function: { name: 'f', description: 'd', parameters: { type: 'object' }, strict: true } },
    { type: 'gateway_web_search', max_results: 3 },
  ],
  tool_choice: { type: 'function', function: { name: 'f' } },
  plugins: [{ id: 'moderation' }],
  provider: { allow_fallbacks: true, order: ['x'] },
  reasoning: { effort: 'high', summary: 'auto', max_tokens: 100, exclude: false, enabled: true },
  reasoning_effort: 'high',
  route: null,
  service_tier: 'ultrafast',
  session_id: 's'.repeat(256),
  user: 'u',
  metadata: Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`.padEnd(64, 'x'), 'v'.repeat(512)])),
  cache_control: { type: 'ephemeral' },
  debug: { echo_upstream_body: true },
  deferred_tools: { protocol: 'v1', profile: 'portable', validation: 'runtime', search: { type: 'regex' } },
  stop_server_tools_when: [{ type: 'step_count_is', step_count: 3 }, { type: 'not_shown_yet' }],
  trace: { trace_id: 't', extra: { nested: true } },
  parallel_tool_calls: false,
  prediction: { type: 'content', content: 'draft' },
  response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' }, strict: true } },
  modalities: ['text', 'image', 'audio'],
  image_config: { aspect_ratio: '16:9' },
  logit_bias: { '50256': -100 },
  logprobs: true,
  top_logprobs: 20,
  frequency_penalty: -2,
  presence_penalty: 2,
  repetition_penalty: 2,
  min_p: 1,
  top_a: 0,
  transforms: ['middle-out'],
};

/** Chat parameters OpenAI types as nullable (null = not given), plus the gateway's own nullable fields. */
const chatNulls: Body = {
  max_tokens: null,
  max_completion_tokens: null,
  temperature: null,
  top_p: null,
  stop: null,
  seed: null,
  n: null,
  stream: null,
  stream_options: null,
  metadata: null,
  prediction: null,
  modalities: null,
  logit_bias: null,
  logprobs: null,
  top_logprobs: null,
  frequency_penalty: null,
  presence_penalty: null,
  reasoning_effort: null,
  service_tier: null,
  route: null,
};

/** The messages fields spec 4.1 types as `|null` (and the deprecated `route`). */
const messagesNulls: Body = { fallbacks: null, context_management: null, speed: null, route: null };

function expectProblem(kind: RequestKind, body: unknown, field: string, fragment: string): void {
  const problem = validators[kind](body);
  expect(problem, JSON.stringify(body).slice(0, 300)).not.toBeNull();
  expect(problem?.field).toBe(field);
  expect(problem?.message).toContain(fragment);
  expect(problem?.message).not.toMatch(/must match (exactly one|a) schema/);
}

describe('valid request bodies pass', () => {
  it.each<[RequestKind, string, Body]>([
    ['messages', 'minimal', minimalMessages],
    ['messages', 'rich', richMessages],
    ['messages', 'models with fallbacks: null', { ...minimalMessages, models: ['a'], fallbacks: null }],
    ['messages', 'thinking disabled', { ...minimalMessages, thinking: { type: 'disabled' } }],
    ['messages', 'thinking adaptive', { ...minimalMessages, thinking: { type: 'adaptive', block_binding: 'x' } }],
    ['messages', 'thinking between_tools', { ...minimalMessages, thinking: { type: 'between_tools' } }],
    ['messages', 'string system, null context_management', { ...minimalMessages, system: 's', context_management: null }],
    ['chat_completions', 'minimal', minimalChat],
    ['chat_completions', 'rich', richChat],
    ['chat_completions', 'string stop and tool_choice', { ...minimalChat, stop: 'END', tool_choice: 'required' }],
    ['chat_completions', 'tool_choice allowed_tools', { ...minimalChat, tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [{ type: 'function', function: { name: 'f' } }] } } }],
    ['chat_completions', 'tool_choice custom', { ...minimalChat, tool_choice: { type: 'custom', custom: { name: 'g' } } }],
    ['chat_completions', 'null effort shorthand beside reasoning.effort', { ...minimalChat, reasoning_effort: null, reasoning: { effort: 'low' } }],
    ['chat_completions', 'grammar response_format', { ...minimalChat, response_format: { type: 'grammar', grammar: 'root ::= "a"' } }],
    ['chat_completions', 'null for every nullable OpenAI parameter', { ...minimalChat, ...chatNulls }],
    ['chat_completions', 'an empty model beside models that name one', { ...minimalChat, model: '', models: ['gpt-y'] }],
    ['messages', 'null for the spec 4.1 nullable fields', { ...minimalMessages, ...messagesNulls }],
    ['messages', 'an empty model with a fallback to route to', { ...minimalMessages, model: '', fallbacks: [{ model: 'a' }] }],
  ])('%s: %s', (kind, _name, body) => {
    expect(validators[kind](body)).toBeNull();
  });
});

describe('the body must be a JSON object', () => {
  it.each<[RequestKind, unknown]>([
    ['messages', []],
    ['messages', 'text'],
    ['chat_completions', null],
    ['chat_completions', 42],
  ])('%s rejects %j', (kind, body) => {
    expectProblem(kind, body, 'body', 'must be a JSON object');
  });
});

const long = (n: number): string => 'x'.repeat(n);
const fourFallbacks = [{ model: 'a' }, { model: 'b' }, { model: 'c' }, { model: 'd' }];

describe('messages-style body (spec 4.1, 8.1)', () => {
  const cases: FailingCase[] = [
    ['model required', { model: undefined }, 'model', '`model` is required'],
    ['model string', { model: 7 }, 'model', '`model` must be a string'],
    ['model not empty', { model: '' }, 'model', '`model` must name a model'],
    ['model not empty with empty models', { model: '', models: [''] }, 'model', '`model` must name a model'],
    ['messages required', { messages: undefined }, 'messages', '`messages` is required'],
    ['messages array', { messages: 'hi' }, 'messages', '`messages` must be an array'],
    ['messages min 1', { messages: [] }, 'messages', '`messages` must contain at least 1 item'],
    ['message role required', { messages: [{ content: 'x' }] }, 'messages[0].role', '`messages[0].role` is required'],
    ['message role string', { messages: [{ role: 1, content: 'x' }] }, 'messages[0].role', 'must be one of'],
    ['message role user or assistant', { messages: [{ role: 'system', content: 'x' }] }, 'messages[0].role', 'must be one of `user`, `assistant`'],
    ['message content required', { messages: [{ role: 'user' }] }, 'messages[0].content', 'is required'],
    ['message content type', { messages: [{ role: 'user', content: 5 }] }, 'messages[0].content', '`messages[0].content` must be a string or an array'],
    ['content block object', { messages: [{ role: 'user', content: ['x'] }] }, 'messages[0].content[0]', 'must be an object'],
    ['content block type', { messages: [{ role: 'user', content: [{ type: 'text' }, { text: 'x' }] }] }, 'messages[0].content[1].type', '`messages[0].content[1].type` is required'],
    ['content block cache_control', { messages: [{ role: 'user', content: [{ type: 'text', cache_control: { type: 'forever' } }] }] }, 'messages[0].content[0].cache_control.type', 'must be `ephemeral`'],
    ['max_tokens integer', { max_tokens: 1.5 }, 'max_tokens', '`max_tokens` must be an integer'],
    ['max_tokens >= 1', { max_tokens: 0 }, 'max_tokens', '`max_tokens` must be >= 1'],
    ['max_tokens not negative', { max_tokens: -1 }, 'max_tokens', '`max_tokens` must be >= 1'],
    ['max_tokens not null', { max_tokens: null }, 'max_tokens', '`max_tokens` must be an integer'],
    ['temperature not null', { temperature: null }, 'temperature', '`temperature` must be a number'],
    ['system type', { system: 3 }, 'system', '`system` must be a string or an array'],
    ['system block type', { system: [{ type: 'image', text: 'x' }] }, 'system[0].type', '`system[0].type` must be `text`'],
    ['system block text', { system: [{ type: 'text' }] }, 'system[0].text', '`system[0].text` is required'],
    ['temperature number', { temperature: 'hot' }, 'temperature', '`temperature` must be a number'],
    // The Messages API's ranges (chat's temperature goes to 2; a translated one is clamped).
    ['temperature <= 1', { temperature: 2 }, 'temperature', '`temperature` must be <= 1'],
    ['temperature >= 0', { temperature: -0.5 }, 'temperature', '`temperature` must be >= 0'],
    ['top_p <= 1', { top_p: 1.5 }, 'top_p', '`top_p` must be <= 1'],
    ['top_p number', { top_p: '1' }, 'top_p', '`top_p` must be a number'],
    ['top_k integer', { top_k: 2.5 }, 'top_k', '`top_k` must be an integer'],
    ['stop_sequences strings', { stop_sequences: ['a', 1] }, 'stop_sequences[1]', '`stop_sequences[1]` must be a string'],
    ['stream boolean', { stream: 'yes' }, 'stream', '`stream` must be a boolean'],
    ['metadata object', { metadata: 'x' }, 'metadata', '`metadata` must be an object'],
    ['metadata.user_id', { metadata: { user_id: 5 } }, 'metadata.user_id', '`metadata.user_id` must be a string or null'],
    ['user max 256', { user: long(257) }, 'user', '`user` must NOT be longer than 256 characters'],
    ['session_id max 256', { session_id: long(257) }, 'session_id', '`session_id` must NOT be longer than 256 characters'],
    ['service_tier string', { service_tier: 1 }, 'service_tier', '`service_tier` must be a string'],
    ['speed values', { speed: 'slow' }, 'speed', '`speed` must be one of `fast`, `standard`, null'],
    ['models strings', { models: ['a', 2] }, 'models[1]', '`models[1]` must be a string'],
    ['fallbacks max 3', { fallbacks: fourFallbacks }, 'fallbacks', '`fallbacks` must NOT have more than 3 items'],
    ['fallbacks only model', { fallbacks: [{ model: 'a' }, { model: 'b', max_tokens: 5 }] }, 'fallbacks[1].max_tokens', '`fallbacks[1]` accepts only `model` (got `max_tokens`)'],
    ['fallback model required', { fallbacks: [{}] }, 'fallbacks[0].model', '`fallbacks[0].model` is required'],
    ['fallback entry object', { fallbacks: ['a'] }, 'fallbacks[0]', '`fallbacks[0]` must be an object'],
    ['fallbacks type', { fallbacks: 'a' }, 'fallbacks', '`fallbacks` must be an array or null'],
    ['models with fallbacks', { models: ['a'], fallbacks: [{ model: 'b' }] }, 'fallbacks', '`models` and `fallbacks` cannot be used together'],
    ['cache_control type', { cache_control: { type: 'persistent' } }, 'cache_control.type', '`cache_control.type` must be `ephemeral`'],
    ['cache_control ttl', { cache_control: { type: 'ephemeral', ttl: 300 } }, 'cache_control.ttl', 'must be a string'],
    ['thinking type required', { thinking: {} }, 'thinking.type', '`thinking.type` is required'],
    ['thinking type values', { thinking: { type: 'sometimes' } }, 'thinking.type', '`thinking.type` must be one of `enabled`, `disabled`, `adaptive`, `between_tools`'],
    ['thinking budget required', { thinking: { type: 'enabled' } }, 'thinking.budget_tokens', '`thinking.budget_tokens` is required when thinking.type is enabled'],
    ['thinking budget integer', { thinking: { type: 'enabled', budget_tokens: '1k' } }, 'thinking.budget_tokens', 'must be an integer'],
    ['thinking enabled extras', { thinking: { type: 'enabled', budget_tokens: 1, effort: 'x' } }, 'thinking.effort', '`thinking` accepts only `type`, `budget_tokens`, `block_binding`, `display` (got `effort`)'],
    ['thinking disabled extras', { thinking: { type: 'disabled', budget_tokens: 5 } }, 'thinking.budget_tokens', '`thinking` accepts only `type` (got `budget_tokens`)'],
    ['thinking adaptive extras', { thinking: { type: 'adaptive', budget_tokens: 5 } }, 'thinking.budget_tokens', '`thinking` accepts only `type`, `block_binding`, `display` (got `budget_tokens`)'],
    ['thinking between_tools extras', { thinking: { type: 'between_tools', display: 'x' } }, 'thinking.display', '`thinking` accepts only `type` (got `display`)'],
    ['tool_choice type values', { tool_choice: { type: 'whatever' } }, 'tool_choice.type', 'must be one of `auto`, `any`, `none`, `tool`'],
    ['tool_choice tool name', { tool_choice: { type: 'tool' } }, 'tool_choice.name', '`tool_choice.name` is required when tool_choice.type is tool'],
    ['tool_choice disable_parallel_tool_use', { tool_choice: { type: 'auto', disable_parallel_tool_use: 'yes' } }, 'tool_choice.disable_parallel_tool_use', 'must be a boolean'],
    ['tools array', { tools: {} }, 'tools', '`tools` must be an array'],
    ['tool object', { tools: ['bash'] }, 'tools[0]', '`tools[0]` must be an object'],
    ['tool type string', { tools: [{ type: 5 }] }, 'tools[0].type', '`tools[0].type` must be a string'],
    ['untyped tool needs name', { tools: [{ input_schema: {} }] }, 'tools[0].name', '`tools[0].name` is required'],
    ['custom tool input_schema', { tools: [{ name: 'f' }] }, 'tools[0].input_schema', '`tools[0].input_schema` is required'],
    ['custom tool input_schema.type', { tools: [{ type: 'custom', name: 'f', input_schema: { type: 'array' } }] }, 'tools[0].input_schema.type', 'must be `object`'],
    ['custom tool strict', { tools: [{ name: 'f', input_schema: {}, strict: 'yes' }] }, 'tools[0].strict', 'must be a boolean'],
    ['bash tool name', { tools: [{ type: 'bash_20250124', name: 'shell' }] }, 'tools[0].name', '`tools[0].name` must be `bash`'],
    ['text editor tool name', { tools: [{ type: 'text_editor_20250124', name: 'editor' }] }, 'tools[0].name', 'must be `str_replace_editor`'],
    ['web search max_uses', { tools: [{ type: 'web_search_20260209', name: 'web_search', max_uses: '3' }] }, 'tools[0].max_uses', 'must be an integer or null'],
    ['web search domains', { tools: [{ type: 'web_search_20250305', name: 'web_search', allowed_domains: [1] }] }, 'tools[0].allowed_domains[0]', 'must be a string'],
    ['advisor model required', { tools: [{ type: 'advisor_20260301', name: 'advisor' }] }, 'tools[0].model', '`tools[0].model` is required when tools[0].type is advisor_20260301'],
    ['tool cache_control', { tools: [{ type: 'datetime', cache_control: {} }] }, 'tools[0].cache_control.type', 'is required'],
    ['context_management type', { context_management: 'auto' }, 'context_management', 'must be an object or null'],
    ['edit types', { context_management: { edits: [{ type: 'clear_all' }] } }, 'context_management.edits[0].type', 'must be one of `clear_tool_uses_20250919`, `clear_thinking_20251015`, `compact_20260112`'],
    ['clear_tool_uses keep', { context_management: { edits: [{ type: 'clear_tool_uses_20250919', keep: { type: 'turns', value: 1 } }] } }, 'context_management.edits[0].keep.type', 'must be `tool_uses`'],
    ['clear_tool_uses trigger value', { context_management: { edits: [{ type: 'clear_tool_uses_20250919', trigger: { type: 'tool_uses' } }] } }, 'context_management.edits[0].trigger.value', 'is required'],
    ['clear_tool_uses clear_tool_inputs', { context_management: { edits: [{ type: 'clear_tool_uses_20250919', clear_tool_inputs: 3 }] } }, 'context_management.edits[0].clear_tool_inputs', 'must be a boolean, an array or null'],
    ['clear_thinking keep string', { context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'some' }] } }, 'context_management.edits[0].keep', 'must be `all`'],
    ['clear_thinking keep turns', { context_management: { edits: [{ type: 'clear_thinking_20251015', keep: { type: 'thinking_turns' } }] } }, 'context_management.edits[0].keep.value', 'is required when context_management.edits[0].keep.type is thinking_turns'],
    ['compact trigger', { context_management: { edits: [{ type: 'compact_20260112', trigger: { type: 'input_tokens', value: 'many' } }] } }, 'context_management.edits[0].trigger.value', 'must be an integer'],
    ['deferred_tools search required', { deferred_tools: { protocol: 'v1', profile: 'portable', validation: 'runtime' } }, 'deferred_tools.search', '`deferred_tools.search` is required'],
    ['deferred_tools protocol', { deferred_tools: { protocol: 'v2', profile: 'portable', validation: 'runtime', search: {} } }, 'deferred_tools.protocol', 'must be `v1`'],
    ['plugin id values', { plugins: [{ id: 'auto-router' }, { id: 'telepathy' }] }, 'plugins[1].id', '`plugins[1].id` must be one of `alignment`'],
    ['plugin id required', { plugins: [{ enabled: true }] }, 'plugins[0].id', 'is required'],
    ['auto-router enabled', { plugins: [{ id: 'auto-router', enabled: 'yes' }] }, 'plugins[0].enabled', 'must be a boolean'],
    ['plugin options are each plugin\'s own', { plugins: [{ id: 'auto-router' }, { id: 'web', engine: 'exa' }] }, 'plugins[1].engine', '`plugins[1]` accepts only `id`, `enabled`, `max_results`, `search_prompt` (got `engine`)'],
    ['file-parser pdf engine', { plugins: [{ id: 'file-parser', pdf: { engine: 'mistral-ocr' } }] }, 'plugins[0].pdf.engine', 'must be `pdf-text`'],
    ['stop_server_tools_when min 1', { stop_server_tools_when: [] }, 'stop_server_tools_when', '`stop_server_tools_when` must contain at least 1 item'],
    ['stop condition step_count', { stop_server_tools_when: [{ type: 'step_count_is' }] }, 'stop_server_tools_when[0].step_count', 'is required when stop_server_tools_when[0].type is step_count_is'],
    ['provider object', { provider: 'openai' }, 'provider', '`provider` must be an object'],
    ['provider.allow_fallbacks', { provider: { allow_fallbacks: 'no' } }, 'provider.allow_fallbacks', '`provider.allow_fallbacks` must be a boolean'],
    ['route values', { route: 'random' }, 'route', '`route` must be one of `fallback`, `sort`'],
    ['output_config object', { output_config: 3 }, 'output_config', '`output_config` must be an object'],
    ['safeguards type', { safeguards: 'on' }, 'safeguards', '`safeguards` must be an object or an array'],
    ['trace object', { trace: 'abc' }, 'trace', '`trace` must be an object'],
    ['trace known keys', { trace: { parent_span_id: 12 } }, 'trace.parent_span_id', '`trace.parent_span_id` must be a string'],
  ];
  it.each(cases)('%s', (_name, overrides, field, fragment) => {
    expectProblem('messages', { ...minimalMessages, ...overrides }, field, fragment);
  });
});

describe('chat-completions body (spec 4.2, 8.1)', () => {
  const cases: FailingCase[] = [
    ['messages required', { messages: undefined }, 'messages', '`messages` is required'],
    ['messages min 1', { messages: [] }, 'messages', '`messages` must contain at least 1 item'],
    ['message object', { messages: ['hi'] }, 'messages[0]', 'must be an object'],
    ['message role required', { messages: [{ content: 'x' }] }, 'messages[0].role', 'is required'],
    ['message role values', { messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role', '`messages[0].role` must be one of `system`, `developer`, `user`, `assistant`, `tool`, `function`'],
    ['message content type', { messages: [{ role: 'user', content: 5 }] }, 'messages[0].content', '`messages[0].content` must be a string, an array or null'],
    ['message content required', { messages: [{ role: 'user' }] }, 'messages[0].content', '`messages[0].content` is required'],
    ['content part type', { messages: [{ role: 'user', content: [{ text: 'x' }] }] }, 'messages[0].content[0].type', 'is required'],
    ['text part text', { messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 'messages[0].content[0].text', 'is required'],
    ['text part text string', { messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] }, 'messages[0].content[0].text', 'must be a string'],
    ['message name', { messages: [{ role: 'user', content: 'x', name: 5 }] }, 'messages[0].name', 'must be a string'],
    // OpenAI refuses a tool message without the id of the call it answers; it went to a messages provider as `tool_use_id: ""`.
    ['tool message tool_call_id required', { messages: [{ role: 'tool', content: 'r' }] }, 'messages[0].tool_call_id', 'is required'],
    ['tool message tool_call_id not empty', { messages: [{ role: 'tool', content: 'r', tool_call_id: '' }] }, 'messages[0].tool_call_id', 'must NOT be shorter than 1 characters'],
    ['model or models', { model: undefined }, 'model', '`model` or `models` is required'],
    ['model string', { model: ['a'] }, 'model', '`model` must be a string'],
    ['model not null', { model: null }, 'model', '`model` must be a string'],
    ['messages not null', { messages: null }, 'messages', '`messages` must be an array'],
    ['models strings', { model: undefined, models: [1] }, 'models[0]', 'must be a string'],
    ['model not empty', { model: '' }, 'model', '`model` must name a model'],
    ['model not empty, models empty', { model: '', models: [] }, 'model', '`model` must name a model'],
    ['models not empty', { model: undefined, models: [] }, 'models', '`models` must name at least one model'],
    ['models of empty names', { model: undefined, models: [''] }, 'models', '`models` must name at least one model'],
    ['n >= 1', { n: 0 }, 'n', '`n` must be >= 1'],
    ['max_tokens >= 1', { max_tokens: 0 }, 'max_tokens', '`max_tokens` must be >= 1'],
    ['max_completion_tokens integer', { max_completion_tokens: 1.5 }, 'max_completion_tokens', 'must be an integer'],
    ['temperature <= 2', { temperature: 2.5 }, 'temperature', '`temperature` must be <= 2'],
    ['temperature >= 0', { temperature: -0.1 }, 'temperature', '`temperature` must be >= 0'],
    ['top_p <= 1', { top_p: 1.5 }, 'top_p', '`top_p` must be <= 1'],
    ['top_k integer', { top_k: 'x' }, 'top_k', 'must be an integer'],
    ['stop max 4', { stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop', '`stop` must NOT have more than 4 items'],
    ['stop type', { stop: 5 }, 'stop', '`stop` must be a string, an array or null'],
    ['stop strings', { stop: ['a', 1] }, 'stop[1]', 'must be a string'],
    ['seed integer', { seed: 1.5 }, 'seed', '`seed` must be an integer'],
    ['stream boolean', { stream: 1 }, 'stream', 'must be a boolean'],
    ['stream_options object', { stream_options: true }, 'stream_options', 'must be an object'],
    ['stream_options.include_usage', { stream_options: { include_usage: 'yes' } }, 'stream_options.include_usage', 'must be a boolean'],
    ['tool type required', { tools: [{ function: { name: 'f' } }] }, 'tools[0].type', '`tools[0].type` is required'],
    ['function tool needs function', { tools: [{ type: 'function' }] }, 'tools[0].function', '`tools[0].function` is required when tools[0].type is function'],
    ['function tool name', { tools: [{ type: 'function', function: { description: 'x' } }] }, 'tools[0].function.name', '`tools[0].function.name` is required'],
    ['function tool parameters', { tools: [{ type: 'function', function: { name: 'f', parameters: '{}' } }] }, 'tools[0].function.parameters', 'must be an object'],
    ['tool_choice string values', { tool_choice: 'sometimes' }, 'tool_choice', '`tool_choice` must be one of `none`, `auto`, `required`'],
    ['tool_choice type', { tool_choice: 5 }, 'tool_choice', '`tool_choice` must be a string or an object'],
    ['tool_choice object function', { tool_choice: { type: 'function' } }, 'tool_choice.function', 'is required'],
    ['tool_choice object name', { tool_choice: { type: 'function', function: {} } }, 'tool_choice.function.name', 'is required'],
    ['tool_choice object type', { tool_choice: { type: 'tool', function: { name: 'f' } } }, 'tool_choice.type', 'must be one of `function`, `custom`, `allowed_tools`'],
    ['tool_choice custom name', { tool_choice: { type: 'custom', custom: {} } }, 'tool_choice.custom.name', 'is required'],
    ['tool_choice allowed_tools mode', { tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'maybe', tools: [] } } }, 'tool_choice.allowed_tools.mode', 'must be one of `auto`, `required`'],
    ['plugin id values', { plugins: [{ id: 'nope' }] }, 'plugins[0].id', '`plugins[0].id` must be one of'],
    ['plugin options', { plugins: [{ id: 'pareto-router', min_quality: 0.5, max_price: 1 }] }, 'plugins[0].max_price', '`plugins[0]` accepts only `id`, `enabled`, `min_quality`, `allowed_models`, `excluded_models` (got `max_price`)'],
    ['provider object', { provider: [] }, 'provider', 'must be an object'],
    ['provider.allow_fallbacks', { provider: { allow_fallbacks: 'no' } }, 'provider.allow_fallbacks', 'must be a boolean'],
    // Routing reads these; a wrong type was a 500 (`s.toLowerCase is not a function`).
    ['provider.only a list', { provider: { only: 'fakeo' } }, 'provider.only', 'must be an array'],
    ['provider.ignore strings', { provider: { ignore: [null] } }, 'provider.ignore[0]', 'must be a string'],
    ['provider.order strings', { provider: { order: [5] } }, 'provider.order[0]', 'must be a string'],
    ['provider.only of objects', { provider: { only: [{}] } }, 'provider.only[0]', 'must be a string'],
    ['provider.sort values', { provider: { sort: 5 } }, 'provider.sort', 'provider.sort'],
    ['provider.sort.by', { provider: { sort: { by: 'x' } } }, 'provider.sort.by', 'must be one of'],
    ['provider.max_price numbers', { provider: { max_price: { prompt: 'x' } } }, 'provider.max_price.prompt', 'must be a number'],
    ['provider.require_parameters', { provider: { require_parameters: 'yes' } }, 'provider.require_parameters', 'must be a boolean'],
    ['provider.data_collection', { provider: { data_collection: 'maybe' } }, 'provider.data_collection', 'must be one of'],
    ['reasoning object', { reasoning: 'high' }, 'reasoning', '`reasoning` must be an object'],
    ['reasoning.effort values', { reasoning: { effort: 'huge' } }, 'reasoning.effort', 'must be one of `max`, `xhigh`, `high`, `medium`, `low`, `minimal`, `none`, null'],
    ['reasoning.exclude', { reasoning: { exclude: 1 } }, 'reasoning.exclude', 'must be a boolean'],
    ['reasoning_effort values', { reasoning_effort: 'huge' }, 'reasoning_effort', '`reasoning_effort` must be one of `max`'],
    ['reasoning_effort conflict', { reasoning_effort: 'high', reasoning: { effort: 'low' } }, 'reasoning_effort', '`reasoning_effort` conflicts with `reasoning.effort`'],
    ['route values', { route: 'fastest' }, 'route', '`route` must be one of `fallback`, `sort`, null'],
    ['service_tier values', { service_tier: 'gold' }, 'service_tier', '`service_tier` must be one of `auto`, `default`, `fast`, `flex`, `priority`, `scale`, `ultrafast`, null'],
    ['session_id max 256', { session_id: long(257) }, 'session_id', '`session_id` must NOT be longer than 256 characters'],
    ['user max 256', { user: long(257) }, 'user', '`user` must NOT be longer than 256 characters'],
    ['metadata max 16 pairs', { metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata', '`metadata` must NOT have more than 16 properties'],
    ['metadata key max 64', { metadata: { [long(65)]: 'v' } }, 'metadata', `\`metadata\` key \`${long(65)}\` must NOT be longer than 64 characters`],
    ['metadata value max 512', { metadata: { note: long(513) } }, 'metadata.note', '`metadata.note` must NOT be longer than 512 characters'],
    ['metadata value string', { metadata: { 'trace-id': 5 } }, 'metadata["trace-id"]', '`metadata["trace-id"]` must be a string'],
    ['cache_control type', { cache_control: { type: 'persistent' } }, 'cache_control.type', 'must be `ephemeral`'],
    ['debug.echo_upstream_body', { debug: { echo_upstream_body: 'yes' } }, 'debug.echo_upstream_body', 'must be a boolean'],
    ['deferred_tools profile', { deferred_tools: { protocol: 'v1', profile: 'strict', validation: 'runtime', search: {} } }, 'deferred_tools.profile', 'must be `portable`'],
    ['deferred_tools validation', { deferred_tools: { protocol: 'v1', profile: 'portable', validation: 'static', search: {} } }, 'deferred_tools.validation', 'must be `runtime`'],
    ['stop_server_tools_when min 1', { stop_server_tools_when: [] }, 'stop_server_tools_when', 'must contain at least 1 item'],
    ['stop condition type', { stop_server_tools_when: [{ step_count: 1 }] }, 'stop_server_tools_when[0].type', 'is required'],
    ['stop condition max_cost', { stop_server_tools_when: [{ type: 'max_cost', max_cost_in_dollars: '1' }] }, 'stop_server_tools_when[0].max_cost_in_dollars', 'must be a number'],
    ['trace known keys', { trace: { span_name: 5 } }, 'trace.span_name', '`trace.span_name` must be a string'],
    ['parallel_tool_calls boolean', { parallel_tool_calls: 'true' }, 'parallel_tool_calls', 'must be a boolean'],
    ['prediction type', { prediction: { type: 'text', content: 'x' } }, 'prediction.type', 'must be `content`'],
    ['prediction content', { prediction: { type: 'content', content: 5 } }, 'prediction.content', 'must be a string or an array'],
    ['response_format type', { response_format: { type: 'yaml' } }, 'response_format.type', 'must be one of `text`, `json_object`, `json_schema`, `grammar`, `python`'],
    ['response_format json_schema', { response_format: { type: 'json_schema' } }, 'response_format.json_schema', 'is required when response_format.type is json_schema'],
    ['response_format json_schema name', { response_format: { type: 'json_schema', json_schema: { schema: {} } } }, 'response_format.json_schema.name', 'is required'],
    ['response_format grammar', { response_format: { type: 'grammar' } }, 'response_format.grammar', 'is required when response_format.type is grammar'],
    ['modalities values', { modalities: ['text', 'video'] }, 'modalities[1]', '`modalities[1]` must be one of `text`, `image`, `audio`'],
    ['image_config object', { image_config: '16:9' }, 'image_config', 'must be an object'],
    ['logit_bias numbers', { logit_bias: { '50256': 'ban' } }, 'logit_bias["50256"]', 'must be a number'],
    ['logprobs boolean', { logprobs: 1 }, 'logprobs', 'must be a boolean'],
    ['top_logprobs <= 20', { top_logprobs: 21 }, 'top_logprobs', '`top_logprobs` must be <= 20'],
    ['top_logprobs >= 0', { top_logprobs: -1 }, 'top_logprobs', '`top_logprobs` must be >= 0'],
    ['top_logprobs integer', { top_logprobs: 1.5 }, 'top_logprobs', 'must be an integer'],
    ['frequency_penalty <= 2', { frequency_penalty: 2.5 }, 'frequency_penalty', '`frequency_penalty` must be <= 2'],
    ['presence_penalty >= -2', { presence_penalty: -3 }, 'presence_penalty', '`presence_penalty` must be >= -2'],
    ['repetition_penalty > 0', { repetition_penalty: 0 }, 'repetition_penalty', '`repetition_penalty` must be > 0'],
    ['repetition_penalty <= 2', { repetition_penalty: 2.1 }, 'repetition_penalty', '`repetition_penalty` must be <= 2'],
    ['min_p <= 1', { min_p: 1.1 }, 'min_p', '`min_p` must be <= 1'],
    ['top_a >= 0', { top_a: -0.1 }, 'top_a', '`top_a` must be >= 0'],
  ];
  it.each(cases)('%s', (_name, overrides, field, fragment) => {
    expectProblem('chat_completions', { ...minimalChat, ...overrides }, field, fragment);
  });
});

describe('`plugins` is one definition for both endpoints', () => {
  // schemas/messages.schema.json refers to chat-completions' `plugins`: a plugin's id and options are written once.
  const IDS = ['alignment', 'auto-beta-router', 'auto-router', 'context-compression', 'file-parser', 'fusion', 'jev-router', 'moderation', 'pareto-router', 'response-healing', 'switchyard-router', 'web', 'web-fetch'];
  const both = (plugins: unknown[]) => ({
    messages: validators.messages({ ...minimalMessages, plugins }),
    chat_completions: validators.chat_completions({ ...minimalChat, plugins }),
  });
  it.each(IDS)('%s: the same answer from each endpoint, for the id alone and with a key it does not read', (id) => {
    expect(both([{ id }])).toEqual({ messages: null, chat_completions: null });
    // (ids no stage runs have no list of options: validate's pipeline check refuses them instead)
    const extra = both([{ id, not_an_option: 1 }]);
    expect(extra.messages).toEqual(extra.chat_completions);
  });
});

describe('null optional fields are "not given"', () => {
  it('drops every nullable chat field set to null, and nothing else', () => {
    const body: Body = { ...minimalChat, ...chatNulls, top_k: null, user: null, tool_choice: null, temperature_hint: null };
    dropNullFields(body, validators.chat_completions.nullable);
    // top_k, user and tool_choice are not nullable (OpenAI types): left for the validator to refuse.
    expect(body).toEqual({ ...minimalChat, top_k: null, user: null, tool_choice: null, temperature_hint: null });
    expect(validators.chat_completions(body)?.field).toBe('top_k');
  });

  it('never drops the required fields', () => {
    const body: Body = { model: null, messages: null };
    dropNullFields(body, validators.chat_completions.nullable);
    expect(body).toEqual({ model: null, messages: null });
  });

  it('drops only the spec 4.1 nullable fields of a messages body', () => {
    const body: Body = { ...minimalMessages, ...messagesNulls, temperature: null, max_tokens: null };
    dropNullFields(body, validators.messages.nullable);
    expect(body).toEqual({ ...minimalMessages, temperature: null, max_tokens: null });
  });

  it('leaves a body that is not an object alone', () => {
    expect(() => dropNullFields(null, validators.messages.nullable)).not.toThrow();
    expect(() => dropNullFields([null], validators.messages.nullable)).not.toThrow();
  });
});

describe('the x-session-id header (spec 8.1 bound of session_id)', () => {
  it('accepts 256 characters and refuses 257, naming the header', () => {
    expect(checkSessionHeader('')).toBeNull();
    expect(checkSessionHeader(long(256))).toBeNull();
    expect(checkSessionHeader(long(257))).toEqual({ field: 'x-session-id', message: '`x-session-id` must NOT be longer than 256 characters' });
  });
});

describe('oneOf/anyOf failures report the branch the client meant', () => {
  // The shipped schemas use if/then; these schemas exercise the union handling for schemas that use oneOf/anyOf.
  const dir = mkdtempSync(join(tmpdir(), 'request-schemas-'));
  writeFileSync(
    join(dir, 'messages.schema.json'),
    JSON.stringify({
      type: 'object',
      properties: {
        thinking: {
          oneOf: [
            { type: 'object', required: ['type', 'budget_tokens'], properties: { type: { const: 'enabled' }, budget_tokens: { type: 'integer' } } },
            { type: 'object', required: ['type'], properties: { type: { const: 'disabled' } }, additionalProperties: false },
          ],
        },
      },
    }),
  );
  writeFileSync(
    join(dir, 'chat-completions.schema.json'),
    JSON.stringify({ type: 'object', properties: { stop: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }] } } }),
  );
  const custom = compileRequestValidators(dir);
  rmSync(dir, { recursive: true, force: true });

  it('picks the branch selected by the type discriminator', () => {
    expect(custom.messages({ thinking: { type: 'enabled', budget_tokens: 'lots' } })).toEqual({
      field: 'thinking.budget_tokens',
      message: '`thinking.budget_tokens` must be an integer',
    });
  });

  it('follows the discriminator even when another branch fails at the same depth', () => {
    expect(custom.messages({ thinking: { type: 'disabled', extra: 1 } })).toEqual({
      field: 'thinking.extra',
      message: '`thinking` accepts only `type` (got `extra`)',
    });
  });

  it('names the accepted types when no branch matches the value type', () => {
    expect(custom.chat_completions({ stop: 5 })).toEqual({ field: 'stop', message: '`stop` must be a string or an array' });
  });

  it('reports the error inside an array branch', () => {
    expect(custom.chat_completions({ stop: ['a', 2] })).toEqual({ field: 'stop[1]', message: '`stop[1]` must be a string' });
  });
});
