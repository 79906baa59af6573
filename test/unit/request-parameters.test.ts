import { describe, expect, it } from 'vitest';
import { chatToMessagesRequest, messagesToChatRequest } from '../../src/dialects/translate/request';
import type { Dialect } from '../../src/providers/types';
import { fittedBody, requestedParameters, supportedThrough } from '../../src/routing/parameters';

type Body = Record<string, any>;
const TOOLS_CHAT = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
const TOOLS_MESSAGES = [{ name: 'f', input_schema: { type: 'object', properties: {} } }];
const SCHEMA = { type: 'object', properties: { a: { type: 'string' } } };

/** Top-level fields whose value differs between two bodies (added, removed or changed). */
function changed(a: Body, b: Body): string[] {
  return [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k])).sort();
}

/**
 * Each parameter with a sample value (and what it needs beside it, as `tool_choice` needs tools): the fields
 * translation changes in the other style's body when the parameter is added are the names the table must give it.
 */
const CHAT_PARAMETERS: [string, unknown, Body?][] = [
  ['max_completion_tokens', 100],
  ['max_tokens', 100],
  ['temperature', 0.5],
  ['top_p', 0.9],
  ['top_k', 5],
  ['stop', ['END']],
  ['tools', TOOLS_CHAT],
  ['tool_choice', 'required', { tools: TOOLS_CHAT }],
  ['parallel_tool_calls', false, { tools: TOOLS_CHAT }],
  ['reasoning', { effort: 'high' }],
  ['reasoning_effort', 'low'],
  ['response_format', { type: 'json_schema', json_schema: { name: 'x', schema: SCHEMA } }],
  ['service_tier', 'auto'],
  ['cache_control', { type: 'ephemeral' }],
  ['seed', 1],
  ['logprobs', true],
  ['top_logprobs', 2],
  ['logit_bias', { '1': 1 }],
  ['frequency_penalty', 0.1],
  ['presence_penalty', 0.1],
  ['repetition_penalty', 1.1],
  ['min_p', 0.1],
  ['top_a', 0.1],
  ['prediction', { type: 'content', content: 'x' }],
  ['modalities', ['text']],
  ['n', 1],
  ['store', true],
  ['verbosity', 'low'],
  ['prompt_cache_key', 'k'],
  ['safety_identifier', 's'],
  ['web_search_options', {}],
];
const MESSAGES_PARAMETERS: [string, unknown, Body?][] = [
  ['max_tokens', 100],
  ['temperature', 0.5],
  ['top_p', 0.9],
  ['top_k', 5],
  ['stop_sequences', ['END']],
  ['tools', TOOLS_MESSAGES],
  ['tool_choice', { type: 'any' }, { tools: TOOLS_MESSAGES }],
  ['thinking', { type: 'enabled', budget_tokens: 2048 }],
  ['thinking', { type: 'disabled' }],
  ['output_config', { effort: 'high' }],
  ['output_config', { format: { type: 'json_schema', schema: SCHEMA } }],
  ['service_tier', 'auto'],
  ['cache_control', { type: 'ephemeral' }],
  ['context_management', { edits: [] }],
  ['container', 'c'],
  ['mcp_servers', []],
];

const translate = (from: Dialect, body: Body): Body =>
  from === 'chat_completions' ? chatToMessagesRequest(body, { defaultMaxTokens: 4096 }) : messagesToChatRequest(body);
/** Fields an endpoint gets whatever it lists (src/routing/parameters.ts ALWAYS_SENT). */
const ALWAYS_SENT: Record<Dialect, string[]> = {
  chat_completions: ['model', 'messages', 'stream', 'stream_options', 'user', 'metadata'],
  messages: ['model', 'messages', 'system', 'stream', 'max_tokens', 'metadata'],
};
const OTHER: Record<Dialect, Dialect> = { chat_completions: 'messages', messages: 'chat_completions' };

describe('the name table matches what the translator carries', () => {
  for (const [from, list] of [['chat_completions', CHAT_PARAMETERS], ['messages', MESSAGES_PARAMETERS]] as const) {
    it.each(list)(`${from}: %s`, (name, value, beside = {}) => {
      const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...beside };
      const produced = changed(translate(from, base), translate(from, { ...base, [name]: value }));
      const to = OTHER[from];
      if (produced.length === 0) {
        // Translation drops it: an endpoint reached through it does not take it, whatever it lists.
        expect(supportedThrough({ dialect: to, list: undefined }, from, [name])).toEqual([]);
        return;
      }
      // What an endpoint always gets (a messages max_tokens, raised to fit a thinking budget) carries no parameter.
      const carriers = produced.filter((n) => !ALWAYS_SENT[to].includes(n));
      if (carriers.length === 0) {
        expect(supportedThrough({ dialect: to, list: [] }, from, [name])).toEqual([name]);
        return;
      }
      // Under every name it arrives as, a list naming that one takes it; a list naming none does not.
      for (const n of carriers) expect(supportedThrough({ dialect: to, list: [n] }, from, [name]), n).toEqual([name]);
      expect(supportedThrough({ dialect: to, list: [] }, from, [name])).toEqual([]);
    });
  }

  it('a parameter no endpoint lists under any of its names is not taken (top_k to a chat endpoint listing stop)', () => {
    expect(supportedThrough({ dialect: 'chat_completions', list: ['stop'] }, 'messages', ['stop_sequences', 'top_k'])).toEqual(['stop_sequences']);
    expect(supportedThrough({ dialect: 'messages', list: ['stop_sequences'] }, 'chat_completions', ['stop', 'top_k', 'max_tokens'])).toEqual(['stop', 'max_tokens']);
  });
});

describe('supportedThrough, same style', () => {
  it('reads the list in the client\'s names; no list takes everything', () => {
    expect(supportedThrough({ dialect: 'chat_completions', list: undefined }, 'chat_completions', ['top_k'])).toBeUndefined();
    expect(supportedThrough({ dialect: 'chat_completions', list: ['temperature'] }, 'chat_completions', ['top_k', 'temperature'])).toEqual(['temperature']);
  });

  it('counts either spelling of the chat output limit, and the max_tokens a messages endpoint always takes', () => {
    expect(supportedThrough({ dialect: 'chat_completions', list: ['max_tokens'] }, 'chat_completions', ['max_completion_tokens'])).toEqual(['max_completion_tokens']);
    expect(supportedThrough({ dialect: 'messages', list: ['temperature'] }, 'messages', ['max_tokens', 'top_k'])).toEqual(['max_tokens']);
  });
});

describe('requestedParameters', () => {
  it('leaves out the request itself and the gateway\'s own fields', () => {
    const body = { model: 'm', messages: [], system: 's', stream: true, stream_options: {}, user: 'u', metadata: {}, provider: {}, models: [], speed: 'fast', session_id: 's', plugins: [], top_k: 1, stop: ['x'] };
    expect(requestedParameters(body)).toEqual(['top_k', 'stop']);
  });
});

describe('fittedBody', () => {
  it('returns the body itself when the endpoint lists everything it carries', () => {
    const body = { model: 'm', messages: [], stream: true, stream_options: { include_usage: true }, user: 'h', temperature: 1 };
    const fitted = fittedBody(body, 'chat_completions', ['temperature']);
    expect(fitted.body).toBe(body);
    expect(fitted.dropped).toBeUndefined();
  });

  it('leaves out what is not listed, in a new object, without touching the body it was given', () => {
    const body = { model: 'm', messages: [], top_k: 4, temperature: 1, min_p: 0.1 };
    const fitted = fittedBody(body, 'chat_completions', ['temperature']);
    expect(fitted.body).toEqual({ model: 'm', messages: [], temperature: 1 });
    expect(Object.keys(fitted.body)).toEqual(['model', 'messages', 'temperature']);
    expect(fitted.dropped).toEqual(['top_k', 'min_p']);
    expect(body).toEqual({ model: 'm', messages: [], top_k: 4, temperature: 1, min_p: 0.1 });
  });

  it('always sends a messages endpoint its system, max_tokens and metadata', () => {
    const body = { model: 'm', system: 's', messages: [], max_tokens: 10, metadata: { user_id: 'h' }, top_k: 3 };
    expect(fittedBody(body, 'messages', [])).toEqual({ body: { model: 'm', system: 's', messages: [], max_tokens: 10, metadata: { user_id: 'h' } }, dropped: ['top_k'] });
  });

  it('sends the chat output limit under the spelling the list names; with both sent, the unlisted one is dropped', () => {
    expect(fittedBody({ model: 'm', max_completion_tokens: 9 }, 'chat_completions', ['max_tokens'])).toEqual({ body: { model: 'm', max_tokens: 9 }, dropped: undefined });
    expect(fittedBody({ model: 'm', max_tokens: 9 }, 'chat_completions', ['max_completion_tokens'])).toEqual({ body: { model: 'm', max_completion_tokens: 9 }, dropped: undefined });
    expect(fittedBody({ model: 'm', max_tokens: 5, max_completion_tokens: 9 }, 'chat_completions', ['max_tokens'])).toEqual({ body: { model: 'm', max_tokens: 5 }, dropped: ['max_completion_tokens'] });
    // Messages has one spelling: no renaming there.
    expect(fittedBody({ model: 'm', max_completion_tokens: 9 }, 'messages', [])).toEqual({ body: { model: 'm' }, dropped: ['max_completion_tokens'] });
  });

  it('keeps a messages body\'s tools that its history needs (tool_use / tool_result, tool_choice none) for a list without `tools`; others are left out', () => {
    const tools = [{ name: 'f', input_schema: { type: 'object' } }];
    const history = [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'r' }] },
    ];
    const body = { model: 'm', messages: history, max_tokens: 10, tools, tool_choice: { type: 'none' }, top_k: 3 };
    expect(fittedBody(body, 'messages', [])).toEqual({ body: { model: 'm', messages: history, max_tokens: 10, tools, tool_choice: { type: 'none' } }, dropped: ['top_k'] });
    // Tools offered for calling, with such a history, go uncallable (tool_choice none, whatever it was, or set
    // when absent; even where the list names tool_choice): the offer is named dropped.
    const uncallable = { body: { model: 'm', messages: history, max_tokens: 10, tools, tool_choice: { type: 'none' } }, dropped: ['tools', 'tool_choice', 'top_k'] };
    expect(fittedBody({ ...body, tool_choice: { type: 'auto' } }, 'messages', [])).toEqual(uncallable);
    expect(fittedBody({ ...body, tool_choice: { type: 'tool', name: 'f' } }, 'messages', ['tool_choice'])).toEqual(uncallable);
    const { tool_choice: _c, ...unchosen } = body;
    expect(fittedBody(unchosen, 'messages', ['top_k'])).toEqual({ body: { ...unchosen, tool_choice: { type: 'none' } }, dropped: ['tools'] });
    // Tools without a history that needs them shape the answer only: left out.
    expect(fittedBody({ ...body, messages: [{ role: 'user', content: 'q' }] }, 'messages', []).dropped).toEqual(['tools', 'tool_choice', 'top_k']);
    // A chat body has no such rule (chat takes tool calls in its history without tools).
    expect(fittedBody({ model: 'm', messages: [], tools: [], tool_choice: 'none' }, 'chat_completions', []).dropped).toEqual(['tools', 'tool_choice']);
  });

  it('sends a chat reasoning_effort as reasoning.effort to a list naming `reasoning` only; the body\'s own reasoning stands over it', () => {
    const list = ['reasoning'];
    expect(fittedBody({ model: 'm', reasoning_effort: 'high' }, 'chat_completions', list)).toEqual({ body: { model: 'm', reasoning: { effort: 'high' } }, dropped: undefined });
    expect(fittedBody({ model: 'm', reasoning: { exclude: true, effort: null }, reasoning_effort: 'low' }, 'chat_completions', list).body).toEqual({ model: 'm', reasoning: { exclude: true, effort: 'low' } });
    expect(fittedBody({ model: 'm', reasoning: { enabled: false }, reasoning_effort: 'low' }, 'chat_completions', list)).toEqual({ body: { model: 'm', reasoning: { enabled: false } }, dropped: undefined });
    // A budget instead of an effort: the effort is left out, and said so.
    expect(fittedBody({ model: 'm', reasoning: { max_tokens: 9 }, reasoning_effort: 'low' }, 'chat_completions', list)).toEqual({ body: { model: 'm', reasoning: { max_tokens: 9 } }, dropped: ['reasoning_effort'] });
    expect(supportedThrough({ dialect: 'chat_completions', list }, 'chat_completions', ['reasoning_effort'])).toEqual(['reasoning_effort']);
    expect(supportedThrough({ dialect: 'chat_completions', list }, 'messages', ['thinking'])).toEqual(['thinking']);
  });

  it('finds nothing for a field named like an object built-in', () => {
    const body = JSON.parse('{"model":"m","constructor":1,"toString":2}');
    expect(fittedBody(body, 'chat_completions', []).dropped).toEqual(['constructor', 'toString']);
    expect(supportedThrough({ dialect: 'messages', list: undefined }, 'chat_completions', ['constructor', 'toString'])).toEqual([]);
  });
});
