import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ensureBuilt } from '../fixtures/cli';

const ROOT = path.resolve(__dirname, '../..');

/** Runs `script` in a fresh node with `args` after a stand-in script name (as `node main.js <args>` has them); returns its stdout, or the signal it died of. */
function run(script: string, args: string[]): string {
  try {
    return execFileSync(process.execPath, ['-e', script, '--', 'main.js', ...args], { cwd: ROOT, encoding: 'utf8', timeout: 10_000 }).trim();
  } catch (err) {
    return `died: ${(err as { signal?: string }).signal}`;
  }
}

const SCRIPT = `
  const { takeEarlyHup } = require('./dist/src/early-hup.js');
  process.kill(process.pid, 'SIGHUP');
  setTimeout(() => console.log('alive, hup kept: ' + takeEarlyHup()), 50);
`;

describe('a SIGHUP while serve is starting (found by an operator audit: it ended the process)', () => {
  it('is kept for serve, which reloads once its handler is in place', () => {
    ensureBuilt();
    expect(run(SCRIPT, ['serve', '--config', 'x.yaml'])).toBe('alive, hup kept: true');
  });

  it('keeps Node default for the other commands (a closed terminal ends them)', () => {
    ensureBuilt();
    expect(run(SCRIPT, ['keys', 'list'])).toBe('died: SIGHUP');
  });
});
