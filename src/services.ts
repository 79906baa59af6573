import type { Tracer } from '@opentelemetry/api';
import type { OwnKeys } from './auth/byok-keys';
import type { Logger } from 'pino';
import type { GatewayConfig, ModelConfig } from './config/types';
import type { Dispatch } from './routing/dispatch';
import type { EndpointHealth } from './routing/health';
import type { SpendControl } from './spend/control';
import type { LedgerWriter } from './spend/ledger';
import type { RateLimiter } from './spend/rate-limits';
import type { SharedState } from './state/types';
import type { GatewayMetrics } from './telemetry/metrics';
import type { Presets } from './presets/lookup';
import type { KeyRecord, Store } from './store/types';
import type { VideoCatalog } from './videos/catalog';

/** Looks a presented key up by its hash (cached; see auth/key-cache.ts). */
export interface KeyLookup {
  find(presentedKey: string): Promise<KeyRecord | null>;
  /** Drops a key from the cache, e.g. after a revoke in this process. */
  forget(keyId: string): void;
}

/**
 * What stages get from the core through `create(config, services)`. One object per loaded config, so a
 * reload hands new pipelines the new models and providers while old requests keep the old ones.
 */
export interface Services {
  config: GatewayConfig;
  store: Store;
  ledger: LedgerWriter;
  keys: KeyLookup;
  /** Shared fast state (memory or Redis): holds, counters, rate windows, sticky sessions. */
  state: SharedState;
  spend: SpendControl;
  rateLimits: RateLimiter;
  /** Presets at request time (cached designated versions). */
  presets: Presets;
  dispatch: Dispatch;
  /**
   * Per-endpoint health (breakers, Retry-After rests), shared with dispatch; stages only read it (the
   * auto-router skips models whose every endpoint is known down). Keys: `endpointKeyOf` (routing/plan.ts).
   */
  health: EndpointHealth;
  models: ReadonlyMap<string, ModelConfig>;
  /** Video models and video providers (never used by chat routing). */
  videos: VideoCatalog;
  /**
   * A workspace's own provider keys (BYOK), opened, by provider id; cached a few seconds (auth/byok-keys.ts).
   * Rejects with a typed 503 when the store cannot be read.
   */
  ownKeys(workspaceId: string): Promise<OwnKeys>;
  logger: Logger;
  tracer: Tracer;
  /** Prometheus metrics (README "Metrics"), one per gateway; null when `server.metrics.enabled` is false. */
  metrics: GatewayMetrics | null;
}
