import { messagesErrorType, publicMessage } from '../errors/envelope';
import { GatewayError } from '../errors/gateway-error';
import type { NormalizedUsage, SseEvent } from '../pipeline/types';
import { DONE } from '../providers/sse';

/** The terminal event a provider that stopped after its message_delta still owes the client. */
const MESSAGE_STOP = { event: 'message_stop', data: '{"type":"message_stop"}' };
import { cacheCreation, mergeUsage, num, stripGatewayFields, type Obj } from './common';
import { endedBeforeOutput, endedIncomplete, eventData, providerStreamError } from './stream-error';
import type { DialectAdapter, FinishInfo, StreamRewriter } from './types';

/**
 * Messages usage → normalized usage (`input_tokens` there excludes cache reads and writes). The tokens of a
 * `compaction` entry of `usage.iterations` (server-side compaction, `compact_20260112`) are added: the Messages
 * API leaves them out of the top-level counts, and bills them (the model's own summarizing call). Of the cache
 * writes, those `cache_creation` gives to the 1-hour cache are kept apart (they are billed at `cache_write_1h`).
 */
export function messagesUsage(u: unknown): NormalizedUsage | null {
  if (!u || typeof u !== 'object') return null;
  const usage = u as Record<string, any>;
  let cached = num(usage.cache_read_input_tokens);
  let written = num(usage.cache_creation_input_tokens);
  let hour = Math.min(num(usage.cache_creation?.ephemeral_1h_input_tokens), written);
  let plain = num(usage.input_tokens);
  let output = num(usage.output_tokens);
  let calls = 0;
  for (const it of Array.isArray(usage.iterations) ? usage.iterations : []) {
    if (it?.type === 'message') calls++;
    if (it?.type !== 'compaction') continue;
    calls++;
    cached += num(it.cache_read_input_tokens);
    const itWritten = num(it.cache_creation_input_tokens);
    written += itWritten;
    hour += Math.min(num(it.cache_creation?.ephemeral_1h_input_tokens), itWritten);
    plain += num(it.input_tokens);
    output += num(it.output_tokens);
  }
  return {
    inputTokens: plain + cached + written,
    outputTokens: output,
    cachedTokens: cached,
    cacheWriteTokens: written,
    ...(hour > 0 ? { cacheWrite1hTokens: hour } : {}),
    // `thinking_tokens` is the Messages API's own name for what the gateway calls reasoning tokens.
    reasoningTokens: num(usage.output_tokens_details?.reasoning_tokens) || num(usage.output_tokens_details?.thinking_tokens),
    ...(calls > 1 ? { calls } : {}),
  };
}

/**
 * A `message_start` usage without its `output_tokens`: that is the count when the answer began (Anthropic
 * sends 1), not the answer's, whose count comes in `message_delta`. Taken as the answer's, a stream whose
 * `message_delta` reported no output (none, or 0) was billed 1 output token for 2 000 characters of text;
 * left out, such a stream is billed its output from the text it relayed (spend/delivered.ts).
 */
export function openingUsage(u: unknown): Record<string, unknown> | undefined {
  if (!u || typeof u !== 'object' || Array.isArray(u)) return undefined;
  const { output_tokens: _opening, ...rest } = u as Record<string, unknown>;
  return rest;
}

/** Normalized usage → the messages `usage` object (for translated answers). */
export function messagesUsageBody(u: NormalizedUsage): Record<string, unknown> {
  const out: Record<string, unknown> = {
    input_tokens: Math.max(0, u.inputTokens - u.cachedTokens - u.cacheWriteTokens),
    output_tokens: u.outputTokens,
    cache_creation_input_tokens: u.cacheWriteTokens,
    cache_read_input_tokens: u.cachedTokens,
  };
  const hour = u.cacheWrite1hTokens ?? 0;
  if (hour > 0) out.cache_creation = cacheCreation(u.cacheWriteTokens, hour);
  // `reasoning_tokens` is what the gateway bills from; `thinking_tokens` is the Messages API's own name.
  if (u.reasoningTokens > 0) out.output_tokens_details = { reasoning_tokens: u.reasoningTokens, thinking_tokens: u.reasoningTokens };
  return out;
}

/**
 * Thinking blocks without a signature are left out of the assistant turns that go upstream: they were never a
 * messages provider's (another style's reasoning, as this gateway's translated answers give it with
 * `signature: ""`), and the Messages API refuses any it did not sign (400 "Invalid `signature` in `thinking`
 * block"), so a conversation that moved between providers of the two styles failed on its next turn. A turn
 * left with nothing else keeps them (its content may not be empty). When the last assistant turn is in a tool
 * loop and lost its thinking, thinking is switched off for the call, as the translator does (with thinking on,
 * the Messages API requires that turn to start with a signed thinking block). `out` is the request's own copy.
 */
function withoutUnsignedThinking(out: Record<string, unknown>): void {
  const list = out.messages as Turn[];
  let copied: Turn[] | null = null;
  for (let i = 0; i < list.length; i++) {
    const m = list[i];
    if (m?.role !== 'assistant' || !Array.isArray(m.content) || !m.content.some(unsigned)) continue;
    const kept = m.content.filter((b) => !unsigned(b));
    if (kept.length === 0) continue;
    copied ??= list.slice();
    copied[i] = { ...m, content: kept };
  }
  if (!copied) return;
  out.messages = copied;
  const thinking = out.thinking as { type?: unknown } | undefined;
  if ((thinking?.type === 'enabled' || thinking?.type === 'adaptive') && inToolLoopWithoutThinking(copied)) out.thinking = { type: 'disabled' };
}

type Turn = { role?: unknown; content?: unknown } | null;

function unsigned(block: unknown): boolean {
  const b = block as { type?: unknown; signature?: unknown } | null;
  return b?.type === 'thinking' && (typeof b.signature !== 'string' || b.signature === '');
}

/** The last turn answers tool calls of an assistant turn that has no thinking block (the translator's rule too). */
function inToolLoopWithoutThinking(list: Turn[]): boolean {
  const last = list[list.length - 1];
  const prev = list[list.length - 2];
  const types = (m: Turn) => (Array.isArray(m?.content) ? (m.content as { type?: unknown }[]).map((b) => b?.type) : []);
  if (last?.role !== 'user' || !types(last).includes('tool_result') || prev?.role !== 'assistant') return false;
  const prevTypes = types(prev);
  return !prevTypes.includes('thinking') && !prevTypes.includes('redacted_thinking');
}

/** Events that come before any output: held back until the answer begins (`opensOutput`). */
const PREAMBLE = new Set(['message_start', 'ping', 'content_block_start']);

export const messages: DialectAdapter = {
  upstreamBody(body, { upstreamModel, hashUser }) {
    const out = stripGatewayFields(body, upstreamModel);
    // `user` is this gateway's field, not the Messages API's; metadata.user_id goes upstream hashed (4.2).
    delete out.user;
    const meta = out.metadata as Record<string, unknown> | undefined;
    if (meta && typeof meta.user_id === 'string') out.metadata = { ...meta, user_id: hashUser(meta.user_id) };
    if (Array.isArray(out.messages)) withoutUnsignedThinking(out);
    return out;
  },

  finishBody(body, info) {
    body.id = info.generationId;
    body.model = info.model;
    body.provider = info.provider;
    // Spec 4.1 lists both: null when the provider gave none (as a stream's message_start and message_delta, below).
    if (body.type === 'message') {
      if (body.stop_details === undefined) body.stop_details = null;
      if (body.container === undefined) body.container = null;
    }
    const usage = messagesUsage(body.usage);
    if (!usage) return { usage: null, cost: null };
    const cost = info.costOf(usage);
    Object.assign(body.usage as object, { cost, is_byok: info.isByok });
    return { usage, cost };
  },

  streamRewriter(info: FinishInfo): StreamRewriter {
    // Usage arrives in parts: input side in message_start, output (cumulative) in message_delta.
    const seen: Obj = {};
    let haveUsage = false;
    let failed = false;
    let ended = false;
    let stopped = false; // message_stop seen
    let answered = false; // a message_delta gave the stop reason: the answer is whole
    let reasoning = 0;
    const read = (data: string) => {
      try {
        return JSON.parse(data);
      } catch {
        throw new GatewayError('provider_unavailable', `Provider ${info.provider} sent a malformed stream event`, { metadata: { provider_name: info.provider } });
      }
    };
    const current = () => (haveUsage ? messagesUsage({ ...seen, output_tokens_details: { reasoning_tokens: reasoning } }) : null);
    const take = (u: Record<string, any> | undefined) => {
      if (!u) return;
      haveUsage = true;
      mergeUsage(seen, u); // a later event never lowers a count (usage.iterations: as last sent)
      const r = u.output_tokens_details?.reasoning_tokens;
      if (typeof r === 'number' && r >= reasoning) reasoning = r;
    };
    return {
      rewrite(ev: SseEvent): SseEvent | null {
        if (ev.data === '[DONE]') {
          // `[DONE]` before message_stop: after the stop reason the answer is whole (message_stop is owed and
          // sent now, `[DONE]` by end()); before it, the answer was cut, never a clean end (spec 7.5).
          if (!stopped && answered) {
            stopped = true;
            return MESSAGE_STOP;
          }
          if (!stopped) throw endedIncomplete(info.provider);
          ended = true;
          return DONE;
        }
        switch (ev.event) {
          case 'message_start': {
            const data = read(ev.data);
            data.message.id = info.generationId;
            data.message.model = info.model;
            data.message.provider = info.provider;
            if (info.metadata) data.message.gateway_metadata = info.metadata;
            // Spec 4.1 lists it; the Anthropic SDK's `finalMessage()` keeps message_start's (message_delta sets it
            // only when not null): null when the provider gave none, as in the JSON answer.
            if (data.message.container === undefined) data.message.container = null;
            // A usage of zeros (a translated stream's message_start, before its provider reported any) is not
            // usage: the bill of a stream cut short then counts the input from the request (spend/delivered.ts).
            const opening = openingUsage(data.message.usage);
            if (counts(opening)) take(opening);
            // The Anthropic SDK reads message_start's usage and message_delta's output_tokens unguarded: a provider
            // that left them out crashed `finalMessage()` with a TypeError. Zeros then, as a translated stream has.
            if (!data.message.usage || typeof data.message.usage !== 'object') data.message.usage = { input_tokens: 0, output_tokens: 0 };
            // Its `content` too, the list each content_block_start appends to: a message_start without one (OpenCode
            // Go's Anthropic-style endpoint sends none) failed `finalMessage()` at the first block ("reading 'push'").
            if (!Array.isArray(data.message.content)) data.message.content = [];
            return { event: ev.event, data: JSON.stringify(data) };
          }
          case 'message_delta': {
            const data = read(ev.data);
            // Zeros here too are not usage (a translated stream whose provider reported none): the stream is
            // then billed from what it relayed, as a chat client's is.
            if (counts(data.usage)) take(data.usage);
            if (data.delta?.stop_reason != null) answered = true;
            // The Anthropic SDK sets `stop_details` from message_delta as it stands: a provider that left it out
            // (the built-in simulated one, Anthropic-compatible servers) made `finalMessage().stop_details`
            // undefined where the Messages API says null.
            if (data.delta && typeof data.delta === 'object' && data.delta.stop_details === undefined) data.delta.stop_details = null;
            if (typeof data.usage?.output_tokens !== 'number') data.usage = { ...data.usage, output_tokens: seen.output_tokens ?? 0 };
            const usage = current();
            if (usage) data.usage = { ...data.usage, cost: info.costOf(usage), is_byok: info.isByok };
            return { event: ev.event, data: JSON.stringify(data) };
          }
          case 'error':
            // The provider's error ends the stream as the gateway's own in-band error (one, with error_type).
            throw providerStreamError('messages', read(ev.data), info.provider);
          case 'message_stop':
            stopped = true;
            return ev;
          default:
            // A record without an event name is not a messages event (clients dispatch on it): dropped.
            return ev.event === undefined ? null : ev;
        }
      },
      failure(err: GatewayError): SseEvent[] {
        failed = true;
        ended = true;
        const data = { type: 'error', error: { type: messagesErrorType(err.errorType), message: publicMessage(err), error_type: err.errorType } };
        return [{ event: 'error', data: JSON.stringify(data) }, DONE];
      },
      // Spec 4.1: a messages stream ends with the `[DONE]` sentinel after message_stop. A provider that
      // stopped after its message_delta (stop reason, final usage) gave a whole answer: message_stop is owed.
      // Before that it stopped early: that ends with the in-band error, never a clean end.
      end() {
        if (ended) return [];
        if (stopped) return [DONE];
        if (answered) {
          stopped = true;
          return [MESSAGE_STOP, DONE];
        }
        return this.failure(endedIncomplete(info.provider));
      },
      usage: current,
      cost: () => {
        const u = current();
        return u ? info.costOf(u) : null;
      },
      failed: () => failed,
      complete: () => stopped || ended,
      answered: () => answered,
    };
  },

  opensOutput(ev: SseEvent, providerId: string): boolean {
    if (ev.event === 'error') throw providerStreamError('messages', eventData(ev, providerId), providerId);
    if (ev.data === '[DONE]') throw endedBeforeOutput(providerId);
    return !(ev.event === undefined || PREAMBLE.has(ev.event));
  },
};

/** Whether a usage object counts any tokens. */
function counts(u: Record<string, unknown> | undefined): boolean {
  return !!u && Object.values(u).some((v) => typeof v === 'number' && v > 0);
}
