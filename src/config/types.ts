import type { StorageConfig } from '../store';

/** gateway.yaml after ${ENV} interpolation, schema validation and defaults (schemas/gateway.schema.json). */
export interface GatewayConfig {
  server: {
    host: string;
    port: number;
    base_path: string;
    max_body_bytes: number;
    /** Edge limits (README "Edge limits"): JSON nesting, slow clients, connections and requests at once. */
    max_json_depth: number;
    max_json_values: number;
    headers_timeout_ms: number;
    body_timeout_ms: number;
    /** Longest a stream waits for its client to take what was written (a reader that stopped reading is cut). */
    write_timeout_ms: number;
    /** A stream whose answer is slow to begin gets its headers and an SSE comment this often (0: off; README "Edge limits"). */
    stream_keepalive_ms: number;
    /** 0 = no limit. */
    max_connections: number;
    /** 0 = no limit. */
    max_in_flight: number;
    user_hash_salt?: string;
    watch_config: boolean;
    /** Longest a shutdown waits for requests in flight before cutting them (README "Shutdown and probes"). */
    drain_timeout_ms: number;
    /** CORS for browser clients (src/cors.ts); off while `allowed_origins` is empty. Read per request. */
    cors: { allowed_origins: string[]; max_age_s: number };
    /** `GET /metrics` (README "Metrics"): Prometheus text, outside base_path. */
    metrics: { enabled: boolean; auth: 'none' | 'token' | 'management_key'; token?: string };
  };
  storage: StorageConfig;
  state: StateConfig;
  telemetry: { exporter: 'none' | 'console' | 'otlp'; endpoint?: string; service_name: string; max_queue: number };
  logging: { level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent' };
  /** `journal`: pending rows for requests in flight, so a killed process loses none (README "Ledger durability"). */
  ledger: { flush_ms: number; max_batch: number; journal: boolean };
  routing: { retry_wait_max_ms: number; sticky_ttl_ms: number; circuit_breaker: { failure_threshold: number; cooldown_ms: number } };
  providers: ProviderConfig[];
  models: ModelConfig[];
  pipelines: { default: string[]; messages?: string[]; chat_completions?: string[] };
  free_models: FreeModelsConfig;
  accounts: AccountConfig[];
  workspaces: WorkspaceConfig[];
  guardrails: GuardrailConfig[];
  /** Moderation engines, assigned per workspace (README "Moderation"). */
  moderation: ModerationConfig;
  spend: SpendConfig;
  rate_limits: RateLimitsConfig;
  byok: { encryption_key?: string };
  plugins: Record<string, unknown>;
  /** Video generation models (README "Video jobs"); served only by the video provider kinds. */
  video_models: VideoModelConfig[];
  videos: VideosConfig;
}

export interface StateConfig {
  driver: 'memory' | 'redis';
  url?: string;
  prefix: string;
  command_timeout_ms: number;
}

export type ResetInterval = 'daily' | 'weekly' | 'monthly' | 'lifetime';

export interface BudgetConfig {
  limit_usd: number;
  reset_interval: ResetInterval;
  include_byok: boolean;
}

export interface AccountConfig {
  name: string;
  billing: 'prepaid' | 'invoice' | 'enterprise' | 'subscription';
}

export interface WorkspaceConfig {
  name: string;
  account: string;
  default_guardrail?: string;
  /** Id of the moderation engine (`moderation.engines[].id`) the `moderation` stage runs for this workspace. */
  moderation?: string;
  members: { user_id: string; guardrail?: string }[];
  keys: { key: string; guardrail: string }[];
  budgets: (BudgetConfig & { id: string })[];
}

/**
 * A guardrail: its budget (enforced by `budget-check`) and its content rules (enforced by the `guardrail`
 * stage; README "Guardrails"). The content fields are optional here because the schema fills their defaults.
 */
export interface GuardrailConfig {
  id: string;
  budget?: BudgetConfig;
  action?: 'block' | 'redact' | 'flag';
  on_error?: 'allow' | 'deny';
  patterns?: { name: string; regex: string; flags?: string }[];
  keywords?: string[];
  pii?: PiiKind[];
  prompt_injection?: { enabled: boolean; threshold?: number; classifier_url?: string; timeout_ms?: number };
}

/** A local moderation rule: a JavaScript regex or a keyword list, reported by its name. */
export interface ModerationRuleConfig {
  name: string;
  regex?: string;
  flags?: string;
  keywords?: string[];
}

/** One moderation engine (README "Moderation"); defaults are filled by the schema. */
export interface ModerationEngineConfig {
  id: string;
  kind: 'openai' | 'rules';
  /** openai: the OpenAI-compatible API base, e.g. `https://api.openai.com/v1` (POST `{base_url}/moderations`). */
  base_url?: string;
  api_key?: string;
  model: string;
  timeout_ms: number;
  on_error: 'allow' | 'deny';
  /** openai: only these categories count (all when absent). */
  categories?: string[];
  /** openai: a category counts when its score reaches this (else the provider's own booleans decide). */
  threshold?: number;
  rules: ModerationRuleConfig[];
  /** Also judge the answer (streams as they flow, README "Moderation" → "Output"); the schema defaults it to false. */
  moderate_output?: boolean;
  /** Streams: the engine is asked again after this many new answer characters (and at the end); schema default 500. */
  output_check_chars?: number;
}

export interface ModerationConfig {
  engines: ModerationEngineConfig[];
}

export type PiiKind = 'email' | 'phone' | 'payment_card' | 'national_id' | 'api_key';

export interface SpendConfig {
  max_completion_tokens: number;
  balance_cache_ms: number;
  hold_ttl_ms: number;
  in_flight: {
    enabled: boolean;
    fraction: number;
    ceiling_usd: number;
    applies_below_balance_usd: number;
    settlement_ms: number;
    retry_after_s: number;
  };
}

export interface RequestLimitConfig {
  requests: number;
  window_s: number;
}

export interface RateLimitsConfig {
  key?: RequestLimitConfig;
  models: (RequestLimitConfig & { model: string; per: 'global' | 'key' })[];
}

export interface FreeModelsConfig {
  per_minute: number;
  daily_requests: number;
  daily_requests_purchased: number;
  purchase_threshold_usd: number;
}

export type ProviderConfig = ChatProviderConfig | VideoProviderConfig;

/** Providers of chat models (`models[]`). */
export type ChatProviderConfig = OpenAIProviderConfig | AnthropicProviderConfig | SimulatedProviderConfig;

/** Providers of video models (`video_models[]`): asynchronous jobs, never used for chat routing. */
export type VideoProviderConfig = SimulatedVideoProviderConfig | HttpVideoProviderConfig;

interface ProviderBase {
  id: string;
  region: string;
  data_collection: 'allow' | 'deny';
}

/** Per-attempt timeouts of an HTTP provider; unset ones fall back to `timeout_ms`. */
interface HttpTimeouts {
  timeout_ms: number;
  connect_timeout_ms: number;
  headers_timeout_ms?: number;
  first_token_timeout_ms?: number;
  idle_timeout_ms?: number;
}

export interface OpenAIProviderConfig extends ProviderBase, HttpTimeouts {
  kind: 'openai';
  base_url: string;
  api_key?: string;
  headers?: Record<string, string>;
}

export interface AnthropicProviderConfig extends ProviderBase, HttpTimeouts {
  kind: 'anthropic';
  base_url: string;
  api_key?: string;
  anthropic_version: string;
  headers?: Record<string, string>;
}

export interface SimulatedProviderConfig extends ProviderBase {
  kind: 'simulated';
  latency_ms: number;
  chunk_delay_ms: number;
  reply?: string;
}

/** USD per 1M tokens (request: USD per request). */
export interface Pricing {
  prompt: number;
  completion: number;
  cached_read?: number;
  cache_write?: number;
  /** Prompt tokens written to a 1-hour cache (Anthropic bills them 2× input, a 5-minute write 1.25×); `cache_write`, then `prompt`, when unset. */
  cache_write_1h?: number;
  request: number;
}

export interface ModelEndpointConfig {
  provider: string;
  upstream_model: string;
  pricing: Pricing;
  supported_parameters?: string[];
  /** The high-speed configuration (`speed: fast`), at its premium price. */
  fast?: { upstream_model?: string; pricing: Pricing };
}

export interface ModelConfig {
  id: string;
  name?: string;
  context_length?: number;
  max_output_tokens?: number;
  /** Auto-router capability tier, 1 (small) … 3 (strongest); absent counts as 2. */
  tier?: number;
  /** What the model is good at, for the auto-router. */
  capabilities?: ModelCapability[];
  /** Declared quality score 0..1 (auto-router tie-break, pareto-router minimum). */
  quality?: number;
  endpoints: ModelEndpointConfig[];
}

/** `pdf`: reads PDF documents natively (file-parser leaves its PDFs alone). */
export type ModelCapability = 'code' | 'tools' | 'vision' | 'reasoning' | 'pdf';

export interface SimulatedVideoProviderConfig extends ProviderBase {
  kind: 'simulated-video';
  /** How long a job stays queued, then running, measured from its submission. */
  queued_ms: number;
  running_ms: number;
  /** Share of prompts that fail, 0..1; decided per prompt from a hash with `seed`, so it is reproducible. */
  failure_rate: number;
  seed: string;
  /** Output URL; `{job_id}` is replaced by the upstream job id. */
  output_url: string;
}

export interface HttpVideoProviderConfig extends ProviderBase {
  kind: 'http-video';
  base_url: string;
  api_key?: string;
  headers?: Record<string, string>;
  /** Longest wait for each upstream call's headers and between body chunks. */
  timeout_ms: number;
  connect_timeout_ms: number;
}

/** USD per second of output video and per job; the cost of a job is `per_job + per_second × seconds`. */
export interface VideoPricing {
  per_second: number;
  per_job: number;
}

export interface VideoModelConfig {
  id: string;
  name?: string;
  endpoints: { provider: string; upstream_model: string; pricing: VideoPricing }[];
}

export interface VideosConfig {
  /** How often each gateway process polls the upstream of unfinished jobs. */
  poll_interval_ms: number;
  /** How long outputs stay available after completion (unless the upstream says otherwise). */
  output_ttl_s: number;
  /** A job unfinished this long after creation fails (`timeout`). */
  job_timeout_s: number;
  default_duration_seconds: number;
  max_duration_seconds: number;
  /** Jobs with work left that one poll round advances at most (the next round continues after the last one). */
  max_jobs_per_round: number;
}
