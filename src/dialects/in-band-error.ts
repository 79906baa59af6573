import type { GatewayError } from '../errors/gateway-error';
import type { GatewayState, SseEvent } from '../pipeline/types';
import { DIALECTS } from './index';

/** What chat chunks of a stream say about it, each when they carry it (a chat error chunk takes them). */
export interface StreamStamp {
  id?: string;
  created?: number;
  model?: string;
  provider?: string;
}

/**
 * The dialect's in-band error that ends a stream whose headers are sent, exactly as a provider failing
 * mid-stream produces it (spec 7.5.3): chat an error chunk with `finish_reason: "error"` then `[DONE]`,
 * messages an `error` event then `[DONE]`. Used by stages and by the shutdown that cut a stream themselves.
 * With `stream` (chat), the error chunk carries the stream's own `id`, `created`, `model` and `provider`
 * as the chunks before it did, instead of the gateway's (its `created` had been the time of the error).
 *
 * @example pending += inBandError(state, err).map(formatSse).join('');
 */
export function inBandError(state: GatewayState, err: GatewayError, stream?: StreamStamp): SseEvent[] {
  const route = state.route;
  const messages = state.endpoint === 'messages';
  const rewriter = DIALECTS[messages ? 'messages' : 'chat_completions'].streamRewriter({
    generationId: state.requestId ?? '',
    model: route?.model ?? '',
    provider: route?.provider ?? '',
    isByok: route?.isByok ?? false,
    costOf: () => 0,
    clientWantsUsage: false,
  });
  const events = rewriter.failure(err);
  if (messages || !stream || Object.keys(stream).length === 0) return events;
  // Spread over the chunk: each member keeps its place, with the stream's value.
  return events.map((ev) => (ev.data === '[DONE]' ? ev : { ...ev, data: JSON.stringify({ ...JSON.parse(ev.data), ...stream }) }));
}
