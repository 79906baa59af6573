import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
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

  it('sees edits after its folder was removed and made again (rm -rf conf && mkdir conf && cp: the watch had gone silent)', async () => {
    const conf = path.join(tempDir(), 'conf');
    mkdirSync(conf);
    const file = path.join(conf, 'gateway.yaml');
    writeFileSync(file, 'v1');
    const reads: string[] = [];
    stops.push(watchFile(file, () => reads.push(readFileSync(file, 'utf8')), 20));
    rmSync(conf, { recursive: true });
    mkdirSync(conf);
    writeFileSync(file, 'v2');
    await eventually(() => expect(reads).toContain('v2'));
    // A later edit, by an editor's rename, in the new folder.
    writeFileSync(`${file}.tmp`, 'v3');
    renameSync(`${file}.tmp`, file);
    await eventually(() => expect(reads).toContain('v3'));
  });

  it('sees edits after its folder was moved away and another made in its place', async () => {
    const conf = path.join(tempDir(), 'conf');
    mkdirSync(conf);
    const file = path.join(conf, 'gateway.yaml');
    writeFileSync(file, 'v1');
    const reads: string[] = [];
    stops.push(watchFile(file, () => reads.push(readFileSync(file, 'utf8')), 20));
    renameSync(conf, `${conf}.old`);
    mkdirSync(conf);
    writeFileSync(file, 'v2');
    await eventually(() => expect(reads).toContain('v2'));
    writeFileSync(file, 'v3');
    await eventually(() => expect(reads).toContain('v3'));
  });

  it('still sees edits in place after the link its path goes through was swapped to another folder and the old one removed', async () => {
    const root = tempDir();
    mkdirSync(path.join(root, 'v1'));
    writeFileSync(path.join(root, 'v1', 'gateway.yaml'), 'v1');
    symlinkSync('v1', path.join(root, 'current'));
    const file = path.join(root, 'current', 'gateway.yaml');
    const reads: string[] = [];
    stops.push(watchFile(file, () => reads.push(readFileSync(file, 'utf8')), 20));
    mkdirSync(path.join(root, 'v2'));
    writeFileSync(path.join(root, 'v2', 'gateway.yaml'), 'v2');
    symlinkSync('v2', path.join(root, 'current.tmp'));
    renameSync(path.join(root, 'current.tmp'), path.join(root, 'current'));
    rmSync(path.join(root, 'v1'), { recursive: true });
    await eventually(() => expect(reads).toContain('v2'));
    writeFileSync(path.join(root, 'v2', 'gateway.yaml'), 'v2 edited');
    await eventually(() => expect(reads).toContain('v2 edited'));
  });
});
