import { randomUUID } from 'node:crypto';
import type { VideoModelConfig } from '../config/types';
import type { Services } from '../services';
import { applicableBudgets, counterId } from '../spend/budgets';
import { roundUsd } from '../spend/pricing';
import { toNano, type RestoredHold, type SharedState } from '../state/types';
import type { LedgerRow, Store, VideoJob, VideoJobCursor } from '../store/types';

/**
 * What a video job is held at before it is submitted: the largest `per_job + per_second × duration` over the
 * endpoints it may go to. An endpoint with no price contributes 0 (its cost is whatever its upstream reports,
 * unknown up front).
 *
 * @example videoEstimate(model.endpoints, 8) // 0.85 for { per_second: 0.1, per_job: 0.05 }
 */
export function videoEstimate(endpoints: VideoModelConfig['endpoints'], durationSeconds: number): number {
  let most = 0;
  for (const { pricing } of endpoints) most = Math.max(most, pricing.per_job + pricing.per_second * durationSeconds);
  return roundUsd(most);
}

/**
 * Puts the holds of unfinished video jobs back into in-process shared state, which a restart empties (Redis
 * keeps them): without it the money a job's estimate held was free again after a restart, and a key's limit,
 * a budget or a prepaid balance could be committed twice over. Run once at start, before the poller's first
 * round can release any of them; returns how many holds were put back.
 */
export async function restoreVideoHolds(store: Store, state: SharedState): Promise<number> {
  if (!state.restoreHolds) return 0;
  const holds: RestoredHold[] = [];
  let after: VideoJobCursor | undefined;
  for (;;) {
    const jobs = await store.listUnfinishedVideoJobs(RESTORE_PAGE, after);
    for (const job of jobs) {
      const h = job.request.hold;
      if (h?.amountNano) holds.push({ id: h.id, groups: h.inFlightGroup ? [...h.groups, h.inFlightGroup] : h.groups, amountNano: h.amountNano, until: h.until });
    }
    if (jobs.length < RESTORE_PAGE) break;
    const last = jobs[jobs.length - 1];
    after = { updatedAt: last.updatedAt, id: last.id };
  }
  await state.restoreHolds(holds);
  return holds.length;
}

const RESTORE_PAGE = 500;

/** A job that ended unbilled (failed, cancelled, timed out): its hold, if it has one, is released. Never throws. */
export async function releaseVideoHold(services: Services, job: VideoJob): Promise<void> {
  if (job.request.hold) await services.spend.settleVideoJob(services.config, job.request.hold, job.id);
}

/** The ledger row of a completed job: keyed by the job's generation id, so it can be written only once. */
export function videoLedgerRow(job: VideoJob): LedgerRow {
  return {
    generationId: job.generationId!,
    keyId: job.keyId,
    userId: job.userId,
    workspaceId: job.workspaceId,
    accountId: job.accountId,
    endpoint: 'videos',
    model: job.model,
    provider: job.provider,
    upstreamModel: job.upstreamModel,
    promptTokens: 0,
    completionTokens: 0,
    cachedTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
    costUsd: job.costUsd ?? 0,
    isByok: job.isByok,
    status: 'completed',
    createdAt: new Date(job.completedAt ?? job.updatedAt).toISOString(),
  };
}

/**
 * Bills a completed (or since expired) job exactly once: the ledger row is written straight to the store
 * (not through the batching writer, so it is durable before the job is marked billed) and debits the
 * account; the store ignores a second row with the same generation id, so two pollers, or a restart between
 * completion and billing, cannot bill twice. The writer of the row adds the cost to the cached budget
 * counters of the shared state and releases the job's hold in the same call. A poller that finds the row
 * already written settles the hold too, counting the cost only if the hold is still there (see
 * `settleVideoJob`): the writer may have died before its settlement (kill -9, OOM), which had left the hold
 * until it lapsed and the cost out of the counters for good; and whichever of the two settles first counts it.
 */
export async function billVideoJob(services: Services, job: VideoJob): Promise<void> {
  if (!job.generationId) throw new Error(`video job ${job.id} is ${job.status} without a generation id`);
  const row = videoLedgerRow(job);
  const inserted = await services.store.insertLedger(row);
  if (inserted) services.spend.forgetAccount(job.accountId);
  if (inserted || job.request.hold) {
    // The counters are caches of ledger sums: a failure here is logged (and retried when the state never ran
    // the call, see countInBudgets), never a reason to bill again.
    await countInBudgets(services, job, row, inserted).catch((err) =>
      services.logger.error({ err, video_job_id: job.id }, 'adding a video job cost to the spend counters failed'),
    );
  }
  await services.store.markVideoJobBilled(job.id);
}

/**
 * Adds the job's cost to the existing spend counters of every budget of its key (missing ones are rebuilt from
 * the ledger), and releases its hold in the same settlement. A job created before holds has none: its cost is
 * counted alone, as it was then, and only by the row's writer (`wroteRow`). A hold held in no budget group
 * cannot tell whether the writer counted the cost, so only the writer counts it then.
 */
async function countInBudgets(services: Services, job: VideoJob, row: LedgerRow, wroteRow: boolean): Promise<void> {
  const hold = job.request.hold;
  if (hold) {
    let counters: string[] = [];
    try {
      if (row.costUsd > 0 && (wroteRow || hold.groups.length > 0)) counters = await budgetCounters(services, job.keyId, new Date(row.createdAt));
    } catch (err) {
      // The hold is released all the same: the balance was debited, so a prepaid account's video group would
      // count the job twice until the hold lapsed (an hour or more).
      services.logger.error({ err, video_job_id: job.id }, 'reading the budgets of a billed video job failed; its cost is missing from the spend counters until they are rebuilt');
    }
    return services.spend.settleVideoJob(services.config, hold, job.id, { counters, byok: row.isByok, costUsd: row.costUsd });
  }
  if (!wroteRow) return;
  const counters = row.costUsd > 0 ? await budgetCounters(services, job.keyId, new Date(row.createdAt)) : [];
  if (counters.length === 0) return;
  const input = { holdId: randomUUID(), groups: [], counters, byok: row.isByok, costNano: toNano(row.costUsd), inFlight: null };
  await services.state.settle(input).catch((err) => {
    if (services.spend.retryCount(input, row.generationId, err)) {
      services.logger.warn({ err, video_job_id: job.id }, 'adding a video job cost to the spend counters failed; retrying until the shared state takes it');
    } else services.logger.warn({ err, video_job_id: job.id }, 'adding a video job cost to the spend counters may have failed; they are rebuilt from the ledger');
  });
}

/** The spend counters, at `at`, of every budget of the key (none when the key is gone). */
async function budgetCounters(services: Services, keyId: string, at: Date): Promise<string[]> {
  const key = await services.store.getKey(keyId);
  if (!key) return [];
  const workspace = await services.spend.workspaceConfig(key, services.config);
  return [...new Set(applicableBudgets(services.config, key, workspace).map((b) => counterId(b.group, b.interval, at)))];
}
