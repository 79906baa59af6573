import type { Logger } from 'pino';
import type { StageRegistry } from '../pipeline/types';
import type { Gateway } from '../server';
import { inConfigFile, loadConfig, warnConfigGaps } from './load';
import { checkPipelines } from '../runtime';
import { trace } from '@opentelemetry/api';

/**
 * Re-reads gateway.yaml and swaps it in. A file that fails to load or validate, or whose stages refuse it
 * (`checkPipelines`), is refused and logged;
 * the running config keeps serving. Returns whether the new config is now live.
 *
 * @example const reload = configReloader({ file, registry, gateway, logger }); process.on('SIGHUP', () => reload('SIGHUP'));
 */
export function configReloader(input: { file: string; registry: StageRegistry; gateway: Gateway; logger: Logger }) {
  return (why: string): boolean => {
    try {
      const config = loadConfig(input.file, { registry: input.registry });
      // The checks `serve` and `gateway config check` make (every stage created from the config, none touching
      // a service): a config a restart would refuse is refused here too, not taken and found out at the restart.
      inConfigFile(input.file, () => checkPipelines(config, input.registry, trace.getTracer('config-check'), input.logger, () => input.gateway.resources()));
      input.gateway.reload(config);
      warnConfigGaps(config, input.logger);
    } catch (err) {
      input.logger.error({ reason: (err as Error).message, why }, 'config reload refused; the previous config keeps serving');
      return false;
    }
    input.logger.info({ why }, 'config reloaded');
    return true;
  };
}
