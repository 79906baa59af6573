import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { settled, SETTLE_MS, watchFile } from '../../src/config/watch';

const dirs: string[] = [];
const stops: (() => void)[] = [];
afterEach(() => {
  vi.useRealTimers();
  stops.splice(0).forEach((stop) => stop());
  dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true }));
});

function tempDir(): string {
  const d = mkdtempSync(path.join(tmpdir(), 'gw-watch-'));
  dirs.push(d);
  return d;
}

/** Polls until `check` passes; fails with its last error after `ms` (generous: nothing here waits on luck). */
async function eventually(check: () => void, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      return check();
    } catch (err) {
      if (Date.now() > end) throw err;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

describe('settled: a change is read once the file has stayed unchanged for the settle time', () => {
  it('waits the settle time after the last poke', () => {
    vi.useFakeTimers();
    const onStable = vi.fn();
    const settle = settled(() => 'same', onStable, 2000);
    settle.poke();
    vi.advanceTimersByTime(1500);
    settle.poke(); // the second part of a write, 1.5 s after the first
    vi.advanceTimersByTime(1999);
    expect(onStable).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(onStable).toHaveBeenCalledTimes(1);
  });

  it('waits again when the file changed without an event, and reads it once it holds still', () => {
    vi.useFakeTimers();
    let stamp = 'v1';
    const onStable = vi.fn();
    const settle = settled(() => stamp, onStable, 2000);
    settle.poke();
    vi.advanceTimersByTime(1000);
    stamp = 'v2'; // written, no event seen
    vi.advanceTimersByTime(1000);
    expect(onStable).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1999);
    expect(onStable).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(onStable).toHaveBeenCalledTimes(1);
    settle.stop();
  });
});

describe('watchFile', () => {
  it('does not read a file written in two parts while the second is still to come (the first part was applied)', async () => {
    const file = path.join(tempDir(), 'gateway.yaml');
    writeFileSync(file, 'models: [a]\n');
    const reads: string[] = [];
    stops.push(watchFile(file, () => reads.push(readFileSync(file, 'utf8'))));
    const fd = openSync(file, 'w');
    writeSync(fd, 'models: [b]\n');
    // The second part well inside the settle time (2 s), however slow the machine: 400 ms nominal.
    await new Promise((r) => setTimeout(r, 400));
    writeSync(fd, 'pipelines: {}\n');
    closeSync(fd);
    await eventually(() => expect(reads.length).toBeGreaterThan(0), SETTLE_MS + 10_000);
    expect(reads[0]).toBe('models: [b]\npipelines: {}\n');
  });
});
