import type { NormalizedUsage, SseEvent } from '../../pipeline/types';
import type { Dialect } from '../../providers/types';
import { chatThinkingBudget, chatToMessagesRequest, messagesToChatRequest, MIN_BUDGET, posInt } from './request';
import { chatToMessagesResponse, messagesToChatResponse } from './response';
import { chatToMessagesStream, messagesToChatStream } from './stream';
import { endedIncomplete } from '../stream-error';

/**
 * The one translator pair between the two API styles, used when a client of one style is served by a
 * provider of the other. A same-style request passes through untouched, but for one field: a messages
 * request without `max_tokens` (optional here, spec 4.1; required by the Messages API, which answers 400
 * "max_tokens: Field required") gets `options.defaultMaxTokens`, as a chat request translated to a messages
 * provider does; with a thinking budget at or above it, budget + default (the budget must stay below it).
 */
export function translateRequest(
  from: Dialect,
  to: Dialect,
  body: Record<string, unknown>,
  options: { defaultMaxTokens: number },
): Record<string, unknown> {
  if (from === to) return to === 'messages' && !posInt(body.max_tokens) ? { ...body, max_tokens: defaultMessagesMax(body, options.defaultMaxTokens) } : body;
  return from === 'chat_completions' ? chatToMessagesRequest(body, options) : messagesToChatRequest(body);
}

/** A provider's non-streaming answer in the client's style. */
export function translateResponse(from: Dialect, to: Dialect, body: Record<string, unknown>): Record<string, unknown> {
  if (from === to) return body;
  return from === 'messages' ? messagesToChatResponse(body) : chatToMessagesResponse(body);
}

/**
 * A provider's stream in the client's style, event by event. A stream that ends without its terminal
 * event is a failure (it must never look like a successful end), raised so the caller ends the client's
 * stream with the in-band error of spec 7.5.
 */
export async function* translateStream(
  from: Dialect,
  to: Dialect,
  events: AsyncIterable<SseEvent>,
  providerId: string,
  seen?: { reported: () => NormalizedUsage | null },
): AsyncGenerator<SseEvent> {
  if (from === to) throw new Error('translateStream: nothing to translate between one style and itself');
  const translator = from === 'messages' ? messagesToChatStream() : chatToMessagesStream();
  // What the provider reported before the translated stream can carry it (for the bill of a stream cut short).
  if (seen && translator.reported) seen.reported = () => translator.reported!();
  try {
    for await (const ev of events) {
      yield* translator.push(ev);
      // Its terminal event seen, the answer is whole: a provider that keeps the connection open after it (or
      // sends more) must not hold the client's stream open until a timeout turns a whole answer into a failure.
      if (translator.complete) break;
    }
  } catch (err) {
    // The provider stalled or dropped the connection: after the answer's finish (a chat finish_reason, a
    // messages stop_reason) the answer is whole and ends as it would have; before it, the failure stands.
    const tail = translator.end();
    if (!translator.complete) throw err;
    yield* tail;
    return;
  }
  yield* translator.end();
  if (!translator.complete) {
    throw endedIncomplete(providerId);
  }
}

/** The `max_tokens` a messages provider is sent when neither the client nor the model (`max_output_tokens`) sets one. */
export const DEFAULT_MAX_TOKENS = 4096;

/**
 * The output limit an upstream call carries, as dispatch builds it: a `from`-style `body` sent to a `to`-style
 * provider of a model with `maxOutputTokens` (its `max_output_tokens`). The client's limit (chat passed
 * through: the larger of its two names, the provider may read either); else, for a messages provider, the
 * default the gateway adds (`maxOutputTokens` or 4096; above a thinking budget, budget + it); then lowered to
 * `maxOutputTokens` (withOutputCap). 0 when no limit is sent (a chat provider then uses its own).
 *
 * @example upstreamMaxTokens({ body: { messages }, from: 'messages', to: 'messages' }) // 4096
 */
export function upstreamMaxTokens(input: { body: Record<string, unknown>; from: Dialect; to: Dialect; maxOutputTokens?: number }): number {
  const { body: b, from, to, maxOutputTokens } = input;
  const defaultMax = maxOutputTokens ?? DEFAULT_MAX_TOKENS;
  const num = (v: unknown) => (posInt(v) ? v : 0);
  let sent: number;
  if (from === 'messages') sent = num(b.max_tokens) || (to === 'messages' ? defaultMessagesMax(b, defaultMax) : 0);
  else if (to === 'chat_completions') sent = Math.max(num(b.max_tokens), num(b.max_completion_tokens));
  else {
    const budget = chatThinkingBudget(b);
    const thinking = budget === undefined ? 0 : Math.max(MIN_BUDGET, budget);
    sent = num(b.max_completion_tokens) || num(b.max_tokens) || (thinking >= defaultMax ? thinking + defaultMax : defaultMax);
  }
  return maxOutputTokens !== undefined ? Math.min(sent, maxOutputTokens) : sent;
}

/** `max_tokens` for a messages request that set none: the default, or above an enabled thinking budget. */
function defaultMessagesMax(body: Record<string, unknown>, defaultMax: number): number {
  const thinking = body.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  const budget = thinking?.type === 'enabled' && posInt(thinking.budget_tokens) ? thinking.budget_tokens : 0;
  return budget >= defaultMax ? budget + defaultMax : defaultMax;
}
