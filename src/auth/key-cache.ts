import { LRUCache } from 'lru-cache';
import { GatewayError } from '../errors/gateway-error';
import type { KeyLookup } from '../services';
import { hashKey } from '../store/key-secret';
import type { KeyRecord, Store } from '../store/types';

/**
 * Key lookups by hash with a small LRU in front of the store. Entries live `ttlMs` at most, so a key
 * revoked by another process (the CLI) stops working within that time; a revoke in this process is
 * immediate through `forget`. Unknown keys are not cached, so a new key works at once.
 */
export function createKeyLookup(store: Store, options: { max?: number; ttlMs?: number } = {}): KeyLookup {
  const byHash = new LRUCache<string, KeyRecord>({ max: options.max ?? 10_000, ttl: options.ttlMs ?? 5_000 });
  return {
    async find(presented) {
      const hash = hashKey(presented);
      const hit = byHash.get(hash);
      if (hit) return hit;
      const key = await store.findKeyByHash(hash);
      if (key) byHash.set(hash, key);
      return key;
    },
    forget(keyId) {
      for (const [hash, key] of byHash.entries()) if (key.id === keyId) byHash.delete(hash);
    },
  };
}

/** Why a stored key may not be used now, or null when it may. */
export function keyUnusableReason(key: KeyRecord, now = Date.now()): string | null {
  if (key.revokedAt) return 'revoked';
  if (key.disabled) return 'disabled';
  if (key.expiresAt && Date.parse(key.expiresAt) <= now) return 'expired';
  return null;
}

/** Spec 5.3: preset and video-job operations are for management keys only (403 otherwise). */
export function requireManagementKey(key: KeyRecord | null): void {
  if (!key?.isManagement) throw new GatewayError('permission_denied', 'Only management keys can perform this operation');
}
