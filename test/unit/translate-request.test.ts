import { describe, it, expect } from 'vitest';
import { GatewayError } from '../../src/errors/gateway-error';
import { budgetToEffort, chatToMessagesRequest, EFFORT_BUDGET, messagesToChatRequest } from '../../src/dialects/translate/request';

type Body = Record<string, any>;
const OPTS = { defaultMaxTokens: 4096 };
const toMessages = (b: Body) => chatToMessagesRequest(b, OPTS) as Body;
const toChat = (b: Body) => messagesToChatRequest(b) as Body;
const chat = (extra: Body = {}): Body => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });
const msgs = (extra: Body = {}): Body => ({ model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], ...extra });

const PNG = 'iVBORw0KGgo=';
const PDF = 'JVBERi0xLjQ=';

function thrown(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(GatewayError);
    return e as GatewayError;
  }
  throw new Error('expected a GatewayError');
}

describe('chat → messages: top-level fields', () => {
  // [name, chat overrides, expected subset of the messages body, keys that must be absent]
  const cases: [string, Body, Body, string[]][] = [
    ['model kept, default max_tokens', {}, { model: 'm', max_tokens: 4096 }, []],
    ['max_completion_tokens preferred', { max_completion_tokens: 300, max_tokens: 200 }, { max_tokens: 300 }, ['max_completion_tokens']],
    ['max_tokens used alone', { max_tokens: 200 }, { max_tokens: 200 }, []],
    ['temperature in range', { temperature: 0.4 }, { temperature: 0.4 }, []],
    ['temperature clamped to 1', { temperature: 1.7 }, { temperature: 1 }, []],
    ['top_p and top_k', { top_p: 0.9, top_k: 40 }, { top_p: 0.9, top_k: 40 }, []],
    ['stop string', { stop: 'END' }, { stop_sequences: ['END'] }, ['stop']],
    ['stop array', { stop: ['a', 'b'] }, { stop_sequences: ['a', 'b'] }, ['stop']],
    ['stop null', { stop: null }, {}, ['stop_sequences', 'stop']],
    ['stream kept, stream_options dropped', { stream: true, stream_options: { include_usage: true } }, { stream: true }, ['stream_options']],
    ['user → metadata.user_id', { user: 'hashed-u' }, { metadata: { user_id: 'hashed-u' } }, ['user']],
    ['chat metadata dropped', { metadata: { a: 'b' } }, {}, ['metadata']],
    ['service_tier priority → auto (the provider may use its priority capacity)', { service_tier: 'priority' }, { service_tier: 'auto' }, []],
    ['service_tier auto → auto', { service_tier: 'auto' }, { service_tier: 'auto' }, []],
    ['service_tier default → standard_only', { service_tier: 'default' }, { service_tier: 'standard_only' }, []],
    ['service_tier flex → standard_only', { service_tier: 'flex' }, { service_tier: 'standard_only' }, []],
    ['service_tier of no messages meaning dropped', { service_tier: 'bogus' }, {}, ['service_tier']],
    ['top-level cache_control kept', { cache_control: { type: 'ephemeral' } }, { cache_control: { type: 'ephemeral' } }, []],
    [
      'dropped fields',
      { seed: 1, logprobs: true, top_logprobs: 2, n: 1, frequency_penalty: 1, presence_penalty: 1, logit_bias: { 1: 2 }, modalities: ['text'] },
      {},
      ['seed', 'logprobs', 'top_logprobs', 'n', 'frequency_penalty', 'presence_penalty', 'logit_bias', 'modalities'],
    ],
    [
      'response_format json_schema → output_config.format',
      { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' }, strict: true } } },
      { output_config: { format: { type: 'json_schema', schema: { type: 'object' } } } },
      ['response_format'],
    ],
    ['response_format json_object dropped', { response_format: { type: 'json_object' } }, {}, ['response_format', 'output_config', 'system']],
  ];
  it.each(cases)('%s', (_name, extra, expected, absent) => {
    const out = toMessages(chat(extra));
    expect(out).toMatchObject(expected);
    for (const k of absent) expect(out).not.toHaveProperty(k);
  });

  it('rejects n > 1', () => {
    const e = thrown(() => toMessages(chat({ n: 2 })));
    expect(e.errorType).toBe('invalid_request');
    expect(e.message).toBe("`n` > 1 is not supported by this model's provider");
  });

  it('refuses the deprecated functions / function_call (they were dropped: a forced function call came back as text)', () => {
    for (const extra of [{ functions: [{ name: 'a', parameters: { type: 'object' } }] }, { function_call: { name: 'a' } }, { function_call: 'auto' }]) {
      const e = thrown(() => toMessages(chat(extra)));
      expect(e.errorType).toBe('invalid_request');
      expect(e.message).toMatch(/^`function(s|_call)` \(deprecated function calling\) cannot be sent to this model's provider: use `tools` and `tool_choice`$/);
    }
    // An empty list or a null says nothing: still sent.
    expect(toMessages(chat({ functions: [], function_call: null }))).not.toHaveProperty('tools');
  });
});

describe('chat → messages: system prompts and turns', () => {
  it('folds one system message into a string system', () => {
    const out = toMessages({ messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }] });
    expect(out.system).toBe('be brief');
    expect(out.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('folds several system/developer messages, text parts and later ones, in order', () => {
    const out = toMessages({
      messages: [
        { role: 'system', content: 'one' },
        { role: 'developer', content: [{ type: 'text', text: 'two', cache_control: { type: 'ephemeral' } }] },
        { role: 'user', content: 'hi' },
        { role: 'system', content: 'three' },
      ],
    });
    expect(out.system).toEqual([
      { type: 'text', text: 'one' },
      { type: 'text', text: 'two', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'three' },
    ]);
    expect(out.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('merges consecutive same-role messages and drops `name`', () => {
    const out = toMessages({
      messages: [
        { role: 'user', content: 'a', name: 'bob' },
        { role: 'user', content: [{ type: 'text', text: 'b' }] },
        { role: 'assistant', content: 'c' },
      ],
    });
    expect(out.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
      { role: 'assistant', content: 'c' },
    ]);
  });

  it('keeps a trailing assistant message as prefill', () => {
    const out = toMessages({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: '{"a":' }] });
    expect(out.messages.at(-1)).toEqual({ role: 'assistant', content: '{"a":' });
  });

  it('leaves out assistant text that is only whitespace (the Messages API refuses it)', () => {
    const call = { id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } };
    const out = toMessages({
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: '\n\n', tool_calls: [call] },
        { role: 'tool', tool_call_id: 'c1', content: 'ok' },
        { role: 'assistant', content: [{ type: 'text', text: ' ' }, { type: 'text', text: 'done' }] },
        { role: 'user', content: 'more' },
      ],
    });
    expect(out.messages[1]).toEqual({ role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: 'f', input: {} }] });
    expect(out.messages[3]).toEqual({ role: 'assistant', content: 'done' });
  });

  it('trims the whitespace a prefill ends with (the Messages API refuses it), and only there', () => {
    const out = toMessages({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'a ' }, { role: 'user', content: 'x' }, { role: 'assistant', content: 'Answer:\n' }] });
    expect(out.messages.map((m: Body) => m.content)).toEqual(['hi', 'a ', 'x', 'Answer:']);
  });

  it('rejects a request with only system messages', () => {
    expect(thrown(() => toMessages({ messages: [{ role: 'system', content: 'x' }] })).errorType).toBe('invalid_request');
  });

  it('rejects an unknown role', () => {
    expect(thrown(() => toMessages({ messages: [{ role: 'function', content: 'x' }] })).message).toContain('messages[0].role');
  });
});

describe('chat → messages: content parts', () => {
  const cases: [string, Body, Body][] = [
    ['text (cache_control kept)', { type: 'text', text: 't', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 't', cache_control: { type: 'ephemeral' } }],
    ['image URL (detail dropped)', { type: 'image_url', image_url: { url: 'https://x/a.png', detail: 'high' } }, { type: 'image', source: { type: 'url', url: 'https://x/a.png' } }],
    ['image data URL', { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }],
    [
      'PDF file',
      { type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${PDF}` } },
      { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: PDF }, title: 'a.pdf' },
    ],
    [
      'plain-text file',
      { type: 'file', file: { file_data: `data:text/plain;base64,${Buffer.from('hello').toString('base64')}` } },
      { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'hello' } },
    ],
    [
      'PDF file by URL (OpenRouter\'s form) as a URL document, not as base64 data',
      { type: 'file', file: { filename: 'a.pdf', file_data: 'https://docs.example/a.pdf' } },
      { type: 'document', source: { type: 'url', url: 'https://docs.example/a.pdf' }, title: 'a.pdf' },
    ],
    ['image file', { type: 'file', file: { file_data: `data:image/jpeg;base64,${PNG}` } }, { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: PNG } }],
    ['image/jpg (a common misspelling) as image/jpeg', { type: 'image_url', image_url: { url: `data:image/jpg;base64,${PNG}` } }, { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: PNG } }],
    ['WebP image', { type: 'image_url', image_url: { url: `data:image/webp;base64,${PNG}` } }, { type: 'image', source: { type: 'base64', media_type: 'image/webp', data: PNG } }],
  ];
  it.each(cases)('%s', (_name, part, block) => {
    const out = toMessages({ messages: [{ role: 'user', content: [part] }] });
    expect(out.messages[0].content).toEqual([block]);
  });

  const bad: [string, Body, string][] = [
    ['file_id', { type: 'file', file: { file_id: 'file-1' } }, 'invalid_request'],
    ['audio', { type: 'input_audio', input_audio: { data: 'x', format: 'wav' } }, 'invalid_request'],
    ['unsupported file type', { type: 'file', file: { file_data: 'data:application/zip;base64,AA==' } }, 'invalid_request'],
    ['bad image URL', { type: 'image_url', image_url: { url: 'ftp://x/a.png' } }, 'invalid_image'],
    // The Messages API takes JPEG, PNG, GIF and WebP only: a BMP went upstream and came back as its 400.
    ['BMP image', { type: 'image_url', image_url: { url: 'data:image/bmp;base64,Qk0=' } }, 'unsupported_image_format'],
    ['SVG image file', { type: 'file', file: { file_data: 'data:image/svg+xml;base64,PHN2Zy8+' } }, 'unsupported_image_format'],
    ['unknown part', { type: 'video', video: {} }, 'invalid_request'],
  ];
  it.each(bad)('rejects %s', (_name, part, type) => {
    const e = thrown(() => toMessages({ messages: [{ role: 'user', content: [part] }] }));
    expect(e.errorType).toBe(type);
    expect(e.message).toContain('messages[0].content[0]');
  });
});

describe('chat → messages: tools and tool choice', () => {
  const fnTool = { type: 'function', function: { name: 'get', description: 'd', parameters: { type: 'object', properties: { q: { type: 'string' } } }, strict: true } };

  it('maps function tools and drops others', () => {
    const out = toMessages(chat({ tools: [fnTool, { type: 'custom', custom: { name: 'c' } }, { type: 'function', function: { name: 'bare' } }] }));
    expect(out.tools).toEqual([
      { name: 'get', description: 'd', input_schema: { type: 'object', properties: { q: { type: 'string' } } }, strict: true },
      { name: 'bare', input_schema: { type: 'object', properties: {} } },
    ]);
  });

  it('gives a function schema without `type` the object type the Messages API requires', () => {
    const tools = [
      { type: 'function', function: { name: 'empty', parameters: {} } },
      { type: 'function', function: { name: 'props', parameters: { properties: { q: { type: 'string' } }, required: ['q'] } } },
    ];
    expect(toMessages(chat({ tools })).tools).toEqual([
      { name: 'empty', input_schema: { type: 'object' } },
      { name: 'props', input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
    ]);
  });

  const choices: [string, Body, unknown][] = [
    ['none', { tool_choice: 'none' }, { type: 'none' }],
    ['auto', { tool_choice: 'auto' }, { type: 'auto' }],
    ['required', { tool_choice: 'required' }, { type: 'any' }],
    ['named', { tool_choice: { type: 'function', function: { name: 'get' } } }, { type: 'tool', name: 'get' }],
    ['parallel false alone', { parallel_tool_calls: false }, { type: 'auto', disable_parallel_tool_use: true }],
    ['required + parallel false', { tool_choice: 'required', parallel_tool_calls: false }, { type: 'any', disable_parallel_tool_use: true }],
    ['none ignores parallel', { tool_choice: 'none', parallel_tool_calls: false }, { type: 'none' }],
    ['no choice', {}, undefined],
  ];
  it.each(choices)('tool_choice %s', (_name, extra, expected) => {
    expect(toMessages(chat({ tools: [fnTool], ...extra })).tool_choice).toEqual(expected);
  });

  it('allowed_tools filters the tools and maps the mode', () => {
    const other = { type: 'function', function: { name: 'other' } };
    const out = toMessages(
      chat({ tools: [fnTool, other], tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: 'other' } }] } } }),
    );
    expect(out.tools.map((t: Body) => t.name)).toEqual(['other']);
    expect(out.tool_choice).toEqual({ type: 'any' });
  });

  it('drops tool_choice when no tool survives', () => {
    const out = toMessages(chat({ tool_choice: 'required', parallel_tool_calls: false }));
    expect(out).not.toHaveProperty('tools');
    expect(out).not.toHaveProperty('tool_choice');
  });

  it('maps parallel tool calls and merges consecutive tool results into one user turn', () => {
    const out = toMessages({
      messages: [
        { role: 'user', content: 'weather?' },
        {
          role: 'assistant',
          content: 'checking',
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'get', arguments: '{"q":"paris"}' } },
            { id: 'c2', type: 'function', function: { name: 'get', arguments: '' } },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
        { role: 'tool', tool_call_id: 'c2', content: [{ type: 'text', text: 'rain' }, { type: 'text', text: '!' }] },
        { role: 'user', content: 'thanks' },
      ],
    });
    expect(out.messages).toEqual([
      { role: 'user', content: 'weather?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'checking' },
          { type: 'tool_use', id: 'c1', name: 'get', input: { q: 'paris' } },
          { type: 'tool_use', id: 'c2', name: 'get', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'c1', content: 'sunny' },
          { type: 'tool_result', tool_use_id: 'c2', content: [{ type: 'text', text: 'rain' }, { type: 'text', text: '!' }] },
          { type: 'text', text: 'thanks' },
        ],
      },
    ]);
  });

  it('makes tool call ids the Messages API takes ([a-zA-Z0-9_-]), the same for a call and its result', () => {
    const out = toMessages({
      messages: [
        { role: 'assistant', content: null, tool_calls: [{ id: 'functions.get_weather:0', type: 'function', function: { name: 'get_weather', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'functions.get_weather:0', content: 'sunny' },
      ],
    });
    expect(out.messages[0].content[0]).toMatchObject({ type: 'tool_use', id: 'functions_get_weather_0' });
    expect(out.messages[1].content).toEqual([{ type: 'tool_result', tool_use_id: 'functions_get_weather_0', content: 'sunny' }]);
  });

  it('an empty tool result leaves content out (the documented empty tool_result; `content: ""` is reported refused)', () => {
    const call = { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'touch', arguments: '{}' } }] };
    for (const content of ['', [], null, [{ type: 'text', text: '' }]]) {
      const out = toMessages({ messages: [{ role: 'user', content: 'go' }, call, { role: 'tool', tool_call_id: 'c1', content }] });
      expect(out.messages[2].content).toEqual([{ type: 'tool_result', tool_use_id: 'c1' }]);
    }
  });

  it('a history with tool calls but no tools declares the tools it calls, and forbids calling them (tool_choice none)', () => {
    const history = [
      { role: 'user', content: 'weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }, { id: 'c2', type: 'function', function: { name: 'get_time', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
      { role: 'tool', tool_call_id: 'c2', content: 'noon' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c3', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } }] },
      { role: 'tool', tool_call_id: 'c3', content: 'rain' },
      { role: 'user', content: 'summarize' },
    ];
    const out = toMessages({ messages: history });
    expect(out.tools).toEqual([
      { name: 'get_weather', input_schema: { type: 'object' } },
      { name: 'get_time', input_schema: { type: 'object' } },
    ]);
    expect(out.tool_choice).toEqual({ type: 'none' });
    expect(out.messages[1].content[0]).toMatchObject({ type: 'tool_use', name: 'get_weather' });
    // Tools the client offers are sent as they are; a conversation without calls gets none.
    const offered = toMessages({ messages: history, tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }] });
    expect(offered.tools).toEqual([{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }]);
    expect(offered.tool_choice).toBeUndefined();
    expect(toMessages(chat())).not.toHaveProperty('tools');
  });

  it('puts tool results first in the user turn they are merged into (the Messages API refuses text before them)', () => {
    const out = toMessages({
      messages: [
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get', arguments: '{}' } }] },
        { role: 'user', content: 'also this' },
        { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
      ],
    });
    expect(out.messages[1]).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'c1', content: 'sunny' },
        { type: 'text', text: 'also this' },
      ],
    });
  });

  it.each([
    ['not JSON', '{"q":'],
    ['not an object', '[1,2]'],
  ])('rejects tool call arguments that are %s, naming the message', (_name, args) => {
    const e = thrown(() =>
      toMessages({
        messages: [
          { role: 'user', content: 'x' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: args } }] },
        ],
      }),
    );
    expect(e.errorType).toBe('invalid_request');
    expect(e.status).toBe(400);
    expect(e.message).toContain('Message 1');
    expect(e.message).toContain('messages[1].tool_calls[0].function.arguments');
  });
});

describe('chat → messages: reasoning', () => {
  const cases: [string, Body, Body | undefined, number][] = [
    ['low', { reasoning_effort: 'low' }, { type: 'enabled', budget_tokens: 1024 }, 4096],
    ['medium', { reasoning_effort: 'medium' }, { type: 'enabled', budget_tokens: 4096 }, 8192],
    ['high (max_tokens raised)', { reasoning_effort: 'high' }, { type: 'enabled', budget_tokens: 16384 }, 16384 + 4096],
    ['reasoning.effort', { reasoning: { effort: 'minimal' } }, { type: 'enabled', budget_tokens: 1024 }, 4096],
    ['reasoning.max_tokens wins', { reasoning: { effort: 'high', max_tokens: 2000 } }, { type: 'enabled', budget_tokens: 2000 }, 4096],
    ['budget raised to the minimum', { reasoning: { max_tokens: 10 } }, { type: 'enabled', budget_tokens: 1024 }, 4096],
    ['enabled alone = medium', { reasoning: { enabled: true } }, { type: 'enabled', budget_tokens: 4096 }, 8192],
    ['exclude → display omitted', { reasoning: { effort: 'low', exclude: true } }, { type: 'enabled', budget_tokens: 1024, display: 'omitted' }, 4096],
    ['budget shrunk under a client limit', { reasoning_effort: 'high', max_completion_tokens: 3000 }, { type: 'enabled', budget_tokens: 2999 }, 3000],
    ['client limit too small: no thinking', { reasoning_effort: 'high', max_tokens: 1000 }, undefined, 1000],
    ['none → disabled', { reasoning_effort: 'none' }, { type: 'disabled' }, 4096],
    ['enabled false → disabled', { reasoning: { enabled: false } }, { type: 'disabled' }, 4096],
    ['nothing asked', {}, undefined, 4096],
  ];
  it.each(cases)('%s', (_name, extra, thinking, maxTokens) => {
    const out = toMessages(chat(extra));
    expect(out.thinking).toEqual(thinking);
    expect(out.max_tokens).toBe(maxTokens);
    expect(out).not.toHaveProperty('reasoning_effort');
    expect(out).not.toHaveProperty('reasoning');
  });

  it('drops sampling settings messages rejects with thinking', () => {
    const out = toMessages(chat({ reasoning_effort: 'low', temperature: 0.3, top_k: 5, top_p: 0.5 }));
    expect(out).not.toHaveProperty('temperature');
    expect(out).not.toHaveProperty('top_k');
    expect(out).not.toHaveProperty('top_p');
    expect(toMessages(chat({ reasoning_effort: 'low', top_p: 0.97 })).top_p).toBe(0.97);
  });

  it('turns signed reasoning_details into thinking blocks and drops unsigned reasoning', () => {
    const out = toMessages({
      messages: [
        { role: 'user', content: 'q' },
        {
          role: 'assistant',
          content: 'a',
          reasoning: 'plain reasoning',
          reasoning_details: [
            { type: 'reasoning.text', text: 'signed', signature: 'sig' },
            { type: 'reasoning.text', text: 'unsigned' },
            { type: 'reasoning.encrypted', data: 'enc' },
          ],
        },
      ],
    });
    expect(out.messages[1].content).toEqual([
      { type: 'thinking', thinking: 'signed', signature: 'sig' },
      { type: 'redacted_thinking', data: 'enc' },
      { type: 'text', text: 'a' },
    ]);
  });

  it("replays only Claude's signed reasoning (another model's signature is refused by the Messages API), from reasoning_details or LiteLLM's thinking_blocks", () => {
    const history = (assistant: Body) => toMessages({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a', ...assistant }] }).messages[1].content;
    expect(
      history({
        reasoning_details: [
          { type: 'reasoning.text', text: 'gemini', signature: 'g-sig', format: 'google-gemini-v1' },
          { type: 'reasoning.encrypted', data: 'o-enc', format: 'openai-responses-v1' },
          { type: 'reasoning.text', text: 'claude', signature: 'c-sig', format: 'anthropic-claude-v1' },
        ],
      }),
    ).toEqual([
      { type: 'thinking', thinking: 'claude', signature: 'c-sig' },
      { type: 'text', text: 'a' },
    ]);
    expect(
      history({
        thinking_blocks: [
          { type: 'thinking', thinking: 't', signature: 's' },
          { type: 'redacted_thinking', data: 'r' },
        ],
      }),
    ).toEqual([
      { type: 'thinking', thinking: 't', signature: 's' },
      { type: 'redacted_thinking', data: 'r' },
      { type: 'text', text: 'a' },
    ]);
  });

  const loop = (details?: Body[]) => [
    { role: 'user', content: 'q' },
    { role: 'assistant', content: null, reasoning_details: details, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'c', content: 'r' },
  ];
  it('leaves thinking off inside a tool loop without a signed thinking block', () => {
    expect(toMessages({ messages: loop(), reasoning_effort: 'low' })).not.toHaveProperty('thinking');
    expect(toMessages({ messages: loop([{ type: 'reasoning.text', text: 't', signature: 's' }]), reasoning_effort: 'low' }).thinking).toEqual({
      type: 'enabled',
      budget_tokens: 1024,
    });
  });

  it('leaves thinking off with a forced tool or a prefilled assistant turn (the Messages API refuses both with it)', () => {
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
    const user = [{ role: 'user', content: 'hi' }];
    for (const tool_choice of ['required', { type: 'function', function: { name: 'f' } }]) {
      const out = toMessages({ messages: user, tools, tool_choice, reasoning_effort: 'high', temperature: 0.5 });
      expect(out).not.toHaveProperty('thinking');
      expect(out.temperature).toBe(0.5); // kept: thinking is off
    }
    expect(toMessages({ messages: user, tools, tool_choice: 'auto', reasoning_effort: 'high' }).thinking).toMatchObject({ type: 'enabled' });
    expect(toMessages({ messages: [...user, { role: 'assistant', content: 'Sure,' }], reasoning_effort: 'medium' })).not.toHaveProperty('thinking');
  });

  it('leaves out stop sequences that are only whitespace (the Messages API refuses them)', () => {
    expect(toMessages({ messages: [{ role: 'user', content: 'hi' }], stop: '\n' })).not.toHaveProperty('stop_sequences');
    expect(toMessages({ messages: [{ role: 'user', content: 'hi' }], stop: ['\n\n', 'END', ' '] }).stop_sequences).toEqual(['END']);
  });
});

describe('messages → chat: top-level fields', () => {
  const cases: [string, Body, Body, string[]][] = [
    ['max_tokens → max_completion_tokens', {}, { model: 'm', max_completion_tokens: 100 }, ['max_tokens']],
    ['sampling', { temperature: 0.5, top_p: 0.8, top_k: 10 }, { temperature: 0.5, top_p: 0.8, top_k: 10 }, []],
    ['stop_sequences → stop', { stop_sequences: ['X', 'Y'] }, { stop: ['X', 'Y'] }, ['stop_sequences']],
    ['stream adds include_usage', { stream: true }, { stream: true, stream_options: { include_usage: true } }, []],
    ['stream false', { stream: false }, { stream: false }, ['stream_options']],
    ['metadata.user_id → user', { metadata: { user_id: 'u1' } }, { user: 'u1' }, ['metadata']],
    ['messages user → user', { user: 'u2' }, { user: 'u2' }, []],
    ['service_tier', { service_tier: 'auto' }, { service_tier: 'auto' }, []],
    ['service_tier standard_only → default', { service_tier: 'standard_only' }, { service_tier: 'default' }, []],
    ['service_tier of no chat meaning dropped', { service_tier: 'bogus' }, {}, ['service_tier']],
    [
      'dropped fields',
      { cache_control: { type: 'ephemeral' }, context_management: { edits: [] }, container: 'c', mcp_servers: [] },
      {},
      ['cache_control', 'context_management', 'container', 'mcp_servers'],
    ],
    [
      'output_config.format → response_format',
      { output_config: { format: { type: 'json_schema', schema: { type: 'object' } } } },
      { response_format: { type: 'json_schema', json_schema: { name: 'output', schema: { type: 'object' }, strict: true } } },
      ['output_config'],
    ],
    ['thinking enabled small → low', { thinking: { type: 'enabled', budget_tokens: 1024 } }, { reasoning_effort: 'low' }, ['thinking']],
    ['thinking enabled mid → medium', { thinking: { type: 'enabled', budget_tokens: 5000 } }, { reasoning_effort: 'medium' }, []],
    ['thinking enabled big → high', { thinking: { type: 'enabled', budget_tokens: 20000 } }, { reasoning_effort: 'high' }, []],
    ['output_config.effort wins', { thinking: { type: 'adaptive' }, output_config: { effort: 'max' } }, { reasoning_effort: 'max' }, []],
    ['adaptive alone', { thinking: { type: 'adaptive' } }, {}, ['reasoning_effort', 'reasoning']],
    ['between_tools alone', { thinking: { type: 'between_tools' } }, {}, ['reasoning_effort', 'reasoning']],
    // display and block_binding have no chat form: dropped, the effort still goes.
    ['display and block_binding dropped', { thinking: { type: 'enabled', budget_tokens: 5000, display: 'omitted', block_binding: 'x' } }, { reasoning_effort: 'medium' }, ['reasoning', 'display', 'block_binding']],
    // Reasoning off as chat says it (routing/parameters.ts sends it as the endpoint takes it), over any effort.
    ['disabled', { thinking: { type: 'disabled' } }, { reasoning: { enabled: false } }, ['reasoning_effort']],
    ['disabled over an effort', { thinking: { type: 'disabled' }, output_config: { effort: 'high' } }, { reasoning: { enabled: false } }, ['reasoning_effort']],
  ];
  it.each(cases)('%s', (_name, extra, expected, absent) => {
    const out = toChat(msgs(extra));
    expect(out).toMatchObject(expected);
    for (const k of absent) expect(out).not.toHaveProperty(k);
  });

  it.each([
    ['string', 'be brief', 'be brief'],
    ['one block (cache_control dropped)', [{ type: 'text', text: 'be brief', cache_control: { type: 'ephemeral' } }], 'be brief'],
    // One string, not text parts: DeepSeek's and Moonshot's chat APIs refuse a list ("expected a string").
    ['several blocks', [{ type: 'text', text: 'a', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'b' }], 'a\nb'],
  ])('system %s → a leading system message', (_name, system, content) => {
    const out = toChat(msgs({ system }));
    expect(out.messages[0]).toEqual({ role: 'system', content });
    expect(out.messages[1]).toEqual({ role: 'user', content: 'hi' });
    expect(out).not.toHaveProperty('system');
  });
});

describe('messages → chat: content blocks', () => {
  const cases: [string, Body, Body][] = [
    ['image url', { type: 'image', source: { type: 'url', url: 'https://x/a.png' } }, { type: 'image_url', image_url: { url: 'https://x/a.png' } }],
    ['image base64', { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }],
    [
      'PDF document',
      { type: 'document', title: 'r.pdf', source: { type: 'base64', media_type: 'application/pdf', data: PDF }, cache_control: { type: 'ephemeral' } },
      { type: 'file', file: { filename: 'r.pdf', file_data: `data:application/pdf;base64,${PDF}` } },
    ],
  ];
  it.each(cases)('%s', (_name, block, part) => {
    const out = toChat(msgs({ messages: [{ role: 'user', content: [{ type: 'text', text: 'see' }, block] }] }));
    expect(out.messages[0]).toEqual({ role: 'user', content: [{ type: 'text', text: 'see' }, part] });
  });

  it('a text document becomes text: with the text around it, one string', () => {
    const doc = { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'doc text' } };
    expect(toChat(msgs({ messages: [{ role: 'user', content: [{ type: 'text', text: 'see' }, doc] }] })).messages[0]).toEqual({ role: 'user', content: 'see\ndoc text' });
  });

  it('text-only content of every role goes as one string (chat providers that take only strings take it)', () => {
    const texts = (a: string, b: string) => [{ type: 'text', text: a }, { type: 'text', text: b }];
    const out = toChat(
      msgs({
        messages: [
          { role: 'user', content: texts('<reminder>', 'q') },
          { role: 'assistant', content: [...texts('let me', 'check'), { type: 'tool_use', id: 't1', name: 'f', input: {} }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: texts('r1', 'r2') }, ...texts('and', 'more')] },
        ],
      }),
    );
    expect(out.messages).toEqual([
      { role: 'user', content: '<reminder>\nq' },
      { role: 'assistant', content: 'let me\ncheck', tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 't1', content: 'r1\nr2' },
      { role: 'user', content: 'and\nmore' },
    ]);
  });

  it('a lone text block becomes a string', () => {
    expect(toChat(msgs({ messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }] })).messages[0]).toEqual({ role: 'user', content: 'x' });
  });

  it.each([
    ['URL document', { type: 'document', source: { type: 'url', url: 'https://x/a.pdf' } }],
    ['file image', { type: 'image', source: { type: 'file', file_id: 'f' } }],
    ['unknown block', { type: 'container_upload', file_id: 'f' }],
  ])('rejects a %s', (_name, block) => {
    const e = thrown(() => toChat(msgs({ messages: [{ role: 'user', content: [block] }] })));
    expect(e.errorType).toBe('invalid_request');
    expect(e.message).toContain('messages[0].content[0]');
  });

  it('assistant tool_use → tool_calls; thinking and server-tool blocks dropped; tool results → tool messages first', () => {
    const out = toChat(
      msgs({
        messages: [
          { role: 'user', content: 'q' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'hmm', signature: 's' },
              { type: 'redacted_thinking', data: 'x' },
              { type: 'server_tool_use', id: 'srv', name: 'web_search', input: {} },
              { type: 'web_search_tool_result', tool_use_id: 'srv', content: [] },
              { type: 'text', text: 'calling' },
              { type: 'tool_use', id: 't1', name: 'f', input: { a: 1 } },
              { type: 'tool_use', id: 't2', name: 'g', input: {} },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 't1', content: 'ok', is_error: true },
              {
                type: 'tool_result',
                tool_use_id: 't2',
                content: [
                  { type: 'text', text: 'see image' },
                  { type: 'image', source: { type: 'url', url: 'https://x/i.png' } },
                ],
              },
              { type: 'text', text: 'go on' },
            ],
          },
        ],
      }),
    );
    expect(out.messages).toEqual([
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: 'calling',
        tool_calls: [
          { id: 't1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
          { id: 't2', type: 'function', function: { name: 'g', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 't1', content: 'Error: ok' },
      { role: 'tool', tool_call_id: 't2', content: 'see image' },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/i.png' } }, { type: 'text', text: 'go on' }] },
    ]);
  });

  it('says a failed tool call (is_error: true) in the chat tool message, which has no error flag', () => {
    const result = (content: unknown, is_error?: boolean) => ({ type: 'tool_result', tool_use_id: 't', content, ...(is_error === undefined ? {} : { is_error }) });
    const out = toChat(
      msgs({
        messages: [
          { role: 'user', content: 'q' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] },
          {
            role: 'user',
            content: [
              result('file not found', true),
              result([{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }], true),
              result(undefined, true),
              result('fine', false),
              result('fine'),
            ],
          },
        ],
      }),
    );
    expect(out.messages.slice(2).map((m: Body) => m.content)).toEqual(['Error: file not found', 'Error: a\nb', 'Error', 'fine', 'fine']);
  });

  it('an assistant turn with only thinking is skipped; tool-only turn has null content', () => {
    const out = toChat(
      msgs({
        messages: [
          { role: 'user', content: 'q' },
          { role: 'assistant', content: [{ type: 'thinking', thinking: 'x', signature: 's' }] },
          { role: 'user', content: 'again' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] },
        ],
      }),
    );
    expect(out.messages.map((m: Body) => m.role)).toEqual(['user', 'user', 'assistant']);
    expect(out.messages[2].content).toBeNull();
  });
});

describe('messages → chat: tools and tool choice', () => {
  const tool = { name: 'get', description: 'd', input_schema: { type: 'object', properties: {} }, strict: true, cache_control: { type: 'ephemeral' } };

  it('maps custom tools and drops server tools', () => {
    const out = toChat(msgs({ tools: [tool, { type: 'custom', name: 'c', input_schema: { type: 'object' } }, { type: 'web_search_20250305', name: 'web_search' }, { type: 'bash_20250124', name: 'bash' }] }));
    expect(out.tools).toEqual([
      { type: 'function', function: { name: 'get', description: 'd', parameters: { type: 'object', properties: {} }, strict: true } },
      { type: 'function', function: { name: 'c', parameters: { type: 'object', properties: {} } } },
    ]);
  });

  it('gives an object schema the `properties` (and an array or no `required`) OpenAI requires', () => {
    const tools = [
      { name: 'none', input_schema: { type: 'object' } },
      { name: 'nulls', input_schema: { type: 'object', properties: null, required: null } },
      { name: 'req', input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: null } },
      { name: 'whole', input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
    ];
    expect(toChat(msgs({ tools })).tools.map((t: Body) => t.function.parameters)).toEqual([
      { type: 'object', properties: {} },
      { type: 'object', properties: {} },
      { type: 'object', properties: { q: { type: 'string' } } },
      { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
    ]);
  });

  const choices: [string, Body, unknown, boolean | undefined][] = [
    ['auto', { type: 'auto' }, 'auto', undefined],
    ['any', { type: 'any' }, 'required', undefined],
    ['none', { type: 'none' }, 'none', undefined],
    ['tool', { type: 'tool', name: 'get' }, { type: 'function', function: { name: 'get' } }, undefined],
    ['auto, no parallel', { type: 'auto', disable_parallel_tool_use: true }, 'auto', false],
  ];
  it.each(choices)('tool_choice %s', (_name, choice, expected, parallel) => {
    const out = toChat(msgs({ tools: [tool], tool_choice: choice }));
    expect(out.tool_choice).toEqual(expected);
    expect(out.parallel_tool_calls).toBe(parallel);
  });

  it('drops tool_choice when only server tools were given', () => {
    const out = toChat(msgs({ tools: [{ type: 'web_search_20250305', name: 'web_search' }], tool_choice: { type: 'any' } }));
    expect(out).not.toHaveProperty('tools');
    expect(out).not.toHaveProperty('tool_choice');
  });
});

describe('effort ↔ budget', () => {
  it('every effort maps back to itself where chat has the level', () => {
    for (const e of ['low', 'medium', 'high'] as const) expect(budgetToEffort(EFFORT_BUDGET[e])).toBe(e);
    expect(budgetToEffort(EFFORT_BUDGET.minimal)).toBe('low');
  });
});

describe('round trips', () => {
  const rich: Body = {
    model: 'gpt-x',
    messages: [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }] },
      { role: 'assistant', content: 'calling', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get', arguments: '{"q": "x"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'result' },
      { role: 'assistant', content: 'prefix' },
    ],
    max_completion_tokens: 500,
    temperature: 0.7,
    top_p: 0.9,
    top_k: 20,
    stop: ['END'],
    stream: true,
    user: 'u',
    service_tier: 'auto',
    tools: [{ type: 'function', function: { name: 'get', description: 'd', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }],
    tool_choice: 'required',
    parallel_tool_calls: false,
    response_format: { type: 'json_schema', json_schema: { name: 'output', schema: { type: 'object' }, strict: true } },
  };

  it('chat → messages → chat keeps the meaning', () => {
    const back = toChat(toMessages(rich));
    const normalized = {
      ...back,
      messages: back.messages.map((m: Body) =>
        m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c: Body) => ({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) } : m,
      ),
    };
    const expected = {
      ...rich,
      max_completion_tokens: 500,
      stream_options: { include_usage: true },
      messages: rich.messages.map((m: Body) => (m.tool_calls ? { ...m, tool_calls: [{ ...m.tool_calls[0], function: { name: 'get', arguments: { q: 'x' } } }] } : m)),
    };
    expect(normalized).toEqual(expected);
  });

  it.each(['low', 'medium', 'high'])('reasoning_effort %s survives chat → messages → chat', (effort) => {
    expect(toChat(toMessages(chat({ reasoning_effort: effort }))).reasoning_effort).toBe(effort);
  });

  it('messages → chat → messages keeps the meaning', () => {
    const m: Body = {
      model: 'claude-x',
      max_tokens: 800,
      system: 'sys',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'doc:' }, { type: 'document', title: 'a.pdf', source: { type: 'base64', media_type: 'application/pdf', data: PDF } }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: { x: [1, 2] } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'done' }] },
      ],
      temperature: 0.2,
      stop_sequences: ['S'],
      metadata: { user_id: 'u' },
      tools: [{ name: 'f', description: 'd', input_schema: { type: 'object', properties: {} } }],
      tool_choice: { type: 'tool', name: 'f', disable_parallel_tool_use: true },
      output_config: { format: { type: 'json_schema', schema: { type: 'object' } } },
      stream: false,
    };
    expect(toMessages(toChat(m))).toEqual(m);
  });
});
