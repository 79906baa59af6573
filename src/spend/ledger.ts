import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { GatewayState } from '../pipeline/types';
import type { LedgerRow, Store } from '../store/types';
import { isoTime } from '../store/iso-time';
import { roundUsd } from './pricing';

/** The ledger row of a request that reached a provider, or null when it never did. */
export function ledgerRowOf(state: GatewayState, now: number = Date.now()): LedgerRow | null {
  const { key, route, requestId } = state;
  if (!key || !route || !requestId) return null;
  const u = state.usage;
  return {
    generationId: requestId,
    keyId: key.id,
    userId: key.creatorUserId,
    workspaceId: key.workspaceId,
    accountId: key.accountId,
    endpoint: state.endpoint === 'messages' ? 'messages' : 'chat_completions',
    model: route.model,
    provider: route.provider,
    upstreamModel: route.upstreamModel,
    promptTokens: u?.inputTokens ?? 0,
    completionTokens: u?.outputTokens ?? 0,
    cachedTokens: u?.cachedTokens ?? 0,
    cacheWriteTokens: u?.cacheWriteTokens ?? 0,
    reasoningTokens: u?.reasoningTokens ?? 0,
    costUsd: state.costUsd ?? 0,
    isByok: route.isByok,
    status: state.outcome,
    createdAt: isoTime(now),
  };
}

/**
 * The paid and BYOK parts of a request's cost: by its route, unless its calls were served both ways
 * (`state.byokCostUsd`, set by fusion and the tool loop). A BYOK part is never debited from the balance.
 */
export function costParts(state: GatewayState): { paid: number; byok: number } {
  const cost = state.costUsd ?? 0;
  const own = state.byokCostUsd;
  if (own === undefined || own === null) return state.route?.isByok ? { paid: 0, byok: cost } : { paid: cost, byok: 0 };
  const byok = Math.min(Math.max(0, own), cost);
  return { paid: roundUsd(cost - byok), byok };
}

/**
 * The ledger rows of a request: `ledgerRowOf`'s, flagged by what it billed; when its calls were served both
 * ways, two: the generation id's with the part paid with the gateway's keys (and the usage), and
 * `<generation id>-byok` with the part served with the workspace's own keys. One row flagged by the last
 * call's key had either left the operator's calls undebited or debited the workspace's own.
 */
export function ledgerRowsOf(state: GatewayState, now: number = Date.now()): LedgerRow[] {
  const row = ledgerRowOf(state, now);
  if (!row) return [];
  if (state.byokCostUsd == null) return [row];
  const { paid, byok } = costParts(state);
  if (byok <= 0 && paid <= 0) return [row];
  if (byok <= 0 || paid <= 0) return [{ ...row, isByok: byok > 0 }];
  const none = { promptTokens: 0, completionTokens: 0, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 };
  return [
    { ...row, costUsd: paid, isByok: false },
    { ...row, ...none, generationId: `${row.generationId}-byok`, costUsd: byok, isByok: true },
  ];
}

export interface LedgerOptions {
  /** Longest a row waits before it is written. */
  flushMs: number;
  /** A batch this large is written at once. */
  maxBatch: number;
}

/** The waits between `close()`'s attempts at a failed write: 0.1, 0.2, 0.4, 0.8 s (1.5 s in all with 5 attempts). */
export const CLOSE_RETRY_MS = 100;

/**
 * Batches ledger rows off the request path: a request hands its row over and is done; rows are written
 * in one transaction per batch (every `flushMs` or `maxBatch` rows). A failed write keeps its rows and
 * retries; `close()` writes everything still queued, so a graceful shutdown loses no row. From `close()` on,
 * a row handed over is written at once (a request that ends during or after the shutdown's ledger step: its
 * row had waited for a timer that was cleared, or that never ran before the store closed). Rows are
 * idempotent by generation id in the store, so a retry after an unclear failure cannot double-bill.
 *
 * @example const ledger = new LedgerWriter(store, logger, { flushMs: 20, maxBatch: 256 }); ledger.add(row); await ledger.close();
 */
export class LedgerWriter {
  private queue: LedgerRow[] = [];
  /** Journal entries (pending rows) to delete in the same transaction as the queued rows. */
  private releases: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private failures = 0;
  /** Whether the last write the store was asked for failed. */
  private lastFailed = false;
  /** Set by `close()`: rows are written as they come, not after `flushMs`. */
  private closing = false;

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
    private readonly options: LedgerOptions,
  ) {}

  /** Queues a request's row; `pendingId` is its journal entry (see journal.ts), deleted when the row is written. */
  add(row: LedgerRow, pendingId?: string | null): void {
    // The store refuses a cost that is no number; one such row would hold every row queued behind it (the
    // batch is retried as a whole). It is written at cost 0 and said once, loudly.
    if (!Number.isFinite(row.costUsd)) {
      this.logger.error({ generation_id: row.generationId, model: row.model, cost: String(row.costUsd) }, 'ledger row cost is not a finite number; written at cost 0');
      row = { ...row, costUsd: 0 };
    }
    this.queue.push(row);
    if (pendingId) this.releases.push(pendingId);
    if (this.closing || this.queue.length >= this.options.maxBatch) void this.flush();
    else this.schedule(this.options.flushMs);
  }

  /** Deletes a journal entry of a request that ends without a ledger row (no provider answered). */
  release(pendingId: string): void {
    this.releases.push(pendingId);
    if (this.closing) void this.flush();
    else this.schedule(this.options.flushMs);
  }

  /** Rows handed over but not yet written. */
  get pending(): number {
    return this.queue.length;
  }

  /** Writes everything queued so far (after any write already under way). */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.writing = this.writing.then(() => this.writeQueued());
    return this.writing;
  }

  /**
   * Writes everything queued, rows handed over meanwhile included, until the queue is empty or the store has
   * failed `attempts` times, waiting `retryMs` × 2^n between failed attempts (0.1 + 0.2 + 0.4 + 0.8 s with the
   * defaults: inside the few seconds the README's shutdown gives after the drain). A failed write is retried
   * after a wait, not at once: a database that blinked (a failover, a lock held by the CLI) had been asked
   * five times within a millisecond. Rows handed over after it returns are written at once as well; calling
   * it again waits for them.
   */
  async close(attempts = 5, retryMs = CLOSE_RETRY_MS): Promise<void> {
    this.closing = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    for (let failed = 0; this.queue.length > 0 || this.releases.length > 0; ) {
      await this.flush();
      clearTimeout(this.timer); // the writer's own retry timer: close() retries itself
      this.timer = undefined;
      if (!this.lastFailed) continue; // written (rows handed over meanwhile go next)
      if (++failed >= attempts) break;
      await sleep(retryMs * 2 ** (failed - 1));
    }
    await this.writing; // a write under way (rows handed over since: see add)
    if (this.queue.length > 0) this.logger.error({ rows: this.queue.length }, 'ledger rows could not be written at shutdown');
  }

  private schedule(ms: number): void {
    if (this.timer) return;
    this.timer = setTimeout(() => void this.flush(), ms);
    this.timer.unref();
  }

  private async writeQueued(): Promise<void> {
    if (this.queue.length === 0 && this.releases.length === 0) return;
    const batch = this.queue;
    const releases = this.releases;
    this.queue = [];
    this.releases = [];
    try {
      await this.store.insertLedgerBatch(batch, releases);
      this.failures = 0;
      this.lastFailed = false;
    } catch (err) {
      // Keep the rows (in order, ahead of newer ones) and try again later.
      this.queue = batch.concat(this.queue);
      this.releases = releases.concat(this.releases);
      this.failures++;
      this.lastFailed = true;
      this.logger.error({ err, rows: batch.length, attempt: this.failures }, 'ledger write failed; will retry');
      this.schedule(Math.min(5_000, 100 * 2 ** this.failures));
    }
  }
}
