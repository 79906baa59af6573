import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { Agent, errors } from '../../src/net/undici-parts';

/**
 * `src/net/undici-parts.ts` loads undici's Agent and errors from their own files instead of the package's
 * index. They must be the very objects the index exports: the upstream code checks `instanceof` against
 * these errors, and undici's own code throws the index's. An undici upgrade that moves a file fails here.
 */
const requireHere = createRequire(__filename);

describe("undici's parts", () => {
  it('are the objects the package index exports', () => {
    const undici = requireHere('undici') as typeof import('undici');
    expect(Agent).toBe(undici.Agent);
    expect(errors).toBe(undici.errors);
    expect(new errors.HeadersTimeoutError()).toBeInstanceOf(undici.errors.HeadersTimeoutError);
  });
});
