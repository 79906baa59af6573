import { GatewayError, type ErrorType } from '../errors/gateway-error';
import type { SseEvent } from '../pipeline/types';
import type { Dialect } from '../providers/types';
import { callerFacing } from '../providers/upstream-errors';
import { chatErrorToMessages, messagesErrorToChat } from './translate/response';

/**
 * A provider's in-band stream error, already in the client's dialect (a messages `error` event's data, a chat
 * chunk with `error`), as the GatewayError it stands for: the error_type from the provider's own type or
 * code (as `messagesErrorToChat` / `chatErrorToMessages` read them), the provider's message kept only where it
 * tells the caller what to fix (as for an HTTP error, `classifyUpstreamError`).
 */
export function providerStreamError(dialect: Dialect, data: unknown, providerId: string): GatewayError {
  const error = data && typeof data === 'object' ? (data as { error?: unknown }).error : undefined;
  const code = error && typeof error === 'object' ? (error as { code?: unknown }).code : undefined;
  let type: ErrorType;
  let message: string;
  if (dialect === 'messages') {
    const chat = messagesErrorToChat(error);
    [type, message] = [chat.metadata.error_type, chat.message];
  } else {
    const m = chatErrorToMessages(error);
    [type, message] = [m.error_type, m.message];
  }
  const metadata: Record<string, unknown> = { provider_name: providerId };
  // A translated error says the provider gave no code (`provider_code: null`): its `code` is not the provider's.
  const given = error && typeof error === 'object' ? (error as { metadata?: { provider_code?: unknown } }).metadata?.provider_code : undefined;
  if (typeof code === 'number' && given !== null) metadata.provider_code = code;
  const text = callerFacing(type) ? String(message) : `Provider ${providerId} reported an error in its stream (${type})`;
  return new GatewayError(type, text, { metadata });
}

/** The JSON data of a stream event, or a malformed-stream failure naming the provider. */
export function eventData(ev: SseEvent, providerId: string): unknown {
  try {
    return JSON.parse(ev.data);
  } catch {
    throw new GatewayError('provider_unavailable', `Provider ${providerId} sent a malformed stream event`, { metadata: { provider_name: providerId } });
  }
}

/**
 * A provider's stream that ended (`[DONE]` or the end of its body) before its answer began: no token, no tool
 * call, no finish. Nothing reached the client, so it is a failed attempt and the next candidate is tried.
 */
export function endedBeforeOutput(providerId: string): GatewayError {
  return new GatewayError('provider_unavailable', `Provider ${providerId} ended its stream before any output`, { metadata: { provider_name: providerId } });
}

/** A provider's stream that stopped (its body, or a `[DONE]`) after output but before its finish: cut short. */
export function endedIncomplete(providerId: string): GatewayError {
  return new GatewayError('provider_unavailable', `Provider ${providerId} ended the stream before it was complete`, { metadata: { provider_name: providerId } });
}
