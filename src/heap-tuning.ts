import { PerformanceObserver } from 'node:perf_hooks';
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

/** The process's V8 flags as given (tests pass their own) and the setter (tests record instead). */
type Flags = { execArgv?: readonly string[]; nodeOptions?: string; setFlags?: (flags: string) => void };

/** The node flags the operator gave: the command line and `NODE_OPTIONS`. */
function operatorFlags(o: Flags): string {
  return [...(o.execArgv ?? process.execArgv), o.nodeOptions ?? process.env.NODE_OPTIONS ?? ''].join(' ');
}

/**
 * Sets V8's `--heap-growing-percent` for this process, unless the operator passed a value of their own (on
 * the command line or in `NODE_OPTIONS`), which wins. Unlike the young generation's size, which V8 fixes
 * when the process starts, this factor is read each time V8 sets the next full GC's limit, so setting it
 * at run time takes effect from the next full GC on. Returns the flag it set, or null.
 */
export function tuneHeap(o: Flags = {}): string | null {
  if (/--heap[-_]growing[-_]percent\b/.test(operatorFlags(o))) return null;
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

/**
 * The young generation's semi-space size the gateway holds itself to, in MiB, when the operator has not
 * sized it: V8's default lets each of its two semi-spaces grow to 16 MiB (32 MiB resident, all of it touched
 * under load), and the old generation's limit adds that capacity again. Under 50-connection load (README,
 * Performance) 8 MiB took ~14–20 MiB off the peak RSS with no cost measured: callgrind counted 3.04 M
 * instructions per request against 3.00–3.04 M uncapped. 4 MiB took ~6 MiB more off, but cost ~8 % more CPU
 * time per request in `bench:ab` (the same instructions: the cost is in collecting four times as often).
 */
export const YOUNG_SEMI_SPACE_MIB = 8;

/** True when the operator sized the young generation with a flag of their own (which then wins). */
function youngGenerationGiven(o: Flags): boolean {
  return /--(max|min)[-_]semi[-_]space[-_]size\b|--semi[-_]space[-_]growth[-_]factor\b/.test(operatorFlags(o));
}

/**
 * Stops the young generation from growing while the modules load (`src/start-heap.ts` calls it before
 * anything else is loaded): loading the gateway had grown it to V8's 32 MiB before the first request, and
 * V8 never gives that back. V8 fixes the young generation's maximum when the process starts, but it reads
 * `--semi-space-growth-factor` each time it grows it, so a factor of 1 holds it where it is (1 MiB).
 * `capYoungGeneration` lets it grow again once start-up is done. Returns false (and does nothing) when the
 * operator sized the young generation.
 */
export function holdYoungGeneration(o: Flags = {}): boolean {
  if (youngGenerationGiven(o)) return false;
  (o.setFlags ?? v8.setFlagsFromString)('--semi-space-growth-factor=1');
  return true;
}

/**
 * What one semi-space of the young generation holds now, in bytes: its objects plus its free space (V8's
 * capacity, ~98 % of the semi-space's size; the rest is page headers). Not `space_size`: that is the memory
 * committed, which counts only one semi-space at start and after a full GC.
 */
function semiSpaceBytes(): number {
  for (const s of v8.getHeapSpaceStatistics()) if (s.space_name === 'new_space') return s.space_used_size + s.space_available_size;
  return 0;
}

/**
 * The young generation's semi-space size the gateway raises its cap to while the requests in flight hold
 * big bodies: V8's own maximum (the young generation's maximum is fixed when the process starts, so the cap
 * can move only up to it). A request keeps its parsed body alive while it is in flight (an agent's 60 KB
 * conversation is ~250 KB of strings and objects); with 8 MiB semi-spaces and 50 such requests most of every
 * young collection survived, was copied and promoted, and the old generation then needed full collections:
 * `bench:ab --agent` measured 1 493 µs of CPU per request capped at 8 and 787 µs at 16 (606 against 1 102
 * req/s), peak RSS 143 against 162 MiB.
 */
export const YOUNG_SEMI_SPACE_BUSY_MIB = 16;

/** When the cap goes up and down, by the request body bytes in flight (the recent mean body size × requests in flight). */
export interface BusyRule {
  /** Above this many bytes the cap is raised (default 1 MiB of bodies: ~4 MiB of parsed objects, half an 8 MiB semi-space). */
  raiseBytes: number;
  /** Below this many bytes for `quietMs` on end, the cap comes back down (default 256 KiB, 30 s). */
  lowerBytes: number;
  quietMs: number;
}

const BUSY_RULE: BusyRule = { raiseBytes: 1024 * 1024, lowerBytes: 256 * 1024, quietMs: 30_000 };

/**
 * The semi-space cap, in MiB: `semiMiB`, raised to `busyMiB` while the body bytes in flight are above
 * `raiseBytes`, and back to `semiMiB` once they have stayed below `lowerBytes` for `quietMs`.
 */
export class YoungGenerationCap {
  #capMiB: number;
  #quietSince: number | null = null;

  constructor(
    readonly semiMiB: number,
    readonly busyMiB: number,
    readonly rule: BusyRule = BUSY_RULE,
  ) {
    this.#capMiB = semiMiB;
  }

  cap(nowMs: number, bytesInFlight: number): number {
    if (bytesInFlight > this.rule.raiseBytes) {
      this.#capMiB = Math.max(this.#capMiB, this.busyMiB);
      this.#quietSince = null;
    } else if (this.#capMiB > this.semiMiB && bytesInFlight < this.rule.lowerBytes) {
      this.#quietSince ??= nowMs;
      if (nowMs - this.#quietSince >= this.rule.quietMs) {
        this.#capMiB = this.semiMiB;
        this.#quietSince = null;
      }
    } else this.#quietSince = null;
    return this.#capMiB;
  }
}

/**
 * Lets the young generation grow, once start-up is done, to `semiMiB` per semi-space, and holds it there
 * (raised to `busyMiB` while `bytesInFlight()`, the request body bytes in flight, is high: YoungGenerationCap).
 * V8 grows it to `--semi-space-growth-factor` times its capacity when enough has survived, so the factor is set
 * to take it from where it is to the cap in one step (from the 1 MiB held during start-up to 8 MiB: 8), and to 1 after the garbage collection that
 * reached the cap. Letting it double instead overshot: the check runs after a collection (V8's `gc` entries
 * are delivered on the next turn of the event loop), and under load one turn ran several collections, each
 * doubling it. If V8 shrinks it later (it does when a process goes quiet), the factor is set again to grow it
 * back to the cap. A cap that comes back down leaves the young generation where it is until V8 shrinks it.
 * Returns a stop function, or null (nothing done) when the operator sized the young generation. `semiSpace`
 * and `now` are for tests.
 */
export function capYoungGeneration(
  semiMiB = YOUNG_SEMI_SPACE_MIB,
  o: Flags & { semiSpace?: () => number; bytesInFlight?: () => number; busyMiB?: number; rule?: BusyRule; now?: () => number } = {},
): { stop(): void } | null {
  if (youngGenerationGiven(o)) return null;
  const setFlags = o.setFlags ?? v8.setFlagsFromString;
  const semiSpace = o.semiSpace ?? semiSpaceBytes;
  const now = o.now ?? (() => performance.now());
  const bytesInFlight = o.bytesInFlight ?? (() => 0);
  const busy = new YoungGenerationCap(semiMiB, o.busyMiB ?? Math.max(semiMiB, YOUNG_SEMI_SPACE_BUSY_MIB), o.rule);
  let factor = 0;
  const adjust = () => {
    const cap = busy.cap(now(), bytesInFlight()) * 1024 * 1024;
    const current = semiSpace();
    // 95 %: the capacity reads ~98 % of the semi-space's size.
    const want = current >= cap * 0.95 || current <= 0 ? 1 : Math.max(1, Math.round(cap / current));
    if (want === factor) return;
    setFlags(`--semi-space-growth-factor=${want}`);
    factor = want;
  };
  adjust();
  const observer = new PerformanceObserver(adjust);
  observer.observe({ entryTypes: ['gc'] });
  return { stop: () => observer.disconnect() };
}
