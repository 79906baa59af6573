import { randomUUID } from 'node:crypto';
import type { Services } from '../services';
import { applicableBudgets, counterId } from '../spend/budgets';
import { toNano } from '../state/types';
import type { LedgerRow, VideoJob } from '../store/types';

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
 * completion and billing, cannot bill twice. Only the writer of the row adds the cost to the cached budget
 * counters of the shared state, for the same reason.
 */
export async function billVideoJob(services: Services, job: VideoJob): Promise<void> {
  if (!job.generationId) throw new Error(`video job ${job.id} is ${job.status} without a generation id`);
  const row = videoLedgerRow(job);
  const inserted = await services.store.insertLedger(row);
  if (inserted) {
    services.spend.forgetAccount(job.accountId);
    // The counters are caches of ledger sums: a failure here is logged (and retried when the state never ran
    // the call, see countInBudgets), never a reason to bill again.
    await countInBudgets(services, job, row).catch((err) =>
      services.logger.error({ err, video_job_id: job.id }, 'adding a video job cost to the spend counters failed'),
    );
  }
  await services.store.markVideoJobBilled(job.id);
}

/** Adds the job's cost to the existing spend counters of every budget of its key (missing ones are rebuilt from the ledger). */
async function countInBudgets(services: Services, job: VideoJob, row: LedgerRow): Promise<void> {
  const key = await services.store.getKey(job.keyId);
  if (!key || row.costUsd <= 0) return;
  const workspace = await services.spend.workspaceConfig(key, services.config);
  const at = new Date(row.createdAt);
  const counters = applicableBudgets(services.config, key, workspace).map((b) => counterId(b.group, b.interval, at));
  if (counters.length === 0) return;
  const input = { holdId: randomUUID(), groups: [], counters: [...new Set(counters)], byok: row.isByok, costNano: toNano(row.costUsd), inFlight: null };
  await services.state.settle(input).catch((err) => {
    if (services.spend.retryCount(input, row.generationId, err)) {
      services.logger.warn({ err, video_job_id: job.id }, 'adding a video job cost to the spend counters failed; retrying until the shared state takes it');
    } else services.logger.error({ err, video_job_id: job.id }, 'adding a video job cost to the spend counters failed');
  });
}
