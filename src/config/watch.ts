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
  const watcher: FSWatcher = watch(dir, (_event, name) => {
    if (name !== null && name.toString() !== base) {
      const now = resolved();
      if (now === null || now === target) return;
      target = now;
    } else target = resolved() ?? target;
    clearTimeout(timer);
    timer = setTimeout(onChange, debounceMs);
  });
  watcher.unref();
  return () => {
    clearTimeout(timer);
    watcher.close();
  };
}
