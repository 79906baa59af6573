import { realpathSync, statSync, watch, type FSWatcher } from 'node:fs';
import path from 'node:path';

/** How long a changed config file must stay unchanged before it is read (README "Reload"). */
export const SETTLE_MS = 2000;
/** How often a watched folder that was removed or replaced is looked for again. */
export const REARM_POLL_MS = 500;

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

/** A folder's identity: the folder at a path moved away or swapped by a link is another one. */
function folderId(dir: string): string | null {
  try {
    const s = statSync(dir);
    return s.isDirectory() ? `${s.dev}:${s.ino}` : null;
  } catch {
    return null;
  }
}

/**
 * `fs.watch` of a folder that outlives the folder. A watch follows the folder it was opened on: once that
 * folder is removed (`rm -rf conf && mkdir conf && cp …`), moved away, or was reached through a link now
 * swapped, it goes silent and a later edit was never seen (found by an operator audit). `fs.watch` tells of
 * its folder's own removal or move with an event named after the folder; on that, on an error, or on an event
 * that finds another folder at `dir`, the watch is opened again on what is at `dir` now (looked for every
 * `pollMs` while nothing is there), and `onEvent(null)` tells each step. (Not the inode alone: a folder made
 * again at once often gets the removed one's inode number.) The first watch throws as `fs.watch` does
 * (ENOSPC: the caller warns); a later one that fails is tried again at the next poll.
 */
export function watchFolder(dir: string, onEvent: (name: string | null) => void, pollMs = REARM_POLL_MS): () => void {
  const self = path.basename(dir);
  let id: string | null = null;
  let watcher: FSWatcher | null = null;
  let poll: NodeJS.Timeout | undefined;
  let closed = false;
  const open = () => {
    id = folderId(dir);
    const w = watch(dir, (_event, name) => {
      if (w !== watcher) return; // read in one batch with the event that closed it
      if (name === null || name.toString() === self || folderId(dir) !== id) return again();
      onEvent(name.toString());
    });
    w.on('error', again);
    w.unref();
    watcher = w;
  };
  const reopened = (): boolean => {
    if (folderId(dir) === null) return false;
    try {
      open();
      return true;
    } catch {
      return false; // not watchable yet: the next poll tries again
    }
  };
  const again = () => {
    if (closed) return;
    watcher?.close();
    watcher = null;
    if (!reopened() && !poll) {
      poll = setInterval(() => {
        if (!reopened()) return;
        clearInterval(poll);
        poll = undefined;
        onEvent(null);
      }, pollMs);
      poll.unref();
    }
    onEvent(null);
  };
  open();
  return () => {
    closed = true;
    clearInterval(poll);
    watcher?.close();
  };
}

/**
 * Calls `onChange` when the file changes. Watches the folder, not the file, because editors and config
 * management tools replace the file (rename) rather than write into it; a change is read once the file has
 * stayed unchanged for `settleMs` (`settled`). A file that is a symlink whose target is swapped elsewhere in
 * the folder (a Kubernetes ConfigMap volume: `gateway.yaml -> ..data/gateway.yaml`, and kubelet renames a new
 * `..data` link into place) counts as changed when the path it resolves to changes, whatever the event's
 * name. A watched folder removed and made again is watched again (`watchFolder`). `readAs` is the file's stamp
 * (`fileStamp`) taken before the config now serving was read: a file that differs from it once the watch is
 * in place was written in between (while `serve` opened the store and built the gateway, where no watch saw it:
 * the edit waited for the next one or a SIGHUP), and counts as changed.
 *
 * @example const readAs = fileStamp(file); const config = loadConfig(file, …); … const stop = watchFile(file, () => reload(), SETTLE_MS, readAs);
 */
export function watchFile(file: string, onChange: () => void, settleMs = SETTLE_MS, readAs?: string): () => void {
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
  let stopTarget: (() => void) | null = null;
  const followTarget = () => {
    const now = target === null ? dir : path.dirname(target);
    if (now === targetDir) return;
    stopTarget?.();
    stopTarget = null;
    targetDir = now;
    if (now === dir) return;
    try {
      stopTarget = watchFolder(now, (name) => {
        if (name === null || (target !== null && name === path.basename(target))) settle.poke();
      });
    } catch {
      stopTarget = null; // not watchable: the link's folder and SIGHUP still work
    }
  };
  const stopDir = watchFolder(dir, (name) => {
    if (name !== null && name !== base) {
      const now = resolved();
      if (now === null || now === target) return;
      target = now;
    } else target = resolved() ?? target;
    followTarget();
    settle.poke();
  });
  followTarget();
  if (readAs !== undefined && fileStamp(file) !== readAs) settle.poke();
  return () => {
    settle.stop();
    stopDir();
    stopTarget?.();
  };
}
