import type { StateConfig } from '../config/types';
import { MemoryState } from './memory';
import { RedisState } from './redis';
import type { SharedState } from './types';

/** The shared state gateway.yaml asks for: in-process (default) or Redis. */
export function openState(config: StateConfig, clock: () => number = Date.now): SharedState {
  if (config.driver === 'redis') {
    return new RedisState({ url: config.url!, prefix: config.prefix, commandTimeoutMs: config.command_timeout_ms }, clock);
  }
  return new MemoryState(clock);
}
