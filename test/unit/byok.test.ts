import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ByokKeys } from '../../src/auth/byok-keys';
import { byokContext, ByokSealError, maskProviderKey, openProviderKey, parseEncryptionKey, sealProviderKey } from '../../src/auth/byok-seal';
import { parseConfigText } from '../../src/config/load';
import { registry } from '../../plugins';
import type { GatewayState } from '../../src/pipeline/types';
import { openStore } from '../../src/store';
import type { KeyRecord, Store } from '../../src/store/types';
import { createLogger } from '../../src/telemetry/log';
import { testConfigYaml } from '../fixtures/gateway';

const PROVIDER_KEY = 'sk-proj-unit-secret-0123456789abcd';
const key = randomBytes(32);
const ctx = byokContext('ws-1', 'openai');

describe('sealing provider keys', () => {
  it('round-trips, in the v1:<iv>:<tag>:<ciphertext> form, with a fresh IV every time', () => {
    const a = sealProviderKey(PROVIDER_KEY, key, ctx);
    const b = sealProviderKey(PROVIDER_KEY, key, ctx);
    expect(a).toMatch(/^v1:[A-Za-z0-9+/]{16}:[A-Za-z0-9+/]{22}==:[A-Za-z0-9+/=]+$/);
    expect(a).not.toContain(PROVIDER_KEY);
    expect(a).not.toBe(b);
    expect(openProviderKey(a, key, ctx)).toBe(PROVIDER_KEY);
    expect(openProviderKey(b, key, ctx)).toBe(PROVIDER_KEY);
  });

  it('does not open with another key', () => {
    const sealed = sealProviderKey(PROVIDER_KEY, key, ctx);
    expect(() => openProviderKey(sealed, randomBytes(32), ctx)).toThrow(ByokSealError);
  });

  it('does not open when the ciphertext, the tag or the IV was altered', () => {
    const sealed = sealProviderKey(PROVIDER_KEY, key, ctx);
    const [v, iv, tag, ct] = sealed.split(':');
    const flip = (b64: string) => {
      const buf = Buffer.from(b64, 'base64');
      buf[0] ^= 1;
      return buf.toString('base64');
    };
    expect(() => openProviderKey([v, iv, tag, flip(ct)].join(':'), key, ctx)).toThrow(ByokSealError);
    expect(() => openProviderKey([v, iv, flip(tag), ct].join(':'), key, ctx)).toThrow(ByokSealError);
    expect(() => openProviderKey([v, flip(iv), tag, ct].join(':'), key, ctx)).toThrow(ByokSealError);
    expect(() => openProviderKey(['v2', iv, tag, ct].join(':'), key, ctx)).toThrow(/not a sealed provider key/);
    expect(() => openProviderKey(PROVIDER_KEY, key, ctx)).toThrow(ByokSealError);
  });

  it('is bound to its workspace and provider: a row moved elsewhere does not open', () => {
    const sealed = sealProviderKey(PROVIDER_KEY, key, ctx);
    expect(() => openProviderKey(sealed, key, byokContext('ws-2', 'openai'))).toThrow(ByokSealError);
    expect(() => openProviderKey(sealed, key, byokContext('ws-1', 'anthropic'))).toThrow(ByokSealError);
  });

  it('parses a 32-byte key from hex or base64 and refuses other lengths without echoing the text', () => {
    expect(parseEncryptionKey(key.toString('hex'))).toEqual(key);
    expect(parseEncryptionKey(key.toString('base64'))).toEqual(key);
    expect(parseEncryptionKey(key.toString('base64url'))).toEqual(key);
    expect(parseEncryptionKey(` ${key.toString('base64')}\n`)).toEqual(key);
    const short = randomBytes(16).toString('base64');
    expect(() => parseEncryptionKey(short)).toThrow(/must be 32 bytes.*got 16 bytes/);
    expect(() => parseEncryptionKey(randomBytes(31).toString('hex'))).toThrow(/must be 32 bytes/);
    expect(() => parseEncryptionKey('not a key!')).toThrow(/neither hex nor base64/);
    try {
      parseEncryptionKey(short);
    } catch (err) {
      expect((err as Error).message).not.toContain(short);
    }
  });

  it('a bad byok.encryption_key fails the config load with its path; an empty one means unset', () => {
    const yaml = (k: string) => `${testConfigYaml()}byok: { encryption_key: '${k}' }\n`;
    expect(() => parseConfigText(yaml('abcd'), { registry })).toThrow(/^byok\.encryption_key: must be 32 bytes/);
    expect(parseConfigText(yaml(key.toString('hex')), { registry }).byok.encryption_key).toBe(key.toString('hex'));
    expect(parseConfigText(yaml(''), { registry }).byok.encryption_key).toBe('');
  });

  it('masks a key to its first 3 and last 4 characters, and a short one entirely', () => {
    expect(maskProviderKey('sk-ant-api03-abcdefghijklmnop-wxyz')).toBe('sk-...wxyz');
    expect(maskProviderKey('AIzaSyA1234567890abcd')).toBe('AIz...abcd');
    expect(maskProviderKey('short-key-12345')).toBe('...');
  });
});

describe('ByokKeys', () => {
  let store: Store;
  afterEach(async () => {
    await store?.close();
  });

  async function setup(o: { ttlMs?: number } = {}) {
    store = await openStore({ driver: 'sqlite', path: ':memory:' });
    const account = await store.ensureAccount('default');
    const ws = await store.ensureWorkspace('default', account.id);
    const other = await store.ensureWorkspace('other', account.id);
    const logs: string[] = [];
    const logger = createLogger('info', new Writable({ write: (c, _e, cb) => (logs.push(String(c)), cb()) }));
    const byok = new ByokKeys({ store, logger, ttlMs: o.ttlMs });
    const put = (workspaceId: string, provider: string, plaintext: string, k = key) =>
      store.putByokKey({ workspaceId, provider, secret: sealProviderKey(plaintext, k, byokContext(workspaceId, provider)), label: maskProviderKey(plaintext) });
    return { ws, other, logs, byok, put };
  }
  const configured = { encryption_key: key.toString('base64') };

  it('opens a workspace’s keys, and a stored or deleted key takes effect after the TTL', async () => {
    const { ws, other, byok, put } = await setup({ ttlMs: 100 });
    await put(ws.id, 'openai', PROVIDER_KEY);
    expect([...(await byok.forWorkspace(ws.id, configured))]).toEqual([['openai', PROVIDER_KEY]]);
    expect((await byok.forWorkspace(other.id, configured)).size).toBe(0);
    await store.deleteByokKey(ws.id, 'openai');
    await put(other.id, 'anthropic', 'sk-ant-other-0123456789');
    // Cached: no store read per request.
    expect((await byok.forWorkspace(ws.id, configured)).get('openai')).toBe(PROVIDER_KEY);
    expect((await byok.forWorkspace(other.id, configured)).size).toBe(0);
    await new Promise((r) => setTimeout(r, 150));
    expect((await byok.forWorkspace(ws.id, configured)).size).toBe(0);
    expect((await byok.forWorkspace(other.id, configured)).get('anthropic')).toBe('sk-ant-other-0123456789');
  });

  it('resolves once per request, so admission and routing see the same keys', async () => {
    const { ws, byok, put } = await setup({ ttlMs: 1 });
    await put(ws.id, 'openai', PROVIDER_KEY);
    const state = { key: { workspaceId: ws.id } as KeyRecord } as GatewayState;
    const first = await byok.forRequest(state, configured);
    await store.deleteByokKey(ws.id, 'openai');
    await new Promise((r) => setTimeout(r, 10));
    expect(await byok.forRequest(state, configured)).toBe(first);
    expect((await byok.forRequest({ ...state } as GatewayState, configured)).size).toBe(0);
    expect((await byok.forRequest({ key: null } as GatewayState, configured)).size).toBe(0);
  });

  it('without an encryption key: no keys, and one warning however many requests', async () => {
    const { ws, other, logs, byok, put } = await setup({ ttlMs: 1 });
    await put(ws.id, 'openai', PROVIDER_KEY);
    await put(other.id, 'openai', PROVIDER_KEY);
    for (let i = 0; i < 5; i++) {
      expect((await byok.forWorkspace(ws.id, {})).size).toBe(0);
      expect((await byok.forWorkspace(other.id, {})).size).toBe(0);
      await new Promise((r) => setTimeout(r, 3));
    }
    const warnings = logs.filter((l) => l.includes('byok.encryption_key is not set'));
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0]).level).toBe(40);
  });

  it('a key sealed under another encryption key is left out, warned about once, never logged', async () => {
    const { ws, logs, byok, put } = await setup({ ttlMs: 1 });
    await put(ws.id, 'openai', PROVIDER_KEY, randomBytes(32));
    await put(ws.id, 'anthropic', 'sk-ant-good-0123456789');
    for (let i = 0; i < 3; i++) {
      expect([...(await byok.forWorkspace(ws.id, configured))]).toEqual([['anthropic', 'sk-ant-good-0123456789']]);
      await new Promise((r) => setTimeout(r, 3));
    }
    const warnings = logs.filter((l) => l.includes('does not open'));
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0])).toMatchObject({ workspace_id: ws.id, provider: 'openai' });
    expect(logs.join('')).not.toContain(PROVIDER_KEY);
    expect(logs.join('')).not.toContain('sk-ant-good');
  });

  it('a store failure is a typed 503, without the store error in the message', async () => {
    const { ws, byok } = await setup();
    await store.close();
    const err = await byok.forWorkspace(ws.id, configured).catch((e) => e);
    expect(err).toMatchObject({ errorType: 'server', status: 503, message: 'Workspace provider keys are unavailable' });
    store = await openStore({ driver: 'sqlite', path: ':memory:' });
  });
});
