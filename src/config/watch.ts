import { watch, type FSWatcher } from 'node:fs';
import path from 'node:path';

/**
 * Calls `onChange` when the file changes. Watches the folder, not the file, because editors and config
 * management tools replace the file (rename) rather than write into it; bursts are debounced.
 *
 * @example const stop = watchFile('./gateway.yaml', () => reload()); … stop();
 */
export function watchFile(file: string, onChange: () => void, debounceMs = 150): () => void {
  const dir = path.dirname(path.resolve(file));
  const base = path.basename(file);
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(dir, (_event, name) => {
    if (name !== null && name.toString() !== base) return;
    clearTimeout(timer);
    timer = setTimeout(onChange, debounceMs);
  });
  watcher.unref();
  return () => {
    clearTimeout(timer);
    watcher.close();
  };
}
