import { GatewayError } from '../../errors/gateway-error';
import type { NormalizedUsage, SseEvent } from '../../pipeline/types';
import { isObj, type Obj } from '../common';

/** Translates one provider stream incrementally: each input event gives zero or more output events; end() flushes. */
export interface StreamTranslator {
  push(ev: SseEvent): SseEvent[];
  end(): SseEvent[];
  /**
   * True once the input's terminal event was seen (messages: `message_stop` or `error`; chat: `[DONE]`
   * after a `finish_reason`, or an error chunk). A stream that ends while this is false was cut: the
   * translator has emitted no successful ending, and the caller must end the client's stream with an error.
   */
  readonly complete: boolean;
  /**
   * The usage the provider has reported so far, before the translated stream could carry it (messages →
   * chat: `message_start`'s input count, which a chat stream only carries at its end); null when none.
   */
  reported?(): NormalizedUsage | null;
}

export const DONE: SseEvent = { data: '[DONE]' };

export function parse(ev: SseEvent): Obj {
  let data: unknown;
  try {
    data = JSON.parse(ev.data);
  } catch {
    data = undefined;
  }
  if (!isObj(data)) throw new GatewayError('provider_unavailable', 'Provider sent a malformed stream event');
  return data;
}

