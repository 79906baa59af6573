import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
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
import { sqlitePendingLedger } from './ledger-pending';
import { PendingFiles } from './pending-files';
import { sqlitePresets } from './presets-sqlite';
import { sqliteVideoJobs } from './video-jobs';
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

/** `:free` variants: the model id's last 5 characters (works the same in both engines). */
const FREE_COUNT = "SELECT COUNT(*) FROM ledger WHERE account_id = ? AND created_at >= ? AND is_byok = 0 AND substr(model, length(model) - 4) = ':free'";

export interface SqliteStoreOptions {
  /** Database file; its folder is created when missing. `:memory:` for a throwaway store. */
  path: string;
  /** SQLite's page cache (`storage.cache_mib`, default 2). */
  cacheMib?: number;
}

const DEFAULT_CACHE_MIB = 2;

/** Every statement, prepared once after the migrations have created the tables. */
/** The ledger's columns after `generation_id`, in the order `ledgerParams` gives their values. */
const LEDGER_VALUE_COLUMNS = [
  'key_id', 'user_id', 'workspace_id', 'account_id', 'endpoint', 'model', 'provider', 'upstream_model', 'prompt_tokens',
  'completion_tokens', 'cached_tokens', 'cache_write_tokens', 'reasoning_tokens', 'cost_usd', 'is_byok', 'status', 'created_at',
];

function prepareAll(db: Database.Database) {
  const s = {
    settingInsert: db.prepare('INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING'),
    settingGet: db.prepare('SELECT value FROM settings WHERE name = ?').pluck(),

    accountInsert: db.prepare(
      'INSERT INTO accounts (id, name, created_at) VALUES (@id, @name, @created_at) ON CONFLICT (name) DO NOTHING',
    ),
    accountByName: db.prepare('SELECT * FROM accounts WHERE name = ?'),
    // An id match wins over a name match when one account's name is another's id.
    accountFind: db.prepare('SELECT * FROM accounts WHERE id = @v OR name = @v ORDER BY id = @v DESC LIMIT 1'),
    accountCredit: db.prepare(
      `UPDATE accounts SET balance_usd = balance_usd + @usd, purchased_usd = purchased_usd + @usd
       WHERE id = @id RETURNING *`,
    ),
    accountDebit: db.prepare('UPDATE accounts SET balance_usd = balance_usd - @cost_usd WHERE id = @account_id'),

    workspaceInsert: db.prepare(
      `INSERT INTO workspaces (id, name, account_id, created_at) VALUES (@id, @name, @account_id, @created_at)
       ON CONFLICT (name) DO NOTHING`,
    ),
    workspaceByName: db.prepare('SELECT * FROM workspaces WHERE name = ?'),
    workspaceById: db.prepare('SELECT * FROM workspaces WHERE id = ?'),
    workspaceFind: db.prepare('SELECT * FROM workspaces WHERE id = @v OR name = @v ORDER BY id = @v DESC LIMIT 1'),

    keyInsert: db.prepare(
      `INSERT INTO api_keys (id, hash, label, name, workspace_id, account_id, creator_user_id, is_management,
         is_provisioning, limit_usd, limit_reset, include_byok_in_limit, allowed_data_regions, expires_at, created_at)
       VALUES (@id, @hash, @label, @name, @workspace_id, @account_id, @creator_user_id, @is_management,
         @is_provisioning, @limit_usd, @limit_reset, @include_byok_in_limit, @allowed_data_regions, @expires_at,
         @created_at)
       RETURNING *`,
    ),
    keyByHash: db.prepare('SELECT * FROM api_keys WHERE hash = ?'),
    keyById: db.prepare('SELECT * FROM api_keys WHERE id = ?'),
    keyList: db.prepare('SELECT * FROM api_keys ORDER BY created_at, id'),
    keyRevoke: db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
    keyCount: db.prepare('SELECT COUNT(*) FROM api_keys').pluck(),

    // A new row, and nothing when its generation id is taken. Not an upsert: with `ON CONFLICT … DO UPDATE`
    // and the foreign key to `accounts`, SQLite opened a statement journal for every insert, and in a batch
    // that journal outgrew its 64 KiB in memory and went to a temporary file (~2 page writes a row; a batch
    // of 71 real rows cost ~30 µs a row against ~20 µs now). A taken id goes to `ledgerReplaceInterrupted`.
    ledgerInsert: db.prepare(
      `INSERT INTO ledger (generation_id, ${LEDGER_VALUE_COLUMNS.join(', ')})
       VALUES (?, ${LEDGER_VALUE_COLUMNS.map(() => '?').join(', ')})
       ON CONFLICT (generation_id) DO NOTHING`,
    ),
    // The real row over the `interrupted` one a sweep wrote while the request was in flight; any other row
    // with that id stays. Its parameters are the insert's with the generation id moved to the end.
    ledgerReplaceInterrupted: db.prepare(
      `UPDATE ledger SET ${LEDGER_VALUE_COLUMNS.map((c) => `${c} = ?`).join(', ')}
       WHERE generation_id = ? AND status = 'interrupted'`,
    ),
    ledgerGet: db.prepare('SELECT * FROM ledger WHERE generation_id = ?'),
    usage: db.prepare(usageSelect('is_byok = 1', 'is_byok = 0')),
    freeCount: db.prepare(FREE_COUNT).pluck(),
    spendKey: db.prepare(spendSelect({ kind: 'key', keyId: '' }, 'is_byok = 1', 'is_byok = 0').sql),
    spendMember: db.prepare(spendSelect({ kind: 'member', workspaceId: '', userId: '' }, 'is_byok = 1', 'is_byok = 0').sql),
    spendWorkspace: db.prepare(spendSelect({ kind: 'workspace', workspaceId: '' }, 'is_byok = 1', 'is_byok = 0').sql),
    byokPut: db.prepare(
      `INSERT INTO byok_keys (workspace_id, provider, secret, label, created_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (workspace_id, provider) DO UPDATE SET secret = excluded.secret, label = excluded.label, created_at = excluded.created_at`,
    ),
    byokList: db.prepare('SELECT * FROM byok_keys WHERE workspace_id = ? ORDER BY provider'),
    byokDelete: db.prepare('DELETE FROM byok_keys WHERE workspace_id = ? AND provider = ?'),
  };
  /** The ledger row and the balance change commit together, or neither does. */
  const written = (row: LedgerRow): boolean => {
    const params = ledgerParams(row);
    if (s.ledgerInsert.run(params).changes === 1) return true;
    params.push(params.shift()!);
    return s.ledgerReplaceInterrupted.run(params).changes === 1;
  };
  const insertLedger = db.transaction((row: LedgerRow): boolean => {
    if (!written(row)) return false;
    if (!row.isByok) s.accountDebit.run({ account_id: row.accountId, cost_usd: row.costUsd });
    return true;
  });
  const pending = sqlitePendingLedger(db);
  // One debit per account per batch instead of one per row: half the statements on the hot write path.
  // An interrupted row replaced by the real one cost 0, so the real cost is debited in full.
  const insertLedgerBatch = db.transaction((rows: LedgerRow[], release: string[]): number => {
    for (const id of release) pending.release.run(id); // an empty list when the journal is in files
    const debits = new Map<string, number>();
    let inserted = 0;
    for (const row of rows) {
      if (!written(row)) continue;
      inserted++;
      if (row.isByok) continue; // paid with the workspace's own provider key, not with credits
      debits.set(row.accountId, (debits.get(row.accountId) ?? 0) + row.costUsd);
    }
    for (const [account_id, cost_usd] of debits) s.accountDebit.run({ account_id, cost_usd });
    return inserted;
  });
  return { ...s, insertLedger, insertLedgerBatch, pending };
}

type Statements = ReturnType<typeof prepareAll>;

/**
 * The default durable store: one SQLite file through better-sqlite3.
 * WAL mode and a 5 s busy timeout let the CLI and a running server share the file.
 *
 * @example
 * const store = new SqliteStore({ path: './data/gateway.db' });
 * await store.init();
 * const account = await store.ensureAccount('default');
 */
export class SqliteStore implements Store {
  readonly driver = 'sqlite' as const;
  private readonly db: Database.Database;
  private statements?: Statements;
  /** The ledger journal of a database file (README "Ledger durability"); a `:memory:` store keeps it in its table. */
  private readonly pendingFiles: PendingFiles | null = null;
  /** Pending rows are durable when this returns (a write to the journal file): no transaction to wait for. */
  readonly insertPendingLedgerNow?: (rows: PendingLedgerRow[]) => void;

  constructor(options: SqliteStoreOptions) {
    if (options.path !== ':memory:' && options.path !== '') {
      try {
        mkdirSync(dirname(resolve(options.path)), { recursive: true });
      } catch (err) {
        // `EEXIST: file already exists, mkdir '/etc/hostname'` did not say which setting to fix.
        throw new Error(`storage.path ${options.path}: cannot create its folder (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
      }
      // SQLite's own "unable to open database file" named neither the setting nor the cause.
      if (statSync(options.path, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`storage.path ${options.path}: is a folder; name the database file in it (e.g. ${join(options.path, 'gateway.db')})`);
      const files = new PendingFiles(`${resolve(options.path)}-pending`);
      this.pendingFiles = files;
      this.insertPendingLedgerNow = (rows) => files.append(rows);
    }
    const created = options.path !== ':memory:' && options.path !== '' && !statSync(options.path, { throwIfNoEntry: false });
    try {
      this.db = new Database(options.path);
      // A new database is the owner's alone (0600; SQLite gives its -wal and -shm files the same mode, so
      // before WAL is on): it holds the ledger, preset prompts and sealed provider keys, and the umask had made
      // it readable by every local user (found by a security audit). An existing file keeps its mode.
      if (created) chmodSync(options.path, 0o600);
      // WAL needs the folder writable too (its -wal and -shm files): a read-only folder fails here, not above.
      this.db.pragma('busy_timeout = 5000');
      this.db.pragma('journal_mode = WAL');
    } catch (err) {
      (this as unknown as { db?: Database.Database }).db?.close();
      // SQLite's own "unable to open database file" named neither the setting nor the file.
      const code = (err as { code?: string }).code;
      throw new Error(`storage.path ${options.path}: cannot open the database (${(err as Error).message}${code ? `, ${code}` : ''}; is the file or its folder writable by this user?)`);
    }
    // (Above: the busy timeout first, as switching to WAL needs a lock that another process may be holding.)
    // With WAL, NORMAL never corrupts the file; a power loss may drop the last commits, not break the db.
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma('foreign_keys = ON');
    // Why set: better-sqlite3 builds SQLite with a 16 MiB page cache, which the ledger's writes fill within
    // seconds of load (+20 MiB of resident memory measured); SQLite's own default is 2 MiB, and the pages the
    // writes need (the right edge of the ledger's B-trees) fit in that.
    this.db.pragma(`cache_size = ${-Math.round((options.cacheMib ?? DEFAULT_CACHE_MIB) * 1024)}`);
  }

  async init(): Promise<void> {
    // IMMEDIATE takes the write lock up front, so a second process starting at the same time waits
    // (busy_timeout) and then finds the migrations already recorded.
    this.db
      .transaction(() => {
        this.db.exec(MIGRATIONS_TABLE.sqlite);
        const applied = this.db.prepare('SELECT id FROM schema_migrations').pluck().all() as number[];
        const newer = newerThanBuild(applied);
        if (newer) throw newer;
        const record = this.db.prepare('INSERT INTO schema_migrations (id, name, applied_at) VALUES (?, ?, ?)');
        for (const m of pendingMigrations(applied)) {
          this.db.exec(m.sqlite);
          record.run(m.id, m.name, Date.now());
        }
      })
      .immediate();
    this.statements ??= prepareAll(this.db);
  }

  async close(): Promise<void> {
    this.pendingFiles?.close();
    if (this.db.open) this.db.close();
  }

  private get s(): Statements {
    if (!this.statements) throw new Error('SqliteStore: call init() before use');
    return this.statements;
  }

  async settingOrInit(name: string, value: string): Promise<string> {
    this.s.settingInsert.run(name, value);
    return this.s.settingGet.get(name) as string;
  }

  async ensureAccount(name: string): Promise<Account> {
    this.s.accountInsert.run({ id: randomUUID(), name, created_at: Date.now() });
    return rowToAccount(this.s.accountByName.get(name) as Row);
  }

  async findAccount(idOrName: string): Promise<Account | null> {
    const row = this.s.accountFind.get({ v: idOrName }) as Row | undefined;
    return row ? rowToAccount(row) : null;
  }

  async addCredits(accountId: string, usd: number): Promise<Account> {
    if (!Number.isFinite(usd)) throw new Error(`credits must be a finite number, got ${usd}`);
    const row = this.s.accountCredit.get({ id: accountId, usd }) as Row | undefined;
    if (!row) throw new Error(`unknown account: ${accountId}`);
    return rowToAccount(row);
  }

  async ensureWorkspace(name: string, accountId: string): Promise<Workspace> {
    this.s.workspaceInsert.run({ id: randomUUID(), name, account_id: accountId, created_at: Date.now() });
    return rowToWorkspace(this.s.workspaceByName.get(name) as Row);
  }

  async findWorkspace(idOrName: string): Promise<Workspace | null> {
    const row = this.s.workspaceFind.get({ v: idOrName }) as Row | undefined;
    return row ? rowToWorkspace(row) : null;
  }

  async createKey(input: NewKey): Promise<KeyRecord> {
    return this.insertKey(input);
  }

  async createFirstKey(input: NewKey): Promise<KeyRecord | null> {
    // A write transaction from its start (BEGIN IMMEDIATE): a second process on the same file waits for it
    // (busy_timeout), then counts the key this one made.
    return this.db.transaction(() => (Number(this.s.keyCount.get()) === 0 ? this.insertKey(input) : null)).immediate();
  }

  private insertKey(input: NewKey): KeyRecord {
    const ws = this.s.workspaceById.get(input.workspaceId) as Row | undefined;
    if (!ws) throw new Error(`unknown workspace: ${input.workspaceId}`);
    const row = this.s.keyInsert.get({
      id: randomUUID(),
      hash: input.hash,
      label: input.label,
      name: input.name,
      workspace_id: input.workspaceId,
      account_id: ws.account_id,
      creator_user_id: input.creatorUserId,
      is_management: input.isManagement ? 1 : 0,
      is_provisioning: input.isProvisioning ? 1 : 0,
      limit_usd: input.limitUsd ?? null,
      limit_reset: input.limitReset ?? null,
      include_byok_in_limit: input.includeByokInLimit ? 1 : 0,
      allowed_data_regions: JSON.stringify(input.allowedDataRegions ?? []),
      expires_at: input.expiresAt ? toMillis(input.expiresAt) : null,
      created_at: Date.now(),
    }) as Row;
    return rowToKey(row);
  }

  async findKeyByHash(hash: string): Promise<KeyRecord | null> {
    const row = this.s.keyByHash.get(hash) as Row | undefined;
    return row ? rowToKey(row) : null;
  }

  async getKey(id: string): Promise<KeyRecord | null> {
    const row = this.s.keyById.get(id) as Row | undefined;
    return row ? rowToKey(row) : null;
  }

  async listKeys(): Promise<KeyRecord[]> {
    return (this.s.keyList.all() as Row[]).map(rowToKey);
  }

  async revokeKey(id: string): Promise<boolean> {
    return this.s.keyRevoke.run(Date.now(), id).changes === 1;
  }

  async countKeys(): Promise<number> {
    return Number(this.s.keyCount.get());
  }

  async insertLedger(row: LedgerRow): Promise<boolean> {
    return this.s.insertLedger(row);
  }

  async insertLedgerBatch(rows: LedgerRow[], release: string[] = []): Promise<number> {
    const files = this.pendingFiles;
    if (!files) return rows.length || release.length ? this.s.insertLedgerBatch(rows, release) : 0;
    // Journal in files: released after the commit (a kill in between leaves a pending row whose ledger row exists).
    const inserted = rows.length > 0 ? this.s.insertLedgerBatch(rows, []) : 0;
    files.release(release);
    return inserted;
  }

  async insertPendingLedger(rows: PendingLedgerRow[]): Promise<void> {
    if (rows.length === 0) return;
    if (this.pendingFiles) this.pendingFiles.append(rows);
    else this.s.pending.insert(rows);
  }

  async finalizePendingLedger(input: { beforeMs: number; exceptOwner: string }): Promise<number> {
    // The table too: rows a gateway version before the journal files left behind.
    const fromTable = this.s.pending.finalize(input.beforeMs, input.exceptOwner);
    const writeInterrupted = this.s.pending.writeInterrupted;
    return fromTable + (this.pendingFiles?.finalize(input.beforeMs, input.exceptOwner, (rows) => writeInterrupted(rows)) ?? 0);
  }

  async listPendingLedger(): Promise<PendingLedgerRow[]> {
    const rows = this.s.pending.list();
    return this.pendingFiles ? [...rows, ...this.pendingFiles.list()] : rows;
  }

  async getLedger(generationId: string): Promise<LedgerRow | null> {
    const row = this.s.ledgerGet.get(generationId) as Row | undefined;
    return row ? rowToLedger(row) : null;
  }

  async usageForKey(keyId: string, now: Date = new Date()): Promise<UsageTotals> {
    // `$1`… bind by number from an object in better-sqlite3.
    const params = Object.fromEntries(usageParams(keyId, now).map((v, i) => [i + 1, v]));
    return rowToUsage(this.s.usage.get(params) as Row);
  }

  async spendTotals(scope: SpendScope, sinceMs: number): Promise<{ paid: number; byok: number }> {
    const { params } = spendSelect(scope, '', '');
    const stmt = scope.kind === 'key' ? this.s.spendKey : scope.kind === 'member' ? this.s.spendMember : this.s.spendWorkspace;
    const bind = Object.fromEntries([...params, sinceMs].map((v, i) => [i + 1, v]));
    const row = stmt.get(bind) as Row;
    return { paid: Number(row.paid), byok: Number(row.byok) };
  }

  async countFreeModelRequests(accountId: string, sinceMs: number): Promise<number> {
    return Number(this.s.freeCount.get(accountId, sinceMs));
  }

  async savePresetVersion(input: NewPresetVersion): Promise<PresetWithVersion> {
    return this.presets.save(input);
  }

  async findPreset(workspaceId: string, slug: string): Promise<PresetWithVersion | null> {
    return this.presets.find(workspaceId, slug);
  }

  async listPresets(workspaceId: string): Promise<PresetWithVersion[]> {
    return this.presets.list(workspaceId);
  }

  async listPresetVersions(presetId: string): Promise<PresetVersionRecord[]> {
    return this.presets.versions(presetId);
  }

  /** Prepared after the migrations (init) created the tables. */
  private get presets(): ReturnType<typeof sqlitePresets> {
    return (this.presetStatements ??= sqlitePresets(this.db));
  }

  private presetStatements?: ReturnType<typeof sqlitePresets>;

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
    this.videoJobs.markBilled(id);
  }

  async listUnfinishedVideoJobs(limit: number, after?: VideoJobCursor): Promise<VideoJob[]> {
    return this.videoJobs.unfinished(limit, after);
  }

  async listExpiredVideoJobs(nowMs: number, limit: number): Promise<VideoJob[]> {
    return this.videoJobs.expired(nowMs, limit);
  }

  /** Prepared after the migrations (init) created the table. */
  private get videoJobs(): ReturnType<typeof sqliteVideoJobs> {
    if (!this.statements) throw new Error('SqliteStore: call init() before use');
    return (this.videoJobStatements ??= sqliteVideoJobs(this.db));
  }

  private videoJobStatements?: ReturnType<typeof sqliteVideoJobs>;

  async putByokKey(input: Omit<ByokKeyRecord, 'createdAt'>): Promise<void> {
    this.s.byokPut.run(input.workspaceId, input.provider, input.secret, input.label, Date.now());
  }

  async listByokKeys(workspaceId: string): Promise<ByokKeyRecord[]> {
    return (this.s.byokList.all(workspaceId) as Row[]).map(rowToByok);
  }

  async deleteByokKey(workspaceId: string, provider: string): Promise<boolean> {
    return this.s.byokDelete.run(workspaceId, provider).changes === 1;
  }
}

function ledgerParams(row: LedgerRow): (string | number)[] {
  if (!Number.isFinite(row.costUsd)) throw new Error(`ledger cost must be a finite number, got ${row.costUsd}`);
  // Positional, in the INSERT's column order: better-sqlite3 binds an object by looking up each parameter's
  // name on it: ~12k of a row's ~120k instructions (callgrind of a loop of 50-row batches).
  return [
    row.generationId,
    row.keyId,
    row.userId,
    row.workspaceId,
    row.accountId,
    row.endpoint,
    row.model,
    row.provider,
    row.upstreamModel,
    wholeTokens(row.promptTokens),
    wholeTokens(row.completionTokens),
    wholeTokens(row.cachedTokens),
    wholeTokens(row.cacheWriteTokens),
    wholeTokens(row.reasoningTokens),
    row.costUsd,
    row.isByok ? 1 : 0,
    row.status,
    toMillis(row.createdAt),
  ];
}
