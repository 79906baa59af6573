import type { StateConfig } from '../config/types';
import { MemoryState } from './memory';
import type { SharedState } from './types';

/**
 * The shared state gateway.yaml asks for: in-process (default) or Redis. The Redis driver (and ioredis,
 * ~5 MiB of resident code) is loaded only when configured.
 */
export function openState(config: StateConfig, clock: () => number = Date.now): SharedState {
  if (config.driver === 'redis') {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { RedisState } = require('./redis') as typeof import('./redis');
    return new RedisState({ url: config.url!, prefix: config.prefix, commandTimeoutMs: config.command_timeout_ms }, clock);
  }
  return new MemoryState(clock);
}
