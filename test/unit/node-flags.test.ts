import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { NODE_FLAGS } from '../../src/node-flags';

const scripts = (JSON.parse(readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;

describe('the shipped node flags', () => {
  it('are on the node command line of `npm start` and `npm run gateway`, before the gateway', () => {
    const expected = ['node', ...NODE_FLAGS, 'dist/src/main.js'].join(' ');
    expect(scripts.start).toContain(`${expected} serve`);
    expect(scripts.gateway).toBe(expected);
  });

  it('are known to this node (it refuses an unknown option with exit code 9, so a typo or a removed flag fails here)', () => {
    expect(spawnSync(process.execPath, [...NODE_FLAGS, '-e', ''], { encoding: 'utf8' }).status).toBe(0);
    expect(spawnSync(process.execPath, ['--no-concurrent-recompilaton', '-e', ''], { encoding: 'utf8' }).status).toBe(9);
  });
});
