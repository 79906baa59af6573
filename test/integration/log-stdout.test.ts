import { spawn } from 'node:child_process';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, ROOT, WAIT_MS } from '../fixtures/cli';

/**
 * The gateway's stdout logger holds lines in batches (src/telemetry/log.ts). These run it in a child process,
 * as `gateway serve` does, and check that no line is kept back: one logged while the process runs reaches
 * stdout without anything else being logged, and lines still held when the process exits, or dies of an
 * uncaught exception, are written on the way out.
 */
const LOG = path.join(ROOT, 'dist/src/telemetry/log.js');

function child(script: string): { lines: () => string[]; waitLine: (msg: string) => Promise<void>; exited: Promise<number | null> } {
  const proc = spawn(process.execPath, ['-e', `const { createLogger } = require(${JSON.stringify(LOG)}); const log = createLogger('info'); ${script}`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const waiters: (() => void)[] = [];
  proc.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    waiters.forEach((w) => w());
  });
  const exited = new Promise<number | null>((resolve) => proc.on('close', resolve));
  // Complete lines only: a read may end inside a line.
  const lines = () => out.slice(0, out.lastIndexOf('\n') + 1).split('\n').filter(Boolean);
  return {
    lines,
    exited,
    waitLine: (msg) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => (proc.kill('SIGKILL'), reject(new Error(`no line "${msg}" within ${WAIT_MS} ms; stdout: ${out}`))), WAIT_MS);
        const check = () => {
          if (!lines().some((l) => JSON.parse(l).msg === msg)) return;
          clearTimeout(timer);
          resolve();
        };
        waiters.push(check);
        check();
      }),
  };
}

describe('stdout log lines', () => {
  beforeAll(() => ensureBuilt(), 120_000);

  it('reach stdout while the process runs, though nothing else is logged', async () => {
    const c = child(`log.info({ n: 1 }, 'lonely line'); setTimeout(() => {}, ${WAIT_MS + 5000});`);
    await c.waitLine('lonely line');
    const line = JSON.parse(c.lines()[0]);
    expect(line).toMatchObject({ level: 30, msg: 'lonely line', n: 1, service: 'model-gateway' });
    expect(c.lines()).toHaveLength(1); // one line, not split or written twice
  });

  it('still held at exit are all written, in order', async () => {
    const c = child(`for (let i = 0; i < 25; i++) log.info({ i }, 'line'); process.exit(0);`);
    expect(await c.exited).toBe(0);
    expect(c.lines().map((l) => JSON.parse(l).i)).toEqual([...Array(25).keys()]);
  });

  it('still held when an uncaught exception ends the process are written', async () => {
    const c = child(`log.info('before the crash'); setImmediate(() => { throw new Error('boom'); });`);
    expect(await c.exited).not.toBe(0);
    expect(c.lines().map((l) => JSON.parse(l).msg)).toEqual(['before the crash']);
  });
});
