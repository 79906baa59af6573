/**
 * Numbered schema migrations shared by both stores (the row ⇄ record mapping of their tables: rows.ts).
 *
 * Each store applies, in `init()`, every migration whose id is not yet in `schema_migrations`, in id order,
 * and records it there. To change the schema, append `{ id: 9, … }`; never edit a migration that has shipped
 * (the one exception, migration 2's `IF NOT EXISTS`, repairs an edit of migration 1 made before: see there).
 * A database that records a migration this build does not know was migrated by a newer build: `newerThanBuild`
 * says so, and the stores refuse to open it.
 *
 * Column conventions (both engines compare the same way):
 * - timestamps are integer epoch milliseconds (INTEGER in SQLite, BIGINT in PostgreSQL); records carry ISO strings;
 * - money is REAL / double precision, in USD;
 * - booleans are 0/1 INTEGER in SQLite, BOOLEAN in PostgreSQL;
 * - `allowed_data_regions` is JSON text.
 *
 * @example
 * for (const m of pendingMigrations(appliedIds)) db.exec(m.sqlite);
 */

export interface Migration {
  id: number;
  name: string;
  sqlite: string;
  postgres: string;
}

/** Created before any migration runs; the record of which migrations are applied. */
export const MIGRATIONS_TABLE = {
  sqlite: `CREATE TABLE IF NOT EXISTS schema_migrations (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
  postgres: `CREATE TABLE IF NOT EXISTS schema_migrations (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`,
};

export const MIGRATIONS: readonly Migration[] = [
  {
    id: 1,
    name: 'settings, accounts, workspaces, api_keys, ledger',
    sqlite: `
      CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE accounts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        balance_usd REAL NOT NULL DEFAULT 0,
        purchased_usd REAL NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL
      );
      CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        account_id TEXT NOT NULL REFERENCES accounts(id),
        created_at INTEGER NOT NULL
      );
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        label TEXT NOT NULL,
        name TEXT NOT NULL,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        account_id TEXT NOT NULL REFERENCES accounts(id),
        creator_user_id TEXT NOT NULL,
        is_management INTEGER NOT NULL DEFAULT 0 CHECK (is_management IN (0, 1)),
        is_provisioning INTEGER NOT NULL DEFAULT 0 CHECK (is_provisioning IN (0, 1)),
        limit_usd REAL,
        limit_reset TEXT CHECK (limit_reset IN ('daily', 'weekly', 'monthly')),
        include_byok_in_limit INTEGER NOT NULL DEFAULT 0 CHECK (include_byok_in_limit IN (0, 1)),
        allowed_data_regions TEXT NOT NULL DEFAULT '[]',
        expires_at INTEGER,
        disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
        revoked_at INTEGER,
        created_at INTEGER NOT NULL
      );
      CREATE INDEX api_keys_workspace ON api_keys (workspace_id);
      CREATE TABLE ledger (
        generation_id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts(id),
        endpoint TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL,
        reasoning_tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        is_byok INTEGER NOT NULL CHECK (is_byok IN (0, 1)),
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
      -- Covering indexes: window sums read only the index, never the table.
      CREATE INDEX ledger_key_time ON ledger (key_id, created_at, is_byok, cost_usd);
    `,
    postgres: `
      CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE accounts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        balance_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
        purchased_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL
      );
      CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        account_id TEXT NOT NULL REFERENCES accounts(id),
        created_at BIGINT NOT NULL
      );
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        label TEXT NOT NULL,
        name TEXT NOT NULL,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        account_id TEXT NOT NULL REFERENCES accounts(id),
        creator_user_id TEXT NOT NULL,
        is_management BOOLEAN NOT NULL DEFAULT FALSE,
        is_provisioning BOOLEAN NOT NULL DEFAULT FALSE,
        limit_usd DOUBLE PRECISION,
        limit_reset TEXT CHECK (limit_reset IN ('daily', 'weekly', 'monthly')),
        include_byok_in_limit BOOLEAN NOT NULL DEFAULT FALSE,
        allowed_data_regions TEXT NOT NULL DEFAULT '[]',
        expires_at BIGINT,
        disabled BOOLEAN NOT NULL DEFAULT FALSE,
        revoked_at BIGINT,
        created_at BIGINT NOT NULL
      );
      CREATE INDEX api_keys_workspace ON api_keys (workspace_id);
      CREATE TABLE ledger (
        generation_id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts(id),
        endpoint TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL,
        reasoning_tokens INTEGER NOT NULL,
        cost_usd DOUBLE PRECISION NOT NULL,
        is_byok BOOLEAN NOT NULL,
        status TEXT NOT NULL,
        created_at BIGINT NOT NULL
      );
      -- INCLUDE makes the window sums index-only scans.
      CREATE INDEX ledger_key_time ON ledger (key_id, created_at) INCLUDE (is_byok, cost_usd);
    `,
  },
  {
    id: 2,
    name: 'ledger user_id and spend indexes (budgets per member and workspace), byok_keys',
    sqlite: `
      ALTER TABLE ledger ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
      -- IF NOT EXISTS: the first builds' migration 1 created this index (a later commit took it out of
      -- migration 1), and their databases could not be upgraded: "index ledger_workspace_time already exists".
      CREATE INDEX IF NOT EXISTS ledger_workspace_time ON ledger (workspace_id, created_at, is_byok, cost_usd);
      CREATE INDEX ledger_member_time ON ledger (workspace_id, user_id, created_at, is_byok, cost_usd);
      CREATE INDEX ledger_account_time ON ledger (account_id, created_at);
      CREATE TABLE byok_keys (
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        provider TEXT NOT NULL,
        secret TEXT NOT NULL,
        label TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, provider)
      );
    `,
    postgres: `
      ALTER TABLE ledger ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
      -- IF NOT EXISTS: see the SQLite statement.
      CREATE INDEX IF NOT EXISTS ledger_workspace_time ON ledger (workspace_id, created_at) INCLUDE (is_byok, cost_usd);
      CREATE INDEX ledger_member_time ON ledger (workspace_id, user_id, created_at) INCLUDE (is_byok, cost_usd);
      CREATE INDEX ledger_account_time ON ledger (account_id, created_at);
      CREATE TABLE byok_keys (
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        provider TEXT NOT NULL,
        secret TEXT NOT NULL,
        label TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (workspace_id, provider)
      );
    `,
  },
  {
    id: 3,
    name: 'presets and their versions',
    sqlite: `
      CREATE TABLE presets (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        slug TEXT NOT NULL,
        name TEXT NOT NULL,
        description TEXT,
        status TEXT NOT NULL DEFAULT 'active',
        status_updated_at INTEGER,
        creator_user_id TEXT NOT NULL,
        designated_version_id TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (workspace_id, slug)
      );
      CREATE TABLE preset_versions (
        id TEXT PRIMARY KEY,
        preset_id TEXT NOT NULL REFERENCES presets(id),
        version INTEGER NOT NULL,
        config TEXT NOT NULL,
        system_prompt TEXT,
        creator_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (preset_id, version)
      );
    `,
    postgres: `
      CREATE TABLE presets (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        slug TEXT NOT NULL,
        name TEXT NOT NULL,
        description TEXT,
        status TEXT NOT NULL DEFAULT 'active',
        status_updated_at BIGINT,
        creator_user_id TEXT NOT NULL,
        designated_version_id TEXT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        UNIQUE (workspace_id, slug)
      );
      CREATE TABLE preset_versions (
        id TEXT PRIMARY KEY,
        preset_id TEXT NOT NULL REFERENCES presets(id),
        version INTEGER NOT NULL,
        config TEXT NOT NULL,
        system_prompt TEXT,
        creator_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        UNIQUE (preset_id, version)
      );
    `,
  },
  {
    id: 4,
    name: 'video_jobs',
    // Row mapping and queries: video-jobs.ts.
    sqlite: `
      CREATE TABLE video_jobs (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        key_id TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts(id),
        user_id TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        upstream_job_id TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'cancelled', 'expired')),
        previous_job_id TEXT REFERENCES video_jobs(id),
        request TEXT NOT NULL,
        generation_id TEXT UNIQUE,
        urls TEXT NOT NULL DEFAULT '[]',
        cost_usd REAL,
        is_byok INTEGER NOT NULL DEFAULT 0 CHECK (is_byok IN (0, 1)),
        error TEXT,
        expires_at INTEGER,
        completed_at INTEGER,
        billed INTEGER NOT NULL DEFAULT 0 CHECK (billed IN (0, 1)),
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
      );
      -- The poller's question (work left) reads only jobs that have some.
      CREATE INDEX video_jobs_work ON video_jobs (updated_at)
        WHERE status IN ('pending', 'in_progress') OR (status IN ('completed', 'expired') AND billed = 0);
      CREATE INDEX video_jobs_expiry ON video_jobs (expires_at) WHERE status = 'completed';
    `,
    postgres: `
      CREATE TABLE video_jobs (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        key_id TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts(id),
        user_id TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        upstream_job_id TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'cancelled', 'expired')),
        previous_job_id TEXT REFERENCES video_jobs(id),
        request TEXT NOT NULL,
        generation_id TEXT UNIQUE,
        urls TEXT NOT NULL DEFAULT '[]',
        cost_usd DOUBLE PRECISION,
        is_byok BOOLEAN NOT NULL DEFAULT FALSE,
        error TEXT,
        expires_at BIGINT,
        completed_at BIGINT,
        billed BOOLEAN NOT NULL DEFAULT FALSE,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
      );
      -- The poller's question (work left) reads only jobs that have some.
      CREATE INDEX video_jobs_work ON video_jobs (updated_at)
        WHERE status IN ('pending', 'in_progress') OR (status IN ('completed', 'expired') AND NOT billed);
      CREATE INDEX video_jobs_expiry ON video_jobs (expires_at) WHERE status = 'completed';
    `,
  },
  {
    id: 5,
    name: 'ledger_pending (journal of requests in flight)',
    // Statements: ledger-pending.ts. One row per request sent upstream, deleted in the transaction that
    // writes its ledger row; rows a dead process left behind become `interrupted` ledger rows.
    sqlite: `
      CREATE TABLE ledger_pending (
        generation_id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        is_byok INTEGER NOT NULL CHECK (is_byok IN (0, 1)),
        owner TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE INDEX ledger_pending_time ON ledger_pending (created_at);
    `,
    postgres: `
      CREATE TABLE ledger_pending (
        generation_id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        is_byok BOOLEAN NOT NULL,
        owner TEXT NOT NULL,
        created_at BIGINT NOT NULL
      );
      CREATE INDEX ledger_pending_time ON ledger_pending (created_at);
    `,
  },
  {
    id: 6,
    name: 'ledger user_id of rows written before migration 2, from their key',
    // Migration 2 added `user_id` with '' for the rows already there, and member budgets sum by it: those
    // rows' spend was invisible to them. A row's member is its key's creator, as the gateway writes it.
    sqlite: `
      UPDATE ledger SET user_id = COALESCE((SELECT creator_user_id FROM api_keys WHERE api_keys.id = ledger.key_id), '')
        WHERE user_id = '';
    `,
    postgres: `
      UPDATE ledger SET user_id = COALESCE((SELECT creator_user_id FROM api_keys WHERE api_keys.id = ledger.key_id), '')
        WHERE user_id = '';
    `,
  },
  {
    id: 7,
    name: 'video_jobs poller index: (updated_at, id) of jobs with work left',
    // Migration 4's video_jobs_work was on (updated_at) alone, and the poller's query also asked for expired
    // outputs (expires_at <= now), which its partial WHERE does not cover: every page scanned the whole table
    // and sorted it (60 000 pending jobs: 29 ms a page, 8.6 s a round). The poller now reads jobs with work
    // left by this index (its WHERE is the query's, word for word, so both engines use it; keyset pages over
    // (updated_at, id) need no sort) and expired outputs separately by video_jobs_expiry. Queries: video-jobs.ts.
    sqlite: `
      DROP INDEX video_jobs_work;
      CREATE INDEX video_jobs_work_page ON video_jobs (updated_at, id)
        WHERE status IN ('pending', 'in_progress') OR (status IN ('completed', 'expired') AND billed = 0);
    `,
    postgres: `
      DROP INDEX video_jobs_work;
      CREATE INDEX video_jobs_work_page ON video_jobs (updated_at, id)
        WHERE status IN ('pending', 'in_progress') OR (status IN ('completed', 'expired') AND billed = FALSE);
    `,
  },
  {
    id: 8,
    name: 'preset_versions system_blocks: a system given as blocks, kept as given',
    // system_prompt is the spec's string (2.2): blocks joined, their cache_control lost, so a /messages request
    // through the preset had no cache breakpoint in its system. JSON text; null for a string system (and the
    // versions written before). Row mapping: rows.ts.
    sqlite: `ALTER TABLE preset_versions ADD COLUMN system_blocks TEXT;`,
    postgres: `ALTER TABLE preset_versions ADD COLUMN system_blocks TEXT;`,
  },
  {
    id: 9,
    name: 'ledger token counts: BIGINT on PostgreSQL',
    // PostgreSQL's INTEGER is 32-bit; SQLite's is 64-bit already. A row over 2 147 483 647 tokens (usage
    // bounded per call, up to 64 server-tool calls of 100 M each) was refused by PostgreSQL alone, and the
    // ledger writer retries a refused batch whole: every row after it waited for good.
    sqlite: `SELECT 1;`,
    postgres: `ALTER TABLE ledger
      ALTER COLUMN prompt_tokens TYPE BIGINT, ALTER COLUMN completion_tokens TYPE BIGINT,
      ALTER COLUMN cached_tokens TYPE BIGINT, ALTER COLUMN cache_write_tokens TYPE BIGINT,
      ALTER COLUMN reasoning_tokens TYPE BIGINT;`,
  },
];

/**
 * The refusal for a database that records migrations this build does not have (a newer build migrated it),
 * or null. Running on it, an older build would write rows without what the newer schema expects of them
 * (the first builds wrote ledger rows no member budget counts).
 */
export function newerThanBuild(applied: Iterable<number>): Error | null {
  const known = new Set(MIGRATIONS.map((m) => m.id));
  const unknown = [...applied].filter((id) => !known.has(id)).sort((a, b) => a - b);
  if (unknown.length === 0) return null;
  const newest = Math.max(...known);
  return new Error(
    `the database was migrated by a newer build of the gateway (migration ${unknown.join(', ')}; this build knows up to ${newest}): run that build or a later one`,
  );
}

/** Migrations not yet applied, in id order. */
export function pendingMigrations(applied: Iterable<number>): Migration[] {
  const done = new Set(applied);
  return [...MIGRATIONS].sort((a, b) => a.id - b.id).filter((m) => !done.has(m.id));
}
