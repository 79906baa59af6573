import type { Logger } from 'pino';
import type { StageRegistry } from '../pipeline/types';
import type { Gateway } from '../server';
import { loadConfig } from './load';

/**
 * Re-reads gateway.yaml and swaps it in. A file that fails to load or validate is refused and logged;
 * the running config keeps serving. Returns whether the new config is now live.
 *
 * @example const reload = configReloader({ file, registry, gateway, logger }); process.on('SIGHUP', () => reload('SIGHUP'));
 */
export function configReloader(input: { file: string; registry: StageRegistry; gateway: Gateway; logger: Logger }) {
  return (why: string): boolean => {
    try {
      input.gateway.reload(loadConfig(input.file, { registry: input.registry }));
    } catch (err) {
      input.logger.error({ reason: (err as Error).message, why }, 'config reload refused; the previous config keeps serving');
      return false;
    }
    input.logger.info({ why }, 'config reloaded');
    return true;
  };
}
