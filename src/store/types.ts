/**
 * The durable store: keys (hashed), accounts (credit balance), workspaces and the ledger.
 * SQLite (default) and PostgreSQL implement the same interface and pass the same test suite.
 *
 * Money is USD as a JS number; timestamps are ISO 8601 strings in records.
 */

export type LimitReset = 'daily' | 'weekly' | 'monthly';

export interface Account {
  id: string; // uuid
  name: string; // unique, human name ("default")
  balanceUsd: number; // credit balance; goes down with every ledger row's cost
  purchasedUsd: number; // all-time credits added
  createdAt: string;
}

export interface Workspace {
  id: string; // uuid
  name: string; // unique
  accountId: string;
  createdAt: string;
}

export interface KeyRecord {
  id: string; // uuid
  hash: string; // sha256 hex of the full key; the key itself is never stored
  label: string; // masked form shown by GET /key and `keys list`
  name: string;
  workspaceId: string;
  accountId: string;
  creatorUserId: string;
  isManagement: boolean;
  isProvisioning: boolean;
  limitUsd: number | null;
  limitReset: LimitReset | null;
  includeByokInLimit: boolean;
  allowedDataRegions: string[];
  expiresAt: string | null;
  disabled: boolean;
  revokedAt: string | null;
  createdAt: string;
}

export interface NewKey {
  hash: string;
  label: string;
  name: string;
  workspaceId: string;
  creatorUserId: string;
  isManagement?: boolean;
  isProvisioning?: boolean;
  limitUsd?: number | null;
  limitReset?: LimitReset | null;
  includeByokInLimit?: boolean;
  allowedDataRegions?: string[];
  expiresAt?: string | null;
}

export interface LedgerRow {
  generationId: string; // primary key: a second insert of the same id is ignored
  keyId: string;
  userId: string; // the key's creator: the member whose combined spend member budgets count
  workspaceId: string;
  accountId: string;
  endpoint: 'messages' | 'chat_completions' | 'videos';
  model: string; // gateway model id
  provider: string; // provider id from gateway.yaml
  upstreamModel: string;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  costUsd: number;
  isByok: boolean; // served with the workspace's own provider key: counted, never debited from the balance
  /** `interrupted`: the process serving it died; written at cost 0 from its pending row (README "Ledger durability"). */
  status: 'completed' | 'failed' | 'cancelled' | 'interrupted';
  createdAt: string;
}

/**
 * A request sent upstream whose ledger row is not written yet (table `ledger_pending`, or a SQLite database
 * file's journal files): written durably before the provider is called, released with the ledger row. The route is the first
 * candidate's (the one that answers is not known yet).
 */
export interface PendingLedgerRow {
  generationId: string;
  keyId: string;
  userId: string;
  workspaceId: string;
  accountId: string;
  endpoint: LedgerRow['endpoint'];
  model: string;
  provider: string;
  upstreamModel: string;
  isByok: boolean;
  /** The gateway process that wrote it (random per start): a process never finalises its own rows. */
  owner: string;
  createdAt: string;
}

/**
 * Spend sums for one key over the UTC windows of spec 8.4.
 * The two families are disjoint: `usage*` sums only non-BYOK ledger rows (spend of gateway credits) and
 * `byokUsage*` only BYOK rows (spend through the caller's own provider keys). A caller that needs the combined
 * figure (e.g. `include_byok_in_limit`) adds them. The day/week/month windows are [start, next reset) around
 * `now`; the all-time sums count every row of the key.
 */
export interface UsageTotals {
  usage: number;
  usageDaily: number;
  usageWeekly: number;
  usageMonthly: number;
  byokUsage: number;
  byokUsageDaily: number;
  byokUsageWeekly: number;
  byokUsageMonthly: number;
}

/** Whose spend a budget counts (spec 8.4): one key, one member's keys in a workspace, or a whole workspace. */
export type SpendScope =
  | { kind: 'key'; keyId: string }
  | { kind: 'member'; workspaceId: string; userId: string }
  | { kind: 'workspace'; workspaceId: string };

/** A workspace's own provider key (BYOK); `secret` is the sealed (encrypted) form, never the plaintext. */
export interface ByokKeyRecord {
  workspaceId: string;
  provider: string;
  secret: string;
  label: string;
  createdAt: string;
}

/** A named, versioned request configuration of one workspace (spec 2.2). */
export interface PresetRecord {
  id: string; // uuid
  workspaceId: string;
  slug: string; // unique per workspace
  name: string;
  description: string | null;
  status: string; // 'active'
  statusUpdatedAt: string | null;
  creatorUserId: string;
  designatedVersionId: string;
  createdAt: string;
  updatedAt: string;
}

export interface PresetVersionRecord {
  id: string; // uuid
  presetId: string;
  version: number; // 1, 2, … per preset, never reused
  config: Record<string, unknown>;
  systemPrompt: string | null;
  /** `system` as the blocks it was given in (their `cache_control` with them); null when it was a string or absent. */
  systemBlocks: Record<string, unknown>[] | null;
  creatorId: string;
  createdAt: string;
  updatedAt: string;
}

/** A preset with its designated version. */
export interface PresetWithVersion {
  preset: PresetRecord;
  version: PresetVersionRecord;
}

export interface NewPresetVersion {
  workspaceId: string;
  slug: string;
  creatorUserId: string;
  config: Record<string, unknown>;
  systemPrompt: string | null;
  /** `system` as the blocks it was given in; absent or null for a string `system`. */
  systemBlocks?: Record<string, unknown>[] | null;
}

/** A write lost a race with another write of the same resource (a preset version number): retry later. */
export class StoreConflictError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StoreConflictError';
  }
}

/** Spec 3: the states of a video job. The allowed moves between them are in src/videos/states.ts. */
export type VideoJobStatus = 'pending' | 'in_progress' | 'completed' | 'failed' | 'cancelled' | 'expired';

/** A video generation job (spec 2.3), one row of `video_jobs`. Timestamps are epoch ms here. */
export interface VideoJob {
  id: string; // gen-vid-<unix ms>-<20 alphanumerics>
  workspaceId: string;
  keyId: string;
  accountId: string;
  userId: string; // the key's creator
  model: string; // gateway video model id
  provider: string;
  upstreamModel: string;
  upstreamJobId: string;
  status: VideoJobStatus;
  previousJobId: string | null;
  /**
   * The prompt and the other generation parameters as sent upstream, the price (USD) agreed at creation, and
   * the spend hold taken for the job's estimate (none for jobs created before holds, BYOK-only jobs, and jobs
   * whose estimate held nothing).
   */
  request: { prompt: string; params: Record<string, unknown>; pricing?: { per_second: number; per_job: number }; hold?: VideoJobHold };
  /** Set when the job enters in_progress (once it is being processed); the ledger row's id. */
  generationId: string | null;
  urls: string[];
  costUsd: number | null;
  /** Submitted with the workspace's own key for its provider (BYOK): polled and cancelled with it, billed as BYOK. */
  isByok: boolean;
  error: string | null;
  /** When the outputs stop being available (set on completion). */
  expiresAt: number | null;
  completedAt: number | null;
  /** The ledger row of a completed job has been written (written once: the ledger is idempotent by generation id). */
  billed: boolean;
  createdAt: number;
  updatedAt: number;
}

/**
 * What a video job holds in the shared state from its creation until it is billed or ends unbilled (spend
 * control's `admitVideoJob`): the hold id, the budget hold groups its estimate is held in, the account's
 * video in-flight group (prepaid accounts), and when the hold lapses (epoch ms).
 */
export interface VideoJobHold {
  id: string;
  groups: string[];
  inFlightGroup: string | null;
  until: number;
  /** What is held in each group (nano-USD), to put it back after a restart of in-process state; absent on jobs from before it was stored. */
  amountNano?: number;
}

export type NewVideoJob = Omit<VideoJob, 'generationId' | 'urls' | 'costUsd' | 'error' | 'expiresAt' | 'completedAt' | 'billed' | 'updatedAt'>;

/** A position in the list of unfinished jobs: the last job of a page. */
export interface VideoJobCursor {
  updatedAt: number;
  id: string;
}

/** What a status change may set besides the status. */
export type VideoJobPatch = Partial<Pick<VideoJob, 'generationId' | 'urls' | 'costUsd' | 'error' | 'expiresAt' | 'completedAt'>> & {
  status: VideoJobStatus;
  updatedAt: number;
};

export interface Store {
  readonly driver: 'sqlite' | 'postgres';
  /** Applies pending numbered migrations. Safe to call on every start. */
  init(): Promise<void>;
  close(): Promise<void>;

  /** Reads a setting; stores `value` first when absent. Returns the stored value (first writer wins). */
  settingOrInit(name: string, value: string): Promise<string>;

  ensureAccount(name: string): Promise<Account>;
  /** By id or by name. */
  findAccount(idOrName: string): Promise<Account | null>;
  /** Adds to balance and to purchased credits; returns the updated account. Throws if unknown. */
  addCredits(accountId: string, usd: number): Promise<Account>;

  /** Creates the workspace in the given account when missing (by name). */
  ensureWorkspace(name: string, accountId: string): Promise<Workspace>;
  /** By id or by name. */
  findWorkspace(idOrName: string): Promise<Workspace | null>;

  createKey(input: NewKey): Promise<KeyRecord>;
  /**
   * Creates the key only if the store has no key at all (the first start's management key): atomic across
   * processes starting together on one database, so exactly one of them creates it. Null when a key exists.
   */
  createFirstKey(input: NewKey): Promise<KeyRecord | null>;
  findKeyByHash(hash: string): Promise<KeyRecord | null>;
  getKey(id: string): Promise<KeyRecord | null>;
  listKeys(): Promise<KeyRecord[]>;
  /** Marks the key revoked; false when no such key or already revoked. */
  revokeKey(id: string): Promise<boolean>;
  countKeys(): Promise<number>;

  /**
   * Writes one ledger row and deducts its cost from the account balance in one transaction.
   * Idempotent by generation id: returns false (and changes nothing) when the id already exists.
   */
  insertLedger(row: LedgerRow): Promise<boolean>;
  /**
   * Many rows in one transaction (same rules as insertLedger); returns how many were new. The pending rows
   * named in `release` are deleted in the same transaction, or, kept in files, marked released right after
   * it commits (a request's journal entry goes with its row).
   * A row replaces an existing `interrupted` row of its generation id (which costs 0) and is debited then.
   */
  insertLedgerBatch(rows: LedgerRow[], release?: string[]): Promise<number>;
  /** Writes pending rows (one transaction); a known generation id is ignored. */
  insertPendingLedger(rows: PendingLedgerRow[]): Promise<void>;
  /**
   * Present when pending rows are durable as soon as a synchronous call returns (the SQLite store's journal
   * files): the journal then writes each row at once instead of grouping rows into transactions. Throws when
   * the row cannot be written.
   */
  readonly insertPendingLedgerNow?: (rows: PendingLedgerRow[]) => void;
  /**
   * Turns pending rows created before `beforeMs` by another owner into `interrupted` ledger rows (cost 0, no
   * tokens; a generation id that already has a row keeps it) and deletes them (one transaction for the table). Returns
   * how many pending rows were finalised.
   */
  finalizePendingLedger(input: { beforeMs: number; exceptOwner: string }): Promise<number>;
  /** Pending rows, oldest first (tests and operators). */
  listPendingLedger(): Promise<PendingLedgerRow[]>;
  getLedger(generationId: string): Promise<LedgerRow | null>;
  /** Spend of one key: all time and the current UTC day, week (from Monday) and month. */
  usageForKey(keyId: string, now?: Date): Promise<UsageTotals>;
  /** Paid and BYOK spend (USD) of a scope in ledger rows created at or after `sinceMs` (0: all time). */
  spendTotals(scope: SpendScope, sinceMs: number): Promise<{ paid: number; byok: number }>;
  /** Requests of one account to free model variants (model id ending in `:free`) since `sinceMs`, not counting BYOK ones (spec 8.3.2). */
  countFreeModelRequests(accountId: string, sinceMs: number): Promise<number>;

  /**
   * Creates the preset (version 1) or its next version, which becomes the designated one. Version numbers are
   * never duplicated: a write that loses a race throws StoreConflictError.
   */
  savePresetVersion(input: NewPresetVersion): Promise<PresetWithVersion>;
  /** The workspace's preset by slug, with its designated version. */
  findPreset(workspaceId: string, slug: string): Promise<PresetWithVersion | null>;
  listPresets(workspaceId: string): Promise<PresetWithVersion[]>;
  /** Every version of a preset, newest first. */
  listPresetVersions(presetId: string): Promise<PresetVersionRecord[]>;

  createVideoJob(job: NewVideoJob): Promise<VideoJob>;
  /** A job of one workspace: null for an unknown id and for another workspace's job alike. */
  getVideoJob(id: string, workspaceId: string): Promise<VideoJob | null>;
  /**
   * Compare-and-set: applies `patch` only while the job is still in status `expected`, so two pollers (or
   * processes) cannot both apply a transition. Returns the updated job, or null when the status had moved on.
   */
  updateVideoJob(id: string, expected: VideoJobStatus, patch: VideoJobPatch): Promise<VideoJob | null>;
  /** Marks a completed job's ledger row as written. */
  markVideoJobBilled(id: string): Promise<void>;
  /**
   * Jobs with work left, least recently updated first (by updated_at, then id), after `after` when given (the
   * last job of the previous page): pending and in_progress ones, and completed or expired ones not yet billed.
   * Read by an index in both engines: a page costs its own rows, not the table's.
   */
  listUnfinishedVideoJobs(limit: number, after?: VideoJobCursor): Promise<VideoJob[]>;
  /** Billed completed jobs whose outputs expired at or before `nowMs` (to be marked expired), earliest first. */
  listExpiredVideoJobs(nowMs: number, limit: number): Promise<VideoJob[]>;

  /** Stores (or replaces) a workspace's sealed provider key. */
  putByokKey(input: Omit<ByokKeyRecord, 'createdAt'>): Promise<void>;
  listByokKeys(workspaceId: string): Promise<ByokKeyRecord[]>;
  /** False when there was none. */
  deleteByokKey(workspaceId: string, provider: string): Promise<boolean>;
}
