import type { Logger } from 'pino';
import type { SettleInput } from '../state/types';

interface Waiting {
  input: SettleInput;
  generationId: string | null;
  since: number;
  /** When the hold expires (epoch ms): past it a retry could not tell a settled hold from an expired one. */
  holdUntil: number;
}

/** Retries stop this long before the hold expires (clocks of processes sharing the state differ a little). */
export const HOLD_MARGIN_MS = 2_000;

export interface SettleRetryOptions {
  /** First wait before a retry; it doubles after each failed round, up to `maxDelayMs`. */
  firstDelayMs: number;
  maxDelayMs: number;
  /** A settlement still failing after this long is given up (logged); its hold expires by TTL. */
  maxAgeMs: number;
  /** Most settlements kept waiting; beyond it the oldest is given up (logged). */
  maxWaiting: number;
}

const DEFAULTS: SettleRetryOptions = { firstDelayMs: 250, maxDelayMs: 5_000, maxAgeMs: 10 * 60_000, maxWaiting: 100_000 };

/**
 * Settlements (a finished request's hold released and its cost counted) that the shared state refused, sent
 * again until they go through. Without it one Redis blip at the moment requests finished left their holds
 * held until the hold TTL (30 minutes: a prepaid account refused as "in flight" with nothing in flight) and
 * their costs out of the spend counters for good (a lifetime key limit overspent once the holds lapsed).
 * Retries are marked `retry`, so the state counts a cost only if the hold was still there: a first attempt
 * that did run (its reply lost to a timeout) is not counted twice. That test holds only while the hold
 * cannot have expired, so a settlement is retried until shortly before its hold's expiry (`hold_ttl_ms` after
 * admission), then given up: its cost would be missing from the spend counters (the ledger has it), so those
 * counters are deleted instead (retried until the state takes it) and the next reserve rebuilds them from the
 * ledger. Rounds run one settlement at a time and
 * stop at the first failure (the state is still down); the wait doubles between failed rounds.
 *
 * @example const retries = new SettleRetries((input) => state.settle(input), logger, Date.now);
 *          state.settle(input).catch(() => retries.add(input, generationId));
 */
/**
 * Errors of a state call refused before it was sent: ioredis without its offline queue while disconnected,
 * and the Redis state's own wait for its first connection. Timeouts and closed connections may have run.
 */
export function neverSent(err: unknown): boolean {
  const message = (err as { message?: unknown })?.message;
  return typeof message === 'string' && /^(Stream isn't writeable|redis not ready after)/.test(message);
}

export class SettleRetries {
  private waiting: Waiting[] = [];
  /**
   * Spend counters a settlement given up for good could not add its cost to: deleted (retried like the
   * settlements, but for as long as it takes: a delete is idempotent), so the next reserve rebuilds them from
   * the ledger, which has the cost.
   */
  private readonly stale = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private delay: number;
  private running: Promise<void> | null = null;
  private readonly options: SettleRetryOptions;

  constructor(
    private readonly settle: (input: SettleInput) => Promise<void>,
    private readonly logger: Logger,
    private readonly clock: () => number,
    options: Partial<SettleRetryOptions> = {},
    /** Deletes spend counters (SharedState.dropCounters); without it a given-up cost stays missing. */
    private readonly dropCounters?: (counters: string[]) => Promise<void>,
  ) {
    this.options = { ...DEFAULTS, ...options };
    this.delay = this.options.firstDelayMs;
  }

  /** Settlements waiting for the state to come back. */
  get pending(): number {
    return this.waiting.length;
  }

  /**
   * Spend counters a cost may or may not have reached (a call with no hold to test whose reply was lost): they
   * are deleted, retried until the state takes it, and rebuilt from the ledger by the next reserve.
   */
  markStale(counters: string[]): void {
    if (counters.length === 0 || !this.dropCounters) return;
    for (const c of counters) this.stale.add(c);
    this.schedule();
  }

  /** Spend counters waiting to be deleted (then rebuilt from the ledger). */
  get staleCounters(): number {
    return this.stale.size;
  }

  /**
   * `neverRan`: the first attempt is known not to have reached the state (refused before it was sent), so the
   * retry counts the cost whether or not a hold is there (a video job's cost has no hold: `groups` is empty),
   * unless the input itself is a `retry` (a billed video job's: another poller may have counted the cost).
   */
  add(input: SettleInput, generationId: string | null, holdUntil: number, neverRan = false): void {
    if (this.waiting.length >= this.options.maxWaiting) this.giveUp(this.waiting.shift()!, 'too many settlements waiting');
    this.waiting.push({ input: { ...input, retry: input.retry === true || !neverRan }, generationId, since: this.clock(), holdUntil });
    this.schedule();
  }

  /** One round now (after any round under way); what still fails keeps waiting. */
  async retryNow(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.running ??= this.round().finally(() => {
      this.running = null;
      this.schedule();
    });
    await this.running;
  }

  /** At shutdown: one last round, then whatever is left is given up (logged). */
  async close(): Promise<void> {
    await this.retryNow();
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const w of this.waiting.splice(0)) this.giveUp(w, 'shutting down');
    // The last chance for counters that miss a given-up cost (the ones given up just now included).
    if (this.stale.size > 0) await this.dropStale().catch(() => undefined);
    if (this.stale.size > 0) {
      this.logger.error({ counters: [...this.stale] }, 'spend counters missing a cost could not be deleted at shutdown; they stay short until their window ends');
      this.stale.clear();
    }
  }

  private schedule(): void {
    if (this.timer || (this.waiting.length === 0 && this.stale.size === 0) || this.running) return;
    this.timer = setTimeout(() => void this.retryNow(), this.delay);
    this.timer.unref();
  }

  private async round(): Promise<void> {
    await this.settleWaiting();
    // Counters are deleted only once no settlement waits (the state took them all): a settlement sent after
    // a counter was rebuilt from the ledger would add a cost the rebuild already counted.
    if (this.waiting.length > 0 || this.stale.size === 0) return;
    try {
      await this.dropStale();
    } catch {
      this.delay = Math.min(this.options.maxDelayMs, this.delay * 2);
    }
  }

  private async settleWaiting(): Promise<void> {
    while (this.waiting.length > 0) {
      const next = this.waiting[0];
      const now = this.clock();
      if (now - next.since > this.options.maxAgeMs || now > next.holdUntil - HOLD_MARGIN_MS) {
        this.waiting.shift();
        this.giveUp(next, now - next.since > this.options.maxAgeMs ? 'retried for too long' : 'its hold expires');
        continue;
      }
      try {
        await this.settle(next.input);
      } catch (err) {
        const mayHaveRun = !neverSent(err);
        if (mayHaveRun && next.input.groups.length === 0 && next.input.inFlight === null && next.input.costNano > 0) {
          // A cost with no hold to test (a video job's): a retry could not tell whether this attempt counted it.
          // The counters are rebuilt from the ledger instead, which has it.
          this.waiting.shift();
          this.markStale(next.input.counters);
        } else if (!next.input.retry && mayHaveRun) {
          // A retry that counts whatever is held, and may have run this time (a timeout), must not count twice.
          next.input = { ...next.input, retry: true };
        }
        this.delay = Math.min(this.options.maxDelayMs, this.delay * 2);
        return;
      }
      this.waiting.shift();
      this.delay = this.options.firstDelayMs;
    }
  }

  private giveUp(w: Waiting, why: string): void {
    const { costNano, counters } = w.input;
    const rebuild = costNano > 0 && counters.length > 0 && this.dropCounters !== undefined;
    this.logger.error(
      { generation_id: w.generationId, hold_id: w.input.holdId },
      `settling a spend hold failed for good (${why}); it expires by TTL${rebuild ? '; its spend counters are deleted, to be rebuilt from the ledger' : ''}`,
    );
    if (rebuild) this.markStale(counters);
  }

  /**
   * Deletes the counters that miss a given-up cost; throws (they stay) when the state refuses. Settlements
   * that came to wait meanwhile no longer add their cost to a deleted counter: its rebuild reads it from the
   * ledger.
   */
  private async dropStale(): Promise<void> {
    const counters = [...this.stale];
    await this.dropCounters!(counters);
    for (const c of counters) this.stale.delete(c);
    for (const w of this.waiting) w.input = { ...w.input, counters: w.input.counters.filter((c) => !counters.includes(c)) };
    this.logger.warn({ counters }, 'spend counters that missed a given-up settlement were deleted; the next request rebuilds them from the ledger');
  }
}
