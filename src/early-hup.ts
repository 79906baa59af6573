/**
 * A SIGHUP that comes while `serve` is still starting (loading modules, opening the store) is kept, not
 * fatal: Node's default for SIGHUP ends the process, and a config tool sending one to a gateway that was
 * starting took it down without a log line (found by an operator audit). Imported first by main.ts; only
 * for `serve` (a CLI command keeps the default: a closed terminal ends it). `serve` takes the flag once its
 * own handler is in place and reloads if one came.
 */
let requested = false;
const keep = (): void => {
  requested = true;
};
if (process.argv.slice(2).includes('serve')) process.on('SIGHUP', keep);

/** Stops keeping SIGHUPs; true when one came during start-up. */
export function takeEarlyHup(): boolean {
  process.off('SIGHUP', keep);
  return requested;
}
