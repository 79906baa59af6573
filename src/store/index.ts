/**
 * Opens the durable store named by the `storage` section of gateway.yaml.
 *
 * @example
 * const store = await openStore({ driver: 'sqlite', path: './data/gateway.db' });
 * const account = await store.ensureAccount('default');
 * await store.close();
 */

import { SqliteStore } from './sqlite';
import type { Store } from './types';
import type { PostgresStoreOptions } from './postgres';

export type * from './types';
export { SqliteStore } from './sqlite';

export type StorageConfig =
  | { driver: 'sqlite'; path: string; cache_mib?: number }
  | { driver: 'postgres'; url: string; schema?: string; pool_max?: number; query_timeout_ms?: number };

/**
 * The PostgreSQL store's options from the `storage` section.
 *
 * @example postgresOptions({ driver: 'postgres', url, query_timeout_ms: 5000 }) // { url, schema: undefined, max: undefined, queryTimeoutMs: 5000 }
 */
export function postgresOptions(config: Extract<StorageConfig, { driver: 'postgres' }>): PostgresStoreOptions {
  return { url: config.url, schema: config.schema, max: config.pool_max, queryTimeoutMs: config.query_timeout_ms };
}

/** Constructs the configured store and applies pending migrations; the caller closes it. */
export async function openStore(config: StorageConfig): Promise<Store> {
  let store: Store;
  switch (config.driver) {
    case 'sqlite':
      store = new SqliteStore({ path: config.path, cacheMib: config.cache_mib });
      break;
    case 'postgres': {
      // Loaded only when configured: the pg driver is ~15 MiB of resident memory an SQLite gateway never uses.
      const { PostgresStore } = await import('./postgres');
      store = new PostgresStore(postgresOptions(config));
      break;
    }
    default:
      throw new Error(`unknown storage driver: ${String((config as { driver: unknown }).driver)}`);
  }
  try {
    await store.init();
  } catch (err) {
    await store.close();
    throw err;
  }
  return store;
}
