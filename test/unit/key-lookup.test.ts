import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { auth } from '../../plugins/auth';
import { createKeyLookup } from '../../src/auth/key-cache';
import { GatewayError } from '../../src/errors/gateway-error';
import type { GatewayContext } from '../../src/pipeline/types';
import type { KeyLookup, Services } from '../../src/services';
import { generateKey, hashKey } from '../../src/store/key-secret';
import type { KeyRecord, Store } from '../../src/store/types';

/**
 * Issue 8 item 4: a presented key is compared by hash lookup only. Whatever it looks like (the right
 * `sk-gw-v1-` prefix with a wrong secret, a wrong prefix, a prefix of a real key), it is hashed and the
 * hash is looked up: there is no string comparison of secrets and no early return on a prefix mismatch, so
 * there is nothing whose timing depends on how much of a key is right. (Not a timing test: it checks that
 * every kind of wrong key takes the same path.)
 */

const real = generateKey();
const record = { id: 'key_1', workspaceId: 'ws_1', revokedAt: null, disabled: false, expiresAt: null } as unknown as KeyRecord;

const wrongKeys = {
  'right prefix, wrong secret': `sk-gw-v1-${randomBytes(24).toString('hex')}`,
  'wrong prefix, right length': `pk-xx-v9-${randomBytes(24).toString('hex')}`,
  'no prefix at all': randomBytes(30).toString('base64'),
  'a prefix of the real key': real.slice(0, -1),
  'the real key plus one character': `${real}0`,
  'just the prefix': 'sk-gw-v1-',
  'one character': 'x',
};

function fakeStore() {
  const findKeyByHash = vi.fn(async (hash: string) => (hash === hashKey(real) ? record : null));
  return { store: { findKeyByHash } as unknown as Store, findKeyByHash };
}

describe('key lookup by hash', () => {
  it('hashes every presented key and looks the hash up in the store, whatever its prefix', async () => {
    const { store, findKeyByHash } = fakeStore();
    const keys = createKeyLookup(store);
    for (const [what, presented] of Object.entries(wrongKeys)) {
      findKeyByHash.mockClear();
      expect(await keys.find(presented), what).toBeNull();
      expect(findKeyByHash, what).toHaveBeenCalledTimes(1);
      expect(findKeyByHash, what).toHaveBeenCalledWith(hashKey(presented));
      expect(findKeyByHash.mock.calls[0][0], what).toMatch(/^[0-9a-f]{64}$/);
    }
    findKeyByHash.mockClear();
    expect(await keys.find(real)).toBe(record);
    expect(findKeyByHash).toHaveBeenCalledWith(hashKey(real));
  });

  it('the cache in front of the store is keyed by the hash too (a hit needs the whole key)', async () => {
    const { store, findKeyByHash } = fakeStore();
    const keys = createKeyLookup(store);
    expect(await keys.find(real)).toBe(record);
    expect(await keys.find(real)).toBe(record);
    expect(findKeyByHash).toHaveBeenCalledTimes(1);
    // A near miss of a cached key is not served from the cache: it is hashed and goes to the store.
    expect(await keys.find(real.slice(0, -1))).toBeNull();
    expect(await keys.find(`${real.slice(0, -1)}${real.endsWith('0') ? '1' : '0'}`)).toBeNull();
    expect(findKeyByHash).toHaveBeenCalledTimes(3);
  });

  it('the auth stage hands every presented key to the hash lookup, with no prefix check before it', async () => {
    const find = vi.fn<KeyLookup['find']>(async (presented) => (presented === real ? record : null));
    const stage = auth.create({ accept_x_api_key: true, max_body_reads_per_key: 64, max_requests_per_key: 512 }, { keys: { find, forget: () => undefined } } as unknown as Services);
    const run = async (headers: Record<string, string>) => {
      const span = { setAttribute: vi.fn() };
      const ctx = { get: (name: string) => headers[name.toLowerCase()] ?? '', res: { once: () => undefined }, state: { gateway: { span, key: null } } } as unknown as GatewayContext;
      const next = vi.fn(async () => undefined);
      try {
        await stage(ctx, next);
        return { passed: next.mock.calls.length === 1, error: null };
      } catch (err) {
        return { passed: false, error: err as GatewayError };
      }
    };
    for (const [what, presented] of Object.entries(wrongKeys)) {
      for (const headers of [{ authorization: `Bearer ${presented}` }, { 'x-api-key': presented }] as Record<string, string>[]) {
        find.mockClear();
        const r = await run(headers);
        expect(find, `${what} ${Object.keys(headers)[0]}`).toHaveBeenCalledExactlyOnceWith(presented);
        expect(r.error?.errorType, what).toBe('authentication');
        expect(r.error?.message, what).toBe('Invalid API key');
      }
    }
    expect(await run({ authorization: `Bearer ${real}` })).toEqual({ passed: true, error: null });
  });

  it('stores keys as the hex SHA-256 of their UTF-8 text, as every earlier version did (stored keys keep working)', () => {
    for (const key of [generateKey(), 'sk-gw-v1-clé-ünïcode', '']) {
      expect(hashKey(key)).toBe(createHash('sha256').update(key, 'utf8').digest('hex'));
    }
    expect(hashKey('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });
});
