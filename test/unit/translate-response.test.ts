import { describe, it, expect } from 'vitest';
import { chatToMessagesResponse, DEFAULT_REFUSAL, messagesToChatResponse } from '../../src/dialects/translate/response';
import { chatToMessagesRequest } from '../../src/dialects/translate/request';
import { chatUsage } from '../../src/dialects/chat-completions';
import { messagesUsage } from '../../src/dialects/messages';

type Obj = Record<string, any>;

function message(over: Obj = {}): Obj {
  return {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'claude-x',
    content: [{ type: 'text', text: 'Hello' }],
    stop_reason: 'end_turn',
    stop_sequence: null,
    stop_details: null,
    container: null,
    usage: { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    ...over,
  };
}

function completion(msg: Obj, finish: string, over: Obj = {}): Obj {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1700000000,
    model: 'gpt-x',
    choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: null, ...msg }, finish_reason: finish, logprobs: null }],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
    ...over,
  };
}

describe('messagesToChatResponse', () => {
  it('builds a complete chat.completion with concatenated text', () => {
    const out = messagesToChatResponse(message({ content: [{ type: 'text', text: 'Hel' }, { type: 'text', text: 'lo' }] }));
    expect(out).toMatchObject({ id: 'msg_1', object: 'chat.completion', model: 'claude-x' });
    expect(typeof out.created).toBe('number');
    expect(out.choices).toEqual([{ index: 0, message: { role: 'assistant', content: 'Hello', refusal: null }, finish_reason: 'stop', logprobs: null }]);
    expect(out.choices[0].message).not.toHaveProperty('tool_calls');
    expect(out.choices[0].message).not.toHaveProperty('reasoning');
  });

  it('carries system_fingerprint: null, as OpenAI answers carry the field (spec 4.2); a messages provider has none', () => {
    expect(messagesToChatResponse(message())).toHaveProperty('system_fingerprint', null);
  });

  it('maps parallel tool_use blocks to tool_calls with JSON arguments', () => {
    const out = messagesToChatResponse(
      message({
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'toolu_a', name: 'weather', input: { city: 'Paris', days: [1, 2] } },
          { type: 'tool_use', id: 'toolu_b', name: 'time', input: {} },
        ],
        stop_reason: 'tool_use',
      }),
    );
    const m = out.choices[0].message;
    expect(m.content).toBe('Checking.');
    expect(m.tool_calls).toEqual([
      { id: 'toolu_a', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris","days":[1,2]}' } },
      { id: 'toolu_b', type: 'function', function: { name: 'time', arguments: '{}' } },
    ]);
    expect(out.choices[0].finish_reason).toBe('tool_calls');
  });

  it('gives null content when there are only tool calls', () => {
    const out = messagesToChatResponse(message({ content: [{ type: 'tool_use', id: 't', name: 'f', input: { a: 1 } }], stop_reason: 'tool_use' }));
    expect(out.choices[0].message.content).toBeNull();
  });

  it("gives empty content (not null) when the model wrote no text: thinking took all of max_tokens (spec 7.5.5), an empty turn", () => {
    const spent = messagesToChatResponse(
      message({ content: [{ type: 'thinking', thinking: 'Hmm…', signature: 's' }], stop_reason: 'max_tokens', usage: { input_tokens: 3, output_tokens: 64, output_tokens_details: { thinking_tokens: 64 } } }),
    );
    expect(spent.choices[0]).toMatchObject({ finish_reason: 'length', message: { content: '', refusal: null } });
    expect(spent.usage.completion_tokens_details.reasoning_tokens).toBe(64);
    expect(messagesToChatResponse(message({ content: [] })).choices[0].message.content).toBe('');
  });

  it('maps thinking blocks to reasoning and drops signatures and redacted thinking', () => {
    const out = messagesToChatResponse(
      message({
        content: [
          { type: 'thinking', thinking: 'Let me think. ', signature: 'sig' },
          { type: 'redacted_thinking', data: 'xxx' },
          { type: 'thinking', thinking: 'Done.', signature: 'sig2' },
          { type: 'text', text: 'Answer' },
        ],
        usage: { input_tokens: 3, output_tokens: 50, output_tokens_details: { thinking_tokens: 40 } },
      }),
    );
    expect(out.choices[0].message.reasoning).toBe('Let me think. Done.');
    expect(out.choices[0].message.content).toBe('Answer');
    expect(out.usage.completion_tokens_details).toEqual({ reasoning_tokens: 40 });
  });

  it('reads reasoning_tokens as well as thinking_tokens', () => {
    const out = messagesToChatResponse(message({ usage: { input_tokens: 1, output_tokens: 9, output_tokens_details: { reasoning_tokens: 7 } } }));
    expect(out.usage.completion_tokens_details.reasoning_tokens).toBe(7);
  });

  it('maps a refusal to message.refusal and content_filter', () => {
    const out = messagesToChatResponse(
      message({ content: [], stop_reason: 'refusal', stop_details: { type: 'refusal', category: 'cyber', explanation: 'Not allowed.' } }),
    );
    expect(out.choices[0].finish_reason).toBe('content_filter');
    expect(out.choices[0].message).toEqual({ role: 'assistant', content: null, refusal: 'Not allowed.' });
    const bare = messagesToChatResponse(message({ content: [{ type: 'text', text: 'Partial' }], stop_reason: 'refusal' }));
    expect(bare.choices[0].message).toEqual({ role: 'assistant', content: 'Partial', refusal: DEFAULT_REFUSAL });
  });

  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['tool_use', 'tool_calls'],
    ['refusal', 'content_filter'],
    [null, 'stop'],
  ])('stop_reason %s → finish_reason %s', (stop, finish) => {
    expect(messagesToChatResponse(message({ stop_reason: stop })).choices[0].finish_reason).toBe(finish);
  });

  it('maps usage: prompt_tokens includes cache reads and writes', () => {
    const out = messagesToChatResponse(
      message({ usage: { input_tokens: 10, cache_read_input_tokens: 100, cache_creation_input_tokens: 20, output_tokens: 30, service_tier: 'priority' } }),
    );
    expect(out.usage).toEqual({
      prompt_tokens: 130,
      completion_tokens: 30,
      total_tokens: 160,
      prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    expect(out.service_tier).toBe('priority');
    expect(messagesToChatResponse(message())).not.toHaveProperty('service_tier');
  });

  it('turns a messages error body into a chat error body', () => {
    const out = messagesToChatResponse({ type: 'error', error: { type: 'overloaded_error', message: 'Busy' }, request_id: 'req_1' });
    // `code` is the gateway's status for the type; the provider gave none (`provider_code: null`).
    expect(out).toEqual({ id: 'req_1', error: { code: 503, message: 'Busy', metadata: { error_type: 'provider_overloaded', provider_code: null } } });
    expect(out).not.toHaveProperty('choices');
  });

  it('classifies a messages error by its type and message, as the HTTP error of that type (prompt too long, credit balance)', () => {
    const code = (error: object) => messagesToChatResponse({ type: 'error', error }).error.metadata.error_type;
    expect(code({ type: 'invalid_request_error', message: 'prompt is too long: 250000 tokens > 200000 maximum' })).toBe('context_length_exceeded');
    expect(code({ type: 'invalid_request_error', message: 'Your credit balance is too low to access the Anthropic API.' })).toBe('provider_unavailable');
    expect(code({ type: 'invalid_request_error', message: 'messages: roles must alternate' })).toBe('invalid_request');
    expect(code({ type: 'timeout_error', message: 'm' })).toBe('timeout');
    expect(code({ type: 'authentication_error', message: 'm' })).toBe('provider_unavailable');
    expect(code({ type: 'constructor', message: 'm' })).toBe('provider_unavailable');
  });
});

describe('chatToMessagesResponse', () => {
  it('builds a complete message with a text block', () => {
    const out = chatToMessagesResponse(completion({ content: 'Hi there' }, 'stop'));
    expect(out).toEqual({
      id: 'chatcmpl-1',
      type: 'message',
      role: 'assistant',
      model: 'gpt-x',
      content: [{ type: 'text', text: 'Hi there' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      stop_details: null,
      container: null,
      usage: { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, service_tier: null },
    });
  });

  it('maps parallel tool_calls to tool_use blocks (bad JSON kept under _raw, empty arguments as {})', () => {
    const out = chatToMessagesResponse(
      completion(
        {
          content: 'Let me look.',
          tool_calls: [
            { id: 'call_a', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
            { id: 'call_b', type: 'function', function: { name: 'time', arguments: '' } },
            { id: 'call_c', type: 'function', function: { name: 'bad', arguments: '{"x":' } },
          ],
        },
        'tool_calls',
      ),
    );
    expect(out.content).toEqual([
      { type: 'text', text: 'Let me look.' },
      { type: 'tool_use', id: 'call_a', name: 'weather', input: { city: 'Oslo' } },
      { type: 'tool_use', id: 'call_b', name: 'time', input: {} },
      { type: 'tool_use', id: 'call_c', name: 'bad', input: { _raw: '{"x":' } },
    ]);
    expect(out.stop_reason).toBe('tool_use');
  });

  it('gives tool calls sent with an empty id (Gemini, LM Studio) ids of their own', () => {
    const call = (name: string) => ({ id: '', type: 'function', function: { name, arguments: '{}' } });
    const out = chatToMessagesResponse(completion({ tool_calls: [call('a'), call('b')] }, 'tool_calls'));
    const ids = out.content.map((b: Obj) => b.id);
    expect(ids).toEqual([expect.stringMatching(/^toolu_/), expect.stringMatching(/^toolu_/)]);
    expect(ids[0]).not.toBe(ids[1]);
  });

  it('takes tool call arguments sent as a JSON object (llama-server) as the input', () => {
    const out = chatToMessagesResponse(completion({ tool_calls: [{ id: 'call_o', type: 'function', function: { name: 'write', arguments: { path: 'a.txt' } } }] }, 'tool_calls'));
    expect(out.content).toEqual([{ type: 'tool_use', id: 'call_o', name: 'write', input: { path: 'a.txt' } }]);
  });

  it('maps a legacy function_call to a tool_use block with a generated id', () => {
    const body = completion({ function_call: { name: 'f', arguments: '{"a":1}' } }, 'function_call');
    const out = chatToMessagesResponse(body);
    expect(out.content).toEqual([{ type: 'tool_use', id: expect.stringMatching(/^toolu_/), name: 'f', input: { a: 1 } }]);
    expect(out.stop_reason).toBe('tool_use');
    expect(body.choices[0].message).not.toHaveProperty('tool_calls');
  });

  it('says tool_use when the model called a tool, even if the provider finished with stop (Gemini does)', () => {
    const out = chatToMessagesResponse(completion({ tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] }, 'stop'));
    expect(out.stop_reason).toBe('tool_use');
    expect(chatToMessagesResponse(completion({ tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }, 'length')).stop_reason).toBe('max_tokens');
  });

  it('maps reasoning (and reasoning_content) to a leading thinking block, with reasoning tokens', () => {
    const out = chatToMessagesResponse(
      completion({ content: 'Yes', reasoning: 'Because.' }, 'stop', {
        usage: { prompt_tokens: 5, completion_tokens: 50, total_tokens: 55, completion_tokens_details: { reasoning_tokens: 42 } },
      }),
    );
    expect(out.content).toEqual([
      { type: 'thinking', thinking: 'Because.', signature: '' },
      { type: 'text', text: 'Yes' },
    ]);
    expect(out.usage.output_tokens_details).toEqual({ reasoning_tokens: 42, thinking_tokens: 42 });
    const alt = chatToMessagesResponse(completion({ content: 'Yes', reasoning_content: 'Hmm.' }, 'stop'));
    expect(alt.content[0]).toEqual({ type: 'thinking', thinking: 'Hmm.', signature: '' });
    expect(alt.usage).not.toHaveProperty('output_tokens_details');
  });

  it("gives Claude's signed reasoning_details (OpenRouter's shape) as thinking blocks with their signature, redacted thinking too", () => {
    const out = chatToMessagesResponse(
      completion(
        {
          content: 'Yes',
          reasoning: 'Plan.Check.',
          reasoning_details: [
            { type: 'reasoning.text', text: 'Plan.', signature: 'SIG1', format: 'anthropic-claude-v1', index: 0 },
            { type: 'reasoning.encrypted', data: 'ENC', format: 'anthropic-claude-v1', index: 1 },
            { type: 'reasoning.text', text: 'Check.', signature: 'SIG2', format: 'anthropic-claude-v1', index: 2 },
          ],
        },
        'stop',
      ),
    );
    expect(out.content).toEqual([
      { type: 'thinking', thinking: 'Plan.', signature: 'SIG1' },
      { type: 'redacted_thinking', data: 'ENC' },
      { type: 'thinking', thinking: 'Check.', signature: 'SIG2' },
      { type: 'text', text: 'Yes' },
    ]);
    // Another model's signature, or reasoning partly unsigned, stays one unsigned block (the Messages API refuses a signature it did not make).
    for (const details of [
      [{ type: 'reasoning.text', text: 'Plan.', signature: 'GEMSIG', format: 'google-gemini-v1' }],
      [{ type: 'reasoning.text', text: 'Plan.', signature: 'SIG1' }, { type: 'reasoning.text', text: 'Check.' }],
    ]) {
      expect(chatToMessagesResponse(completion({ content: 'Yes', reasoning: 'Plan.Check.', reasoning_details: details }, 'stop')).content[0]).toEqual({
        type: 'thinking',
        thinking: 'Plan.Check.',
        signature: '',
      });
    }
  });

  it("gives Claude's thinking_blocks (LiteLLM's shape) as thinking blocks with their signature, redacted thinking too", () => {
    const thinking_blocks = [
      { type: 'thinking', thinking: 'Plan.', signature: 'SIG1' },
      { type: 'redacted_thinking', data: 'ENC' },
      { type: 'thinking', thinking: 'Check.', signature: 'SIG2' },
    ];
    const out = chatToMessagesResponse(completion({ content: 'Yes', reasoning_content: 'Plan.Check.', thinking_blocks }, 'stop'));
    expect(out.content).toEqual([...thinking_blocks, { type: 'text', text: 'Yes' }]);
    // Without reasoning_content beside them, and unsigned: one unsigned block of their text.
    const unsigned = chatToMessagesResponse(completion({ content: 'Yes', thinking_blocks: [{ type: 'thinking', thinking: 'Hmm.', signature: null }] }, 'stop'));
    expect(unsigned.content).toEqual([{ type: 'thinking', thinking: 'Hmm.', signature: '' }, { type: 'text', text: 'Yes' }]);
  });

  it('says stop_sequence with the sequence when the provider names it (vLLM stop_reason, SGLang matched_stop); end_turn when it does not', () => {
    for (const named of [{ stop_reason: '###' }, { matched_stop: '###' }]) {
      const out = chatToMessagesResponse(completion({ content: 'Yes' }, 'stop', { choices: [{ index: 0, message: { role: 'assistant', content: 'Yes' }, finish_reason: 'stop', ...named }] }));
      expect([out.stop_reason, out.stop_sequence]).toEqual(['stop_sequence', '###']);
    }
    for (const none of [{}, { stop_reason: null }, { stop_reason: 128001 }, { matched_stop: 2 }]) {
      const out = chatToMessagesResponse(completion({ content: 'Yes' }, 'stop', { choices: [{ index: 0, message: { role: 'assistant', content: 'Yes' }, finish_reason: 'stop', ...none }] }));
      expect([out.stop_reason, out.stop_sequence]).toEqual(['end_turn', null]);
    }
  });

  it('maps message.refusal and content_filter to stop_reason refusal', () => {
    const out = chatToMessagesResponse(completion({ refusal: "I can't help with that." }, 'stop'));
    expect(out.stop_reason).toBe('refusal');
    expect(out.content).toEqual([]);
    expect(out.stop_details).toEqual({ type: 'refusal', category: null, explanation: "I can't help with that." });
    const filtered = chatToMessagesResponse(completion({ content: 'Partial' }, 'content_filter'));
    expect(filtered.stop_reason).toBe('refusal');
    expect(filtered.stop_details).toEqual({ type: 'refusal', category: null, explanation: null });
    expect(filtered.content).toEqual([{ type: 'text', text: 'Partial' }]);
  });

  it.each([
    ['stop', 'end_turn'],
    ['length', 'max_tokens'],
    ['tool_calls', 'tool_use'],
    ['function_call', 'tool_use'],
    ['content_filter', 'refusal'],
    ['something_new', 'end_turn'],
  ])('finish_reason %s → stop_reason %s', (finish, stop) => {
    const out = chatToMessagesResponse(completion({ content: 'x' }, finish));
    expect(out.stop_reason).toBe(stop);
    expect(out.stop_sequence).toBeNull();
  });

  it('maps usage: input_tokens excludes cached and cache-write tokens; keeps service_tier', () => {
    const out = chatToMessagesResponse(
      completion({ content: 'x' }, 'stop', {
        service_tier: 'flex',
        usage: {
          prompt_tokens: 130,
          completion_tokens: 30,
          total_tokens: 160,
          prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 },
          completion_tokens_details: { reasoning_tokens: 0 },
        },
      }),
    );
    expect(out.usage).toEqual({ input_tokens: 10, output_tokens: 30, cache_creation_input_tokens: 20, cache_read_input_tokens: 100, service_tier: 'standard' }); // chat's flex is the Messages API's standard
  });

  it('gives usage.service_tier null when the provider reported no tier (the Messages API always has the field)', () => {
    expect(chatToMessagesResponse(completion({ content: 'x' }, 'stop')).usage).toHaveProperty('service_tier', null);
  });

  it('takes text from content given as an array of parts', () => {
    const out = chatToMessagesResponse(completion({ content: [{ type: 'text', text: 'A' }, { type: 'text', text: 'B' }] }, 'stop'));
    expect(out.content).toEqual([{ type: 'text', text: 'AB' }]);
  });

  it('turns an error-only body, or a choice that ended in error, into a messages error', () => {
    const out = chatToMessagesResponse({ id: 'gen-1', error: { code: 429, message: 'Slow down' } });
    expect(out).toEqual({ type: 'error', error: { type: 'rate_limit_error', message: 'Slow down', error_type: 'rate_limit_exceeded' }, request_id: 'gen-1' });
    const inChoice = completion({ content: 'partial' }, 'error');
    inChoice.choices[0].error = { code: 502, message: 'Upstream died', metadata: { error_type: 'provider_unavailable' } };
    expect(chatToMessagesResponse(inChoice).error).toEqual({ type: 'api_error', message: 'Upstream died', error_type: 'provider_unavailable' });
  });
});

describe('round trips', () => {
  it('messages → chat → messages keeps text, thinking, parallel tools, stop reason and usage', () => {
    const original = message({
      content: [
        { type: 'thinking', thinking: 'Plan.', signature: '' },
        { type: 'text', text: 'Calling two tools.' },
        { type: 'tool_use', id: 'toolu_1', name: 'a', input: { q: 'x' } },
        { type: 'tool_use', id: 'toolu_2', name: 'b', input: { n: 2, nested: { ok: true } } },
      ],
      stop_reason: 'tool_use',
      usage: {
        input_tokens: 7,
        output_tokens: 90,
        cache_creation_input_tokens: 11,
        cache_read_input_tokens: 13,
        output_tokens_details: { reasoning_tokens: 60, thinking_tokens: 60 },
        service_tier: 'standard',
      },
    });
    expect(chatToMessagesResponse(messagesToChatResponse(original))).toEqual(original);
  });

  it("names the service tier in the client's own values (each SDK types its own)", () => {
    for (const [chat, messages] of [['priority', 'priority'], ['default', 'standard'], ['auto', 'standard'], ['flex', 'standard'], ['scale', 'standard']]) {
      const translated = chatToMessagesResponse({ id: 'c', object: 'chat.completion', model: 'm', service_tier: chat, choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1 } });
      expect(translated.usage.service_tier).toBe(messages);
    }
    for (const [messages, chat] of [['priority', 'priority'], ['standard', 'default'], ['batch', 'default']]) {
      expect(messagesToChatResponse(message({ usage: { input_tokens: 1, output_tokens: 1, service_tier: messages } })).service_tier).toBe(chat);
    }
  });

  it.each(['end_turn', 'max_tokens', 'tool_use', 'refusal'])('messages → chat → messages keeps stop_reason %s', (stop) => {
    const original = message({ stop_reason: stop, usage: { ...message().usage, service_tier: 'standard' } }); // as Anthropic reports it
    if (stop === 'refusal') original.stop_details = { type: 'refusal', category: null, explanation: 'No.' };
    expect(chatToMessagesResponse(messagesToChatResponse(original))).toEqual(original);
  });

  it('chat → messages → chat keeps content, reasoning, tool calls, refusal and usage', () => {
    const original = completion(
      {
        content: 'Sure.',
        reasoning: 'Thinking it over.',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
          { id: 'call_2', type: 'function', function: { name: 'g', arguments: '{"b":[true,null]}' } },
        ],
      },
      'tool_calls',
      {
        usage: {
          prompt_tokens: 100,
          completion_tokens: 40,
          total_tokens: 140,
          prompt_tokens_details: { cached_tokens: 60, cache_write_tokens: 5 },
          completion_tokens_details: { reasoning_tokens: 12 },
        },
      },
    );
    // The fingerprint has no place in a messages answer: a chat answer from a messages provider has null.
    const back = messagesToChatResponse(chatToMessagesResponse(original));
    expect({ ...back, created: original.created }).toEqual({ ...original, system_fingerprint: null });
    const refusal = completion({ refusal: 'No can do.' }, 'content_filter', { usage: back.usage, system_fingerprint: null });
    expect({ ...messagesToChatResponse(chatToMessagesResponse(refusal)), created: refusal.created }).toEqual(refusal);
  });
});

describe('usage counts a provider reports', () => {
  it('a negative, infinite or non-numeric count is none (a negative one would lower the bill and the spend)', () => {
    expect(chatUsage({ prompt_tokens: -10, completion_tokens: 5, prompt_tokens_details: { cached_tokens: -3 }, completion_tokens_details: { reasoning_tokens: Infinity } })).toEqual({
      inputTokens: 0, outputTokens: 5, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0,
    });
    expect(messagesUsage({ input_tokens: 7, output_tokens: -1000000, cache_read_input_tokens: -2, cache_creation_input_tokens: '4' })).toMatchObject({ inputTokens: 7, outputTokens: 0 });
  });
});

describe('1-hour cache writes (usage.cache_creation)', () => {
  const usage = { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 300, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 } };

  it('are read apart from the other writes, compaction entries included, never more than the writes', () => {
    expect(messagesUsage(usage)).toMatchObject({ inputTokens: 310, cacheWriteTokens: 300, cacheWrite1hTokens: 200 });
    const compaction = { type: 'compaction', input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 50, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 50 } };
    expect(messagesUsage({ ...usage, iterations: [compaction] })).toMatchObject({ cacheWriteTokens: 350, cacheWrite1hTokens: 250 });
    expect(messagesUsage({ ...usage, cache_creation_input_tokens: 20 })).toMatchObject({ cacheWriteTokens: 20, cacheWrite1hTokens: 20 });
    expect(messagesUsage({ ...usage, cache_creation: { ephemeral_5m_input_tokens: 300, ephemeral_1h_input_tokens: 0 } })).not.toHaveProperty('cacheWrite1hTokens');
  });

  it('keep their split through a translation either way', () => {
    const chat = messagesToChatResponse({ id: 'm', type: 'message', role: 'assistant', model: 'x', content: [{ type: 'text', text: 'hi' }], stop_reason: 'end_turn', usage });
    expect(chat.usage.prompt_tokens_details).toEqual({ cached_tokens: 0, cache_write_tokens: 300, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 } });
    expect(chatUsage(chat.usage)).toMatchObject({ cacheWriteTokens: 300, cacheWrite1hTokens: 200 });
    const back = chatToMessagesResponse(chat);
    expect(back.usage).toMatchObject({ cache_creation_input_tokens: 300, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 } });
  });
});

describe('signed thinking round-trips through a chat client (reasoning_details)', () => {
  it('a messages answer gives reasoning_details; sent back on the assistant turn, they are the thinking blocks again', () => {
    const answer = messagesToChatResponse({
      id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', stop_reason: 'tool_use',
      content: [
        { type: 'thinking', thinking: 'Plan: call the tool.', signature: 'SIG_abc' },
        { type: 'redacted_thinking', data: 'ENCRYPTED' },
        { type: 'thinking', thinking: 'unsigned', signature: '' },
        { type: 'tool_use', id: 'toolu_1', name: 'get', input: { q: 1 } },
      ],
      usage: { input_tokens: 1, output_tokens: 1 },
    });
    const message = answer.choices[0].message;
    expect(message.reasoning_details).toEqual([
      { type: 'reasoning.text', text: 'Plan: call the tool.', signature: 'SIG_abc', format: 'anthropic-claude-v1', index: 0 },
      { type: 'reasoning.encrypted', data: 'ENCRYPTED', format: 'anthropic-claude-v1', index: 1 },
    ]);
    const next = chatToMessagesRequest(
      {
        model: 'claude',
        reasoning_effort: 'low',
        max_completion_tokens: 4000,
        messages: [{ role: 'user', content: 'go' }, message, { role: 'tool', tool_call_id: 'toolu_1', content: 'done' }],
      },
      { defaultMaxTokens: 4096 },
    ) as { messages: { role: string; content: { type: string }[] }[]; thinking?: unknown };
    expect(next.messages[1].content.slice(0, 2)).toEqual([
      { type: 'thinking', thinking: 'Plan: call the tool.', signature: 'SIG_abc' },
      { type: 'redacted_thinking', data: 'ENCRYPTED' },
    ]);
    expect(next.thinking).toMatchObject({ type: 'enabled' });
  });
});
