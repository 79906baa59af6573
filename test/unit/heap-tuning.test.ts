import { spawnSync } from 'node:child_process';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import { collectStartupGarbage, HEAP_GROWING_PERCENT, tuneHeap } from '../../src/heap-tuning';

describe('tuneHeap', () => {
  it('sets the heap growing percent when the operator gave none', () => {
    const set: string[] = [];
    expect(tuneHeap({ execArgv: ['--enable-source-maps'], nodeOptions: '--max-old-space-size=512', setFlags: (f) => set.push(f) })).toBe(
      `--heap-growing-percent=${HEAP_GROWING_PERCENT}`,
    );
    expect(set).toEqual([`--heap-growing-percent=${HEAP_GROWING_PERCENT}`]);
  });

  it("leaves the operator's own value alone, from the command line or NODE_OPTIONS, in either spelling", () => {
    for (const given of [
      { execArgv: ['--heap-growing-percent=50'], nodeOptions: '' },
      { execArgv: [], nodeOptions: '--max-semi-space-size=4 --heap_growing_percent=10' },
    ]) {
      const set: string[] = [];
      expect(tuneHeap({ ...given, setFlags: (f) => set.push(f) })).toBeNull();
      expect(set).toEqual([]);
    }
  });

  it('names a flag this Node knows (an unknown one would be ignored at run time without a word)', () => {
    const set: string[] = [];
    const flag = tuneHeap({ execArgv: [], nodeOptions: '', setFlags: (f) => set.push(f) })!;
    // On the command line Node refuses an unknown option (exit code 9), so a typo in the name fails here.
    const run = spawnSync(process.execPath, [flag, '-e', ''], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
  });
});

describe('collectStartupGarbage', () => {
  it('runs a full garbage collection: an object nothing refers to any more is gone after it', async () => {
    let ref: WeakRef<object> | undefined;
    (() => {
      ref = new WeakRef({ big: new Array(1000).fill('x') });
    })();
    // A WeakRef's target is kept until the current job ends; let it end first.
    await new Promise((r) => setImmediate(r));
    const ms = collectStartupGarbage();
    expect(ms).not.toBeNull();
    expect(ms!).toBeGreaterThanOrEqual(0);
    expect(ref!.deref()).toBeUndefined();
  });

  it('leaves no gc function behind: neither in this context nor in contexts made afterwards', () => {
    const hadGc = typeof (globalThis as { gc?: unknown }).gc;
    collectStartupGarbage();
    expect(typeof (globalThis as { gc?: unknown }).gc).toBe(hadGc);
    expect(vm.runInNewContext('typeof gc')).toBe('undefined');
  });
});
