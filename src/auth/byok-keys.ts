import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { GatewayConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import type { GatewayState } from '../pipeline/types';
import type { Store } from '../store/types';
import { byokContext, openProviderKey, parseEncryptionKey } from './byok-seal';

/** A workspace's own provider keys (BYOK): provider id → plaintext key. Never logged, never put in errors. */
export type OwnKeys = ReadonlyMap<string, string>;

const NONE: OwnKeys = new Map();

export interface ByokKeysOptions {
  store: Store;
  logger: Logger;
  /** How long a workspace's keys are reused before the store is read again (a stored or deleted key takes effect within it). */
  ttlMs?: number;
  max?: number;
}

/**
 * The provider keys a request may be sent with: its workspace's stored keys, opened with
 * `byok.encryption_key`, cached per workspace for a few seconds so routing does not read the store per
 * request. Concurrent misses for one workspace share one store read. Outlives config reloads; the config's
 * `byok` section is passed in per call (a changed encryption key empties the cache).
 *
 * Keys that cannot be opened (no encryption key configured, a wrong one, a damaged row) are left out, so
 * those requests use the operator's keys; each such case is logged once, never per request.
 *
 * @example const own = await byok.forRequest(state, config.byok); own.get('openai') // 'sk-…' or undefined
 */
export class ByokKeys {
  private readonly cache: LRUCache<string, OwnKeys>;
  /** One resolution per request: the spend check and routing see the same keys even across a cache expiry. */
  private readonly perRequest = new WeakMap<GatewayState, Promise<OwnKeys>>();
  private keyText: string | undefined;
  private key: Buffer | null = null;
  private warnedNoKey = false;
  private readonly warnedUnopenable = new LRUCache<string, true>({ max: 1000 });

  constructor(private readonly deps: ByokKeysOptions) {
    this.cache = new LRUCache<string, OwnKeys>({
      max: deps.max ?? 10_000,
      ttl: deps.ttlMs ?? 5_000,
      fetchMethod: (workspaceId) => this.load(workspaceId),
    });
  }

  /** The own keys of the request's workspace (none without an authenticated key). */
  forRequest(state: GatewayState, config: GatewayConfig['byok']): Promise<OwnKeys> {
    let keys = this.perRequest.get(state);
    if (!keys) {
      keys = state.key ? this.forWorkspace(state.key.workspaceId, config) : Promise.resolve(NONE);
      this.perRequest.set(state, keys);
    }
    return keys;
  }

  async forWorkspace(workspaceId: string, config: GatewayConfig['byok']): Promise<OwnKeys> {
    this.useEncryptionKey(config.encryption_key);
    try {
      return (await this.cache.fetch(workspaceId)) ?? NONE;
    } catch (err) {
      // Fail closed: routing with the operator's key instead would bill the operator for the workspace's traffic.
      throw new GatewayError('server', 'Workspace provider keys are unavailable', { status: 503, headers: { 'Retry-After': '1' }, cause: err });
    }
  }

  private useEncryptionKey(text: string | undefined): void {
    if (text === this.keyText) return;
    // Validated when the config loaded (config/load.ts), so this does not throw for a loaded config.
    this.key = text ? parseEncryptionKey(text) : null;
    this.keyText = text;
    this.cache.clear();
  }

  private async load(workspaceId: string): Promise<OwnKeys> {
    const rows = await this.deps.store.listByokKeys(workspaceId);
    if (rows.length === 0) return NONE;
    if (!this.key) {
      if (!this.warnedNoKey) {
        this.warnedNoKey = true;
        this.deps.logger.warn(
          { workspace_id: workspaceId },
          'workspace provider keys (BYOK) are stored but byok.encryption_key is not set: they cannot be opened, so requests use the operator keys',
        );
      }
      return NONE;
    }
    const out = new Map<string, string>();
    for (const row of rows) {
      try {
        out.set(row.provider, openProviderKey(row.secret, this.key, byokContext(workspaceId, row.provider)));
      } catch {
        const id = `${workspaceId}:${row.provider}:${row.createdAt}`;
        if (this.warnedUnopenable.has(id)) continue;
        this.warnedUnopenable.set(id, true);
        this.deps.logger.warn(
          { workspace_id: workspaceId, provider: row.provider },
          'a workspace provider key (BYOK) does not open with byok.encryption_key (another key, or a damaged row): requests use the operator key; store it again with `gateway byok set`',
        );
      }
    }
    return out;
  }
}
