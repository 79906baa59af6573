/**
 * The row ⇄ record mapping of the tables migrations.ts creates (column conventions: see there), and the
 * ledger spend SELECTs both stores share, whose rows it reads. A new column changes both files.
 */

import { windowEnd, windowStart, type WindowInterval } from '../spend/windows';
import type { Account, ByokKeyRecord, KeyRecord, LedgerRow, LimitReset, PresetRecord, PresetVersionRecord, SpendScope, UsageTotals, Workspace } from './types';
import { isoMillis } from './iso-time';

// Both drivers go through Number()/Boolean(): pg returns BIGINT as a string and BOOLEAN as boolean,
// better-sqlite3 returns numbers for both.

type Row = Record<string, unknown>;

/** ISO string → epoch ms; rejects strings that are not timestamps instead of storing NaN. */
export function toMillis(iso: string): number {
  const ms = isoMillis(iso);
  if (Number.isNaN(ms)) throw new Error(`not an ISO 8601 timestamp: ${JSON.stringify(iso)}`);
  return ms;
}

function iso(ms: unknown): string {
  return new Date(Number(ms)).toISOString();
}

function isoOrNull(ms: unknown): string | null {
  return ms === null || ms === undefined ? null : iso(ms);
}

export function rowToAccount(r: Row): Account {
  return {
    id: String(r.id),
    name: String(r.name),
    balanceUsd: Number(r.balance_usd),
    purchasedUsd: Number(r.purchased_usd),
    createdAt: iso(r.created_at),
  };
}

export function rowToWorkspace(r: Row): Workspace {
  return { id: String(r.id), name: String(r.name), accountId: String(r.account_id), createdAt: iso(r.created_at) };
}

export function rowToKey(r: Row): KeyRecord {
  return {
    id: String(r.id),
    hash: String(r.hash),
    label: String(r.label),
    name: String(r.name),
    workspaceId: String(r.workspace_id),
    accountId: String(r.account_id),
    creatorUserId: String(r.creator_user_id),
    isManagement: Boolean(r.is_management),
    isProvisioning: Boolean(r.is_provisioning),
    limitUsd: r.limit_usd === null ? null : Number(r.limit_usd),
    limitReset: (r.limit_reset as LimitReset | null) ?? null,
    includeByokInLimit: Boolean(r.include_byok_in_limit),
    allowedDataRegions: JSON.parse(String(r.allowed_data_regions)) as string[],
    expiresAt: isoOrNull(r.expires_at),
    disabled: Boolean(r.disabled),
    revokedAt: isoOrNull(r.revoked_at),
    createdAt: iso(r.created_at),
  };
}

/** The columns a ledger row shares with its journal entry in `ledger_pending`: who asked, and which endpoint answered. */
export type RequestColumns = Pick<LedgerRow, 'generationId' | 'keyId' | 'userId' | 'workspaceId' | 'accountId' | 'endpoint' | 'model' | 'provider' | 'upstreamModel'>;

export function requestColumns(r: Row): RequestColumns {
  return {
    generationId: String(r.generation_id),
    keyId: String(r.key_id),
    userId: String(r.user_id ?? ''),
    workspaceId: String(r.workspace_id),
    accountId: String(r.account_id),
    endpoint: r.endpoint as LedgerRow['endpoint'],
    model: String(r.model),
    provider: String(r.provider),
    upstreamModel: String(r.upstream_model),
  };
}

export function rowToLedger(r: Row): LedgerRow {
  return {
    ...requestColumns(r),
    promptTokens: Number(r.prompt_tokens),
    completionTokens: Number(r.completion_tokens),
    cachedTokens: Number(r.cached_tokens),
    cacheWriteTokens: Number(r.cache_write_tokens),
    reasoningTokens: Number(r.reasoning_tokens),
    costUsd: Number(r.cost_usd),
    isByok: Boolean(r.is_byok),
    status: r.status as LedgerRow['status'],
    createdAt: iso(r.created_at),
  };
}

export function rowToByok(r: Row): ByokKeyRecord {
  return { workspaceId: String(r.workspace_id), provider: String(r.provider), secret: String(r.secret), label: String(r.label), createdAt: iso(r.created_at) };
}

export function rowToPreset(r: Row): PresetRecord {
  return {
    id: String(r.id),
    workspaceId: String(r.workspace_id),
    slug: String(r.slug),
    name: String(r.name),
    description: r.description === null || r.description === undefined ? null : String(r.description),
    status: String(r.status),
    statusUpdatedAt: isoOrNull(r.status_updated_at),
    creatorUserId: String(r.creator_user_id),
    designatedVersionId: String(r.designated_version_id),
    createdAt: iso(r.created_at),
    updatedAt: iso(r.updated_at),
  };
}

export function rowToPresetVersion(r: Row): PresetVersionRecord {
  return {
    id: String(r.id),
    presetId: String(r.preset_id),
    version: Number(r.version),
    config: JSON.parse(String(r.config)) as Record<string, unknown>,
    systemPrompt: r.system_prompt === null || r.system_prompt === undefined ? null : String(r.system_prompt),
    systemBlocks: r.system_blocks === null || r.system_blocks === undefined ? null : (JSON.parse(String(r.system_blocks)) as Record<string, unknown>[]),
    creatorId: String(r.creator_id),
    createdAt: iso(r.created_at),
    updatedAt: iso(r.updated_at),
  };
}

export function rowToUsage(r: Row): UsageTotals {
  return {
    usage: Number(r.usage),
    usageDaily: Number(r.usage_daily),
    usageWeekly: Number(r.usage_weekly),
    usageMonthly: Number(r.usage_monthly),
    byokUsage: Number(r.byok_usage),
    byokUsageDaily: Number(r.byok_usage_daily),
    byokUsageWeekly: Number(r.byok_usage_weekly),
    byokUsageMonthly: Number(r.byok_usage_monthly),
  };
}

/**
 * The SELECT list of `usageForKey`, the same for both engines given how each spells "is BYOK".
 * Parameters: $1 key id; $2/$3 day, $4/$5 week, $6/$7 month as [start, end) in epoch ms.
 * better-sqlite3 binds `$1`… from an object `{ 1: …, 2: … }`, pg from an array, so the text is shared.
 */
export function usageSelect(isByok: string, notByok: string): string {
  const sum = (cond: string, window?: [number, number]) =>
    `COALESCE(SUM(CASE WHEN ${cond}${window ? ` AND created_at >= $${window[0]} AND created_at < $${window[1]}` : ''}` +
    ` THEN cost_usd END), 0)`;
  return `SELECT
      ${sum(notByok)} AS usage,
      ${sum(notByok, [2, 3])} AS usage_daily,
      ${sum(notByok, [4, 5])} AS usage_weekly,
      ${sum(notByok, [6, 7])} AS usage_monthly,
      ${sum(isByok)} AS byok_usage,
      ${sum(isByok, [2, 3])} AS byok_usage_daily,
      ${sum(isByok, [4, 5])} AS byok_usage_weekly,
      ${sum(isByok, [6, 7])} AS byok_usage_monthly
    FROM ledger WHERE key_id = $1`;
}

/**
 * `spendTotals`: paid and BYOK spend of one scope since `$n` (inclusive; 0 for all time). The WHERE clause
 * names the leading columns of one covering index per scope, so the sum reads only the index.
 */
export function spendSelect(scope: SpendScope, isByok: string, notByok: string): { sql: string; params: string[] } {
  const where =
    scope.kind === 'key'
      ? { sql: 'key_id = $1', params: [scope.keyId] }
      : scope.kind === 'member'
        ? { sql: 'workspace_id = $1 AND user_id = $2', params: [scope.workspaceId, scope.userId] }
        : { sql: 'workspace_id = $1', params: [scope.workspaceId] };
  const since = `$${where.params.length + 1}`;
  return {
    sql: `SELECT COALESCE(SUM(CASE WHEN ${notByok} THEN cost_usd END), 0) AS paid,
      COALESCE(SUM(CASE WHEN ${isByok} THEN cost_usd END), 0) AS byok
      FROM ledger WHERE ${where.sql} AND created_at >= ${since}`,
    params: where.params,
  };
}

/** The parameters of `usageSelect` for one key at `now`, in $1…$7 order. */
export function usageParams(keyId: string, now: Date): [string, ...number[]] {
  const bounds = (['daily', 'weekly', 'monthly'] as WindowInterval[]).flatMap((w) => [
    windowStart(w, now).getTime(),
    windowEnd(w, now).getTime(),
  ]);
  return [keyId, ...bounds];
}

/**
 * A token count as the ledger stores it: a whole number, at most 2^53 − 1. A provider may report a fraction
 * (JSON allows `10.5`) or, under a client's huge `max_tokens`, more than a BIGINT holds: SQLite kept either as a
 * REAL, PostgreSQL's integer columns refused the row, holding the writer's batch.
 *
 * @example wholeTokens(10.5) // 11
 */
export const wholeTokens = (n: number): number => Math.min(Math.round(n), Number.MAX_SAFE_INTEGER);
