import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { capYoungGeneration, holdYoungGeneration, YOUNG_SEMI_SPACE_MIB, YoungGenerationCap } from '../../src/heap-tuning';
import { ensureBuilt, ROOT } from '../fixtures/cli';

/**
 * The young generation held small while the gateway loads and capped once it serves (src/heap-tuning.ts).
 * V8's young-generation size is per process, so each case runs a child process: a script that allocates
 * like a busy program (a ring of 50,000 live objects, replaced continuously, so a share of every young
 * collection survives, which is what makes V8 grow the young generation) during a synchronous "start-up" and
 * then in many short turns of the event loop, and reports the young generation's capacity (both
 * semi-spaces, MiB) at start, after start-up and at the end.
 */
const HEAP_TUNING = path.join(ROOT, 'dist/src/heap-tuning.js');
const SCRIPT = `
const { holdYoungGeneration, capYoungGeneration } = require(${JSON.stringify(HEAP_TUNING)});
const v8 = require('node:v8');
const mode = process.argv[1];
const held = mode === 'free' ? null : holdYoungGeneration();
const newSpace = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size / 1048576;
const start = newSpace();
const ring = new Array(50000);
let n = 0;
const work = (count) => { for (let i = 0; i < count; i++, n++) ring[n % ring.length] = { n, s: 'item ' + n }; };
work(300000);
const afterStart = newSpace();
if (mode === 'cap' && process.argv[2] === 'after-gc') { v8.setFlagsFromString('--expose-gc'); require('node:vm').runInNewContext('gc')(); }
// 'busy': big bodies in flight all along, so the cap is 4 MiB from the start.
const busy = process.argv[2] === 'busy' ? { busyMiB: 4, bytesInFlight: () => 1e9 } : { busyMiB: 2 };
const capped = mode === 'cap' ? capYoungGeneration(2, busy) !== null : null;
(async () => {
  for (let turn = 0; turn < 1500; turn++) { work(2000); await new Promise((r) => setImmediate(r)); }
  process.stdout.write(JSON.stringify({ held, capped, start, afterStart, end: newSpace() }));
})();
`;

function run(mode: 'free' | 'hold' | 'cap', nodeFlags: string[] = [], extra = ''): { held: boolean | null; capped: boolean | null; start: number; afterStart: number; end: number } {
  const child = spawnSync(process.execPath, [...nodeFlags, '-e', SCRIPT, mode, extra], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, NODE_OPTIONS: '' } });
  expect(child.stderr).toBe('');
  return JSON.parse(child.stdout);
}

beforeAll(() => ensureBuilt(), 120_000);

describe('the young generation in a child process', () => {
  it("grows to V8's default of 32 MiB under this workload when nothing holds it (the control)", () => {
    const r = run('free');
    expect(r.start).toBeLessThanOrEqual(2);
    expect(r.end).toBe(32);
  });

  it('stays at its starting size while held (the start-up)', () => {
    const r = run('hold');
    expect(r.held).toBe(true);
    expect(r.afterStart).toBeLessThanOrEqual(2);
    expect(r.end).toBeLessThanOrEqual(2);
  });

  it('grows once start-up is done up to the cap and no further (2 MiB semi-spaces: 4 MiB)', () => {
    const r = run('cap');
    expect(r.capped).toBe(true);
    expect(r.afterStart).toBeLessThanOrEqual(2);
    expect(r.end).toBe(4);
  });

  it('lands on the cap after a full GC too (which leaves one semi-space uncommitted), as serve does it', () => {
    const r = run('cap', [], 'after-gc');
    expect(r.capped).toBe(true);
    expect(r.end).toBe(4);
  });

  it('grows to the raised cap while big bodies are in flight (4 MiB semi-spaces: 8 MiB), and no further', () => {
    const r = run('cap', [], 'busy');
    expect(r.capped).toBe(true);
    expect(r.end).toBe(8);
  });

  it("is left to the operator's own --max-semi-space-size: neither held nor capped", () => {
    const r = run('cap', ['--max-semi-space-size=8']);
    expect(r.held).toBe(false);
    expect(r.capped).toBe(false);
    expect(r.end).toBe(16);
  });
});

describe('the busy cap', () => {
  const rule = { raiseBytes: 1000, lowerBytes: 250, quietMs: 30_000 };

  it('goes up while the body bytes in flight are above the raise mark, down after staying under the lower one', () => {
    const cap = new YoungGenerationCap(8, 16, rule);
    const seen = ([[0, 900], [1, 1001], [2, 500], [3, 100], [20_000, 100], [20_001, 600], [25_000, 100], [54_999, 100], [55_000, 100], [56_000, 900]] as const).map(
      ([t, bytes]) => cap.cap(t, bytes),
    );
    // 500 is between the marks (no quiet time counted); 600 restarts the quiet time.
    expect(seen).toEqual([8, 16, 16, 16, 16, 16, 16, 16, 8, 8]);
  });
});

describe('the flags it sets', () => {
  it('holds with a growth factor of 1 unless the operator sized the young generation, in any spelling', () => {
    const set: string[] = [];
    expect(holdYoungGeneration({ execArgv: ['--enable-source-maps'], nodeOptions: '', setFlags: (f) => set.push(f) })).toBe(true);
    expect(set).toEqual(['--semi-space-growth-factor=1']);
    for (const given of [{ execArgv: ['--max-semi-space-size=16'] }, { nodeOptions: '--min_semi_space_size=2' }, { nodeOptions: '--semi-space-growth-factor=4' }]) {
      const none: string[] = [];
      expect(holdYoungGeneration({ execArgv: [], nodeOptions: '', ...given, setFlags: (f) => none.push(f) })).toBe(false);
      expect(capYoungGeneration(4, { execArgv: [], nodeOptions: '', ...given, setFlags: (f) => none.push(f) })).toBeNull();
      expect(none).toEqual([]);
    }
  });

  it('grows to the cap in one step from where it is, and not at all once there', () => {
    const MiB = 1024 * 1024;
    // What V8 reports a semi-space holds: ~98 % of its size (page headers).
    for (const [now, factor] of [
      [0.983 * MiB, 4], // held at start-up (1 MiB semi-spaces) → 4 MiB in one growth (cap 4 here)
      [1.966 * MiB, 2],
      [3.93 * MiB, 1],
      [15.73 * MiB, 1], // already past the cap (grown before it): no further
    ]) {
      const set: string[] = [];
      const c = capYoungGeneration(4, { execArgv: [], nodeOptions: '', setFlags: (f) => set.push(f), semiSpace: () => now });
      c!.stop();
      expect(set).toEqual([`--semi-space-growth-factor=${factor}`]);
    }
    expect(YOUNG_SEMI_SPACE_MIB).toBeGreaterThan(0);
  });

  it('raises the cap to the busy size at the collection after big bodies came in flight, from where the young generation is', async () => {
    const MiB = 1024 * 1024;
    const set: string[] = [];
    let t = 0;
    const c = capYoungGeneration(8, {
      execArgv: [],
      nodeOptions: '',
      setFlags: (f) => set.push(f),
      semiSpace: () => 7.86 * MiB, // at the 8 MiB cap
      now: () => (t += 2000),
      bytesInFlight: () => (t > 2000 ? 2 * 1024 * 1024 : 0), // big bodies in flight from the first collection on
    });
    expect(set).toEqual(['--semi-space-growth-factor=1']);
    // Short-lived garbage until a young collection happens and its entry arrives (bounded, not timed).
    const sink: unknown[] = [];
    for (let i = 0; i < 2000 && set.length < 2; i++) {
      for (let j = 0; j < 2000; j++) sink[j % 10] = { i, j, s: `x${j}` };
      await new Promise((r) => setImmediate(r));
    }
    c!.stop();
    expect(set).toEqual(['--semi-space-growth-factor=1', '--semi-space-growth-factor=2']);
  });

  it('names a flag this Node knows (an unknown one would be ignored at run time without a word)', () => {
    const run = spawnSync(process.execPath, ['--semi-space-growth-factor=1', '-e', ''], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
  });
});
