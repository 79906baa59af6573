import type { GatewayError } from '../errors/gateway-error';
import type { GatewayState, SseEvent } from '../pipeline/types';
import { DIALECTS } from './index';

/**
 * The dialect's in-band error that ends a stream whose headers are sent, exactly as a provider failing
 * mid-stream produces it (spec 7.5.3): chat an error chunk with `finish_reason: "error"` then `[DONE]`,
 * messages an `error` event then `[DONE]`. Used by stages and by the shutdown that cut a stream themselves.
 *
 * @example pending += inBandError(state, err).map(formatSse).join('');
 */
export function inBandError(state: GatewayState, err: GatewayError): SseEvent[] {
  const route = state.route;
  const rewriter = DIALECTS[state.endpoint === 'messages' ? 'messages' : 'chat_completions'].streamRewriter({
    generationId: state.requestId ?? '',
    model: route?.model ?? '',
    provider: route?.provider ?? '',
    isByok: route?.isByok ?? false,
    costOf: () => 0,
    clientWantsUsage: false,
  });
  return rewriter.failure(err);
}
