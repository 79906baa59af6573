/**
 * The asynchronous-job contract of video providers, next to the chat `Provider` (types.ts): a generation is
 * submitted once, then polled until it ends, and may be cancelled. Adapters are stateless towards the
 * gateway: everything needed to poll a job again after a restart is its `upstreamJobId`.
 */

/** The provider kinds that serve `video_models` (and never chat models). */
export const VIDEO_PROVIDER_KINDS: ReadonlySet<string> = new Set(['simulated-video', 'http-video']);

/** What the upstream says about a job. Mapped onto the gateway's job states by src/videos/advance.ts. */
export type VideoUpstreamStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export interface VideoSubmitInput {
  /** The endpoint's `upstream_model`. */
  model: string;
  prompt: string;
  /** Further generation parameters of the request (`duration_seconds`, `resolution`, …), passed on as they are. */
  params: Record<string, unknown>;
  /** The upstream job id of the job this one continues (`previous_job_id`), on the same provider. */
  previousUpstreamJobId?: string;
}

export interface VideoPollResult {
  status: VideoUpstreamStatus;
  /** Output URLs, when succeeded. */
  urls?: string[];
  /** What the upstream reports it produced or charged; the gateway prices with the endpoint's pricing first. */
  usage?: { cost?: number; seconds?: number };
  /** Why it failed, when failed. */
  error?: string;
  /** Epoch ms after which the upstream no longer serves the outputs, when it says so. */
  expiresAt?: number;
}

/**
 * A video provider adapter. Errors are thrown as GatewayError classified like the chat adapters'
 * (`metadata.provider_name`, `provider_code`). `apiKey`, when given, is a workspace's own key for this
 * provider (BYOK), sent instead of the configured one; a job submitted with it is polled and cancelled with it.
 *
 * @example const { upstreamJobId } = await provider.submit({ model: 'v1', prompt: 'a cat', params: {} }, signal);
 */
export interface VideoProvider {
  id: string;
  kind: string;
  submit(input: VideoSubmitInput, signal: AbortSignal, apiKey?: string): Promise<{ upstreamJobId: string }>;
  /** `signal`: the poller's stop (a shutdown) or the request's abort ends the call. */
  poll(upstreamJobId: string, apiKey?: string, signal?: AbortSignal): Promise<VideoPollResult>;
  cancel(upstreamJobId: string, apiKey?: string, signal?: AbortSignal): Promise<void>;
}
