/**
 * The `ledger_pending` table (migration 5) for both engines: the journal of requests sent upstream whose
 * ledger row is not written yet (README "Ledger durability"). A row goes in before the provider is called and
 * is deleted in the transaction that writes the request's ledger row; rows left by a dead process are turned
 * into `interrupted` ledger rows (cost 0) by `finalize`.
 */

import type Database from 'better-sqlite3';
import type { Pool } from 'pg';
import { requestColumns, toMillis } from './rows';
import type { PendingLedgerRow } from './types';

type Row = Record<string, unknown>;

export function rowToPending(r: Row): PendingLedgerRow {
  return {
    ...requestColumns(r),
    isByok: Boolean(r.is_byok),
    owner: String(r.owner),
    createdAt: new Date(Number(r.created_at)).toISOString(),
  };
}

const PENDING_COLUMNS = 'generation_id, key_id, user_id, workspace_id, account_id, endpoint, model, provider, upstream_model, is_byok, owner, created_at';

/** Pending columns → ledger columns of an interrupted row: no tokens, cost 0. */
const AS_INTERRUPTED = `generation_id, key_id, user_id, workspace_id, account_id, endpoint, model, provider, upstream_model,
  0, 0, 0, 0, 0, 0, is_byok, 'interrupted', created_at`;
const LEDGER_TARGET = `ledger (generation_id, key_id, user_id, workspace_id, account_id, endpoint, model, provider, upstream_model,
  prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, is_byok, status, created_at)`;

function values(r: PendingLedgerRow): unknown[] {
  return [r.generationId, r.keyId, r.userId, r.workspaceId, r.accountId, r.endpoint, r.model, r.provider, r.upstreamModel, r.isByok, r.owner, toMillis(r.createdAt)];
}

/** better-sqlite3 statements; `release` is used inside the ledger batch transaction of sqlite.ts. */
export function sqlitePendingLedger(db: Database.Database) {
  const insert = db.prepare(`INSERT INTO ledger_pending (${PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (generation_id) DO NOTHING`);
  const release = db.prepare('DELETE FROM ledger_pending WHERE generation_id = ?');
  // `WHERE` before `ON CONFLICT` is required by SQLite's parser for an upsert over a SELECT.
  const moveStale = db.prepare(
    `INSERT INTO ${LEDGER_TARGET} SELECT ${AS_INTERRUPTED} FROM ledger_pending WHERE created_at < ? AND owner <> ? ON CONFLICT (generation_id) DO NOTHING`,
  );
  const deleteStale = db.prepare('DELETE FROM ledger_pending WHERE created_at < ? AND owner <> ?');
  const list = db.prepare('SELECT * FROM ledger_pending ORDER BY created_at, generation_id');
  const interrupted = db.prepare(
    `INSERT INTO ${LEDGER_TARGET} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 0, 0, 0, ?, 'interrupted', ?) ON CONFLICT (generation_id) DO NOTHING`,
  );
  return {
    release,
    /** Interrupted ledger rows for pending rows kept outside the table (pending-files.ts); an existing row stays. */
    writeInterrupted: db.transaction((rows: PendingLedgerRow[]) => {
      for (const r of rows) {
        const v = values(r);
        interrupted.run([...v.slice(0, 9), Number(r.isByok), v[11]]);
      }
    }),
    insert: db.transaction((rows: PendingLedgerRow[]) => {
      for (const r of rows) insert.run(values(r).map((v) => (typeof v === 'boolean' ? Number(v) : v)));
    }),
    finalize: db.transaction((beforeMs: number, exceptOwner: string): number => {
      moveStale.run(beforeMs, exceptOwner);
      return deleteStale.run(beforeMs, exceptOwner).changes;
    }),
    list: () => (list.all() as Row[]).map(rowToPending),
  };
}

/**
 * Why `synchronous_commit` off for this transaction only: the journal guards against the gateway process dying,
 * and a commit the server has accepted survives that without waiting for the WAL flush (it is lost only if
 * PostgreSQL itself crashes within ~3 × wal_writer_delay). Waiting for the flush cost ~1.5 ms per request here.
 * `set_config(…, true)` is transaction-local, so pooled connections keep their setting.
 */
const PG_INSERT = `INSERT INTO ledger_pending (${PENDING_COLUMNS})
  SELECT u.* FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
    $10::boolean[], $11::text[], $12::bigint[]) AS u, (SELECT set_config('synchronous_commit', 'off', true)) AS local_setting
  ON CONFLICT (generation_id) DO NOTHING`;

/** Why one statement: the DELETE locks the rows it takes, so two processes sweeping at once never both move one. */
const PG_FINALIZE = `
  WITH moved AS (DELETE FROM ledger_pending WHERE created_at < $1 AND owner <> $2 RETURNING *),
  written AS (INSERT INTO ${LEDGER_TARGET} SELECT ${AS_INTERRUPTED} FROM moved ON CONFLICT (generation_id) DO NOTHING RETURNING 1)
  SELECT (SELECT count(*) FROM moved)::int AS n`;

/** The release inside the ledger batch is a CTE of postgres.ts's batch insert; this is the release-only form. */
export const PG_RELEASE = 'DELETE FROM ledger_pending WHERE generation_id = ANY($1::text[])';

export function postgresPendingLedger(pool: Pool) {
  return {
    async insert(rows: PendingLedgerRow[]): Promise<void> {
      if (rows.length === 0) return;
      const columns: unknown[][] = Array.from({ length: 12 }, () => []);
      for (const r of rows) values(r).forEach((v, i) => columns[i].push(v));
      await pool.query(PG_INSERT, columns);
    },
    async finalize(beforeMs: number, exceptOwner: string): Promise<number> {
      const result = await pool.query(PG_FINALIZE, [beforeMs, exceptOwner]);
      return Number(result.rows[0]?.n ?? 0);
    },
    async list(): Promise<PendingLedgerRow[]> {
      const result = await pool.query('SELECT * FROM ledger_pending ORDER BY created_at, generation_id COLLATE "C"');
      return (result.rows as Row[]).map(rowToPending);
    },
  };
}
