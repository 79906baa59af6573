import type { GatewayError } from '../errors/gateway-error';
import type { NormalizedUsage, SseEvent } from '../pipeline/types';

/** What a dialect needs to know to finish a response for the client. */
export interface FinishInfo {
  generationId: string;
  /** The gateway model id the client asked for (and gets back in `model`). */
  model: string;
  provider: string;
  isByok: boolean;
  /** Cost of a usage under the serving endpoint's pricing. */
  costOf(usage: NormalizedUsage): number;
  /** Chat: whether the client asked for the usage chunk (`stream_options.include_usage`). */
  clientWantsUsage: boolean;
  /**
   * Chat: how many choices the client asked for (`n`, 1 when unset). Above 1 the answer is whole only once
   * every choice that began has its finish_reason.
   */
  choices?: number;
  /** Routing metadata to carry in the stream (messages style: in message_start), when opted in. */
  metadata?: Record<string, unknown>;
}

/** Rewrites a provider's stream for the client, event by event, and keeps the usage it saw. */
export interface StreamRewriter {
  /** The event to send, or null to drop it. */
  rewrite(ev: SseEvent): SseEvent | null;
  /** Events that end the stream in this dialect after a mid-stream failure (spec 7.5). */
  failure(err: GatewayError): SseEvent[];
  /**
   * Events still owed at a normal end (e.g. `[DONE]` when the provider sent none). `billed`: the usage the
   * request is billed (spend/delivered.ts), for a chat client that asked for the usage chunk when the provider
   * sent none: it then gets one, before `[DONE]`.
   */
  end(billed?: () => NormalizedUsage | null): SseEvent[];
  usage(): NormalizedUsage | null;
  cost(): number | null;
  /** True once the provider reported an error in-band. */
  failed(): boolean;
  /**
   * True once the provider's terminal event has been relayed (chat `[DONE]`, messages `message_stop`): nothing
   * after it is read, so a provider that keeps its connection open cannot hold the client's stream open.
   */
  complete(): boolean;
  /**
   * True once the answer is whole though the terminal event has not come yet (chat: a `finish_reason` was
   * relayed, the usage chunk and `[DONE]` are still owed; messages: never, `message_stop` is the terminal
   * event). A provider that stalls or drops the connection after that has still answered: the stream ends as
   * `end()` ends it, not with an error after a complete answer.
   */
  answered(): boolean;
}

export interface DialectAdapter {
  /** The body to send to a provider of the same dialect. */
  upstreamBody(body: Record<string, unknown>, input: { upstreamModel: string; hashUser(u: string): string }): Record<string, unknown>;
  /** Rewrites a non-streaming provider answer in place for the client; returns its usage. */
  finishBody(body: Record<string, unknown>, info: FinishInfo): { usage: NormalizedUsage | null; cost: number | null };
  streamRewriter(info: FinishInfo): StreamRewriter;
  /**
   * Whether a stream event (in this dialect) shows the answer has begun: a token, a tool call or a finish
   * (`[DONE]` before that is a stream that ended with no answer, thrown as a failure). What comes before (message_start, a role chunk, pings) is held back until then, so that an
   * attempt failing before any output can still fail over (spec 7.5.2). Throws the provider's error for an
   * in-band error event, and for a malformed one.
   */
  opensOutput(ev: SseEvent, providerId: string): boolean;
}
