import { realpathSync, watch, type FSWatcher } from 'node:fs';
import path from 'node:path';

/**
 * Calls `onChange` when the file changes. Watches the folder, not the file, because editors and config
 * management tools replace the file (rename) rather than write into it; bursts are debounced. A file that is
 * a symlink whose target is swapped elsewhere in the folder (a Kubernetes ConfigMap volume: `gateway.yaml ->
 * ..data/gateway.yaml`, and kubelet renames a new `..data` link into place) counts as changed when the path
 * it resolves to changes, whatever the event's name.
 *
 * @example const stop = watchFile('./gateway.yaml', () => reload()); … stop();
 */
export function watchFile(file: string, onChange: () => void, debounceMs = 150): () => void {
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
  let timer: NodeJS.Timeout | undefined;
  const fire = () => {
    clearTimeout(timer);
    timer = setTimeout(onChange, debounceMs);
  };
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
        if (name === null || (target !== null && name.toString() === path.basename(target))) fire();
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
    fire();
  });
  watcher.unref();
  followTarget();
  return () => {
    clearTimeout(timer);
    watcher.close();
    targetWatcher?.close();
  };
}
