/**
 * What the ledger journal (README "Ledger durability") costs a request: the pending-row write each request
 * awaits before its upstream call, alone (latency) and with many requests at once (group commit), on a
 * SQLite file (WAL, synchronous=NORMAL) and on the local PostgreSQL; and the release of the pending row in the
 * ledger batch, against the same batch without it.
 *
 *   npm run bench:journal            (TEST_DATABASE_URL overrides postgres://postgres@127.0.0.1:5432/test)
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import pino from 'pino';
import { LedgerJournal } from '../src/spend/journal';
import { openStore, type LedgerRow, type Store } from '../src/store';
import type { PendingLedgerRow } from '../src/store/types';

const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const silent = pino({ level: 'silent' });
let seq = 0;

function pending(accountId: string, workspaceId: string, owner: string): PendingLedgerRow {
  return {
    generationId: `gen-bench-${++seq}-${randomBytes(4).toString('hex')}`, keyId: 'k', userId: 'u', workspaceId, accountId,
    endpoint: 'chat_completions', model: 'm', provider: 'p', upstreamModel: 'u', isByok: false, owner, createdAt: new Date().toISOString(),
  };
}

function row(p: PendingLedgerRow): LedgerRow {
  return {
    generationId: p.generationId, keyId: 'k', userId: 'u', workspaceId: p.workspaceId, accountId: p.accountId, endpoint: 'chat_completions',
    model: 'm', provider: 'p', upstreamModel: 'u', promptTokens: 10, completionTokens: 5, cachedTokens: 0, cacheWriteTokens: 0,
    reasoningTokens: 0, costUsd: 1e-6, isByok: false, status: 'completed', createdAt: new Date().toISOString(),
  };
}

async function measure(name: string, store: Store): Promise<void> {
  const account = await store.ensureAccount('bench');
  const workspace = await store.ensureWorkspace('bench', account.id);
  const journal = new LedgerJournal({ store, logger: silent, holdTtlMs: () => 1_800_000 });
  const make = () => pending(account.id, workspace.id, journal.owner);
  for (let i = 0; i < 200; i++) await journal.record(make()); // warm-up

  const N = 2000;
  const sequential = Array.from({ length: N }, make); // made before the clock starts: only the journal is timed
  let t = performance.now();
  for (const r of sequential) await journal.record(r);
  const sequentialUs = ((performance.now() - t) * 1000) / N;

  const rows: PendingLedgerRow[] = [];
  const batches = Array.from({ length: N / 100 }, () => Array.from({ length: 100 }, make));
  t = performance.now();
  for (const batch of batches) {
    rows.push(...batch);
    await Promise.all(batch.map((r) => journal.record(r)));
  }
  const concurrentUs = ((performance.now() - t) * 1000) / N;

  // The ledger batch (100 rows) with and without deleting their pending rows in the same transaction.
  const half = rows.length / 2;
  t = performance.now();
  for (let i = 0; i < half; i += 100) await store.insertLedgerBatch(rows.slice(i, i + 100).map(row));
  const plainUs = ((performance.now() - t) * 1000) / half;
  t = performance.now();
  for (let i = half; i < rows.length; i += 100) {
    const slice = rows.slice(i, i + 100);
    await store.insertLedgerBatch(slice.map(row), slice.map((r) => r.generationId));
  }
  const releaseUs = ((performance.now() - t) * 1000) / half;
  await journal.close();
  console.log(
    `${name.padEnd(8)} record, one at a time: ${sequentialUs.toFixed(1)} µs/request | 100 at once (group commit): ${concurrentUs.toFixed(1)} µs/request | ` +
      `ledger batch row: ${plainUs.toFixed(1)} µs, with release: ${releaseUs.toFixed(1)} µs`,
  );
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gw-journal-bench-'));
  const sqlite = await openStore({ driver: 'sqlite', path: path.join(dir, 'bench.db') });
  await measure('sqlite', sqlite); // a database file: the journal is in files next to it
  await sqlite.close();
  rmSync(dir, { recursive: true, force: true });

  const schema = `gw_bench_${randomBytes(4).toString('hex')}`;
  const pg = await openStore({ driver: 'postgres', url: PG_URL, schema, pool_max: 10 } as never);
  try {
    await measure('postgres', pg);
  } finally {
    await pg.close();
    const c = new Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  }
}

void main();
