import { roundUsd } from '../spend/pricing';
import { generationId } from '../routing/generation-id';
import type { Services } from '../services';
import type { VideoJob, VideoJobPatch, VideoJobStatus } from '../store/types';
import type { VideoPollResult } from '../providers/video-types';
import { billVideoJob, releaseVideoHold } from './billing';
import { transition } from './job';
import { jobKey } from './own-key';

/** What one step of a job needs: the current config's services and the clock. */
export interface AdvanceDeps {
  services: Services;
  clock: () => number;
  /** Ends an upstream poll under way: the poller's stop (a shutdown), or the request's abort. */
  signal?: AbortSignal;
}

/**
 * Takes one job one step further, as far as it can go now: polls the upstream of a pending or in_progress
 * job and applies what it reports, bills a completed job not yet billed, and expires a completed job whose
 * outputs expired. Every status change is a compare-and-set: when another poller or process changed the job
 * first, this returns null and leaves the job to the next round. A job this call moved to failed or cancelled
 * (by its upstream, or timed out) has its spend hold released. Upstream errors are logged and retried at the
 * next poll.
 *
 * @example await advanceJob({ services, clock: Date.now }, job);
 */
export async function advanceJob(deps: AdvanceDeps, job: VideoJob): Promise<VideoJob | null> {
  let current: VideoJob | null = job;
  if (current.status === 'pending' || current.status === 'in_progress') {
    current = await followUpstream(deps, current);
    // Only the process whose compare-and-set ended the job gets it back here in an end state.
    if (current?.status === 'failed' || current?.status === 'cancelled') await releaseVideoHold(deps.services, current);
  }
  if (!current) return null;
  if ((current.status === 'completed' || current.status === 'expired') && !current.billed) {
    await billVideoJob(deps.services, current);
    current = { ...current, billed: true };
  }
  return expireIfDue(deps, current);
}

/** completed → expired once the outputs' expiry has passed (the poller, and every read of the job). */
export async function expireIfDue(deps: AdvanceDeps, job: VideoJob): Promise<VideoJob | null> {
  const now = deps.clock();
  if (job.status !== 'completed' || job.expiresAt === null || job.expiresAt > now) return job;
  return transition(deps.services.store, job, 'expired', {}, now);
}

async function followUpstream(deps: AdvanceDeps, job: VideoJob): Promise<VideoJob | null> {
  const { services } = deps;
  const now = deps.clock();
  const provider = services.videos.providers.get(job.provider);
  const timeoutS = services.config.videos.job_timeout_s;
  if (now - job.createdAt >= timeoutS * 1000) {
    if (provider) {
      jobKey(services, job)
        .then((key) => provider.cancel(job.upstreamJobId, key))
        .catch((err) => services.logger.warn({ err, video_job_id: job.id }, 'cancelling a timed-out video job upstream failed'));
    }
    return transition(services.store, job, 'failed', { error: `The job did not finish within ${timeoutS} s` }, now);
  }
  if (!provider) return job; // its provider left the config: the job waits for it to come back, or times out
  let result: VideoPollResult;
  try {
    // A BYOK job whose key was deleted waits like one whose upstream is down (the key may be stored again).
    result = await provider.poll(job.upstreamJobId, await jobKey(services, job), deps.signal);
  } catch (err) {
    // Stopped (a shutdown): the job is polled again at the next round, in this process or the next one.
    if (deps.signal?.aborted) return job;
    services.logger.warn({ err, video_job_id: job.id, provider: job.provider }, 'polling a video job failed; retrying at the next poll');
    return job;
  }
  const step = (from: VideoJob, to: VideoJobStatus, patch: Omit<VideoJobPatch, 'status' | 'updatedAt'> = {}) =>
    transition(services.store, from, to, patch, deps.clock());
  const started = async (j: VideoJob) => (j.status === 'pending' ? step(j, 'in_progress', { generationId: generationId(deps.clock()) }) : j);
  switch (result.status) {
    case 'queued':
      return job;
    case 'running':
      return started(job);
    case 'succeeded': {
      // An upstream that finished between two polls still passes through in_progress (the generation id).
      const running = await started(job);
      return running && step(running, 'completed', completion(deps, running, result));
    }
    case 'failed':
      return step(job, 'failed', { error: result.error ?? `Provider ${job.provider} reported the job as failed` });
    case 'cancelled':
      return step(job, 'cancelled');
  }
}

/**
 * The completion patch: outputs, their expiry (the upstream's own, else `videos.output_ttl_s` from now) and the
 * cost at the price agreed when the job was created: `per_job + per_second × seconds` (the upstream's seconds,
 * at most the requested duration, else that); with no price at all, the cost the upstream reports, at most
 * MAX_VIDEO_COST_USD. Why the bounds: an upstream's `seconds: 1e308` made the cost Infinity, which the store
 * refuses, so the job was polled every round until `job_timeout_s` and never billed.
 */
function completion(deps: AdvanceDeps, job: VideoJob, result: VideoPollResult): Omit<VideoJobPatch, 'status' | 'updatedAt'> {
  const now = deps.clock();
  const pricing = job.request.pricing ?? { per_second: 0, per_job: 0 };
  const requested = Number(job.request.params.duration_seconds);
  // A job stored without a usable duration: the config's ceiling bounds what its upstream says.
  const asked = Number.isFinite(requested) && requested >= 0 ? requested : undefined;
  const seconds = Math.min(result.usage?.seconds ?? asked ?? 0, asked ?? deps.services.config.videos.max_duration_seconds);
  const priced = pricing.per_job > 0 || pricing.per_second > 0;
  const cost = priced ? pricing.per_job + pricing.per_second * seconds : Math.min(result.usage?.cost ?? 0, MAX_VIDEO_COST_USD);
  return {
    urls: result.urls ?? [],
    costUsd: roundUsd(cost),
    expiresAt: result.expiresAt ?? now + deps.services.config.videos.output_ttl_s * 1000,
    completedAt: now,
  };
}

/** The most a job is billed at its upstream's word: what the spend counters can count (2^53 − 1 nano-USD, about $9 M). */
export const MAX_VIDEO_COST_USD = Number.MAX_SAFE_INTEGER / 1e9;
