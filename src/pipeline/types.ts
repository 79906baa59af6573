import type { ParameterizedContext, Next } from 'koa';
import type { Context, Span } from '@opentelemetry/api';
import type { ApiStyle } from '../errors/envelope';
import type { ClientBytes } from '../routes/client-bytes';
import type { ExactIntegers } from '../routes/exact-integers';
import type { Admission } from '../spend/admission';
import type { KeyRecord } from '../store/types';
import type { AbortWatch } from './request-abort';

/** The endpoints that run a pipeline. */
export type EndpointId = 'messages' | 'chat_completions' | 'key' | 'models' | 'model_get' | 'preset_write' | 'preset_list' | 'preset_get' | 'preset_versions' | 'videos_create' | 'videos_get' | 'videos_cancel';

/** One Server-Sent Event; `data` is the JSON text (or `[DONE]`). */
export interface SseEvent {
  event?: string;
  data: string;
}

/** What a pipeline answers with. Post-stages may wrap `events` to transform a stream as it flows. */
export type GatewayResponse =
  | {
      kind: 'json';
      status: number;
      body: unknown;
      headers?: Record<string, string>;
      /**
       * The error_type of a failure the answer reports in its body with a 200 (spec 7.5.4: every provider failed
       * after answering 2xx): the access line, the metrics and the span count the request as that error.
       */
      failure?: string;
    }
  | {
      kind: 'sse';
      status: number;
      events: AsyncIterable<SseEvent>;
      headers?: Record<string, string>;
      /**
       * Called by the endpoint when `events` will never be read (the client left, or a stage refused the answer,
       * before it was written): bills what the provider had sent and closes its stream (routing's relay sets it).
       * A stage that wraps `events` keeps it (assign `events`, or spread the response).
       */
      unread?: () => void;
    };

/** Token usage in one shape for both dialects. `inputTokens` includes cached and cache-write tokens. */
export interface NormalizedUsage {
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
  cacheWriteTokens: number;
  /**
   * Of `cacheWriteTokens`, those written to a 1-hour cache (Anthropic's `cache_creation.ephemeral_1h_input_tokens`),
   * billed at `cache_write_1h`; absent when none.
   */
  cacheWrite1hTokens?: number;
  reasoningTokens: number;
  /**
   * The model calls the provider reports the usage sums (an Anthropic-style provider's `usage.iterations`: a
   * server-side tool loop, a compaction); 1 when it says nothing. Each call is bounded as one (boundedUsage).
   */
  calls?: number;
}

/** The provider endpoint a request was (finally) served by. */
export interface RouteChoice {
  model: string;
  provider: string;
  upstreamModel: string;
  isByok: boolean;
}

/**
 * What a stage did to a request, for `gateway_metadata.pipeline` (spec 7.8) and the trace: e.g. a guardrail
 * `{type: 'guardrail', name, guardrail_id, guardrail_scope, summary, data: {action, detected, engines, patterns}}`.
 */
export interface PipelineRecord {
  type: string;
  name: string;
  summary: string;
  data?: Record<string, unknown>;
  [field: string]: unknown;
}

export interface UpstreamAttempt {
  provider: string;
  model: string;
  upstreamModel: string;
  outcome: 'success' | 'error';
  errorType?: string;
  status?: number;
  /** Request parameters left out of this attempt's body: the endpoint's `supported_parameters` did not list them. */
  droppedParameters?: string[];
}

/** Per-request data, `ctx.state.gateway`: one declared type every stage shares. */
export interface GatewayState {
  endpoint: EndpointId;
  style: ApiStyle;
  /** Parsed JSON body of POST endpoints (a JSON object; other JSON is refused by `validate`). */
  body: Record<string, unknown> | null;
  /** The body's bytes as the client sent them, when the pipeline keeps the body (see ClientBytes); else null or absent. */
  clientBytes?: ClientBytes | null;
  /** The client's digits of integers in the body that JSON.parse could not hold exactly (src/routes/exact-integers.ts); else null or absent. */
  exactIntegers?: ExactIntegers | null;
  /** Authenticated key, set by `auth`. */
  key: KeyRecord | null;
  /** Generation id (`gen-…`), set once routing starts; errors before that carry `request_id: null`. */
  requestId: string | null;
  /** performance.now() when the request arrived. */
  startedAt: number;
  /** The sticky-routing session (`session_id`, else the `x-session-id` header). */
  session: string | null;
  /** Streams with `debug.echo_upstream_body`: the upstream body of each attempt, redacted. */
  debugEchoes: { provider: string; model: string; body: unknown }[];
  /** X-Gateway-Metadata: enabled (or the legacy header). */
  metadataOptIn: boolean;
  /** Aborted when the client goes away (or a shutdown cuts the request). Made on first use: see `abort`. */
  signal: AbortSignal;
  /**
   * The same cancellation as `signal`, for code that only checks or listens: reading it makes no
   * AbortSignal (each costs the heap, src/pipeline/request-abort.ts). The gateway's hot path uses this.
   */
  abort: AbortWatch;
  /** The request span; stages add attributes here (stage spans are made by the runner). */
  span: Span;
  /**
   * The trace context of the code running now (the innermost stage's span). Passed explicitly rather
   * than through AsyncLocalStorage, whose promise hooks cost every request on Node 20.
   */
  traceContext: Context;
  route: RouteChoice | null;
  /** What stages did (guardrails, moderation, routers, healing…), in order, for `gateway_metadata.pipeline`. */
  pipeline: PipelineRecord[];
  /** Every endpoint routing considered, in order (for routing metadata). */
  candidates: { provider: string; model: string; region: string }[];
  attempts: UpstreamAttempt[];
  /**
   * Milliseconds spent waiting on upstream calls (JSON: until the reply; stream: until its first event;
   * plus retry waits the upstream asked for); -1 until the first call. Feeds `gateway_overhead_seconds`.
   */
  upstreamMs: number;
  /** Final usage and cost, set by the stage that produced the answer (for streams: when the stream ends). */
  usage: NormalizedUsage | null;
  costUsd: number | null;
  /**
   * The part of `costUsd` spent with the workspace's own provider keys, for a request whose upstream calls were
   * not all served one way (fusion's candidates and judge, a tool loop's turns): set by the stage that sums
   * them. Absent, `route.isByok` says for the whole cost.
   */
  byokCostUsd?: number | null;
  /** How the request ended, for the ledger. */
  outcome: 'completed' | 'failed' | 'cancelled';
  /**
   * Run once when the request is over (answer written, stream ended or failed), after usage and cost are
   * final: e.g. `budget-check` settles its hold here. Each must not throw.
   */
  onFinish: (() => void)[];
  response: GatewayResponse | null;
  /**
   * A stage that answers in the provider call's place by calling upstreams itself, when that must happen
   * where `upstream` stands (after the routers and the spend checks), sets this instead of `response`:
   * fusion, web-fetch's `gateway:web_fetch` tool loop. The `upstream` stage calls it in place of the dispatch.
   */
  answerer: (() => Promise<GatewayResponse>) | null;
  /**
   * Called by routing when a provider has accepted this request's stream (200) and its first output is
   * awaited. From then on the status is 200 whatever follows (spec 7.5.2), so the endpoint may send the
   * headers and keep-alive comments while the answer is slow to begin (`server.stream_keepalive_ms`).
   * Set by the endpoint for streaming requests; null otherwise and in child calls. Fusion calls it too, once
   * `min_answers` of its candidates answered (its judge's call, a child, does not); the `gateway:web_fetch`
   * tool loop hands it to its turns (children), whose providers call it on their 2xx (UpstreamCall.accepted).
   */
  streamAccepted?: (() => void) | null;
  /**
   * Called when dispatch commits the call to an endpoint (its answer arrived; a stream: its first event), before
   * the routing metadata is written: a stage that makes a call on the request's behalf records the route it
   * took there (fusion's judge, whose record a stream's metadata carries). Set through `childState`; absent otherwise.
   */
  routeChosen?: ((route: NonNullable<GatewayState['route']>) => void) | null;
  /**
   * The client's own text of its last user message, kept by the first stage that adds to that message
   * (web-fetch, file-parser): see `src/pipeline/asked-text.ts`. Null until then.
   */
  askedText: string | null;
  /**
   * The request's spend hold, set when `budget-check` ran (`admission` null: nothing is held). A stage that
   * calls upstreams in the request's place widens it with `services.spend.cover`; the hold held when the
   * request ends is the one settled. `models`: the models the request named when it was checked (see
   * `services.spend.recheck`).
   */
  spendHold?: { admission: Admission | null; models?: string };
  /**
   * What `rate-limit` counted the request against, set when it ran: the model (the first the request names that
   * this gateway has) and whether the free-model windows counted it. `services.rateLimits.recheck` counts the
   * model served when a later stage (a router, `:online`) changed it. `dailyAt`: when the free-model daily window
   * counted it (null if none), the time its ledger row is dated by when no spend hold dates it.
   */
  rateCounted?: { model: string | undefined; free: boolean; dailyAt: number | null };
  /**
   * The request's journal entry (README "Ledger durability"): the generation id of its pending ledger row
   * (claimed when its write starts; `recording` resolves once it is durable), deleted with its ledger row.
   * Shared with child calls (fusion, the tool loop's turns), so a request has at most one; they run under the
   * request's generation id, so the entry's id is the one its ledger row carries.
   */
  pendingLedger?: { id: string | null; recording?: Promise<void> };
}

export type GatewayContext = ParameterizedContext<{ gateway: GatewayState }>;

/**
 * A pipeline stage: a plain Koa middleware. Pre-work before `await next()`, post-work after it.
 *
 * `beforeBody` (optional): a check on the request's headers alone, which the endpoint runs before it reads
 * the body, for a stage whose refusal does not depend on the body (`auth`: the key). A client it refuses
 * never has its body read or parsed (README "Edge limits"). It throws the refusal; the stage itself still
 * runs in its place in the pipeline (and may use what the check found: key what it keeps by `ctx`).
 */
export type Stage = ((ctx: GatewayContext, next: Next) => Promise<void>) & { beforeBody?: HeaderCheck };

/** What `auth`'s header check leaves on Koa's `ctx.state` for the header checks after it: the key it found. */
export interface HeaderKeyState {
  headerKey?: KeyRecord;
}

/** See `Stage.beforeBody`. `ctx.state.gateway` is not set yet when it runs. */
export type HeaderCheck = (ctx: ParameterizedContext) => Promise<void>;

/** A stage's header check, with the stage's id (for its span when it refuses). */
export interface StageCheck {
  stage: string;
  check: HeaderCheck;
}

/** One endpoint's pipeline, built at load: run it with the request; `beforeBody` are its stages' header checks, in order. */
export interface Pipeline {
  (ctx: GatewayContext): Promise<void>;
  readonly beforeBody: readonly StageCheck[];
  /** Every stage keeps the body (`StageDefinition.keepsBody`): the endpoint keeps the client's bytes for the upstream call. */
  readonly keepsBody: boolean;
}

/**
 * A plugin: one folder under `plugins/<id>/` exporting this definition.
 *
 * @example
 * export const timing: StageDefinition<{ header: string }, Services> = {
 *   id: 'timing', configSchema: schema,
 *   create: (config) => async (ctx, next) => { const t = Date.now(); await next(); ctx.set(config.header, String(Date.now() - t)); },
 * };
 */
export interface StageDefinition<C = any, S = any> {
  id: string;
  /** JSON Schema of the stage's operator config (`plugins.<id>` in gateway.yaml). */
  configSchema: object;
  /**
   * The stage's work is on the request, before the provider is called (checks, spend, routing, request
   * changes): a pipeline that names it after `upstream` is a config error (it would run after the provider was
   * called and billed). Stages that look at the answer (work after `await next()`) may stand anywhere.
   */
  beforeUpstream?: boolean;
  /**
   * The stage never changes the request body's values in place: it reads them, or puts a new value in a
   * top-level field (`state.body = { ...state.body, model }`, `body.max_tokens = 100`). When every stage of a
   * pipeline says so, the parts of the body no stage replaced go upstream as the client's own bytes instead of
   * being serialized again (README "Writing a plugin"). Leave it unset if the stage edits a message, a tool or
   * any other nested value where it is.
   */
  keepsBody?: boolean;
  create(config: C, services: S): Stage;
}

export type StageRegistry = ReadonlyMap<string, StageDefinition>;
