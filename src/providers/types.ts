import type { AbortWatch } from '../pipeline/request-abort';
import type { SseEvent } from '../pipeline/types';

/** The two wire formats a client or a provider can speak. */
export type Dialect = 'messages' | 'chat_completions';

/** One call to one provider endpoint. */
export interface UpstreamCall {
  dialect: Dialect;
  /** Body in the provider's dialect, `model` already rewritten to the upstream model. */
  body: Record<string, unknown>;
  /** `body` as JSON to send, when the caller can make it cheaper than `JSON.stringify(body)` (the client's own bytes). */
  encodedBody?(): string | Buffer;
  stream: boolean;
  signal: AbortSignal;
  /** The same cancellation as `signal`, to check or listen to without making an AbortSignal (see GatewayState.abort). */
  abort?: AbortWatch;
  /** Client headers a provider may forward (e.g. `anthropic-beta`). */
  forwardHeaders?: Record<string, string>;
  /**
   * The workspace's own provider key (BYOK), sent instead of the configured `api_key` in the provider's auth
   * header. Adapters without an auth header (simulated) ignore it. Never logged.
   */
  apiKey?: string;
  /**
   * A call without streaming: called once the provider answered 2xx, before its body is read. A streaming
   * client's request is 200 from then on (spec 7.5.2): the `gateway:web_fetch` tool loop's turns start the
   * stream's keep-alive with it. Streams are told by routing itself (`GatewayState.streamAccepted`).
   */
  accepted?(): void;
}

export type UpstreamReply =
  | { stream: false; body: Record<string, unknown> }
  | {
      stream: true;
      events: AsyncIterable<SseEvent>;
      /** Cuts this call off now (e.g. no first event in time); the events then end with an error. */
      abort?: (reason: Error) => void;
    };

/**
 * A provider adapter. Errors are thrown as GatewayError, classified once here (see http.ts), with
 * `metadata.provider_name` and, when known, `metadata.provider_code`.
 */
export interface Provider {
  id: string;
  kind: string;
  region: string;
  /** Whether the provider may keep or train on prompts (provider.data_collection filter). */
  dataCollection: 'allow' | 'deny';
  /** Streams: longest wait from response headers to the first event before the attempt fails over. */
  firstTokenTimeoutMs?: number;
  dialects: ReadonlySet<Dialect>;
  send(call: UpstreamCall): Promise<UpstreamReply>;
}
