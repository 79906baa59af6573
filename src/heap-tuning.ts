import v8 from 'node:v8';
import vm from 'node:vm';

/**
 * How far V8 lets the old generation grow past what survived the last full GC, in percent, when the
 * operator has not chosen: 30 % instead of V8's own factor, which under the gateway's load was ~3.6×
 * (`--trace-gc`: 26 MiB live, the next full GC at ~95 MiB). Under load most of that is promoted garbage
 * (request objects that outlived two young-generation GCs) waiting for the next full GC, all of it resident.
 * `npm run bench:ab` measured peak RSS 158.7 → 140.3 MiB with it set at run time, and no difference in CPU per
 * request (221 vs 230 µs; see README, Performance).
 */
export const HEAP_GROWING_PERCENT = 30;

/**
 * Sets V8's `--heap-growing-percent` for this process, unless the operator passed a value of their own (on
 * the command line or in `NODE_OPTIONS`), which wins. Unlike the young generation's size, which V8 fixes
 * when the process starts, this factor is read each time V8 sets the next full GC's limit, so setting it
 * at run time takes effect from the next full GC on. Returns the flag it set, or null.
 */
export function tuneHeap(
  o: { execArgv?: readonly string[]; nodeOptions?: string; setFlags?: (flags: string) => void } = {},
): string | null {
  const given = [...(o.execArgv ?? process.execArgv), o.nodeOptions ?? process.env.NODE_OPTIONS ?? ''].join(' ');
  if (/--heap[-_]growing[-_]percent\b/.test(given)) return null;
  const flag = `--heap-growing-percent=${HEAP_GROWING_PERCENT}`;
  (o.setFlags ?? v8.setFlagsFromString)(flag);
  return flag;
}

/**
 * One full garbage collection, run once when start-up is done and before the first request: what start-up
 * left behind (parsed config, compiled schemas and module source it no longer needs) is freed, and V8
 * sets the old generation's limit from what really survived. Until its first full GC, V8 works to an
 * initial limit set before anything was loaded, so the first burst of traffic after a start grew the heap
 * ~25 MiB further than any later one (first 12 s of 50-connection chat load: peak RSS 163–167 MiB without
 * it, 137–144 with it, three starts each; later loads ~146 either way). It takes ~20 ms, once.
 *
 * Node has no call for it without `--expose-gc`, so the flag is switched on just long enough to take
 * `gc` from a fresh context (a context made while the flag is on gets it; the gateway's own context never
 * does) and switched off again; an operator's own `--expose-gc` is simply used. Returns the time it took
 * in ms, or null if this Node does not allow it (then nothing happened).
 */
export function collectStartupGarbage(): number | null {
  try {
    let gc = (globalThis as { gc?: () => void }).gc;
    if (typeof gc !== 'function') {
      v8.setFlagsFromString('--expose-gc');
      try {
        gc = vm.runInNewContext('gc') as (() => void) | undefined;
      } finally {
        v8.setFlagsFromString('--no-expose-gc');
      }
    }
    if (typeof gc !== 'function') return null;
    const started = performance.now();
    gc();
    return performance.now() - started;
  } catch {
    return null;
  }
}
