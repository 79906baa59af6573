import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type LedgerRow, type StorageConfig, type Store } from '../../src/store';
import { PostgresStore } from '../../src/store/postgres';
import { generateKey, hashKey, maskKey } from '../../src/store/key-secret';
import { MIGRATIONS, MIGRATIONS_TABLE } from '../../src/store/migrations';
import { StoreConflictError } from '../../src/store/types';

const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

type RawRow = Record<string, unknown>;

/** One engine under test: where its store lives, and a way to read tables behind the store's back. */
interface Engine {
  name: 'sqlite' | 'postgres';
  setup(): Promise<StorageConfig>;
  raw(sql: string): Promise<RawRow[]>;
  teardown(): Promise<void>;
}

function sqliteEngine(): Engine {
  let dir = '';
  let path = '';
  return {
    name: 'sqlite',
    async setup() {
      dir = mkdtempSync(join(tmpdir(), 'gw-store-'));
      path = join(dir, 'nested', 'gateway.db'); // the store must create `nested/`
      return { driver: 'sqlite', path };
    },
    async raw(sql) {
      const db = new Database(path);
      try {
        return db.prepare(sql).all() as RawRow[];
      } finally {
        db.close();
      }
    },
    async teardown() {
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

function postgresEngine(): Engine {
  const schema = `gw_test_${randomBytes(6).toString('hex')}`;
  const client = new Client({ connectionString: PG_URL });
  return {
    name: 'postgres',
    async setup() {
      await client.connect();
      await client.query(`SET search_path TO ${schema}`);
      return { driver: 'postgres', url: PG_URL, schema, pool_max: 5 };
    },
    async raw(sql) {
      return (await client.query(sql)).rows as RawRow[];
    },
    async teardown() {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    },
  };
}

let ledgerSeq = 0;
function ledgerRow(ids: { keyId: string; workspaceId: string; accountId: string }, over: Partial<LedgerRow> = {}): LedgerRow {
  return {
    generationId: `gen-${process.pid}-${++ledgerSeq}-${randomBytes(4).toString('hex')}`,
    userId: 'user_1',
    ...ids,
    endpoint: 'chat_completions',
    model: 'openai/gpt-4o-mini',
    provider: 'openai',
    upstreamModel: 'gpt-4o-mini',
    promptTokens: 10,
    completionTokens: 20,
    cachedTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
    costUsd: 0.5,
    isByok: false,
    status: 'completed',
    createdAt: '2025-06-15T12:00:00.000Z',
    ...over,
  };
}

describe.each([sqliteEngine(), postgresEngine()])('Store on $name', (engine) => {
  let config: StorageConfig;
  let store: Store;
  let second: Store;

  beforeAll(async () => {
    config = await engine.setup();
    // Two stores starting together on an empty database: migrations must still be applied exactly once.
    [store, second] = await Promise.all([openStore(config), openStore(config)]);
  });

  afterAll(async () => {
    await second?.close();
    await store?.close();
    await engine.teardown();
  });

  /** A fresh account, workspace and key, so each test's balances and sums are its own. */
  async function fixture(tag: string) {
    const account = await store.ensureAccount(`acct-${tag}`);
    const workspace = await store.ensureWorkspace(`ws-${tag}`, account.id);
    const key = await store.createKey({
      hash: hashKey(generateKey()),
      label: 'sk-gw-v1-...test',
      name: tag,
      workspaceId: workspace.id,
      creatorUserId: 'user-1',
    });
    return { account, workspace, key, ids: { keyId: key.id, workspaceId: workspace.id, accountId: account.id } };
  }

  it('applies each migration once, however often init runs', async () => {
    expect(store.driver).toBe(engine.name);
    await store.init();
    await second.init();
    const rows = await engine.raw('SELECT id, name FROM schema_migrations ORDER BY id');
    expect(rows.map((r) => Number(r.id))).toEqual(MIGRATIONS.map((m) => m.id));
    expect(rows[0].name).toBe(MIGRATIONS[0].name);
  });

  it('settingOrInit: the first writer wins, also when writers race', async () => {
    expect(await store.settingOrInit('instance_id', 'first')).toBe('first');
    expect(await store.settingOrInit('instance_id', 'second')).toBe('first');
    expect(await second.settingOrInit('instance_id', 'third')).toBe('first');

    const raced = await Promise.all(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? store : second).settingOrInit('raced', `v${i}`)),
    );
    expect(new Set(raced).size).toBe(1);
    expect(raced[0]).toMatch(/^v\d$/);
  });

  it('ensureAccount is idempotent and findAccount matches id or name', async () => {
    const a = await store.ensureAccount('default');
    expect(a).toMatchObject({ name: 'default', balanceUsd: 0, purchasedUsd: 0 });
    expect(Number.isNaN(Date.parse(a.createdAt))).toBe(false);
    expect(await store.ensureAccount('default')).toEqual(a);
    expect(await store.findAccount(a.id)).toEqual(a);
    expect(await store.findAccount('default')).toEqual(a);
    expect(await store.findAccount('no-such-account')).toBeNull();

    const raced = await Promise.all(
      Array.from({ length: 8 }, (_, i) => (i % 2 ? store : second).ensureAccount('raced-account')),
    );
    expect(new Set(raced.map((r) => r.id)).size).toBe(1);
  });

  it('ensureWorkspace is idempotent and findWorkspace matches id or name', async () => {
    const account = await store.ensureAccount('ws-owner');
    const w = await store.ensureWorkspace('team', account.id);
    expect(w).toMatchObject({ name: 'team', accountId: account.id });
    expect(await store.ensureWorkspace('team', account.id)).toEqual(w);
    expect(await store.findWorkspace(w.id)).toEqual(w);
    expect(await store.findWorkspace('team')).toEqual(w);
    expect(await store.findWorkspace('nope')).toBeNull();
    await expect(store.ensureWorkspace('orphan', 'no-such-account')).rejects.toThrow();

    const raced = await Promise.all(
      Array.from({ length: 8 }, (_, i) => (i % 2 ? store : second).ensureWorkspace('raced-ws', account.id)),
    );
    expect(new Set(raced.map((r) => r.id)).size).toBe(1);
  });

  it('addCredits raises balance and purchased credits', async () => {
    const a = await store.ensureAccount('buyer');
    const after = await store.addCredits(a.id, 10);
    expect(after).toMatchObject({ id: a.id, balanceUsd: 10, purchasedUsd: 10 });
    expect(await store.addCredits(a.id, 2.5)).toMatchObject({ balanceUsd: 12.5, purchasedUsd: 12.5 });
    expect(await store.findAccount(a.id)).toMatchObject({ balanceUsd: 12.5, purchasedUsd: 12.5 });
    await expect(store.addCredits('no-such-account', 1)).rejects.toThrow(/unknown account/);
  });

  it('creates, finds, lists, counts and revokes keys; stores the hash, never the key', async () => {
    const account = await store.ensureAccount('keys');
    const ws = await store.ensureWorkspace('keys-ws', account.id);
    const countBefore = await store.countKeys();
    const secret = generateKey();
    const full = await store.createKey({
      hash: hashKey(secret),
      label: maskKey(secret),
      name: 'ci',
      workspaceId: ws.id,
      creatorUserId: 'user-1',
      isManagement: true,
      isProvisioning: true,
      limitUsd: 5.5,
      limitReset: 'monthly',
      includeByokInLimit: true,
      allowedDataRegions: ['europe', 'us'],
      expiresAt: '2030-01-02T03:04:05.000Z',
    });
    expect(full).toMatchObject({
      hash: hashKey(secret),
      label: maskKey(secret),
      name: 'ci',
      workspaceId: ws.id,
      accountId: account.id,
      creatorUserId: 'user-1',
      isManagement: true,
      isProvisioning: true,
      limitUsd: 5.5,
      limitReset: 'monthly',
      includeByokInLimit: true,
      allowedDataRegions: ['europe', 'us'],
      expiresAt: '2030-01-02T03:04:05.000Z',
      disabled: false,
      revokedAt: null,
    });
    const minimal = await store.createKey({
      hash: hashKey(generateKey()),
      label: 'sk-gw-v1-...min',
      name: 'minimal',
      workspaceId: ws.id,
      creatorUserId: 'user-2',
    });
    expect(minimal).toMatchObject({
      isManagement: false,
      isProvisioning: false,
      limitUsd: null,
      limitReset: null,
      includeByokInLimit: false,
      allowedDataRegions: [],
      expiresAt: null,
      disabled: false,
      revokedAt: null,
    });

    expect(await store.findKeyByHash(hashKey(secret))).toEqual(full);
    expect(await store.findKeyByHash(hashKey('sk-gw-v1-wrong'))).toBeNull();
    expect(await store.getKey(full.id)).toEqual(full);
    expect(await store.getKey('no-such-key')).toBeNull();
    const listed = await store.listKeys();
    expect(listed).toContainEqual(full);
    expect(listed).toContainEqual(minimal);
    expect(await store.countKeys()).toBe(countBefore + 2);

    // The plaintext key, or even its random part, appears in no column of any api_keys row.
    const rows = await engine.raw('SELECT * FROM api_keys');
    const mine = rows.find((r) => r.id === full.id)!;
    expect(mine.hash).toBe(hashKey(secret));
    for (const row of rows) {
      for (const value of Object.values(row)) {
        expect(String(value)).not.toContain(secret);
        expect(String(value)).not.toContain(secret.slice('sk-gw-v1-'.length, -4));
      }
    }

    await expect(
      store.createKey({ hash: hashKey(secret), label: 'dup', name: 'dup', workspaceId: ws.id, creatorUserId: 'u' }),
    ).rejects.toThrow();
    await expect(
      store.createKey({ hash: 'h', label: 'l', name: 'n', workspaceId: 'no-such-ws', creatorUserId: 'u' }),
    ).rejects.toThrow(/unknown workspace/);

    expect(await store.revokeKey(full.id)).toBe(true);
    expect(await store.revokeKey(full.id)).toBe(false);
    expect(await store.revokeKey('no-such-key')).toBe(false);
    const revoked = await store.getKey(full.id);
    expect(Number.isNaN(Date.parse(revoked!.revokedAt!))).toBe(false);
    expect(await store.countKeys()).toBe(countBefore + 2); // revoked keys still count
  });

  it('insertLedger is idempotent by generation id and deducts the cost once', async () => {
    const { account, ids } = await fixture('idem');
    await store.addCredits(account.id, 10);
    const row = ledgerRow(ids, { costUsd: 1.25 });
    expect(await store.insertLedger(row)).toBe(true);
    expect(await store.insertLedger(row)).toBe(false);
    expect(await second.insertLedger({ ...row, costUsd: 3 })).toBe(false);
    expect((await store.findAccount(account.id))!.balanceUsd).toBe(8.75);
    expect((await store.getLedger(row.generationId))!.costUsd).toBe(1.25);
  });

  it('insertLedgerBatch writes many rows at once, skips known ids, debits each account once per new row', async () => {
    const { account, ids } = await fixture('batch');
    await store.addCredits(account.id, 10);
    const known = ledgerRow(ids, { costUsd: 1 });
    expect(await store.insertLedger(known)).toBe(true);
    const fresh = [ledgerRow(ids, { costUsd: 0.5 }), ledgerRow(ids, { costUsd: 0.25, isByok: true, status: 'cancelled' })];
    expect(await store.insertLedgerBatch([known, ...fresh])).toBe(2);
    expect(await store.insertLedgerBatch([...fresh])).toBe(0);
    expect(await store.insertLedgerBatch([])).toBe(0);
    // The BYOK row is recorded but paid with the workspace's own provider key: no debit.
    expect((await store.findAccount(account.id))!.balanceUsd).toBe(8.5);
    expect(await store.getLedger(fresh[1].generationId)).toMatchObject({ costUsd: 0.25, isByok: true, status: 'cancelled' });
  });

  it('token counts past 2^31 and fractional ones are written like any other row (PostgreSQL refused the batch, which the writer retries whole: every row behind it held)', async () => {
    const { ids } = await fixture('tokens');
    // 64 server-tool calls of a model with no context_length are bounded at 64 × 100 M input tokens.
    const huge = ledgerRow(ids, { promptTokens: 6_400_000_000, completionTokens: 3_000_000_000, cachedTokens: 2_500_000_000, cacheWriteTokens: 2_200_000_000, reasoningTokens: 2_147_483_648 });
    const fractional = ledgerRow(ids, { promptTokens: 10.5, completionTokens: 2.4 });
    const plain = ledgerRow(ids);
    expect(await store.insertLedgerBatch([huge, fractional, plain])).toBe(3);
    expect(await store.getLedger(huge.generationId)).toEqual(huge);
    expect(await store.getLedger(fractional.generationId)).toMatchObject({ promptTokens: 11, completionTokens: 2 });
    expect(await store.getLedger(plain.generationId)).toEqual(plain);
    const single = ledgerRow(ids, { promptTokens: 5_000_000_000, completionTokens: 0.5 });
    expect(await store.insertLedger(single)).toBe(true);
    expect(await store.getLedger(single.generationId)).toMatchObject({ promptTokens: 5_000_000_000, completionTokens: 1 });
    // Past what a BIGINT holds (a client's max_tokens of 1e20 lets a provider report that much): stored as 2^53 − 1.
    const past = ledgerRow(ids, { completionTokens: 1e19, reasoningTokens: 1e300 });
    expect(await store.insertLedgerBatch([past])).toBe(1);
    expect(await store.getLedger(past.generationId)).toMatchObject({ completionTokens: 2 ** 53 - 1, reasoningTokens: 2 ** 53 - 1 });
  });

  it('getLedger round-trips every field', async () => {
    const { ids } = await fixture('roundtrip');
    const row: LedgerRow = {
      generationId: 'gen-roundtrip-1',
      userId: 'user_round',
      ...ids,
      endpoint: 'messages',
      model: 'anthropic/claude-sonnet',
      provider: 'anthropic',
      upstreamModel: 'claude-sonnet-4-20250514',
      promptTokens: 1234,
      completionTokens: 567,
      cachedTokens: 89,
      cacheWriteTokens: 10,
      reasoningTokens: 11,
      costUsd: 0.0123456789,
      isByok: true,
      status: 'failed',
      createdAt: '2025-03-04T05:06:07.089Z',
    };
    expect(await store.insertLedger(row)).toBe(true);
    expect(await store.getLedger(row.generationId)).toEqual(row);
    expect(await store.getLedger('no-such-generation')).toBeNull();
  });

  it('usageForKey sums all-time and UTC day/week/month windows; BYOK apart', async () => {
    const { ids } = await fixture('usage');
    const other = await fixture('usage-other');
    // Powers of two: every sum names exactly which rows it counted.
    const rows: [string, number, boolean][] = [
      ['2025-06-15T00:00:00.000Z', 1, false], // day start (Sunday)
      ['2025-06-14T23:59:59.999Z', 2, false], // just before the day
      ['2025-06-09T00:00:00.000Z', 4, false], // week start (Monday)
      ['2025-06-08T23:59:59.999Z', 8, false], // just before the week
      ['2025-06-01T00:00:00.000Z', 16, false], // month start
      ['2025-05-31T23:59:59.999Z', 32, false], // just before the month; also the week of 2025-05-26
      ['2025-06-16T00:00:00.000Z', 64, false], // next day and week, same month
      ['2025-06-15T06:00:00.000Z', 128, true], // BYOK, today
      ['2025-05-20T00:00:00.000Z', 256, true], // BYOK, last month
    ];
    for (const [createdAt, costUsd, isByok] of rows) {
      await store.insertLedger(ledgerRow(ids, { createdAt, costUsd, isByok }));
    }
    await store.insertLedger(ledgerRow(other.ids, { createdAt: '2025-06-15T01:00:00.000Z', costUsd: 512 }));

    expect(await store.usageForKey(ids.keyId, new Date('2025-06-15T12:00:00.000Z'))).toEqual({
      usage: 127,
      usageDaily: 1,
      usageWeekly: 1 + 2 + 4,
      usageMonthly: 1 + 2 + 4 + 8 + 16 + 64,
      byokUsage: 384,
      byokUsageDaily: 128,
      byokUsageWeekly: 128,
      byokUsageMonthly: 128,
    });
    // Sunday 1 June: the week (from Monday 26 May) began before the month did.
    expect(await second.usageForKey(ids.keyId, new Date('2025-06-01T05:00:00.000Z'))).toEqual({
      usage: 127,
      usageDaily: 16,
      usageWeekly: 16 + 32,
      usageMonthly: 1 + 2 + 4 + 8 + 16 + 64,
      byokUsage: 384,
      byokUsageDaily: 0,
      byokUsageWeekly: 0,
      byokUsageMonthly: 128,
    });
    expect(await store.usageForKey('no-such-key')).toEqual({
      usage: 0,
      usageDaily: 0,
      usageWeekly: 0,
      usageMonthly: 0,
      byokUsage: 0,
      byokUsageDaily: 0,
      byokUsageWeekly: 0,
      byokUsageMonthly: 0,
    });
  });

  it('usageForKey defaults `now` to the current time', async () => {
    const { ids } = await fixture('usage-now');
    await store.insertLedger(ledgerRow(ids, { createdAt: new Date().toISOString(), costUsd: 0.75 }));
    expect(await store.usageForKey(ids.keyId)).toMatchObject({ usage: 0.75, usageDaily: 0.75, usageMonthly: 0.75 });
  });

  it('spendTotals sums a key, a member (all their keys in the workspace) and a workspace, BYOK apart', async () => {
    const { workspace, ids, account } = await fixture('spend-scopes');
    const other = await store.createKey({ hash: hashKey(generateKey()), label: 'x', name: 'k2', workspaceId: workspace.id, creatorUserId: 'user-2' });
    const otherIds = { ...ids, keyId: other.id };
    await store.insertLedgerBatch([
      ledgerRow(ids, { userId: 'user-1', costUsd: 1, createdAt: '2025-06-14T12:00:00.000Z' }),
      ledgerRow(ids, { userId: 'user-1', costUsd: 0.5, createdAt: '2025-06-15T12:00:00.000Z' }),
      ledgerRow(ids, { userId: 'user-1', costUsd: 0.25, isByok: true, createdAt: '2025-06-15T12:00:00.000Z' }),
      ledgerRow(otherIds, { userId: 'user-2', costUsd: 2, createdAt: '2025-06-15T12:00:00.000Z' }),
    ]);
    const day = Date.parse('2025-06-15T00:00:00.000Z');
    expect(await store.spendTotals({ kind: 'key', keyId: ids.keyId }, 0)).toEqual({ paid: 1.5, byok: 0.25 });
    expect(await store.spendTotals({ kind: 'key', keyId: ids.keyId }, day)).toEqual({ paid: 0.5, byok: 0.25 });
    expect(await store.spendTotals({ kind: 'member', workspaceId: workspace.id, userId: 'user-1' }, 0)).toEqual({ paid: 1.5, byok: 0.25 });
    expect(await store.spendTotals({ kind: 'workspace', workspaceId: workspace.id }, day)).toEqual({ paid: 2.5, byok: 0.25 });
    expect(await store.spendTotals({ kind: 'workspace', workspaceId: 'nope' }, 0)).toEqual({ paid: 0, byok: 0 });
    expect((await store.findAccount(account.id))!.balanceUsd).toBe(-3.5);
  });

  it('countFreeModelRequests counts one account\'s `:free` requests since an instant', async () => {
    const { ids } = await fixture('free-count');
    await store.insertLedgerBatch([
      ledgerRow(ids, { model: 'x/y:free', createdAt: '2025-06-15T01:00:00.000Z' }),
      ledgerRow(ids, { model: 'x/y:free', createdAt: '2025-06-14T23:59:59.000Z' }),
      ledgerRow(ids, { model: 'x/y', createdAt: '2025-06-15T02:00:00.000Z' }),
    ]);
    expect(await store.countFreeModelRequests(ids.accountId, Date.parse('2025-06-15T00:00:00.000Z'))).toBe(1);
    expect(await store.countFreeModelRequests(ids.accountId, 0)).toBe(2);
  });

  it('keeps one sealed BYOK key per workspace and provider', async () => {
    const { workspace } = await fixture('byok');
    await store.putByokKey({ workspaceId: workspace.id, provider: 'openai', secret: 'sealed-1', label: 'sk-...1' });
    await store.putByokKey({ workspaceId: workspace.id, provider: 'openai', secret: 'sealed-2', label: 'sk-...2' });
    expect(await store.listByokKeys(workspace.id)).toMatchObject([{ provider: 'openai', secret: 'sealed-2', label: 'sk-...2' }]);
    expect(await store.deleteByokKey(workspace.id, 'openai')).toBe(true);
    expect(await store.deleteByokKey(workspace.id, 'openai')).toBe(false);
    expect(await store.listByokKeys(workspace.id)).toEqual([]);
  });

  it('presets: version 1, then n+1 designated; scoped to the workspace; versions newest first', async () => {
    const { workspace } = await fixture('presets');
    const other = await store.ensureWorkspace('ws-presets-other', (await store.ensureAccount('acct-presets')).id);
    const first = await store.savePresetVersion({ workspaceId: workspace.id, slug: 'writer', creatorUserId: 'u1', config: { model: 'm', max_tokens: 5 }, systemPrompt: 'Be brief.' });
    expect(first.version).toMatchObject({ version: 1, config: { model: 'm', max_tokens: 5 }, systemPrompt: 'Be brief.', creatorId: 'u1', presetId: first.preset.id });
    expect(first.preset).toMatchObject({ slug: 'writer', name: 'writer', status: 'active', workspaceId: workspace.id, designatedVersionId: first.version.id, description: null });
    const second = await store.savePresetVersion({ workspaceId: workspace.id, slug: 'writer', creatorUserId: 'u2', config: { model: 'n' }, systemPrompt: null });
    expect(second.preset.id).toBe(first.preset.id);
    expect(second.version).toMatchObject({ version: 2, systemPrompt: null });
    expect((await store.findPreset(workspace.id, 'writer'))!.version.id).toBe(second.version.id);
    expect(await store.findPreset(other.id, 'writer')).toBeNull();
    await store.savePresetVersion({ workspaceId: other.id, slug: 'writer', creatorUserId: 'u3', config: {}, systemPrompt: null });
    expect((await store.findPreset(other.id, 'writer'))!.version.version).toBe(1);
    expect((await store.listPresets(workspace.id)).map((p) => p.preset.slug)).toEqual(['writer']);
    expect((await store.listPresetVersions(first.preset.id)).map((v) => v.version)).toEqual([2, 1]);
    expect(first.version.systemBlocks).toBeNull();
    // A system given as blocks is kept as given too (cache_control and all), beside its text.
    const blocks = [{ type: 'text', text: 'Context.', cache_control: { type: 'ephemeral', ttl: '1h' } }];
    const third = await store.savePresetVersion({ workspaceId: workspace.id, slug: 'writer', creatorUserId: 'u1', config: {}, systemPrompt: 'Context.', systemBlocks: blocks });
    expect(third.version).toMatchObject({ version: 3, systemPrompt: 'Context.', systemBlocks: blocks });
    expect((await store.findPreset(workspace.id, 'writer'))!.version.systemBlocks).toEqual(blocks);
    expect((await store.listPresetVersions(first.preset.id)).map((v) => v.systemBlocks)).toEqual([blocks, null, null]);
  });

  it('presets and BYOK keys list in byte order on both engines, whatever PostgreSQL\'s collation (it listed `a_b` before `a-b`, `openai` before `Zeta`)', async () => {
    // A database created with a linguistic default collation (en_US.UTF-8, common), here as the columns' own.
    if (engine.name === 'postgres') {
      await engine.raw('ALTER TABLE presets ALTER COLUMN slug TYPE text COLLATE "und-x-icu"');
      await engine.raw('ALTER TABLE byok_keys ALTER COLUMN provider TYPE text COLLATE "und-x-icu"');
    }
    const { workspace } = await fixture('byte-order');
    for (const slug of ['ab', 'a_b', 'a1', 'a.b', 'a-b']) {
      await store.savePresetVersion({ workspaceId: workspace.id, slug, creatorUserId: 'u', config: {}, systemPrompt: null });
    }
    expect((await store.listPresets(workspace.id)).map((p) => p.preset.slug)).toEqual(['a-b', 'a.b', 'a1', 'a_b', 'ab']);
    for (const provider of ['openai', 'x_ai', 'Zeta', 'x-ai']) {
      await store.putByokKey({ workspaceId: workspace.id, provider, secret: 'sealed', label: 'sk-...1' });
    }
    expect((await store.listByokKeys(workspace.id)).map((k) => k.provider)).toEqual(['Zeta', 'openai', 'x-ai', 'x_ai']);
  });

  it('presets: concurrent writes of one slug never share a version number; a loser gets a conflict', async () => {
    const { workspace } = await fixture('presets-race');
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) =>
        (i % 2 ? second : store).savePresetVersion({ workspaceId: workspace.id, slug: 'race', creatorUserId: 'u', config: { n: i }, systemPrompt: null }),
      ),
    );
    const won = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.version.version] : []));
    const lost = results.flatMap((r) => (r.status === 'rejected' ? [r.reason] : []));
    expect(new Set(won).size).toBe(won.length);
    for (const e of lost) expect(e).toBeInstanceOf(StoreConflictError);
    const stored = await store.listPresetVersions((await store.findPreset(workspace.id, 'race'))!.preset.id);
    expect(stored.map((v) => v.version).sort((a, b) => a - b)).toEqual([...won].sort((a, b) => a - b));
    expect(won.length).toBeGreaterThan(0);
  });

  it('50 parallel ledger inserts (each sent twice) leave the exact balance', async () => {
    const { account, ids } = await fixture('parallel');
    await store.addCredits(account.id, 100);
    // Costs are multiples of 1/8, exact in binary floating point, so any summation order gives one answer.
    const rows = Array.from({ length: 50 }, (_, i) => ledgerRow(ids, { costUsd: 0.125 * ((i % 4) + 1) }));
    const results = await Promise.all(
      rows.flatMap((r) => [store.insertLedger(r), second.insertLedger(r)]),
    );
    expect(results.filter(Boolean)).toHaveLength(50);
    const spent = rows.reduce((sum, r) => sum + r.costUsd, 0);
    expect(spent).toBe(15.375);
    expect((await store.findAccount(account.id))!.balanceUsd).toBe(100 - 15.375);
    expect((await store.usageForKey(ids.keyId, new Date('2025-06-15T12:00:00.000Z'))).usageDaily).toBe(15.375);
  });
});

describe('engine specifics', () => {
  it('sqlite: a path whose folder cannot be made names storage.path', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-store-'));
    try {
      writeFileSync(join(dir, 'file'), 'x');
      const path = join(dir, 'file', 'gw.db');
      await expect(openStore({ driver: 'sqlite', path })).rejects.toThrow(`storage.path ${path}: cannot create its folder (EEXIST)`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sqlite: a path that is a folder names storage.path (SQLite said only "unable to open database file")', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-store-'));
    try {
      await expect(openStore({ driver: 'sqlite', path: dir })).rejects.toThrow(`storage.path ${dir}: is a folder; name the database file in it`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sqlite: a file SQLite cannot open as a database names storage.path and the cause (it said only "file is not a database")', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-store-'));
    try {
      const path = join(dir, 'notes.txt');
      writeFileSync(path, 'not a database, just some text that is long enough to be read as a header '.repeat(20));
      await expect(openStore({ driver: 'sqlite', path })).rejects.toThrow(new RegExp(`^storage\\.path ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: cannot open the database \\(file is not a database, SQLITE_NOTADB`));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sqlite: a new database, its WAL and the ledger journal are the owner\'s alone (0600 / 0700); an existing file keeps its mode', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-store-'));
    try {
      const path = join(dir, 'gw.db');
      const store = await openStore({ driver: 'sqlite', path });
      await store.ensureAccount('default');
      store.insertPendingLedgerNow?.([{ generationId: 'gen-1', keyId: 'k', userId: 'u', workspaceId: 'w', accountId: 'a', endpoint: 'chat_completions', model: 'm', provider: 'p', upstreamModel: 'um', isByok: false, owner: 'o', createdAt: new Date().toISOString() }]);
      const mode = (p: string) => statSync(p).mode & 0o777;
      expect(mode(path)).toBe(0o600);
      expect(mode(`${path}-wal`)).toBe(0o600);
      expect(mode(`${path}-pending`)).toBe(0o700);
      for (const f of readdirSync(`${path}-pending`)) expect(mode(join(`${path}-pending`, f))).toBe(0o600);
      await store.close();
      chmodSync(path, 0o640);
      const again = await openStore({ driver: 'sqlite', path });
      expect(mode(path)).toBe(0o640);
      await again.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sqlite: creates the parent folder and uses WAL with a busy timeout', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-store-'));
    try {
      const path = join(dir, 'a', 'b', 'gateway.db');
      const store = await openStore({ driver: 'sqlite', path });
      await store.close();
      expect(existsSync(path)).toBe(true);
      const db = new Database(path);
      try {
        expect(db.pragma('journal_mode', { simple: true })).toBe('wal'); // persisted in the file
      } finally {
        db.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sqlite: a 2 MiB page cache unless storage.cache_mib says otherwise (better-sqlite3 builds SQLite with 16 MiB)', async () => {
    const cacheKib = async (cacheMib?: number) => {
      const store = await openStore({ driver: 'sqlite', path: ':memory:', cache_mib: cacheMib });
      try {
        return (store as unknown as { db: Database.Database }).db.pragma('cache_size', { simple: true });
      } finally {
        await store.close();
      }
    };
    expect(await cacheKib()).toBe(-2048);
    expect(await cacheKib(64)).toBe(-65536);
  });

  it('postgres: rejects a schema name that is not a plain identifier', () => {
    expect(() => new PostgresStore({ url: PG_URL, schema: 'x; DROP TABLE y' })).toThrow(/invalid postgres schema/);
    expect(() => new PostgresStore({ url: PG_URL, schema: 'Public' })).toThrow(/invalid postgres schema/);
  });
});

describe.each([sqliteEngine(), postgresEngine()])('The first key on $name', (engine) => {
  const stores: Store[] = [];
  afterAll(async () => {
    for (const s of stores) await s.close();
    await engine.teardown();
  });

  it('processes starting together on an empty database create one first key between them (two did, 3 runs in 8)', async () => {
    const config = await engine.setup();
    stores.push(...(await Promise.all([openStore(config), openStore(config), openStore(config)])));
    const account = await stores[0].ensureAccount('acct-first');
    const workspace = await stores[0].ensureWorkspace('ws-first', account.id);
    const made = await Promise.all(
      stores.map((s) => {
        const secret = generateKey();
        return s.createFirstKey({ hash: hashKey(secret), label: maskKey(secret), name: 'bootstrap', workspaceId: workspace.id, creatorUserId: 'bootstrap', isManagement: true });
      }),
    );
    expect(made.filter((k) => k !== null)).toHaveLength(1);
    expect(await stores[1].countKeys()).toBe(1);
    // Once there is a key, none is made.
    const secret = generateKey();
    expect(await stores[2].createFirstKey({ hash: hashKey(secret), label: maskKey(secret), name: 'again', workspaceId: workspace.id, creatorUserId: 'x' })).toBeNull();
    expect(Number((await engine.raw('SELECT COUNT(*) AS n FROM api_keys'))[0].n)).toBe(1);
  });
});

/** A database as the first builds left it: their migration 1 also made `ledger_workspace_time`, and no row had a `user_id`. */
function firstBuildsSql(engine: 'sqlite' | 'postgres'): string {
  const index = engine === 'sqlite'
    ? 'CREATE INDEX ledger_workspace_time ON ledger (workspace_id, created_at, is_byok, cost_usd);'
    : 'CREATE INDEX ledger_workspace_time ON ledger (workspace_id, created_at) INCLUDE (is_byok, cost_usd);';
  const no = engine === 'sqlite' ? '0' : 'false';
  return `${MIGRATIONS_TABLE[engine]};
    ${MIGRATIONS[0][engine]}
    ${index}
    INSERT INTO schema_migrations (id, name, applied_at) VALUES (1, '${MIGRATIONS[0].name}', 0);
    INSERT INTO accounts (id, name, created_at) VALUES ('acct-old', 'default', 0);
    INSERT INTO workspaces (id, name, account_id, created_at) VALUES ('ws-old', 'default', 'acct-old', 0);
    INSERT INTO api_keys (id, hash, label, name, workspace_id, account_id, creator_user_id, created_at)
      VALUES ('key-old', 'hash-old', 'sk-gw-v1-...old', 'old', 'ws-old', 'acct-old', 'cli', 0);
    INSERT INTO ledger (generation_id, key_id, workspace_id, account_id, endpoint, model, provider, upstream_model, prompt_tokens,
      completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, is_byok, status, created_at)
      VALUES ('gen-old-1', 'key-old', 'ws-old', 'acct-old', 'chat_completions', 'm', 'p', 'u', 1, 1, 0, 0, 0, 0.25, ${no}, 'completed', ${Date.now()});`;
}

describe.each(['sqlite', 'postgres'] as const)('Upgrades on %s', (engine) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  /** An empty place for a database, the SQL run there before any store opens it, and its storage config. */
  async function prepare(sql: string): Promise<StorageConfig> {
    if (engine === 'sqlite') {
      const dir = mkdtempSync(join(tmpdir(), 'gw-upgrade-'));
      cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
      const path = join(dir, 'gateway.db');
      const db = new Database(path);
      db.exec(sql);
      db.close();
      return { driver: 'sqlite', path };
    }
    const schema = `gw_upgrade_${randomBytes(6).toString('hex')}`;
    const client = new Client({ connectionString: PG_URL });
    await client.connect();
    cleanups.push(async () => {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    });
    await client.query(`CREATE SCHEMA ${schema}; SET search_path TO ${schema}; ${sql}`);
    return { driver: 'postgres', url: PG_URL, schema, pool_max: 2 };
  }

  it('a database of the first builds opens (it failed: "ledger_workspace_time already exists"), and its old rows count for their member', async () => {
    const store = await openStore(await prepare(firstBuildsSql(engine)));
    cleanups.push(() => store.close());
    expect((await store.listKeys()).map((k) => k.id)).toEqual(['key-old']);
    // Migration 2 gave the old rows user_id '' and member budgets sum by it: the old spend was invisible to them.
    expect((await store.spendTotals({ kind: 'member', workspaceId: 'ws-old', userId: 'cli' }, 0)).paid).toBeCloseTo(0.25, 9);
  });

  it('a build refuses a database a newer build migrated (an older build wrote rows the newer schema does not expect)', async () => {
    const config = await prepare(`${MIGRATIONS_TABLE[engine]}; INSERT INTO schema_migrations (id, name, applied_at) VALUES (999, 'from the future', 0);`);
    await expect(openStore(config)).rejects.toThrow(/migrated by a newer build of the gateway \(migration 999; this build knows up to \d+\)/);
  });
});
