import type { Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { ByokKeys } from './auth/byok-keys';
import type { GatewayConfig, ModelConfig } from './config/types';
import { buildPipeline } from './pipeline/build';
import type { EndpointId, Pipeline, StageRegistry } from './pipeline/types';
import { buildProviders } from './providers';
import { createDispatch } from './routing/dispatch';
import { keyInfoStage } from './routes/key';
import { modelGetStage, modelsStage } from './routes/models';
import { presetListStage, presetReadStage, presetWriteStage } from './routes/presets';
import type { KeyLookup, Services } from './services';
import type { EndpointHealth } from './routing/health';
import type { StickyRoutes } from './routing/sticky';
import type { SpendControl } from './spend/control';
import type { Drain } from './drain';
import type { LedgerJournal } from './spend/journal';
import type { LedgerWriter } from './spend/ledger';
import type { RateLimiter } from './spend/rate-limits';
import type { SharedState } from './state/types';
import type { Presets } from './presets/lookup';
import type { Store } from './store/types';
import type { GatewayMetrics } from './telemetry/metrics';
import { buildVideoCatalog } from './videos/catalog';
import { videoCancelStage, videoCreateStage, videoGetStage } from './routes/videos';

/** Everything derived from one loaded gateway.yaml. Swapped as a whole on reload. */
export interface Runtime {
  config: GatewayConfig;
  services: Services;
  pipelines: Readonly<Record<EndpointId, Pipeline>>;
  /** The gateway's shutdown drain (one per gateway, outlives reloads); endpoints refuse new requests while it runs. */
  drain?: Drain;
}

export interface RuntimeInput {
  config: GatewayConfig;
  registry: StageRegistry;
  store: Store;
  ledger: LedgerWriter;
  keys: KeyLookup;
  health: EndpointHealth;
  sticky: StickyRoutes;
  state: SharedState;
  spend: SpendControl;
  rateLimits: RateLimiter;
  /** Workspace provider keys (BYOK); outlives reloads like `spend`. */
  byok: ByokKeys;
  tracer: Tracer;
  logger: Logger;
  hashUser(user: string): string;
  presets: Presets;
  /** Pending ledger rows of requests in flight (README "Ledger durability"); null when `ledger.journal` is off. */
  journal?: LedgerJournal | null;
  drain?: Drain;
  /** Outlives reloads like `health`; null when metrics are off. */
  metrics: GatewayMetrics | null;
}

/** Builds providers, models and every endpoint's pipeline once, ahead of any request. */
export function buildRuntime(input: RuntimeInput): Runtime {
  const { config, registry, tracer } = input;
  const models = new Map<string, ModelConfig>(config.models.map((m) => [m.id, m]));
  const providers = buildProviders(config.providers);
  const services: Services = {
    config,
    store: input.store,
    ledger: input.ledger,
    keys: input.keys,
    state: input.state,
    spend: input.spend,
    rateLimits: input.rateLimits,
    presets: input.presets,
    health: input.health,
    models,
    videos: buildVideoCatalog(config, input.spend.clock),
    ownKeys: (workspaceId) => input.byok.forWorkspace(workspaceId, config.byok),
    logger: input.logger,
    tracer,
    metrics: input.metrics,
    dispatch: createDispatch({
      models,
      providers,
      tracer,
      hashUser: input.hashUser,
      health: input.health,
      sticky: input.sticky,
      routing: config.routing,
      ownKeys: (state) => input.byok.forRequest(state, config.byok),
      journal: input.journal,
      metrics: input.metrics,
    }),
  };
  const build = (stageIds: readonly string[], tail?: Parameters<typeof buildPipeline>[0]['tail']) =>
    buildPipeline({ stageIds, registry, stageConfigs: config.plugins, services, tracer, tail });
  return {
    config,
    services,
    drain: input.drain,
    pipelines: {
      messages: build(config.pipelines.messages ?? config.pipelines.default),
      chat_completions: build(config.pipelines.chat_completions ?? config.pipelines.default),
      key: build(['auth'], [keyInfoStage(services)]),
      models: build(['auth'], [modelsStage(services)]),
      model_get: build(['auth'], [modelGetStage(services)]),
      preset_write: build(['auth'], [presetWriteStage(services)]),
      preset_list: build(['auth'], [presetListStage(services)]),
      preset_get: build(['auth'], [presetReadStage(services, 'preset')]),
      preset_versions: build(['auth'], [presetReadStage(services, 'versions')]),
      videos_create: build(['auth'], [videoCreateStage(services)]),
      videos_get: build(['auth'], [videoGetStage(services)]),
      videos_cancel: build(['auth'], [videoCancelStage(services)]),
    },
  };
}

/** The process resources a checked stage may reach after the check (`checkPipelines`' `later`). */
export type LateServices = Partial<Pick<RuntimeInput, 'store' | 'ledger' | 'keys' | 'health' | 'sticky' | 'state' | 'rateLimits' | 'byok' | 'presets'>>;

/**
 * Builds every pipeline of `config` as `serve` does, with no store, state or other process resources behind
 * the services (none is touched while stages are created; a stage that did would fail the check, naming
 * it), so each stage's own checks of its operator config run: fusion's models, web's backend, … A mistake
 * throws the stage's error (a `ConfigError` naming `plugins.<id>.<field>`). `gateway config check` and the
 * start of `serve` (before the store is opened) run it.
 *
 * A stage may keep its `services` for later (README "Writing a plugin"), and the copies made here are never
 * told they are not used: once the check is over, what such a copy reaches goes to `later()`'s resources
 * (the running gateway's) when there are any. It had thrown there too: a stage whose timer used its store
 * took the gateway down ~200 ms after start, or after a reload.
 */
export function checkPipelines(config: GatewayConfig, registry: StageRegistry, tracer: Tracer, logger: Logger, later?: () => LateServices | undefined): void {
  let checking = true;
  const absent = <T extends object>(name: keyof LateServices): T =>
    new Proxy({} as T, {
      get(_target, prop) {
        if (checking) throw new Error(`a stage used services.${name}.${String(prop)} while being created from the config`);
        const real = later?.()?.[name] as Record<string | symbol, unknown> | undefined;
        if (!real) throw new Error(`a stage used services.${name}.${String(prop)} of a copy made to check the config, with no gateway running`);
        const value = real[prop];
        return typeof value === 'function' ? value.bind(real) : value;
      },
    });
  try {
    buildRuntime({
      config,
      registry,
      tracer,
      logger,
      store: absent('store'),
      ledger: absent('ledger'),
      keys: absent('keys'),
      health: absent('health'),
      sticky: absent('sticky'),
      state: absent('state'),
      spend: { clock: Date.now } as SpendControl,
      rateLimits: absent('rateLimits'),
      byok: absent('byok'),
      presets: absent('presets'),
      hashUser: (user) => user,
      metrics: null,
    });
  } finally {
    checking = false;
  }
}
