import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LedgerJournal } from '../../src/spend/journal';
import { openStore, type LedgerRow, type Store } from '../../src/store';
import type { PendingLedgerRow } from '../../src/store/types';

/** The ledger journal (table ledger_pending, migration 5) on both engines: README "Ledger durability". */

const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `gw_test_${randomBytes(6).toString('hex')}`;
const silent = pino({ level: 'silent' });

interface Ids {
  keyId: string;
  workspaceId: string;
  accountId: string;
}

function pending(ids: Ids, generationId: string, over: Partial<PendingLedgerRow> = {}): PendingLedgerRow {
  return {
    generationId, keyId: ids.keyId, userId: 'u', workspaceId: ids.workspaceId, accountId: ids.accountId, endpoint: 'chat_completions',
    model: 'fake/gpt', provider: 'fake-openai', upstreamModel: 'gpt-upstream', isByok: false, owner: 'dead-process',
    createdAt: new Date(Date.now() - 60_000).toISOString(), ...over,
  };
}

function final(ids: Ids, generationId: string, costUsd: number): LedgerRow {
  return {
    generationId, keyId: ids.keyId, userId: 'u', workspaceId: ids.workspaceId, accountId: ids.accountId, endpoint: 'chat_completions',
    model: 'fake/gpt', provider: 'fake-openai', upstreamModel: 'gpt-upstream', promptTokens: 10, completionTokens: 5, cachedTokens: 0,
    cacheWriteTokens: 0, reasoningTokens: 0, costUsd, isByok: false, status: 'completed', createdAt: new Date().toISOString(),
  };
}

/** `sqlite`: an in-memory database keeps the journal in its table; `sqlite-file`: a database file keeps it in files. */
describe.each(['sqlite', 'sqlite-file', 'postgres'] as const)('ledger journal on %s', (driver) => {
  let store: Store;
  let ids: Ids;
  const dir = mkdtempSync(path.join(tmpdir(), 'gw-journal-'));

  beforeAll(async () => {
    store = await openStore(
      driver === 'sqlite'
        ? { driver, path: ':memory:' }
        : driver === 'sqlite-file'
          ? { driver: 'sqlite', path: path.join(dir, 'gateway.db') }
          : ({ driver, url: PG_URL, schema, pool_max: 3 } as never),
    );
    const account = await store.ensureAccount('journal');
    await store.addCredits(account.id, 10);
    const workspace = await store.ensureWorkspace('journal', account.id);
    ids = { keyId: 'key-1', workspaceId: workspace.id, accountId: account.id };
  });

  afterAll(async () => {
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
    if (driver === 'postgres') {
      const pg = new Client({ connectionString: PG_URL });
      await pg.connect();
      await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pg.end();
    }
  });

  it('a ledger row written with its release deletes the pending row in the same batch; a known id is ignored', async () => {
    await store.insertPendingLedger([pending(ids, 'gen-a'), pending(ids, 'gen-b')]);
    await store.insertPendingLedger([pending(ids, 'gen-a')]);
    expect((await store.listPendingLedger()).map((p) => p.generationId)).toEqual(['gen-a', 'gen-b']);
    expect(await store.insertLedgerBatch([final(ids, 'gen-a', 0.5)], ['gen-a'])).toBe(1);
    expect(await store.insertLedgerBatch([], ['gen-b'])).toBe(0);
    expect(await store.listPendingLedger()).toEqual([]);
    expect((await store.getLedger('gen-a'))?.status).toBe('completed');
    expect((await store.findAccount(ids.accountId))?.balanceUsd).toBeCloseTo(9.5, 10);
  });

  it('finalises only other owners\' rows older than the cut-off, as interrupted rows at cost 0, and never twice', async () => {
    const now = Date.now();
    await store.insertPendingLedger([
      pending(ids, 'gen-old'),
      pending(ids, 'gen-young', { createdAt: new Date(now).toISOString() }),
      pending(ids, 'gen-mine', { owner: 'me' }),
      pending(ids, 'gen-done'),
    ]);
    await store.insertLedgerBatch([final(ids, 'gen-done', 0.25)]); // written, but its release was lost
    expect(await store.finalizePendingLedger({ beforeMs: now - 1000, exceptOwner: 'me' })).toBe(2);
    expect(await store.finalizePendingLedger({ beforeMs: now - 1000, exceptOwner: 'me' })).toBe(0);
    const old = await store.getLedger('gen-old');
    expect(old).toMatchObject({ status: 'interrupted', costUsd: 0, promptTokens: 0, completionTokens: 0, model: 'fake/gpt', keyId: 'key-1' });
    expect((await store.getLedger('gen-done'))?.status).toBe('completed');
    expect((await store.listPendingLedger()).map((p) => p.generationId).sort()).toEqual(['gen-mine', 'gen-young']);
    expect((await store.findAccount(ids.accountId))?.balanceUsd).toBeCloseTo(9.25, 10);
    await store.insertLedgerBatch([], ['gen-mine', 'gen-young']);
  });

  it('the real row replaces an interrupted one and is debited once; a second copy changes nothing', async () => {
    const before = (await store.findAccount(ids.accountId))!.balanceUsd;
    expect(await store.insertLedgerBatch([final(ids, 'gen-old', 0.125), final(ids, 'gen-old', 0.125)])).toBe(1);
    expect(await store.insertLedgerBatch([final(ids, 'gen-old', 0.125)])).toBe(0);
    expect(await store.insertLedger(final(ids, 'gen-old', 0.125))).toBe(false);
    expect((await store.getLedger('gen-old'))).toMatchObject({ status: 'completed', costUsd: 0.125 });
    expect((await store.findAccount(ids.accountId))!.balanceUsd).toBeCloseTo(before - 0.125, 10);
  });

  it('LedgerJournal groups concurrent records into few transactions and its sweep skips its own rows', async () => {
    let writes = 0;
    const counting = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === 'insertPendingLedger') return (rows: PendingLedgerRow[]) => ((writes += 1), target.insertPendingLedger(rows));
        return Reflect.get(target, prop, receiver);
      },
    });
    const journal = new LedgerJournal({ store: counting, logger: silent, holdTtlMs: () => 1000 });
    const rows = Array.from({ length: 50 }, (_, i) => pending(ids, `gen-j${i}`, { owner: journal.owner }));
    await Promise.all(rows.map((r) => journal.record(r)));
    // Journal files: each row written by record() itself, no transaction.
    if (driver === 'sqlite-file') expect(writes).toBe(0);
    else expect(writes).toBeLessThanOrEqual(2);
    expect((await store.listPendingLedger()).length).toBe(50);
    expect(await journal.sweep()).toBe(0); // its own rows, however old
    await store.insertLedgerBatch([], rows.map((r) => r.generationId));
    await journal.close();
  });
});
