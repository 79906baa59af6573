import { describe, it, expect } from 'vitest';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { chatToMessagesResponse, messagesToChatResponse } from '../../src/dialects/translate/response';
import { chatToMessagesStream, messagesToChatStream, type StreamTranslator } from '../../src/dialects/translate/stream';
import type { SseEvent } from '../../src/pipeline/types';
import { formatSse } from '../../src/providers/sse';

type Obj = Record<string, any>;

const DONE: SseEvent = { data: '[DONE]' };

function run(t: StreamTranslator, events: SseEvent[]): SseEvent[] {
  return [...events.flatMap((e) => t.push(e)), ...t.end()];
}

function pieces(s: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

// ---- input builders ----

const mev = (type: string, data: Obj = {}): SseEvent => ({ event: type, data: JSON.stringify({ type, ...data }) });

/** A messages-style event sequence for a message, with every text and JSON split into `size`-char deltas. */
function messagesEvents(msg: Obj, size = 3, finish = true): SseEvent[] {
  const { output_tokens, output_tokens_details, ...inputUsage } = msg.usage;
  const out: SseEvent[] = [
    mev('message_start', { message: { ...msg, content: [], stop_reason: null, stop_sequence: null, usage: { ...inputUsage, output_tokens: 1 } } }),
    mev('ping'),
  ];
  msg.content.forEach((b: Obj, index: number) => {
    if (b.type === 'text') {
      out.push(mev('content_block_start', { index, content_block: { type: 'text', text: '' } }));
      for (const p of pieces(b.text, size)) out.push(mev('content_block_delta', { index, delta: { type: 'text_delta', text: p } }));
    } else if (b.type === 'thinking') {
      out.push(mev('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } }));
      for (const p of pieces(b.thinking, size)) out.push(mev('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: p } }));
      out.push(mev('content_block_delta', { index, delta: { type: 'signature_delta', signature: 'EqSig' } }));
    } else if (b.type === 'tool_use') {
      out.push(mev('content_block_start', { index, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } }));
      const json = Object.keys(b.input).length > 0 ? JSON.stringify(b.input) : '';
      for (const p of pieces(json, size)) out.push(mev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: p } }));
    }
    out.push(mev('content_block_stop', { index }));
    if (index === 0) out.push(mev('ping'));
  });
  const delta: Obj = { stop_reason: msg.stop_reason, stop_sequence: msg.stop_sequence ?? null };
  if (msg.stop_details) delta.stop_details = msg.stop_details;
  const usage: Obj = { output_tokens };
  if (output_tokens_details) usage.output_tokens_details = output_tokens_details;
  out.push(mev('message_delta', { delta, usage }));
  if (finish) out.push(mev('message_stop'), DONE);
  return out;
}

/** A chat chunk sequence for a chat.completion; tool-call arguments split into `size`-char fragments. */
function chatChunks(body: Obj, opts: { size?: number; interleave?: boolean; idFirst?: boolean } = {}): SseEvent[] {
  const size = opts.size ?? 3;
  const base = { id: body.id, object: 'chat.completion.chunk', created: body.created, model: body.model };
  const c = (delta: Obj, finish: string | null = null): SseEvent => ({ data: JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }) });
  const m = body.choices[0].message;
  const out: SseEvent[] = [c({ role: 'assistant', content: '' })];
  for (const p of pieces(m.reasoning ?? '', size)) out.push(c({ reasoning: p }));
  for (const p of pieces(m.content ?? '', size)) out.push(c({ content: p }));
  for (const p of pieces(m.refusal ?? '', size)) out.push(c({ refusal: p }));
  const calls: Obj[] = m.tool_calls ?? [];
  const frags = calls.map((t) => pieces(t.function.arguments, size));
  const head = (t: Obj, i: number) =>
    opts.idFirst
      ? [c({ tool_calls: [{ index: i, id: t.id, type: 'function', function: { arguments: '' } }] }), c({ tool_calls: [{ index: i, function: { name: t.function.name } }] })]
      : [c({ tool_calls: [{ index: i, id: t.id, type: 'function', function: { name: t.function.name, arguments: '' } }] })];
  const frag = (i: number, p: string) => c({ tool_calls: [{ index: i, function: { arguments: p } }] });
  if (opts.interleave) {
    calls.forEach((t, i) => out.push(...head(t, i)));
    for (let k = 0; k < Math.max(0, ...frags.map((f) => f.length)); k++) frags.forEach((f, i) => f[k] !== undefined && out.push(frag(i, f[k])));
  } else {
    calls.forEach((t, i) => out.push(...head(t, i), ...frags[i].map((p) => frag(i, p))));
  }
  out.push(c({}, body.choices[0].finish_reason));
  const usageChunk: Obj = { ...base, choices: [], usage: body.usage };
  if (body.service_tier) usageChunk.service_tier = body.service_tier;
  out.push({ data: JSON.stringify(usageChunk) }, DONE);
  return out;
}

// ---- accumulators (strict about well-formedness, as the SDKs' accumulators rely on it) ----

/** Accumulates chat chunks like the OpenAI SDK does and returns the equivalent chat.completion. */
function accumulateChat(events: SseEvent[]): Obj {
  expect(events.at(-1)).toEqual(DONE);
  expect(events.filter((e) => e.data === '[DONE]')).toHaveLength(1);
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
  const last = chunks.at(-1);
  expect(last.choices).toEqual([]);
  expect(last.usage).toBeDefined();
  let out: Obj | null = null;
  let finishes = 0;
  for (const ch of chunks) {
    expect(ch.object).toBe('chat.completion.chunk');
    if (!out) {
      expect(ch.choices[0].delta.role).toBe('assistant');
      out = { id: ch.id, object: 'chat.completion', created: 0, model: ch.model, choices: [{ index: 0, message: {}, finish_reason: null, logprobs: null }] };
    }
    expect(ch.id).toBe(out.id);
    if (ch.service_tier) out.service_tier = ch.service_tier;
    if ('system_fingerprint' in ch) out.system_fingerprint = ch.system_fingerprint;
    if (ch.usage) out.usage = ch.usage;
    const choice = ch.choices[0];
    if (!choice) continue;
    const msg = out.choices[0].message;
    const d = choice.delta;
    if (d.role) msg.role = d.role;
    if (d.content) msg.content = (msg.content ?? '') + d.content;
    if (d.reasoning) msg.reasoning = (msg.reasoning ?? '') + d.reasoning;
    if (d.refusal) msg.refusal = (msg.refusal ?? '') + d.refusal;
    for (const tc of d.tool_calls ?? []) {
      msg.tool_calls ??= [];
      const prev = msg.tool_calls[tc.index];
      if (!prev) {
        expect(tc.id).toBeTruthy();
        expect(tc.type).toBe('function');
        expect(tc.function.name).toBeTruthy();
        msg.tool_calls[tc.index] = { id: tc.id, type: 'function', function: { name: tc.function.name, arguments: tc.function.arguments ?? '' } };
      } else {
        expect(tc.id).toBeUndefined();
        prev.function.arguments += tc.function.arguments ?? '';
      }
    }
    if (choice.finish_reason) {
      finishes++;
      out.choices[0].finish_reason = choice.finish_reason;
    }
  }
  expect(finishes).toBe(1);
  const msg = out!.choices[0].message;
  out!.choices[0].message = { role: msg.role, content: msg.content ?? null, refusal: msg.refusal ?? null, ...msg };
  for (const tc of msg.tool_calls ?? []) JSON.parse(tc.function.arguments); // always valid JSON
  return out!;
}

/** Accumulates messages-style events like the Anthropic SDK does, checking order, indexes and block types. */
function accumulateMessages(events: SseEvent[]): Obj {
  let msg: Obj | null = null;
  let open: number | null = null;
  const json: string[] = [];
  let stopped = false;
  for (const e of events) {
    const data = JSON.parse(e.data);
    expect(e.event).toBe(data.type);
    expect(stopped).toBe(false);
    if (data.type === 'message_start') {
      expect(msg).toBeNull();
      msg = structuredClone(data.message);
      continue;
    }
    expect(msg).not.toBeNull();
    const m = msg!;
    switch (data.type) {
      case 'content_block_start':
        expect(open).toBeNull();
        expect(data.index).toBe(m.content.length);
        m.content.push({ ...data.content_block });
        open = data.index;
        json[data.index] = '';
        break;
      case 'content_block_delta': {
        expect(data.index).toBe(open);
        const b = m.content[data.index];
        const d = data.delta;
        if (d.type === 'text_delta') expect(b.type).toBe('text'), (b.text += d.text);
        else if (d.type === 'thinking_delta') expect(b.type).toBe('thinking'), (b.thinking += d.thinking);
        else if (d.type === 'signature_delta') expect(b.type).toBe('thinking'), (b.signature = d.signature);
        else if (d.type === 'input_json_delta') expect(b.type).toBe('tool_use'), (json[data.index] += d.partial_json);
        else throw new Error(`unexpected delta ${d.type}`);
        break;
      }
      case 'content_block_stop': {
        expect(data.index).toBe(open);
        const b = m.content[data.index];
        if (b.type === 'tool_use' && json[data.index]) b.input = JSON.parse(json[data.index]);
        open = null;
        break;
      }
      case 'message_delta':
        expect(open).toBeNull();
        m.stop_reason = data.delta.stop_reason;
        m.stop_sequence = data.delta.stop_sequence;
        m.stop_details = data.delta.stop_details;
        expect(typeof data.usage.output_tokens).toBe('number');
        Object.assign(m.usage, data.usage);
        break;
      case 'message_stop':
        stopped = true;
        break;
      default:
        throw new Error(`unexpected event ${data.type}`);
    }
  }
  expect(stopped).toBe(true);
  return msg!;
}

// ---- fixtures ----

function message(over: Obj = {}): Obj {
  const usage = { input_tokens: 12, output_tokens: 8, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const content = [{ type: 'text', text: 'Hello there, how are you?' }];
  return { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-x', content, stop_reason: 'end_turn', stop_sequence: null, stop_details: null, container: null, usage, ...over };
}

const TOOLS_MESSAGE = message({
  content: [
    { type: 'thinking', thinking: 'The user wants weather and time.', signature: '' },
    { type: 'text', text: 'Let me check both.' },
    { type: 'tool_use', id: 'toolu_a', name: 'weather', input: { city: 'Paris', units: 'metric', days: [1, 2, 3] } },
    { type: 'tool_use', id: 'toolu_b', name: 'time', input: { tz: 'Europe/Paris' } },
    { type: 'tool_use', id: 'toolu_c', name: 'ping', input: {} },
  ],
  stop_reason: 'tool_use',
  usage: { input_tokens: 20, output_tokens: 120, cache_creation_input_tokens: 30, cache_read_input_tokens: 400, output_tokens_details: { reasoning_tokens: 50, thinking_tokens: 50 } },
});

function completion(msg: Obj, finish: string, over: Obj = {}): Obj {
  const usage = { prompt_tokens: 500, completion_tokens: 90, total_tokens: 590, prompt_tokens_details: { cached_tokens: 300, cache_write_tokens: 40 }, completion_tokens_details: { reasoning_tokens: 25 } };
  const choice = { index: 0, message: { role: 'assistant', content: null, refusal: null, ...msg }, finish_reason: finish, logprobs: null };
  return { id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: 'gpt-x', choices: [choice], usage, ...over };
}

const TOOLS_COMPLETION = completion(
  {
    content: 'Checking two things.',
    reasoning: 'Need weather and time in parallel.',
    tool_calls: [
      { id: 'call_a', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo","days":[1,2],"detail":{"wind":true}}' } },
      { id: 'call_b', type: 'function', function: { name: 'time', arguments: '{"tz":"Europe/Oslo"}' } },
    ],
  },
  'tool_calls',
);

const withoutCreated = (o: Obj): Obj => ({ ...o, created: 0 });
/** One hand-written chat chunk. */
const cc = (delta: Obj, finish: string | null = null): SseEvent =>
  ({ data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] }) });

// ---- messages → chat ----

describe('messagesToChatStream', () => {
  it('streams text and reproduces the non-streaming translation', () => {
    const t = messagesToChatStream();
    const out = run(t, messagesEvents(message()));
    expect(t.complete).toBe(true);
    expect(accumulateChat(out)).toEqual(withoutCreated(messagesToChatResponse(message())));
    expect(out.every((e) => !e.data.includes('ping'))).toBe(true);
  });

  it('carries system_fingerprint: null on every chunk, as OpenAI streams the field and the JSON translation has it', () => {
    const chunks = run(messagesToChatStream(), messagesEvents(TOOLS_MESSAGE)).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chunks.length).toBeGreaterThan(3);
    for (const ch of chunks) expect(ch).toHaveProperty('system_fingerprint', null);
  });

  it('is incremental: each text delta is answered by a chunk at once', () => {
    const t = messagesToChatStream();
    const [start, , blockStart, d1, d2] = messagesEvents(message(), 5);
    expect(t.push(start)).toHaveLength(1);
    expect(t.push(blockStart)).toEqual([]);
    expect(JSON.parse(t.push(d1)[0].data).choices[0].delta).toEqual({ content: 'Hello' });
    expect(JSON.parse(t.push(d2)[0].data).choices[0].delta).toEqual({ content: ' ther' });
    expect(t.complete).toBe(false);
  });

  it('streams thinking, text and parallel tool calls (arguments in many chunks) like the non-streaming translation', () => {
    const out = run(messagesToChatStream(), messagesEvents(TOOLS_MESSAGE, 2));
    const acc = accumulateChat(out);
    expect(acc).toEqual(withoutCreated(messagesToChatResponse(TOOLS_MESSAGE)));
    expect(acc.choices[0].message.tool_calls.map((c: Obj) => c.function.arguments)).toEqual([
      '{"city":"Paris","units":"metric","days":[1,2,3]}',
      '{"tz":"Europe/Paris"}',
      '{}',
    ]);
    const argChunks = out.filter((e) => e.data.includes('"tool_calls"')).length;
    expect(argChunks).toBeGreaterThan(20);
    expect(acc.usage).toEqual({
      prompt_tokens: 450,
      completion_tokens: 120,
      total_tokens: 570,
      prompt_tokens_details: { cached_tokens: 400, cache_write_tokens: 30 },
      completion_tokens_details: { reasoning_tokens: 50 },
    });
  });

  it('drops server tool and redacted thinking blocks, keeping client tool indexes dense', () => {
    const events = [
      mev('message_start', { message: message({ content: [], stop_reason: null }) }),
      mev('content_block_start', { index: 0, content_block: { type: 'redacted_thinking', data: 'opaque' } }),
      mev('content_block_stop', { index: 0 }),
      mev('content_block_start', { index: 1, content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } }),
      mev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: '{"query":"x"}' } }),
      mev('content_block_stop', { index: 1 }),
      mev('content_block_start', { index: 2, content_block: { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [] } }),
      mev('content_block_stop', { index: 2 }),
      mev('content_block_start', { index: 3, content_block: { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} } }),
      mev('content_block_delta', { index: 3, delta: { type: 'input_json_delta', partial_json: '{"a":1}' } }),
      mev('content_block_stop', { index: 3 }),
      mev('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 3 } }),
      mev('message_stop'),
    ];
    const acc = accumulateChat(run(messagesToChatStream(), events));
    expect(acc.choices[0].message.tool_calls).toEqual([{ id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }]);
    expect(acc.choices[0].message.content).toBeNull();
    expect(acc.choices[0].message).not.toHaveProperty('reasoning');
  });

  it('turns a refusal into a refusal delta with finish_reason content_filter', () => {
    const msg = message({ stop_reason: 'refusal', stop_details: { type: 'refusal', category: 'bio', explanation: 'Declined.' } });
    const acc = accumulateChat(run(messagesToChatStream(), messagesEvents(msg)));
    expect(acc.choices[0].finish_reason).toBe('content_filter');
    expect(acc.choices[0].message.refusal).toBe('Declined.');
    expect(acc).toEqual(withoutCreated(messagesToChatResponse(msg)));
  });

  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['max_tokens', 'length'],
    ['tool_use', 'tool_calls'],
    ['refusal', 'content_filter'],
  ])('stop_reason %s → finish_reason %s', (stop, finish) => {
    const acc = accumulateChat(run(messagesToChatStream(), messagesEvents(message({ stop_reason: stop, stop_sequence: stop === 'stop_sequence' ? 'END' : null }))));
    expect(acc.choices[0].finish_reason).toBe(finish);
  });

  it('always emits the usage chunk (choices: []) right before [DONE], and keeps service_tier', () => {
    const msg = message({ usage: { input_tokens: 1, output_tokens: 2, cache_read_input_tokens: 3, service_tier: 'priority' } });
    const out = run(messagesToChatStream(), messagesEvents(msg));
    const usageChunk = JSON.parse(out.at(-2)!.data);
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage.prompt_tokens).toBe(4);
    expect(usageChunk.service_tier).toBe('priority');
    expect(out.filter((e) => e.data.includes('"usage"'))).toHaveLength(1);
  });

  it('turns an error event into the error chunk and [DONE]; the stream counts as ended', () => {
    const t = messagesToChatStream();
    const events = messagesEvents(message(), 3, false).slice(0, 5);
    events.push(mev('error', { error: { type: 'overloaded_error', message: 'Overloaded' } }), mev('message_stop'));
    const out = run(t, events);
    expect(t.complete).toBe(true);
    expect(out.at(-1)).toEqual(DONE);
    const chunk = JSON.parse(out.at(-2)!.data);
    expect(chunk).toMatchObject({ id: 'msg_1', object: 'chat.completion.chunk', model: 'claude-x' });
    expect(chunk.error).toEqual({ code: 503, message: 'Overloaded', metadata: { error_type: 'provider_overloaded', provider_code: null } });
    expect(chunk.choices).toEqual([{ index: 0, delta: { content: '' }, finish_reason: 'error' }]);
    expect(out.filter((e) => e.data.includes('finish_reason":"stop'))).toHaveLength(0);
  });

  it('keeps a gateway error_type carried by the error event', () => {
    const out = run(messagesToChatStream(), [mev('error', { error: { type: 'api_error', message: 'x', error_type: 'timeout' } })]);
    expect(JSON.parse(out[0].data).error).toEqual({ code: 504, message: 'x', metadata: { error_type: 'timeout', provider_code: null } });
  });

  it.each([
    ['without message_stop', (e: SseEvent[]) => e.slice(0, -2)],
    ['with [DONE] but no message_stop', (e: SseEvent[]) => [...e.slice(0, -2), DONE]],
  ])('an input %s but with its message_delta (stop reason, usage) ends as a whole answer', (_name, cut) => {
    const t = messagesToChatStream();
    const whole = run(messagesToChatStream(), messagesEvents(message()));
    const out = run(t, cut(messagesEvents(message())));
    expect(t.complete).toBe(true);
    expect(out).toEqual(whole);
  });

  it.each([
    ['without message_delta and message_stop', (e: SseEvent[]) => e.slice(0, -3)],
    ['cut mid-block', (e: SseEvent[]) => e.slice(0, 5)],
    ['with [DONE] but no message_delta', (e: SseEvent[]) => [...e.slice(0, -3), DONE]],
  ])('an input %s is not complete and gets no successful ending', (_name, cut) => {
    const t = messagesToChatStream();
    const out = run(t, cut(messagesEvents(message())));
    expect(t.complete).toBe(false);
    expect(t.end()).toEqual([]);
    expect(out.some((e) => e.data === '[DONE]')).toBe(false);
    expect(out.some((e) => /"finish_reason":"[a-z]/.test(e.data))).toBe(false);
    expect(out.some((e) => e.data.includes('"usage"'))).toBe(false);
  });

  it("takes a thinking block's signature as signature_delta gives it, whole, as the Anthropic SDK does (never appended to the start's)", async () => {
    // A provider that puts a signature in content_block_start, then sends the block's signature in signature_delta.
    const events = [
      mev('message_start', { message: { ...message(), content: [] } }),
      mev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '', signature: 'EqOld' } }),
      mev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'Hmm.' } }),
      mev('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: 'EqSig' } }),
      mev('content_block_stop', { index: 0 }),
      mev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } }),
      mev('message_stop'),
    ];
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://gateway.test', fetch: sseFetch(events), maxRetries: 0 });
    const sdk = await client.messages.stream({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(sdk.content[0]).toMatchObject({ type: 'thinking', signature: 'EqSig' });
    const chunk = run(messagesToChatStream(), events).find((e) => e.data.includes('reasoning_details'));
    const details = JSON.parse(chunk!.data).choices[0].delta.reasoning_details;
    expect(details).toEqual([{ type: 'reasoning.text', text: 'Hmm.', signature: 'EqSig', format: 'anthropic-claude-v1', index: 0 }]);
  });

  it('ignores events after the end and refuses malformed data', () => {
    const t = messagesToChatStream();
    run(t, messagesEvents(message()));
    expect(t.push(mev('message_stop'))).toEqual([]);
    expect(() => messagesToChatStream().push({ event: 'message_start', data: '{not json' })).toThrow(/malformed/);
  });
});

// ---- chat → messages ----

describe('chatToMessagesStream', () => {
  it('streams text and reproduces the non-streaming translation', () => {
    const body = completion({ content: 'Hello world, streamed.' }, 'stop');
    const t = chatToMessagesStream();
    const out = run(t, chatChunks(body));
    expect(t.complete).toBe(true);
    expect(out[0].event).toBe('message_start');
    expect(JSON.parse(out[0].data).message.usage.input_tokens).toBe(0);
    expect(accumulateMessages(out)).toEqual(chatToMessagesResponse(body));
    expect(out.map((e) => e.event).slice(-2)).toEqual(['message_delta', 'message_stop']);
  });

  it.each([
    ['sequential', {}],
    ['interleaved', { interleave: true }],
    ['id before name', { idFirst: true }],
    ['one character per fragment', { size: 1 }],
  ])('streams reasoning, text and parallel tool calls (%s) like the non-streaming translation', (_name, opts) => {
    const out = run(chatToMessagesStream(), chatChunks(TOOLS_COMPLETION, opts));
    const blocks = out.filter((e) => e.event === 'content_block_start').map((e) => JSON.parse(e.data).content_block.type);
    expect(blocks).toEqual(['thinking', 'text', 'tool_use', 'tool_use']);
    // Strict: every delta goes to the one open block (interleaved calls are held until the earlier is whole).
    expect(accumulateMessages(out)).toEqual(chatToMessagesResponse(TOOLS_COMPLETION));
  });

  it('streams tool call arguments sent as a JSON object (llama-server) as their text', () => {
    const out = run(chatToMessagesStream(), [
      cc({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_o', type: 'function', function: { name: 'write', arguments: { path: 'a.txt' } } }] }),
      cc({ tool_calls: [{ index: 1, id: 'call_p', type: 'function', function: { name: 'read', arguments: { path: 'b.txt' } } }] }),
      cc({}, 'tool_calls'),
      DONE,
    ]);
    expect(accumulateMessages(out).content).toEqual([
      { type: 'tool_use', id: 'call_o', name: 'write', input: { path: 'a.txt' } },
      { type: 'tool_use', id: 'call_p', name: 'read', input: { path: 'b.txt' } },
    ]);
  });

  it('holds text and reasoning that come while a call\'s arguments are still coming: no delta goes to a stopped block', () => {
    const t = chatToMessagesStream();
    const all: SseEvent[] = [];
    const push = (e: SseEvent) => all.push(...t.push(e));
    push(cc({ role: 'assistant' }));
    push(cc({ tool_calls: [{ index: 0, id: 'call_A', type: 'function', function: { name: 'get_weather', arguments: '{"location":' } }] }));
    push(cc({ content: 'interjection' }));
    push(cc({ reasoning: 'hmm' }));
    push(cc({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }));
    push(cc({ content: ' after' }));
    push(cc({}, 'tool_calls'));
    push(DONE);
    const stopped = new Set<number>();
    for (const e of all) {
      const d = JSON.parse(e.data);
      if (e.event === 'content_block_stop') stopped.add(d.index);
      if (e.event === 'content_block_delta') expect(stopped.has(d.index), `delta to stopped block ${d.index}`).toBe(false);
    }
    expect(accumulateMessages(all).content).toEqual([
      { type: 'tool_use', id: 'call_A', name: 'get_weather', input: { location: 'Paris' } },
      { type: 'text', text: 'interjection' },
      { type: 'thinking', thinking: 'hmm', signature: '' },
      { type: 'text', text: ' after' },
    ]);
  });

  it('holds an interleaved later call until the earlier call\'s arguments are whole, then streams it', () => {
    const call = (index: number, fn: Obj, id?: string) => cc({ tool_calls: [{ index, ...(id ? { id, type: 'function' } : {}), function: fn }] });
    const t = chatToMessagesStream();
    const all: SseEvent[] = [];
    const push = (e: SseEvent) => {
      const out = t.push(e);
      all.push(...out);
      return out;
    };
    push(cc({ role: 'assistant' }));
    expect(push(call(0, { name: 'a', arguments: '{"x":"}' }, 'call_a')).map((e) => e.event)).toEqual(['content_block_start', 'content_block_delta']);
    // The second call begins while the first's arguments are open (a brace inside a string does not close it).
    expect(push(call(1, { name: 'b', arguments: '{"y":' }, 'call_b'))).toEqual([]);
    expect(push(call(1, { arguments: '[1,{"z":2}]' }))).toEqual([]);
    const closing = push(call(0, { arguments: '\\"{"}' }));
    expect(closing.map((e) => [e.event, JSON.parse(e.data).index])).toEqual([
      ['content_block_delta', 0],
      ['content_block_stop', 0],
      ['content_block_start', 1],
      ['content_block_delta', 1],
    ]);
    expect(JSON.parse(closing[3].data).delta.partial_json).toBe('{"y":[1,{"z":2}]');
    // Once open, the later call streams as it comes.
    expect(push(call(1, { arguments: '}' })).map((e) => e.event)).toEqual(['content_block_delta']);
    push(cc({}, 'tool_calls'));
    push(DONE);
    expect(accumulateMessages(all).content).toEqual([
      { type: 'tool_use', id: 'call_a', name: 'a', input: { x: '}"{' } },
      { type: 'tool_use', id: 'call_b', name: 'b', input: { y: [1, { z: 2 }] } },
    ]);
  });

  it('tool calls without an index (each whole, with its own id, as Gemini sends them) are separate blocks; stop with calls is tool_use', () => {
    const whole = (id: string, name: string, args: string) => cc({ tool_calls: [{ id, type: 'function', function: { name, arguments: args } }] });
    const out = run(chatToMessagesStream(), [cc({ role: 'assistant' }), whole('call_a', 'f', '{"city":"Paris"}'), whole('call_b', 'g', '{"tz":"UTC"}'), cc({}, 'stop'), DONE]);
    const message = accumulateMessages(out);
    expect(message.content).toEqual([
      { type: 'tool_use', id: 'call_a', name: 'f', input: { city: 'Paris' } },
      { type: 'tool_use', id: 'call_b', name: 'g', input: { tz: 'UTC' } },
    ]);
    expect(message.stop_reason).toBe('tool_use');
    // An index-less fragment without an id continues the last call.
    const cont = run(chatToMessagesStream(), [whole('call_a', 'f', '{"a":'), cc({ tool_calls: [{ function: { arguments: '1}' } }] }), cc({}, 'tool_calls'), DONE]);
    expect(accumulateMessages(cont).content).toEqual([{ type: 'tool_use', id: 'call_a', name: 'f', input: { a: 1 } }]);
  });

  it('tool calls that reuse an index: another id with a name after whole arguments is a new call (Ollama); another id on a fragment is not (Poolside)', () => {
    const at0 = (id: string, fn: Obj) => cc({ tool_calls: [{ index: 0, id, type: 'function', function: fn }] });
    const ollama = run(chatToMessagesStream(), [at0('call_a', { name: 'f', arguments: '{"city":"Paris"}' }), at0('call_b', { name: 'f', arguments: '{"city":"Rome"}' }), cc({}, 'tool_calls'), DONE]);
    expect(accumulateMessages(ollama).content.map((c: Obj) => [c.id, c.input])).toEqual([['call_a', { city: 'Paris' }], ['call_b', { city: 'Rome' }]]);
    // A later fragment without an id at that index continues the newest call.
    const cont = run(chatToMessagesStream(), [at0('call_a', { name: 'f', arguments: '{}' }), at0('call_b', { name: 'g', arguments: '{"a":' }), cc({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] }), cc({}, 'tool_calls'), DONE]);
    expect(accumulateMessages(cont).content.map((c: Obj) => [c.name, c.input])).toEqual([['f', {}], ['g', { a: 1 }]]);
    // Poolside: the name under one id, the arguments under another, one call.
    const poolside = run(chatToMessagesStream(), [at0('call_1', { name: 'f', arguments: '' }), at0('call_2', { arguments: '{"a":' }), at0('call_2', { arguments: '2}' }), cc({}, 'tool_calls'), DONE]);
    expect(accumulateMessages(poolside).content).toEqual([{ type: 'tool_use', id: 'call_1', name: 'f', input: { a: 2 } }]);
  });

  it('tool calls with neither index nor id: a named one after a named call is a new call; a nameless one continues', () => {
    const bare = (fn: Obj) => ({ type: 'function', function: fn });
    const whole = (name: string, args: string) => cc({ tool_calls: [bare({ name, arguments: args })] });
    const out = run(chatToMessagesStream(), [cc({ role: 'assistant' }), whole('f', '{"city":"Paris"}'), whole('f', '{"city":"Rome"}'), whole('g', '{}'), cc({}, 'tool_calls'), DONE]);
    const calls = accumulateMessages(out).content;
    expect(calls.map((c: Obj) => [c.name, c.input])).toEqual([['f', { city: 'Paris' }], ['f', { city: 'Rome' }], ['g', {}]]);
    expect(new Set(calls.map((c: Obj) => c.id)).size).toBe(3);
    // Two whole calls in one chunk's list.
    const both = run(chatToMessagesStream(), [cc({ tool_calls: [bare({ name: 'a', arguments: '{"x":1}' }), bare({ name: 'b', arguments: '{"y":2}' })] }), cc({}, 'tool_calls'), DONE]);
    expect(accumulateMessages(both).content.map((c: Obj) => [c.name, c.input])).toEqual([['a', { x: 1 }], ['b', { y: 2 }]]);
    // Fragments: nameless ones continue; a server that repeats the name while the arguments are unfinished continues too.
    const parts = [whole('f', ''), cc({ tool_calls: [bare({ arguments: '{"a":' })] }), whole('f', '1}'), whole('f', '{"a":2}'), cc({}, 'tool_calls'), DONE];
    expect(accumulateMessages(run(chatToMessagesStream(), parts)).content.map((c: Obj) => c.input)).toEqual([{ a: 1 }, { a: 2 }]);
  });

  it('a provider that finished but closed without [DONE] ends the message normally; without a finish it does not', () => {
    const events = chatChunks(TOOLS_COMPLETION).filter((e) => e.data !== '[DONE]');
    const out = run(chatToMessagesStream(), events);
    expect(out.at(-1)!.event).toBe('message_stop');
    expect(accumulateMessages(out)).toEqual(chatToMessagesResponse(TOOLS_COMPLETION));
    const cut = run(chatToMessagesStream(), [cc({ role: 'assistant' }), cc({ content: 'Hel' })]);
    expect(cut.map((e) => e.event)).not.toContain('message_stop');
  });

  it('opens the block of a tool call whose name never came, so its arguments are kept', () => {
    const first = cc({ tool_calls: [{ index: 0, id: 'call_x', type: 'function', function: { arguments: '{"a":' } }] });
    const out = run(chatToMessagesStream(), [cc({ role: 'assistant' }), first, cc({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] }), cc({}, 'tool_calls'), DONE]);
    expect(accumulateMessages(out).content).toEqual([{ type: 'tool_use', id: 'call_x', name: '', input: { a: 1 } }]);
  });

  it('streams a legacy function_call delta as a tool_use block', () => {
    const first = cc({ role: 'assistant', function_call: { name: 'f', arguments: '' } });
    const out = run(chatToMessagesStream(), [first, cc({ function_call: { arguments: '{"q":"x"}' } }), cc({}, 'function_call'), DONE]);
    const acc = accumulateMessages(out);
    expect(acc.content).toEqual([{ type: 'tool_use', id: expect.stringMatching(/^toolu_/), name: 'f', input: { q: 'x' } }]);
    expect(acc.stop_reason).toBe('tool_use');
  });

  it('maps refusal deltas to stop_reason refusal with the text as explanation', () => {
    const body = completion({ refusal: "I can't help with that." }, 'stop');
    const acc = accumulateMessages(run(chatToMessagesStream(), chatChunks(body)));
    expect(acc.stop_reason).toBe('refusal');
    expect(acc.stop_details).toEqual({ type: 'refusal', category: null, explanation: "I can't help with that." });
    expect(acc).toEqual(chatToMessagesResponse(body));
  });

  it.each([
    ['stop', 'end_turn'],
    ['length', 'max_tokens'],
    ['tool_calls', 'tool_use'],
    ['function_call', 'tool_use'],
    ['content_filter', 'refusal'],
  ])('finish_reason %s → stop_reason %s', (finish, stop) => {
    const acc = accumulateMessages(run(chatToMessagesStream(), chatChunks(completion({ content: 'x' }, finish))));
    expect(acc.stop_reason).toBe(stop);
    expect(acc.stop_sequence).toBeNull();
  });

  it('puts the usage chunk (cached, cache-write, reasoning tokens) into message_delta', () => {
    const out = run(chatToMessagesStream(), chatChunks(completion({ content: 'x' }, 'stop', { service_tier: 'flex' })));
    const delta = JSON.parse(out.find((e) => e.event === 'message_delta')!.data);
    const details = { reasoning_tokens: 25, thinking_tokens: 25 };
    const expected = { input_tokens: 160, output_tokens: 90, cache_read_input_tokens: 300, cache_creation_input_tokens: 40, output_tokens_details: details, service_tier: 'standard' }; // chat's flex is the Messages API's standard
    expect(delta.usage).toEqual(expected);
  });

  it("gives message_start's usage service_tier null when the provider reported no tier; the Anthropic SDK's finalMessage() reads it", async () => {
    const events = [...run(chatToMessagesStream(), chatChunks(completion({ content: 'x' }, 'stop'))), DONE];
    const start = JSON.parse(events.find((e) => e.event === 'message_start')!.data);
    expect(start.message.usage).toHaveProperty('service_tier', null);
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://gateway.test', fetch: sseFetch(events), maxRetries: 0 });
    const final = await client.messages.stream({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(final.usage.service_tier).toBeNull();
  });

  it('turns an error chunk into an error event and counts as ended', () => {
    const body = completion({ content: 'Partial answer' }, 'stop');
    const events = chatChunks(body).slice(0, 3);
    const err = { id: 'x', object: 'chat.completion.chunk', error: { code: 502, message: 'Upstream gone', metadata: { error_type: 'provider_unavailable' } }, choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }] };
    const t = chatToMessagesStream();
    const out = run(t, [...events, { data: JSON.stringify(err) }, DONE]);
    expect(t.complete).toBe(true);
    expect(out.at(-1)).toEqual({ event: 'error', data: JSON.stringify({ type: 'error', error: { type: 'api_error', message: 'Upstream gone', error_type: 'provider_unavailable' } }) });
    expect(out.some((e) => e.event === 'message_stop' || e.event === 'message_delta')).toBe(false);
  });

  it.each([
    [{ code: 403, message: 'm', metadata: { error_type: 'refusal' } }, { type: 'invalid_request_error', message: 'm', error_type: 'refusal' }],
    [{ code: 429, message: 'm' }, { type: 'rate_limit_error', message: 'm', error_type: 'rate_limit_exceeded' }],
    [{ code: 529, message: 'm' }, { type: 'overloaded_error', message: 'm', error_type: 'provider_overloaded' }],
    // The status with its message, as an HTTP error is classified (a plain invalid_request before).
    [{ code: 400, message: 'maximum context length is 8192' }, { type: 'invalid_request_error', message: 'maximum context length is 8192', error_type: 'context_length_exceeded' }],
    [{ code: 400, message: 'flagged by the content filter' }, { type: 'invalid_request_error', message: 'flagged by the content filter', error_type: 'content_policy_violation' }],
  ])('maps the chunk error %j (its error_type first, else its status)', (error, expected) => {
    const out = run(chatToMessagesStream(), [{ data: JSON.stringify({ error, choices: [] }) }]);
    expect(JSON.parse(out[0].data).error).toEqual(expected);
  });

  it.each([
    ['no finish_reason and no [DONE]', (e: SseEvent[]) => e.slice(0, 4)],
    ['[DONE] without a finish_reason', (e: SseEvent[]) => [...e.slice(0, 4), DONE]],
  ])('an input with %s is not complete and gets no successful ending', (_name, cut) => {
    const t = chatToMessagesStream();
    const out = run(t, cut(chatChunks(completion({ content: 'Some longer text here' }, 'stop'))));
    expect(t.complete).toBe(false);
    expect(t.end()).toEqual([]);
    expect(out.some((e) => e.event === 'message_delta' || e.event === 'message_stop')).toBe(false);
  });

  it('is incremental: each content chunk is answered at once', () => {
    const t = chatToMessagesStream();
    const [role, a, b] = chatChunks(completion({ content: 'abcdef' }, 'stop'));
    expect(t.push(role).map((e) => e.event)).toEqual(['message_start']);
    expect(t.push(a).map((e) => e.event)).toEqual(['content_block_start', 'content_block_delta']);
    expect(JSON.parse(t.push(b)[0].data).delta).toEqual({ type: 'text_delta', text: 'def' });
  });
});

// ---- round trips ----

describe('stream round trips', () => {
  it('messages events → chat → messages accumulate to the original message', () => {
    const original = { ...TOOLS_MESSAGE, content: TOOLS_MESSAGE.content.slice(0, 4), usage: { ...TOOLS_MESSAGE.usage, service_tier: 'standard' } };
    const chat = run(messagesToChatStream(), messagesEvents(original, 4));
    const back = run(chatToMessagesStream(), chat);
    expect(accumulateMessages(back)).toEqual(original);
  });

  it('chat chunks → messages → chat accumulate to the original completion', () => {
    const messages = run(chatToMessagesStream(), chatChunks(TOOLS_COMPLETION, { size: 2 }));
    const back = run(messagesToChatStream(), messages);
    expect(accumulateChat(back)).toEqual({ ...TOOLS_COMPLETION, system_fingerprint: null }); // a messages answer has no fingerprint
  });
});

// ---- the official SDKs consume the translated streams ----

function sseFetch(events: SseEvent[]): typeof fetch {
  const body = events.map(formatSse).join('');
  return (async () => new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } })) as typeof fetch;
}

describe('official SDKs', () => {
  it('the OpenAI SDK accumulates the translated stream into the non-streaming translation', async () => {
    const events = run(messagesToChatStream(), messagesEvents(TOOLS_MESSAGE, 2));
    const client = new OpenAI({ apiKey: 'k', baseURL: 'http://gateway.test/v1', fetch: sseFetch(events), maxRetries: 0 });
    const stream = client.chat.completions.stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    const final = await stream.finalChatCompletion();
    const expected = messagesToChatResponse(TOOLS_MESSAGE);
    const m = final.choices[0].message;
    expect(m.content).toBe(expected.choices[0].message.content);
    expect(m.tool_calls).toEqual(expected.choices[0].message.tool_calls);
    expect(final.choices[0].finish_reason).toBe('tool_calls');
    expect(final.usage).toEqual(expected.usage);
  });

  it("a chat client gets the provider's signed thinking as reasoning_details, whole, in one chunk before the finish; the OpenAI SDK keeps it on the message", async () => {
    const events = run(messagesToChatStream(), messagesEvents(TOOLS_MESSAGE, 2));
    const withDetails = events.filter((e) => e.data.includes('"reasoning_details"'));
    expect(withDetails).toHaveLength(1);
    const details = [{ type: 'reasoning.text', text: 'The user wants weather and time.', signature: 'EqSig', format: 'anthropic-claude-v1', index: 0 }];
    expect(JSON.parse(withDetails[0].data).choices[0].delta.reasoning_details).toEqual(details);
    const client = new OpenAI({ apiKey: 'k', baseURL: 'http://gateway.test/v1', fetch: sseFetch(events), maxRetries: 0 });
    const final = await client.chat.completions.stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }).finalChatCompletion();
    expect((final.choices[0].message as unknown as { reasoning_details: unknown }).reasoning_details).toEqual(details);
  });

  it('the Anthropic SDK accumulates the translated stream into the non-streaming translation', async () => {
    const events = [...run(chatToMessagesStream(), chatChunks(TOOLS_COMPLETION, { size: 1 })), DONE];
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://gateway.test', fetch: sseFetch(events), maxRetries: 0 });
    const final = await client.messages.stream({ model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    const expected = chatToMessagesResponse(TOOLS_COMPLETION);
    expect(final.content).toEqual(expected.content);
    expect(final.stop_reason).toBe('tool_use');
    expect(final.usage).toMatchObject(expected.usage);
  });

  /** The chunks' translation holds a thinking block signed `EqSig` ("Plan it."), `redacted_thinking` ENC and the text "Done.", as the Anthropic SDK reads it too. */
  async function expectSignedThinking(chunks: SseEvent[]): Promise<void> {
    const events = run(chatToMessagesStream(), chunks);
    const expected = [
      { type: 'thinking', thinking: 'Plan it.', signature: 'EqSig' },
      { type: 'redacted_thinking', data: 'ENC' },
      { type: 'text', text: 'Done.' },
    ];
    expect(accumulateMessages(events).content).toEqual(expected);
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://gateway.test', fetch: sseFetch([...events, DONE]), maxRetries: 0 });
    const final = await client.messages.stream({ model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(final.content).toEqual(expected);
  }

  it("gives Claude's signed reasoning_details from a chat stream (OpenRouter's) as the thinking block's signature_delta and redacted_thinking; the Anthropic SDK keeps them", async () => {
    const detail = (d: Obj) => cc({ reasoning_details: [{ format: 'anthropic-claude-v1', index: 0, ...d }] });
    const chunks = [
      cc({ role: 'assistant' }),
      cc({ reasoning: 'Plan', reasoning_details: [{ type: 'reasoning.text', text: 'Plan', format: 'anthropic-claude-v1', index: 0 }] }),
      cc({ reasoning: ' it.', reasoning_details: [{ type: 'reasoning.text', text: ' it.', format: 'anthropic-claude-v1', index: 0 }] }),
      detail({ type: 'reasoning.text', text: '', signature: 'EqSig' }),
      detail({ type: 'reasoning.encrypted', data: 'ENC' }),
      detail({ type: 'reasoning.text', text: '', signature: 'GEMSIG', format: 'google-gemini-v1' }),
      cc({ content: 'Done.' }),
      cc({}, 'stop'),
      DONE,
    ];
    await expectSignedThinking(chunks);
  });

  it("gives Claude's thinking_blocks from a chat stream (LiteLLM's) as the thinking block's signature_delta and redacted_thinking; the Anthropic SDK keeps them", async () => {
    // LiteLLM's shape: each thinking_delta as reasoning_content and a one-piece thinking_blocks, the signature alone.
    const piece = (thinking: string) => cc({ reasoning_content: thinking, thinking_blocks: [{ type: 'thinking', thinking, signature: null }] });
    const chunks = [
      cc({ role: 'assistant' }),
      piece('Plan'),
      piece(' it.'),
      cc({ reasoning_content: '', thinking_blocks: [{ type: 'thinking', thinking: '', signature: 'EqSig' }] }),
      cc({ thinking_blocks: [{ type: 'redacted_thinking', data: 'ENC' }] }),
      cc({ content: 'Done.' }),
      cc({}, 'stop'),
      DONE,
    ];
    await expectSignedThinking(chunks);
  });

  it('says stop_sequence in message_delta when the finish chunk names the sequence (vLLM); the Anthropic SDK reads it', async () => {
    const finish = (extra: Obj): SseEvent =>
      ({ data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta: {}, finish_reason: 'stop', ...extra }] }) });
    const events = run(chatToMessagesStream(), [cc({ role: 'assistant', content: 'one two' }), finish({ stop_reason: 'three' }), DONE]);
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://gateway.test', fetch: sseFetch([...events, DONE]), maxRetries: 0 });
    const final = await client.messages.stream({ model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'count' }] }).finalMessage();
    expect([final.stop_reason, final.stop_sequence]).toEqual(['stop_sequence', 'three']);
    const plain = accumulateMessages(run(chatToMessagesStream(), [cc({ role: 'assistant', content: 'one' }), finish({ stop_reason: null }), DONE]));
    expect([plain.stop_reason, plain.stop_sequence]).toEqual(['end_turn', null]);
  });

  it('the Anthropic SDK also gets the right tool inputs when the provider interleaves parallel calls', async () => {
    const events = [...run(chatToMessagesStream(), chatChunks(TOOLS_COMPLETION, { interleave: true, size: 2 })), DONE];
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://gateway.test', fetch: sseFetch(events), maxRetries: 0 });
    const final = await client.messages.stream({ model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    expect(final.content).toEqual(chatToMessagesResponse(TOOLS_COMPLETION).content);
  });

  it('the Anthropic SDK raises the translated in-band error', async () => {
    const err = { error: { code: 503, message: 'Overloaded', metadata: { error_type: 'provider_overloaded' } }, choices: [] };
    const events = run(chatToMessagesStream(), [...chatChunks(completion({ content: 'abc' }, 'stop')).slice(0, 2), { data: JSON.stringify(err) }]);
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://gateway.test', fetch: sseFetch(events), maxRetries: 0 });
    await expect(client.messages.stream({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }).finalMessage()).rejects.toThrow(/Overloaded/);
  });
});
