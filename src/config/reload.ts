import type { Logger } from 'pino';
import type { StageRegistry } from '../pipeline/types';
import type { Gateway } from '../server';
import type { Store } from '../store/types';
import { ensureDeclared, warnMisplaced } from '../store/declared';
import { inConfigFile, loadConfig, warnConfigGaps } from './load';
import { fileStamp } from './watch';
import { checkPipelines } from '../runtime';
import { trace } from '@opentelemetry/api';

/** Reads of a file that changed while it was read, at most, before the reload is refused. */
const READ_TRIES = 3;

/**
 * Re-reads gateway.yaml and swaps it in. A file that fails to load or validate, or whose stages refuse it
 * (`checkPipelines`), is refused and logged;
 * the running config keeps serving. Resolves with whether the new config is now live. Reloads run one at a
 * time, each reading the file when its turn comes, so the file's latest version is the one left serving.
 * `stamp` tells whether the file was written while it was read (`fileStamp`; tests wrap it). Once the
 * gateway drains for a shutdown, a reload is ignored (logged at info).
 *
 * @example const reload = configReloader({ file, registry, gateway, store, logger }); process.on('SIGHUP', () => void reload('SIGHUP'));
 */
export function configReloader(input: { file: string; registry: StageRegistry; gateway: Gateway; store: Store; logger: Logger; stamp?: () => string }) {
  const stamp = input.stamp ?? (() => fileStamp(input.file));
  // A file written while it was read may have been read half old, half new: it is read again (a load that
  // failed too, its error perhaps the tear's), and refused if it keeps changing (the watcher reads it again
  // once it has settled).
  const read = () => {
    for (let tries = 1; ; tries++) {
      const before = stamp();
      try {
        const config = loadConfig(input.file, { registry: input.registry });
        if (stamp() === before) return config;
      } catch (err) {
        if (stamp() === before || tries === READ_TRIES) throw err;
      }
      if (tries === READ_TRIES) throw new Error(`${input.file} changed while it was read, ${READ_TRIES} times in a row (is it still being written?)`);
    }
  };
  // A SIGHUP (or an edit) during the shutdown drain: nothing new will be served, and the store may be closed
  // under the reload (it was refused with an error, naming the store).
  const shuttingDown = (why: string): false => {
    input.logger.info({ why }, 'config reload ignored: the gateway is shutting down');
    return false;
  };
  const once = async (why: string): Promise<boolean> => {
    if (input.gateway.drain.started) return shuttingDown(why);
    try {
      const config = read();
      // The checks `serve` and `gateway config check` make (every stage created from the config, none touching
      // a service): a config a restart would refuse is refused here too, not taken and found out at the restart.
      inConfigFile(input.file, () => checkPipelines(config, input.registry, trace.getTracer('config-check'), input.logger, () => input.gateway.resources()));
      // What a restart does before it serves: the accounts and workspaces the file declares are made in the
      // store (a reload had left them out until a restart or a CLI command, and never named a declared
      // workspace the store keeps under another account, whose requests bill that one).
      let declared: Awaited<ReturnType<typeof ensureDeclared>>;
      try {
        declared = await ensureDeclared(input.store, config);
      } catch (err) {
        throw new Error(`the declared accounts and workspaces could not be made in the store: ${(err as Error).message}`);
      }
      input.gateway.reload(config);
      warnMisplaced(declared.elsewhere, input.logger);
      warnConfigGaps(config, input.logger);
    } catch (err) {
      if (input.gateway.drain.started) return shuttingDown(why); // began while this reload ran
      input.logger.error({ reason: (err as Error).message, why }, 'config reload refused; the previous config keeps serving');
      return false;
    }
    input.logger.info({ why }, 'config reloaded');
    return true;
  };
  let queue: Promise<boolean> = Promise.resolve(true);
  return (why: string): Promise<boolean> => (queue = queue.then(() => once(why)));
}
