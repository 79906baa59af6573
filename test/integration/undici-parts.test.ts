import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { Agent, errors } from '../../src/net/undici-parts';
import { ensureBuilt, ROOT } from '../fixtures/cli';

/**
 * `src/net/undici-parts.ts` loads undici's Agent and errors from their own files instead of the package's
 * index. They must be the very objects the index exports: the upstream code checks `instanceof` against
 * these errors, and undici's own code throws the index's. An undici upgrade that moves a file fails here.
 */
const requireHere = createRequire(__filename);
const PARTS = path.join(ROOT, 'dist/src/net/undici-parts.js');

beforeAll(() => ensureBuilt(), 120_000);

describe("undici's parts", () => {
  it('are the objects the package index exports', () => {
    const undici = requireHere('undici') as typeof import('undici');
    expect(Agent).toBe(undici.Agent);
    expect(errors).toBe(undici.errors);
    expect(new errors.HeadersTimeoutError()).toBeInstanceOf(undici.errors.HeadersTimeoutError);
  });

  it("give an Agent the index's promise API (the video adapter's agent.request) without loading the index", () => {
    // A fresh process: in this one other tests may have loaded the index, which adds the same methods.
    const script = `const { Agent } = require(${JSON.stringify(PARTS)});
      const agent = new Agent();
      const methods = ['request', 'stream', 'pipeline', 'upgrade', 'connect'].map((m) => typeof agent[m]);
      const index = Object.keys(require.cache).some((k) => /undici[\\\\/]index\\.js$/.test(k));
      process.stdout.write(JSON.stringify({ methods, index }));
      agent.close();`;
    const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30_000 });
    expect(child.stderr).toBe('');
    expect(JSON.parse(child.stdout)).toEqual({ methods: ['function', 'function', 'function', 'function', 'function'], index: false });
  });
});
