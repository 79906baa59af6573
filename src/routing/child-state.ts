import type { GatewayState } from '../pipeline/types';

/** What a child call may differ in from its parent. */
export interface ChildOptions {
  /** The body the child sends (in the parent's dialect). */
  body: Record<string, unknown>;
  /** Aborts the child alone (a per-call timeout); defaults to the parent's signal. */
  signal?: AbortSignal;
  /** The generation id the child's call is made under (default: dispatch draws a new one). */
  requestId?: string;
  /** Carry the parent's `X-Gateway-Metadata` opt-in (default false: a child's answer is not shown as is). */
  metadataOptIn?: boolean;
  /** Share this list as the child's `pipeline` (so its routing metadata shows the parent's records). */
  pipeline?: GatewayState['pipeline'];
  /** Told the route when the child's call commits to an endpoint, before its routing metadata is written. */
  routeChosen?: GatewayState['routeChosen'];
  /**
   * The parent's stream keep-alive, started when the child's provider accepts the call (its 2xx, streaming or
   * not): the tool loop's turns, whose answers the parent's stream carries. Default none.
   */
  streamAccepted?: GatewayState['streamAccepted'];
}

/**
 * A fresh per-request state for one more upstream call made on behalf of `parent` (fusion's candidate and
 * judge calls): same endpoint, dialect, key, span and trace, but its own routing record, usage and cost, no
 * sticky session (a side call must not move the session's endpoint) and no finish hooks. The parent stays
 * the one the ledger bills: the caller copies what it needs back.
 *
 * @example const child = childState(state, { body: { ...state.body, model: 'fake/gpt', stream: false } });
 *          const answer = await services.dispatch(child, {});
 */
export function childState(parent: GatewayState, options: ChildOptions): GatewayState {
  return {
    endpoint: parent.endpoint,
    style: parent.style,
    body: options.body,
    // The body is the parent's with a few fields replaced: its big integers keep the client's digits too.
    exactIntegers: parent.exactIntegers,
    key: parent.key,
    requestId: options.requestId ?? null,
    startedAt: performance.now(),
    session: null,
    debugEchoes: [],
    metadataOptIn: options.metadataOptIn ?? false,
    signal: options.signal ?? parent.signal,
    abort: options.signal ?? parent.abort,
    span: parent.span,
    traceContext: parent.traceContext,
    route: null,
    pipeline: options.pipeline ?? [],
    candidates: [],
    attempts: [],
    upstreamMs: -1,
    usage: null,
    costUsd: null,
    outcome: 'completed',
    onFinish: [],
    response: null,
    answerer: null,
    askedText: null,
    pendingLedger: parent.pendingLedger,
    routeChosen: options.routeChosen ?? null,
    streamAccepted: options.streamAccepted ?? null,
  };
}
