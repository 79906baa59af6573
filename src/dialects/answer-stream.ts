import type { SseEvent } from '../pipeline/types';
import { DONE } from '../providers/sse';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/**
 * A complete JSON answer, in the client's dialect, replayed as that dialect's stream. For answers the gateway
 * assembles from several upstream calls (a server-tool loop) where only the last call's answer reaches the
 * client: the events carry the same id, model, provider, usage and `gateway_metadata` as the JSON answer.
 * Chat: an optional metadata chunk (no choices), per choice one content chunk (role, content, tool calls and
 * every other message member, its logprobs) and a finish chunk, the answer's other top-level members on each, the usage chunk when the client asked for it (`stream_options.include_usage`), `[DONE]`.
 * Messages: message_start, one start/delta/stop triple per content block, message_delta, message_stop, `[DONE]`.
 *
 * @example const events = answerEvents('messages', answer, { includeUsage: true });
 */
export function answerEvents(dialect: 'chat_completions' | 'messages', body: Obj, options: { includeUsage: boolean }): SseEvent[] {
  return dialect === 'chat_completions' ? chatEvents(body, options.includeUsage) : messagesEvents(body);
}

/** Members of a chat answer that its chunks carry in their own way; any other (system_fingerprint, service_tier, …) rides on every chunk, as OpenAI streams them. */
const CHUNK_OWN = new Set(['id', 'object', 'created', 'model', 'provider', 'choices', 'usage', 'error', 'gateway_metadata']);
/** Message members a content chunk's delta does not take as they are. */
const DELTA_OWN = new Set(['role', 'content', 'tool_calls']);

function chatEvents(body: Obj, includeUsage: boolean): SseEvent[] {
  const created = typeof body.created === 'number' ? body.created : Math.floor(Date.now() / 1000);
  // Everything the answer says reaches the client (a provider that answered a stream with JSON had its
  // system_fingerprint, service_tier, logprobs, audio and reasoning_content dropped).
  const top: Obj = {};
  for (const [k, v] of Object.entries(body)) if (!CHUNK_OWN.has(k)) top[k] = v;
  const chunk = (extra: Obj): SseEvent => ({
    data: JSON.stringify({ id: body.id, object: 'chat.completion.chunk', created, model: body.model, provider: body.provider, ...top, ...extra }),
  });
  const out: SseEvent[] = [];
  if (isObj(body.gateway_metadata)) out.push(chunk({ choices: [], gateway_metadata: body.gateway_metadata }));
  if (isObj(body.error)) {
    // A chat answer that failed after headers (spec 7.5.4) becomes the in-band error chunk of 7.5.3.
    out.push(chunk({ error: body.error, choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }] }));
    return [...out, DONE];
  }
  // Every choice (an answer with `n` > 1 has several), each with its own index.
  const choices: Obj[] = Array.isArray(body.choices) ? body.choices.filter(isObj) : [];
  if (choices.length === 0) choices.push({});
  choices.forEach((choice, i) => {
    const index = typeof choice.index === 'number' ? choice.index : i;
    const message: Obj = isObj(choice.message) ? choice.message : {};
    const delta: Obj = { role: 'assistant', content: typeof message.content === 'string' ? message.content : '' };
    for (const [k, v] of Object.entries(message)) if (!DELTA_OWN.has(k) && v !== undefined && v !== null) delta[k] = v;
    if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0) {
      delta.tool_calls = message.tool_calls.map((call: Obj, n: number) => ({ index: n, ...call }));
    }
    out.push(chunk({ choices: [{ index, delta, finish_reason: null }] }));
    // The logprobs ride on the finish chunk: the openai SDK appends a choice's later logprobs to those of its
    // first chunk, which it keeps by reference, so logprobs in the first chunk came out twice.
    const finish: Obj = { index, delta: {}, finish_reason: choice.finish_reason ?? 'stop' };
    if (choice.logprobs !== undefined) finish.logprobs = choice.logprobs;
    out.push(chunk({ choices: [finish] }));
  });
  if (includeUsage && isObj(body.usage)) out.push(chunk({ choices: [], usage: body.usage }));
  return [...out, DONE];
}

function messagesEvents(body: Obj): SseEvent[] {
  const ev = (event: string, data: Obj): SseEvent => ({ event, data: JSON.stringify({ type: event, ...data }) });
  const usage: Obj = isObj(body.usage) ? body.usage : {};
  const { content, stop_reason, stop_sequence, stop_details, usage: _usage, ...rest } = body;
  const startUsage: Obj = { ...usage, output_tokens: 0 };
  delete startUsage.cost;
  const out: SseEvent[] = [ev('message_start', { message: { ...rest, content: [], stop_reason: null, stop_sequence: null, stop_details: null, usage: startUsage } })];
  const blocks: unknown[] = Array.isArray(content) ? content : [];
  blocks.forEach((block, index) => {
    if (!isObj(block)) return;
    const [start, deltas] = blockParts(block);
    out.push(ev('content_block_start', { index, content_block: start }));
    for (const delta of deltas) out.push(ev('content_block_delta', { index, delta }));
    out.push(ev('content_block_stop', { index }));
  });
  // stop_details (a refusal's explanation) goes where the Messages API streams it: the SDK's accumulator sets
  // it from message_delta, so given only in message_start it was lost from `finalMessage()`.
  const delta = { stop_reason: stop_reason ?? 'end_turn', stop_sequence: stop_sequence ?? null, stop_details: stop_details ?? null };
  out.push(ev('message_delta', { delta, usage }));
  out.push(ev('message_stop', {}));
  return [...out, DONE];
}

/** A content block's start form and the deltas that fill it in. */
function blockParts(block: Obj): [Obj, Obj[]] {
  switch (block.type) {
    case 'text': {
      const { text, ...start } = block;
      return [{ ...start, text: '' }, typeof text === 'string' && text !== '' ? [{ type: 'text_delta', text }] : []];
    }
    case 'tool_use': {
      const { input, ...start } = block;
      return [{ ...start, input: {} }, [{ type: 'input_json_delta', partial_json: JSON.stringify(input ?? {}) }]];
    }
    case 'thinking': {
      const { thinking, signature, ...start } = block;
      const deltas: Obj[] = [{ type: 'thinking_delta', thinking: thinking ?? '' }];
      if (typeof signature === 'string') deltas.push({ type: 'signature_delta', signature });
      // Opened as the Messages API opens it (`signature: ""`), the signature following in its delta.
      return [{ ...start, thinking: '', signature: '' }, deltas];
    }
    default:
      // redacted_thinking and server tool blocks arrive whole in their start event.
      return [block, []];
  }
}
