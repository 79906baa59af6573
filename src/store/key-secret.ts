import { createHash, randomBytes } from 'node:crypto';

const PREFIX = 'sk-gw-v1-';

/** A new gateway API key: `sk-gw-v1-` and 48 hex characters (192 bits of entropy). */
export function generateKey(): string {
  return PREFIX + randomBytes(24).toString('hex');
}

/**
 * The stored form of a key. Keys carry 192 random bits, so a plain SHA-256 is enough (no slow KDF needed),
 * and lookup by hash means no byte-by-byte comparison whose timing could leak a prefix.
 */
export function hashKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** The display label: prefix and the last 4 characters, e.g. `sk-gw-v1-...a1b2`. */
export function maskKey(key: string): string {
  return `${key.slice(0, PREFIX.length)}...${key.slice(-4)}`;
}
