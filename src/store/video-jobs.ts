/**
 * The `video_jobs` table (migrations 4 and 7) for both engines: row mapping and the statements, written once with
 * `$n` parameters (better-sqlite3 binds `$1`… from `{1: …}`, pg from an array). Booleans differ per engine
 * only in how a true value is written.
 */

import type Database from 'better-sqlite3';
import type { NewVideoJob, VideoJob, VideoJobCursor, VideoJobPatch, VideoJobStatus } from './types';

/** Before every job. */
const START: VideoJobCursor = { updatedAt: -1, id: '' };

type Row = Record<string, unknown>;

const numberOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
const stringOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));

export function rowToVideoJob(r: Row): VideoJob {
  return {
    id: String(r.id),
    workspaceId: String(r.workspace_id),
    keyId: String(r.key_id),
    accountId: String(r.account_id),
    userId: String(r.user_id),
    model: String(r.model),
    provider: String(r.provider),
    upstreamModel: String(r.upstream_model),
    upstreamJobId: String(r.upstream_job_id),
    status: r.status as VideoJobStatus,
    previousJobId: stringOrNull(r.previous_job_id),
    request: JSON.parse(String(r.request)) as VideoJob['request'],
    generationId: stringOrNull(r.generation_id),
    urls: JSON.parse(String(r.urls)) as string[],
    costUsd: numberOrNull(r.cost_usd),
    isByok: Boolean(r.is_byok),
    error: stringOrNull(r.error),
    expiresAt: numberOrNull(r.expires_at),
    completedAt: numberOrNull(r.completed_at),
    billed: Boolean(r.billed),
    createdAt: Number(r.created_at),
    updatedAt: Number(r.updated_at),
  };
}

export const VIDEO_JOB_QUERIES = {
  insert: `INSERT INTO video_jobs (id, workspace_id, key_id, account_id, user_id, model, provider, upstream_model,
      upstream_job_id, status, previous_job_id, request, created_at, updated_at, is_byok)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13, $14) RETURNING *`,
  get: 'SELECT * FROM video_jobs WHERE id = $1 AND workspace_id = $2',
  // Why one statement: the status check and the write are atomic in both engines, so of two pollers that
  // saw the same status only one changes it; the other gets no row back.
  update: `UPDATE video_jobs SET status = $3, updated_at = $4, generation_id = COALESCE($5, generation_id),
      urls = COALESCE($6, urls), cost_usd = COALESCE($7, cost_usd), error = COALESCE($8, error),
      expires_at = COALESCE($9, expires_at), completed_at = COALESCE($10, completed_at)
    WHERE id = $1 AND status = $2 RETURNING *`,
  markBilled: (yes: string) => `UPDATE video_jobs SET billed = ${yes} WHERE id = $1`,
  // Keyset pages over (updated_at, id), after ($2, $3). The first condition is video_jobs_work_page's WHERE
  // (migration 7) word for word: SQLite uses a partial index only when the query repeats its WHERE as a term.
  unfinished: (no: string) => `SELECT * FROM video_jobs
    WHERE (status IN ('pending', 'in_progress') OR (status IN ('completed', 'expired') AND billed = ${no}))
      AND (updated_at, id) > ($2, $3)
    ORDER BY updated_at, id LIMIT $1`,
  // Billed completed jobs whose outputs expired by $1, earliest first, by video_jobs_expiry (migration 4).
  // Unbilled ones are in `unfinished`: the poller bills them, then expires them.
  expired: (yes: string) => `SELECT * FROM video_jobs
    WHERE status = 'completed' AND expires_at <= $1 AND billed = ${yes}
    ORDER BY expires_at LIMIT $2`,
};

/** `isByok` as the engine writes a boolean: SQLite's 0/1, PostgreSQL's boolean. */
export function insertParams(job: NewVideoJob, isByok: unknown): unknown[] {
  return [
    job.id, job.workspaceId, job.keyId, job.accountId, job.userId, job.model, job.provider, job.upstreamModel,
    job.upstreamJobId, job.status, job.previousJobId, JSON.stringify(job.request), job.createdAt, isByok,
  ];
}

/**
 * `error` is an upstream's text: a NUL in it, which PostgreSQL's text cannot hold, is stored as U+FFFD on both
 * engines (PostgreSQL refused the update, so the job was polled again every round and never left `pending`).
 */
export function updateParams(id: string, expected: VideoJobStatus, patch: VideoJobPatch): unknown[] {
  if (patch.costUsd !== undefined && patch.costUsd !== null && !Number.isFinite(patch.costUsd)) {
    throw new Error(`video job cost must be a finite number, got ${patch.costUsd}`);
  }
  return [
    id, expected, patch.status, patch.updatedAt, patch.generationId ?? null,
    patch.urls === undefined ? null : JSON.stringify(patch.urls), patch.costUsd ?? null, patch.error?.replaceAll('\u0000', '\ufffd') ?? null,
    patch.expiresAt ?? null, patch.completedAt ?? null,
  ];
}

/** The video job statements on SQLite, prepared once (after the migrations created the table). */
export function sqliteVideoJobs(db: Database.Database) {
  const bind = (values: unknown[]) => Object.fromEntries(values.map((v, i) => [i + 1, v]));
  const s = {
    insert: db.prepare(VIDEO_JOB_QUERIES.insert),
    get: db.prepare(VIDEO_JOB_QUERIES.get),
    update: db.prepare(VIDEO_JOB_QUERIES.update),
    markBilled: db.prepare(VIDEO_JOB_QUERIES.markBilled('1')),
    unfinished: db.prepare(VIDEO_JOB_QUERIES.unfinished('0')),
    expired: db.prepare(VIDEO_JOB_QUERIES.expired('1')),
  };
  return {
    create: (job: NewVideoJob) => rowToVideoJob(s.insert.get(bind(insertParams(job, job.isByok ? 1 : 0))) as Row),
    get: (id: string, workspaceId: string) => {
      const row = s.get.get(bind([id, workspaceId])) as Row | undefined;
      return row ? rowToVideoJob(row) : null;
    },
    update: (id: string, expected: VideoJobStatus, patch: VideoJobPatch) => {
      const row = s.update.get(bind(updateParams(id, expected, patch))) as Row | undefined;
      return row ? rowToVideoJob(row) : null;
    },
    markBilled: (id: string) => void s.markBilled.run(bind([id])),
    unfinished: (limit: number, after: VideoJobCursor = START) =>
      (s.unfinished.all(bind([limit, after.updatedAt, after.id])) as Row[]).map(rowToVideoJob),
    expired: (nowMs: number, limit: number) => (s.expired.all(bind([nowMs, limit])) as Row[]).map(rowToVideoJob),
  };
}

type Query = (sql: string, params: unknown[]) => Promise<{ rows: Row[] }>;

/** The video job statements on PostgreSQL, over the store's pool. */
export function postgresVideoJobs(query: Query) {
  const one = async (sql: string, params: unknown[]) => {
    const row = (await query(sql, params)).rows[0];
    return row ? rowToVideoJob(row) : null;
  };
  return {
    create: async (job: NewVideoJob) => (await one(VIDEO_JOB_QUERIES.insert, insertParams(job, job.isByok)))!,
    get: (id: string, workspaceId: string) => one(VIDEO_JOB_QUERIES.get, [id, workspaceId]),
    update: (id: string, expected: VideoJobStatus, patch: VideoJobPatch) => one(VIDEO_JOB_QUERIES.update, updateParams(id, expected, patch)),
    markBilled: async (id: string) => void (await query(VIDEO_JOB_QUERIES.markBilled('TRUE'), [id])),
    unfinished: async (limit: number, after: VideoJobCursor = START) =>
      (await query(VIDEO_JOB_QUERIES.unfinished('FALSE'), [limit, after.updatedAt, after.id])).rows.map(rowToVideoJob),
    expired: async (nowMs: number, limit: number) => (await query(VIDEO_JOB_QUERIES.expired('TRUE'), [nowMs, limit])).rows.map(rowToVideoJob),
  };
}
