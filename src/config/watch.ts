import { realpathSync, statSync, watch, type FSWatcher } from 'node:fs';
import path from 'node:path';

/** How long a changed config file must stay unchanged before it is read (README "Reload"). */
export const SETTLE_MS = 2000;

/**
 * What the file is now (size, modification time, inode, through links), or `missing`: two equal stamps
 * mean nothing was written in between.
 *
 * @example if (fileStamp(file) !== before) … // written meanwhile
 */
export function fileStamp(file: string): string {
  try {
    const s = statSync(file);
    return `${s.size}:${s.mtimeMs}:${s.ino}`;
  } catch {
    return 'missing';
  }
}

/**
 * Calls `onStable` once the stamp has stayed the same for `settleMs` after the last `poke()`: each poke starts
 * the wait again, and so does a stamp that changed during it (a write whose event was not seen). A tool that
 * writes the file in parts (`cp` of a large file, an editor's save in two writes) had its first part read and,
 * when that happened to be a valid config, served until the next part came (found by an operator audit).
 *
 * @example const settle = settled(() => fileStamp(file), reload, 2000); watcher.on('change', settle.poke);
 */
export function settled(stamp: () => string, onStable: () => void, settleMs: number): { poke: () => void; stop: () => void } {
  let timer: NodeJS.Timeout | undefined;
  let seen = '';
  const check = () => {
    const now = stamp();
    if (now !== seen) return wait(now);
    timer = undefined;
    onStable();
  };
  const wait = (now: string) => {
    seen = now;
    clearTimeout(timer);
    timer = setTimeout(check, settleMs);
    timer.unref();
  };
  return { poke: () => wait(stamp()), stop: () => clearTimeout(timer) };
}

/**
 * Calls `onChange` when the file changes. Watches the folder, not the file, because editors and config
 * management tools replace the file (rename) rather than write into it; a change is read once the file has
 * stayed unchanged for `settleMs` (`settled`). A file that is a symlink whose target is swapped elsewhere in
 * the folder (a Kubernetes ConfigMap volume: `gateway.yaml -> ..data/gateway.yaml`, and kubelet renames a new
 * `..data` link into place) counts as changed when the path it resolves to changes, whatever the event's
 * name.
 *
 * @example const stop = watchFile('./gateway.yaml', () => reload()); … stop();
 */
export function watchFile(file: string, onChange: () => void, settleMs = SETTLE_MS): () => void {
  const dir = path.dirname(path.resolve(file));
  const base = path.basename(file);
  const resolved = (): string | null => {
    try {
      return realpathSync(file);
    } catch {
      return null; // mid-swap, or removed: the next event tells
    }
  };
  let target = resolved();
  const settle = settled(() => fileStamp(file), onChange, settleMs);
  // A link into another folder (`/etc/gateway/gateway.yaml -> /srv/config/real.yaml`): the target is edited
  // there, where the link's folder sees nothing, so the target's folder is watched too (an edit in place was
  // missed until a SIGHUP; found by an operator audit). It follows the target when the link changes.
  let targetDir = dir;
  let targetWatcher: FSWatcher | null = null;
  const followTarget = () => {
    const now = target === null ? dir : path.dirname(target);
    if (now === targetDir) return;
    targetWatcher?.close();
    targetWatcher = null;
    targetDir = now;
    if (now === dir) return;
    try {
      targetWatcher = watch(now, (_event, name) => {
        if (name === null || (target !== null && name.toString() === path.basename(target))) settle.poke();
      });
      targetWatcher.on('error', () => undefined); // its folder removed (a swapped ConfigMap version): the link's folder tells
      targetWatcher.unref();
    } catch {
      targetWatcher = null; // not watchable: the link's folder and SIGHUP still work
    }
  };
  const watcher: FSWatcher = watch(dir, (_event, name) => {
    if (name !== null && name.toString() !== base) {
      const now = resolved();
      if (now === null || now === target) return;
      target = now;
    } else target = resolved() ?? target;
    followTarget();
    settle.poke();
  });
  watcher.unref();
  followTarget();
  return () => {
    settle.stop();
    watcher.close();
    targetWatcher?.close();
  };
}
