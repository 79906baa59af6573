import { randomUUID } from 'node:crypto';
import { Pool, type PoolClient, type QueryConfig } from 'pg';
import { MIGRATIONS_TABLE, newerThanBuild, pendingMigrations } from './migrations';
import {
  rowToAccount,
  rowToByok,
  rowToKey,
  rowToLedger,
  rowToUsage,
  rowToWorkspace,
  spendSelect,
  toMillis,
  usageParams,
  usageSelect,
  wholeTokens,
} from './rows';
import { PG_RELEASE, postgresPendingLedger } from './ledger-pending';
import { findPresetPg, listPresetsPg, listPresetVersionsPg, savePresetVersionPg, type Query } from './presets-postgres';
import { postgresVideoJobs } from './video-jobs';
import type {
  Account,
  ByokKeyRecord,
  KeyRecord,
  LedgerRow,
  NewKey,
  PendingLedgerRow,
  NewPresetVersion,
  NewVideoJob,
  PresetVersionRecord,
  PresetWithVersion,
  SpendScope,
  Store,
  UsageTotals,
  VideoJob,
  VideoJobCursor,
  VideoJobPatch,
  VideoJobStatus,
  Workspace,
} from './types';

type Row = Record<string, unknown>;

export interface PostgresStoreOptions {
  /** `postgres://user@host:5432/db` */
  url: string;
  /** Schema holding the tables; created at init when missing. Default: the server's search_path (`public`). */
  schema?: string;
  /** Pool size. Default 10. */
  max?: number;
  /** Errors of idle pooled connections (server restart, network). The pool discards the client either way. */
  onIdleError?: (err: Error) => void;
  /** A query with no answer after this long fails (`Query read timeout`) and its connection is dropped. Default 30 s. */
  queryTimeoutMs?: number;
}

const QUERY_TIMEOUT_MS = 30_000;
/** The migrations' statements: a rewrite of a large table, or the wait for another process's, may take long. */
const NO_TIMEOUT_MS = 2_147_483_647;

/** A query exempt from the pool's `query_timeout` (pg reads a per-query one; its types do not declare it). */
const untimed = (text: string, values?: unknown[]): QueryConfig => ({ text, values, query_timeout: NO_TIMEOUT_MS }) as QueryConfig;

const SCHEMA_NAME = /^[a-z_][a-z0-9_]*$/;

const LEDGER_COLUMNS = `generation_id, key_id, workspace_id, account_id, endpoint, model, provider, upstream_model,
  prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, is_byok, status,
  created_at, user_id`;

/** One ledger row's values in LEDGER_COLUMNS order. */
function ledgerValues(row: LedgerRow): unknown[] {
  if (!Number.isFinite(row.costUsd)) throw new Error(`ledger cost must be a finite number, got ${row.costUsd}`);
  return [
    row.generationId, row.keyId, row.workspaceId, row.accountId, row.endpoint, row.model, row.provider, row.upstreamModel,
    wholeTokens(row.promptTokens), wholeTokens(row.completionTokens), wholeTokens(row.cachedTokens),
    wholeTokens(row.cacheWriteTokens), wholeTokens(row.reasoningTokens), row.costUsd,
    row.isByok, row.status, toMillis(row.createdAt), row.userId,
  ];
}

/** A real row replaces an `interrupted` one (cost 0, written for a process thought dead), which is then debited in full. */
const LEDGER_UPSERT = `ON CONFLICT (generation_id) DO UPDATE SET (${LEDGER_COLUMNS}) =
  ROW(${LEDGER_COLUMNS.split(',').map((c) => `EXCLUDED.${c.trim()}`).join(', ')})
  WHERE ledger.status = 'interrupted'`;

/**
 * Why one statement: a data-modifying CTE runs as a single implicit transaction, so the ledger row and the
 * balance change commit together in one round trip. The UPDATE only sees a row when the INSERT happened, so a
 * duplicate generation id changes nothing. `balance_usd - cost` is computed under the row lock: concurrent
 * inserts for one account never lose an update.
 */
const INSERT_LEDGER = `
  WITH inserted AS (
    INSERT INTO ledger (${LEDGER_COLUMNS})
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
    ${LEDGER_UPSERT}
    RETURNING account_id, CASE WHEN is_byok THEN 0 ELSE cost_usd END AS cost_usd
  )
  UPDATE accounts SET balance_usd = accounts.balance_usd - inserted.cost_usd
  FROM inserted WHERE accounts.id = inserted.account_id
  RETURNING accounts.id`;

/** The batch form: one statement over arrays (unnest), balances debited once per account. */
const INSERT_LEDGER_BATCH = `
  WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
      $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::double precision[], $15::boolean[], $16::text[], $17::bigint[], $18::text[])
  ),
  inserted AS (
    INSERT INTO ledger (${LEDGER_COLUMNS}) SELECT * FROM input
    ${LEDGER_UPSERT}
    RETURNING account_id, CASE WHEN is_byok THEN 0 ELSE cost_usd END AS cost_usd
  ),
  released AS (DELETE FROM ledger_pending WHERE generation_id = ANY($19::text[]) RETURNING 1),
  debits AS (SELECT account_id, sum(cost_usd) AS cost FROM inserted GROUP BY account_id),
  updated AS (
    UPDATE accounts SET balance_usd = accounts.balance_usd - debits.cost FROM debits
    WHERE accounts.id = debits.account_id RETURNING accounts.id
  )
  SELECT (SELECT count(*) FROM inserted)::int AS n`;

const INSERT_KEY = `
  INSERT INTO api_keys (id, hash, label, name, workspace_id, account_id, creator_user_id, is_management,
    is_provisioning, limit_usd, limit_reset, include_byok_in_limit, allowed_data_regions, expires_at, created_at)
  SELECT $1::text, $2::text, $3::text, $4::text, w.id, w.account_id, $6::text, $7::boolean, $8::boolean,
    $9::double precision, $10::text, $11::boolean, $12::text, $13::bigint, $14::bigint
  FROM workspaces w WHERE w.id = $5::text
  RETURNING *`;

/** INSERT_KEY's parameters for a new key. */
function keyParams(input: NewKey): unknown[] {
  return [
    randomUUID(),
    input.hash,
    input.label,
    input.name,
    input.workspaceId,
    input.creatorUserId,
    input.isManagement ?? false,
    input.isProvisioning ?? false,
    input.limitUsd ?? null,
    input.limitReset ?? null,
    input.includeByokInLimit ?? false,
    JSON.stringify(input.allowedDataRegions ?? []),
    input.expiresAt ? toMillis(input.expiresAt) : null,
    Date.now(),
  ];
}

const USAGE = usageSelect('is_byok', 'NOT is_byok');

/**
 * The durable store on PostgreSQL, for several gateway processes sharing one database.
 *
 * @example
 * const store = new PostgresStore({ url: process.env.DATABASE_URL!, schema: 'gateway' });
 * await store.init(); // creates the schema and applies pending migrations under an advisory lock
 */
export class PostgresStore implements Store {
  readonly driver = 'postgres' as const;
  private readonly pool: Pool;
  private readonly schema?: string;
  private ended = false;

  constructor(options: PostgresStoreOptions) {
    if (options.schema !== undefined && !SCHEMA_NAME.test(options.schema)) {
      throw new Error(`invalid postgres schema name ${JSON.stringify(options.schema)}: use [a-z_][a-z0-9_]*`);
    }
    this.schema = options.schema;
    this.pool = new Pool({
      connectionString: options.url,
      max: options.max ?? 10,
      // An unreachable server fails a request within seconds (a typed 503) instead of leaving it waiting.
      connectionTimeoutMillis: 5_000,
      // A server that black-holes packets once connected (a failover, a dropped route) would leave a query waiting
      // for TCP to give up, ~15 minutes: every request needing the store with it. It fails instead (a typed 503).
      query_timeout: options.queryTimeoutMs ?? QUERY_TIMEOUT_MS,
      // Set per connection at startup, so every pooled client sees only this schema.
      ...(options.schema ? { options: `-c search_path=${options.schema}` } : {}),
    });
    // Without a listener an idle client's error (e.g. the server restarting) would crash the process.
    const onIdleError =
      options.onIdleError ?? ((err: Error) => process.emitWarning(`postgres idle client error: ${err.message}`));
    this.pool.on('error', onIdleError);
  }

  async init(): Promise<void> {
    await this.transaction(async (c) => {
      // Transaction-scoped: released at COMMIT/ROLLBACK, even if this process dies mid-migration.
      await c.query(untimed('SELECT pg_advisory_xact_lock(hashtext($1))', [`model-gateway:migrate:${this.schema ?? ''}`]));
      if (this.schema) await c.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
      await c.query(MIGRATIONS_TABLE.postgres);
      const applied = await c.query('SELECT id FROM schema_migrations');
      const newer = newerThanBuild(applied.rows.map((r: Row) => Number(r.id)));
      if (newer) throw newer;
      for (const m of pendingMigrations(applied.rows.map((r: Row) => Number(r.id)))) {
        await c.query(untimed(m.postgres));
        await c.query('INSERT INTO schema_migrations (id, name, applied_at) VALUES ($1, $2, $3)', [
          m.id,
          m.name,
          Date.now(),
        ]);
      }
    });
  }

  async close(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    await this.pool.end();
  }

  private async transaction<T>(fn: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      // A failed ROLLBACK means the connection is unusable: hand it back as broken so the pool drops it. After a
      // read timeout it is unusable already (a ROLLBACK would wait out the timeout again behind the lost query).
      if ((err as Error).message === 'Query read timeout') broken = err as Error;
      else await client.query('ROLLBACK').catch((e: Error) => (broken = e));
      throw err;
    } finally {
      client.release(broken);
    }
  }

  private async one(sql: string, params: unknown[]): Promise<Row | undefined> {
    const result = await this.pool.query(sql, params);
    return result.rows[0] as Row | undefined;
  }

  async settingOrInit(name: string, value: string): Promise<string> {
    // Two statements on purpose: the SELECT takes a fresh snapshot, so it sees a concurrent first writer that
    // committed while our INSERT waited on it (a single CTE statement would not).
    const inserted = await this.one(
      'INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING value',
      [name, value],
    );
    if (inserted) return String(inserted.value);
    const row = await this.one('SELECT value FROM settings WHERE name = $1', [name]);
    return String(row!.value);
  }

  async ensureAccount(name: string): Promise<Account> {
    const row =
      (await this.one(
        'INSERT INTO accounts (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING RETURNING *',
        [randomUUID(), name, Date.now()],
      )) ?? (await this.one('SELECT * FROM accounts WHERE name = $1', [name]));
    return rowToAccount(row!);
  }

  async findAccount(idOrName: string): Promise<Account | null> {
    const row = await this.one(
      'SELECT * FROM accounts WHERE id = $1 OR name = $1 ORDER BY (id = $1) DESC LIMIT 1',
      [idOrName],
    );
    return row ? rowToAccount(row) : null;
  }

  async addCredits(accountId: string, usd: number): Promise<Account> {
    if (!Number.isFinite(usd)) throw new Error(`credits must be a finite number, got ${usd}`);
    const row = await this.one(
      `UPDATE accounts SET balance_usd = balance_usd + $1, purchased_usd = purchased_usd + $1
       WHERE id = $2 RETURNING *`,
      [usd, accountId],
    );
    if (!row) throw new Error(`unknown account: ${accountId}`);
    return rowToAccount(row);
  }

  async ensureWorkspace(name: string, accountId: string): Promise<Workspace> {
    const row =
      (await this.one(
        `INSERT INTO workspaces (id, name, account_id, created_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (name) DO NOTHING RETURNING *`,
        [randomUUID(), name, accountId, Date.now()],
      )) ?? (await this.one('SELECT * FROM workspaces WHERE name = $1', [name]));
    return rowToWorkspace(row!);
  }

  async findWorkspace(idOrName: string): Promise<Workspace | null> {
    const row = await this.one(
      'SELECT * FROM workspaces WHERE id = $1 OR name = $1 ORDER BY (id = $1) DESC LIMIT 1',
      [idOrName],
    );
    return row ? rowToWorkspace(row) : null;
  }

  async createKey(input: NewKey): Promise<KeyRecord> {
    const row = await this.one(INSERT_KEY, keyParams(input));
    if (!row) throw new Error(`unknown workspace: ${input.workspaceId}`);
    return rowToKey(row);
  }

  async createFirstKey(input: NewKey): Promise<KeyRecord | null> {
    return this.transaction(async (c) => {
      // Held to the transaction's end: a second process starting on the same schema waits here, and its count
      // (a fresh snapshot after the wait) sees the key this one inserted.
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`model-gateway:first-key:${this.schema ?? ''}`]);
      const count = await c.query('SELECT COUNT(*) AS n FROM api_keys');
      if (Number(count.rows[0].n) > 0) return null;
      const row = (await c.query(INSERT_KEY, keyParams(input))).rows[0] as Row | undefined;
      if (!row) throw new Error(`unknown workspace: ${input.workspaceId}`);
      return rowToKey(row);
    });
  }

  async findKeyByHash(hash: string): Promise<KeyRecord | null> {
    const row = await this.one('SELECT * FROM api_keys WHERE hash = $1', [hash]);
    return row ? rowToKey(row) : null;
  }

  async getKey(id: string): Promise<KeyRecord | null> {
    const row = await this.one('SELECT * FROM api_keys WHERE id = $1', [id]);
    return row ? rowToKey(row) : null;
  }

  async listKeys(): Promise<KeyRecord[]> {
    // COLLATE "C" (byte order), as SQLite orders text, whatever the database's collation: presets-sqlite.ts.
    const result = await this.pool.query('SELECT * FROM api_keys ORDER BY created_at, id COLLATE "C"');
    return result.rows.map(rowToKey);
  }

  async revokeKey(id: string): Promise<boolean> {
    const result = await this.pool.query(
      'UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL',
      [Date.now(), id],
    );
    return result.rowCount === 1;
  }

  async countKeys(): Promise<number> {
    const row = await this.one('SELECT COUNT(*) AS n FROM api_keys', []);
    return Number(row!.n);
  }

  async insertLedger(row: LedgerRow): Promise<boolean> {
    const result = await this.pool.query(INSERT_LEDGER, ledgerValues(row));
    return result.rowCount === 1;
  }

  async insertLedgerBatch(rows: LedgerRow[], release: string[] = []): Promise<number> {
    if (rows.length === 0) {
      if (release.length > 0) await this.pool.query(PG_RELEASE, [release]);
      return 0;
    }
    // An upsert may not touch one row twice in a statement: a generation id appears once per batch.
    const seen = new Set<string>();
    const unique = rows.filter((r) => !seen.has(r.generationId) && seen.add(r.generationId));
    const columns: unknown[][] = Array.from({ length: 18 }, () => []);
    for (const row of unique) ledgerValues(row).forEach((v, i) => columns[i].push(v));
    const row = await this.one(INSERT_LEDGER_BATCH, [...columns, release]);
    return Number(row?.n ?? 0);
  }

  private get pending(): ReturnType<typeof postgresPendingLedger> {
    return (this.pendingStatements ??= postgresPendingLedger(this.pool));
  }

  private pendingStatements?: ReturnType<typeof postgresPendingLedger>;

  insertPendingLedger(rows: PendingLedgerRow[]): Promise<void> {
    return this.pending.insert(rows);
  }

  finalizePendingLedger(input: { beforeMs: number; exceptOwner: string }): Promise<number> {
    return this.pending.finalize(input.beforeMs, input.exceptOwner);
  }

  listPendingLedger(): Promise<PendingLedgerRow[]> {
    return this.pending.list();
  }

  async getLedger(generationId: string): Promise<LedgerRow | null> {
    const row = await this.one('SELECT * FROM ledger WHERE generation_id = $1', [generationId]);
    return row ? rowToLedger(row) : null;
  }

  async usageForKey(keyId: string, now: Date = new Date()): Promise<UsageTotals> {
    return rowToUsage((await this.one(USAGE, usageParams(keyId, now)))!);
  }

  async spendTotals(scope: SpendScope, sinceMs: number): Promise<{ paid: number; byok: number }> {
    const { sql, params } = spendSelect(scope, 'is_byok', 'NOT is_byok');
    const row = (await this.one(sql, [...params, sinceMs]))!;
    return { paid: Number(row.paid), byok: Number(row.byok) };
  }

  async countFreeModelRequests(accountId: string, sinceMs: number): Promise<number> {
    const row = await this.one(
      "SELECT COUNT(*) AS n FROM ledger WHERE account_id = $1 AND created_at >= $2 AND NOT is_byok AND right(model, 5) = ':free'",
      [accountId, sinceMs],
    );
    return Number(row?.n ?? 0);
  }

  async savePresetVersion(input: NewPresetVersion): Promise<PresetWithVersion> {
    return savePresetVersionPg((fn) => this.transaction(fn), input);
  }

  async findPreset(workspaceId: string, slug: string): Promise<PresetWithVersion | null> {
    return findPresetPg(this.query, workspaceId, slug);
  }

  async listPresets(workspaceId: string): Promise<PresetWithVersion[]> {
    return listPresetsPg(this.query, workspaceId);
  }

  async listPresetVersions(presetId: string): Promise<PresetVersionRecord[]> {
    return listPresetVersionsPg(this.query, presetId);
  }

  private readonly query: Query = (sql, params) => this.pool.query(sql, params);

  async createVideoJob(job: NewVideoJob): Promise<VideoJob> {
    return this.videoJobs.create(job);
  }

  async getVideoJob(id: string, workspaceId: string): Promise<VideoJob | null> {
    return this.videoJobs.get(id, workspaceId);
  }

  async updateVideoJob(id: string, expected: VideoJobStatus, patch: VideoJobPatch): Promise<VideoJob | null> {
    return this.videoJobs.update(id, expected, patch);
  }

  async markVideoJobBilled(id: string): Promise<void> {
    await this.videoJobs.markBilled(id);
  }

  async listUnfinishedVideoJobs(limit: number, after?: VideoJobCursor): Promise<VideoJob[]> {
    return this.videoJobs.unfinished(limit, after);
  }

  async listExpiredVideoJobs(nowMs: number, limit: number): Promise<VideoJob[]> {
    return this.videoJobs.expired(nowMs, limit);
  }

  private readonly videoJobs = postgresVideoJobs((sql, params) => this.pool.query(sql, params));

  async putByokKey(input: Omit<ByokKeyRecord, 'createdAt'>): Promise<void> {
    await this.pool.query(
      `INSERT INTO byok_keys (workspace_id, provider, secret, label, created_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (workspace_id, provider) DO UPDATE SET secret = excluded.secret, label = excluded.label, created_at = excluded.created_at`,
      [input.workspaceId, input.provider, input.secret, input.label, Date.now()],
    );
  }

  async listByokKeys(workspaceId: string): Promise<ByokKeyRecord[]> {
    const result = await this.pool.query('SELECT * FROM byok_keys WHERE workspace_id = $1 ORDER BY provider COLLATE "C"', [workspaceId]);
    return result.rows.map(rowToByok);
  }

  async deleteByokKey(workspaceId: string, provider: string): Promise<boolean> {
    const result = await this.pool.query('DELETE FROM byok_keys WHERE workspace_id = $1 AND provider = $2', [workspaceId, provider]);
    return result.rowCount === 1;
  }

}
