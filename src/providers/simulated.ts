import { setTimeout as sleep } from 'node:timers/promises';
import type { SimulatedProviderConfig } from '../config/types';
import { choiceCount } from '../dialects/common';
import type { SseEvent } from '../pipeline/types';
import type { Dialect, Provider, UpstreamCall, UpstreamReply } from './types';
import { textHead } from '../text-cut';

export const DIALECTS: ReadonlySet<Dialect> = new Set(['messages', 'chat_completions']);

/**
 * The built-in simulated provider: speaks both dialects, answers with deterministic text derived from the
 * prompt (or the configured `reply`), counts tokens as whitespace-separated words, honours
 * `max_tokens`/`max_completion_tokens`, and waits `latency_ms` before the answer and `chunk_delay_ms`
 * between stream chunks. It lets the quick start and the tests run with no network.
 */
export function createSimulatedProvider(config: SimulatedProviderConfig): Provider {
  return {
    id: config.id,
    dataCollection: config.data_collection,
    kind: 'simulated',
    region: config.region,
    dialects: DIALECTS,
    async send(call: UpstreamCall): Promise<UpstreamReply> {
      if (config.latency_ms > 0) await sleep(config.latency_ms, undefined, { signal: call.signal });
      const answer = compose(call, config);
      if (!call.stream) {
        return { stream: false, body: call.dialect === 'messages' ? messagesBody(answer) : chatBody(answer, choiceCount(call.body)) };
      }
      const events = call.dialect === 'messages' ? messagesEvents(answer) : chatEvents(answer, call.body);
      return { stream: true, events: paced(events, config.chunk_delay_ms, call.signal) };
    },
  };
}

interface Answer {
  model: string;
  words: string[];
  inputTokens: number;
  truncated: boolean;
  created: number;
  id: string;
}

let counter = 0;

function compose(call: UpstreamCall, config: SimulatedProviderConfig): Answer {
  const body = call.body;
  const texts = collectText(body.messages);
  if (typeof body.system === 'string') texts.push(body.system);
  else collectText([{ content: body.system }]).forEach((t) => texts.push(t));
  const lastUser = lastUserText(body.messages);
  const reply =
    config.reply ??
    `Simulated reply from ${String(body.model)}. You said: ${lastUser.length > 120 ? `${textHead(lastUser, 120)}…` : lastUser}`;
  const all = reply.split(/\s+/).filter(Boolean);
  const cap = Number(body.max_completion_tokens ?? body.max_tokens ?? Infinity);
  const words = all.slice(0, Math.max(1, cap));
  counter = (counter + 1) % 1_000_000;
  return {
    model: String(body.model),
    words,
    inputTokens: texts.join(' ').split(/\s+/).filter(Boolean).length,
    truncated: words.length < all.length,
    created: Math.floor(Date.now() / 1000),
    id: `sim${Date.now().toString(36)}${counter.toString(36)}`,
  };
}

function textOf(content: unknown): string[] {
  if (typeof content === 'string') return [content];
  if (!Array.isArray(content)) return [];
  return content.flatMap((part) =>
    part && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string' ? [(part as { text: string }).text] : [],
  );
}

function collectText(messages: unknown): string[] {
  if (!Array.isArray(messages)) return [];
  return messages.flatMap((m) => (m && typeof m === 'object' ? textOf((m as { content?: unknown }).content) : []));
}

function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown } | null;
    if (m && m.role === 'user') return textOf(m.content).join(' ').replace(/\s+/g, ' ').trim();
  }
  return '';
}

/** What the simulated backend reports as its `system_fingerprint` (spec 4.2 lists the field; OpenAI sends one). */
const FINGERPRINT = 'fp_simulated';

function chatBody(a: Answer, n: number): Record<string, unknown> {
  const choice = (index: number) => ({ index, message: { role: 'assistant', content: a.words.join(' '), refusal: null }, logprobs: null, finish_reason: a.truncated ? 'length' : 'stop' });
  return {
    id: `chatcmpl-${a.id}`,
    object: 'chat.completion',
    created: a.created,
    model: a.model,
    system_fingerprint: FINGERPRINT,
    choices: Array.from({ length: n }, (_, i) => choice(i)),
    usage: { prompt_tokens: a.inputTokens, completion_tokens: a.words.length * n, total_tokens: a.inputTokens + a.words.length * n },
  };
}

function messagesBody(a: Answer): Record<string, unknown> {
  return {
    id: `msg_${a.id}`,
    type: 'message',
    role: 'assistant',
    model: a.model,
    content: [{ type: 'text', text: a.words.join(' ') }],
    stop_reason: a.truncated ? 'max_tokens' : 'end_turn',
    stop_sequence: null,
    stop_details: null,
    container: null,
    usage: { input_tokens: a.inputTokens, output_tokens: a.words.length, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
  };
}

function* chatEvents(a: Answer, body: Record<string, unknown>): Generator<SseEvent> {
  const base = { id: `chatcmpl-${a.id}`, object: 'chat.completion.chunk', created: a.created, model: a.model, system_fingerprint: FINGERPRINT };
  const n = choiceCount(body);
  const chunk = (index: number, delta: Record<string, unknown>, finish: string | null) =>
    ({ data: JSON.stringify({ ...base, choices: [{ index, delta, logprobs: null, finish_reason: finish }] }) });
  for (let c = 0; c < n; c++) yield chunk(c, { role: 'assistant', content: '' }, null);
  for (let i = 0; i < a.words.length; i++) for (let c = 0; c < n; c++) yield chunk(c, { content: i === 0 ? a.words[i] : ` ${a.words[i]}` }, null);
  for (let c = 0; c < n; c++) yield chunk(c, {}, a.truncated ? 'length' : 'stop');
  const options = body.stream_options as { include_usage?: boolean } | undefined;
  if (options?.include_usage) {
    const usage = { prompt_tokens: a.inputTokens, completion_tokens: a.words.length * n, total_tokens: a.inputTokens + a.words.length * n };
    yield { data: JSON.stringify({ ...base, choices: [], usage }) };
  }
  yield { data: '[DONE]' };
}

function* messagesEvents(a: Answer): Generator<SseEvent> {
  const ev = (type: string, data: Record<string, unknown>): SseEvent => ({ event: type, data: JSON.stringify({ type, ...data }) });
  yield ev('message_start', {
    message: {
      id: `msg_${a.id}`, type: 'message', role: 'assistant', model: a.model, content: [], stop_reason: null, stop_sequence: null,
      stop_details: null, container: null,
      usage: { input_tokens: a.inputTokens, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    },
  });
  yield ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
  yield ev('ping', {});
  for (let i = 0; i < a.words.length; i++) {
    yield ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: i === 0 ? a.words[i] : ` ${a.words[i]}` } });
  }
  yield ev('content_block_stop', { index: 0 });
  yield ev('message_delta', {
    delta: { stop_reason: a.truncated ? 'max_tokens' : 'end_turn', stop_sequence: null },
    usage: { output_tokens: a.words.length },
  });
  yield ev('message_stop', {});
}

async function* paced(events: Iterable<SseEvent>, delayMs: number, signal: AbortSignal): AsyncGenerator<SseEvent> {
  let first = true;
  for (const ev of events) {
    if (!first && delayMs > 0) await sleep(delayMs, undefined, { signal });
    first = false;
    yield ev;
  }
}
