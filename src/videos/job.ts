import { alphanumerics } from '../routing/generation-id';
import type { Store, VideoJob, VideoJobPatch, VideoJobStatus } from '../store/types';
import { assertTransition } from './states';

/** A video job id: `gen-vid-<unix ms>-<20 alphanumerics>` (spec 2.3). */
export function videoJobId(now = Date.now()): string {
  return `gen-vid-${now}-${alphanumerics(20)}`;
}

/**
 * Moves a job to `to`, the one way every status change is made: the state machine is checked first
 * (an impossible move throws), then the store applies it only if the job is still in the status it was read
 * in. Returns the updated job, or null when another poller or process moved it first.
 *
 * @example const next = await transition(store, job, 'in_progress', { generationId }, now);
 */
export async function transition(
  store: Store,
  job: VideoJob,
  to: VideoJobStatus,
  patch: Omit<VideoJobPatch, 'status' | 'updatedAt'>,
  now: number,
): Promise<VideoJob | null> {
  assertTransition(job.status, to);
  return store.updateVideoJob(job.id, job.status, { ...patch, status: to, updatedAt: now });
}

/**
 * The job object of spec 2.3 as the wire shows it:
 * - `generation_id` once the job has been processed (from in_progress on);
 * - `unsigned_urls` and `expires_at` (unix seconds: when the outputs stop being available) while completed;
 * - `usage {cost, is_byok}` once completed (kept when it expires, the job was billed);
 * - `error {message}` on a failed job (this gateway's addition).
 */
export function jobObject(job: VideoJob, basePath: string): Record<string, unknown> {
  const out: Record<string, unknown> = { id: job.id, status: job.status, polling_url: `${basePath}/videos/${job.id}` };
  if (job.generationId) out.generation_id = job.generationId;
  if (job.status === 'completed') {
    out.unsigned_urls = job.urls;
    if (job.expiresAt !== null) out.expires_at = Math.floor(job.expiresAt / 1000);
  }
  if (job.status === 'completed' || job.status === 'expired') out.usage = { cost: job.costUsd ?? 0, is_byok: job.isByok };
  if (job.status === 'failed' && job.error) out.error = { message: job.error };
  return out;
}
