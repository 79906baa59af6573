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
 * admission), then given up: its cost is then missing from the spend counters (the ledger has it) until they
 * are rebuilt. Rounds run one settlement at a time and
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
  private timer: NodeJS.Timeout | undefined;
  private delay: number;
  private running: Promise<void> | null = null;
  private readonly options: SettleRetryOptions;

  constructor(
    private readonly settle: (input: SettleInput) => Promise<void>,
    private readonly logger: Logger,
    private readonly clock: () => number,
    options: Partial<SettleRetryOptions> = {},
  ) {
    this.options = { ...DEFAULTS, ...options };
    this.delay = this.options.firstDelayMs;
  }

  /** Settlements waiting for the state to come back. */
  get pending(): number {
    return this.waiting.length;
  }

  /**
   * `neverRan`: the first attempt is known not to have reached the state (refused before it was sent), so the
   * retry counts the cost whether or not a hold is there (a video job's cost has no hold: `groups` is empty).
   */
  add(input: SettleInput, generationId: string | null, holdUntil: number, neverRan = false): void {
    if (this.waiting.length >= this.options.maxWaiting) this.giveUp(this.waiting.shift()!, 'too many settlements waiting');
    this.waiting.push({ input: { ...input, retry: !neverRan }, generationId, since: this.clock(), holdUntil });
    this.schedule();
  }

  /** One round now (after any round under way); what still fails keeps waiting. */
  async retryNow(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.running ??= this.round().finally(() => {
      this.running = null;
      if (this.waiting.length > 0) this.schedule();
    });
    await this.running;
  }

  /** At shutdown: one last round, then whatever is left is given up (logged). */
  async close(): Promise<void> {
    await this.retryNow();
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const w of this.waiting.splice(0)) this.giveUp(w, 'shutting down');
  }

  private schedule(): void {
    if (this.timer || this.running) return;
    this.timer = setTimeout(() => void this.retryNow(), this.delay);
    this.timer.unref();
  }

  private async round(): Promise<void> {
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
        // A retry that counts whatever is held, and may have run this time (a timeout), must not count twice.
        if (!next.input.retry && !neverSent(err)) next.input = { ...next.input, retry: true };
        this.delay = Math.min(this.options.maxDelayMs, this.delay * 2);
        return;
      }
      this.waiting.shift();
      this.delay = this.options.firstDelayMs;
    }
  }

  private giveUp(w: Waiting, why: string): void {
    this.logger.error({ generation_id: w.generationId, hold_id: w.input.holdId }, `settling a spend hold failed for good (${why}); it expires by TTL`);
  }
}
