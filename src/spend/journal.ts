import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { GatewayError } from '../errors/gateway-error';
import type { GatewayState } from '../pipeline/types';
import type { Candidate } from '../routing/candidates';
import type { PendingLedgerRow, Store } from '../store/types';
import { isoTime } from '../store/iso-time';

const RECORDED: Promise<void> = Promise.resolve();

export interface JournalDeps {
  store: Store;
  logger: Logger;
  /** `spend.hold_ttl_ms` of the current config: a pending row older than this, of another process, is finalised. */
  holdTtlMs: () => number;
}

/**
 * The pending row of a request about to be sent upstream: the first candidate's route (the endpoint that
 * will answer is not known yet). Null when the request has no key (nothing to bill).
 */
export function pendingRowOf(state: GatewayState, first: Candidate, isByok: boolean, owner: string): PendingLedgerRow | null {
  const key = state.key;
  if (!key || !state.requestId) return null;
  return {
    generationId: state.requestId,
    keyId: key.id,
    userId: key.creatorUserId,
    workspaceId: key.workspaceId,
    accountId: key.accountId,
    endpoint: state.endpoint === 'messages' ? 'messages' : 'chat_completions',
    model: first.model.id,
    provider: first.provider.id,
    upstreamModel: first.endpoint.upstream_model,
    isByok,
    owner,
    createdAt: isoTime(Date.now()),
  };
}

/**
 * The ledger journal (README "Ledger durability"): before a request is sent upstream its pending row is
 * written durably, so a process killed with requests in flight (or with rows still queued in LedgerWriter)
 * loses none of them. The row's ledger row releases it when it is written (LedgerWriter.add); pending rows
 * a dead process left behind are finalised as `interrupted` (cost 0) by `sweep`, at start and periodically,
 * once they are older than the hold TTL (its holds have lapsed by then, and a live process's request never
 * runs that long).
 *
 * A store whose pending rows are durable once a synchronous call returns (the SQLite store's journal files,
 * `Store.insertPendingLedgerNow`) writes each row at once. Otherwise writes use group commit: rows handed over
 * while a write is under way (or in the same event-loop turn) go in the next single transaction, and each
 * request waits only for the commit that holds its row.
 *
 * @example const journal = new LedgerJournal({ store, logger, holdTtlMs: () => 1_800_000 }); journal.start();
 *          await journal.record(row); … await journal.close();
 */
export class LedgerJournal {
  /** This process, in the rows it writes (random per start). */
  readonly owner = randomUUID();
  private batch: PendingLedgerRow[] = [];
  private waiters: { resolve: () => void; reject: (err: Error) => void }[] = [];
  private writing: Promise<void> | null = null;
  private scheduled = false;
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<number> | null = null;

  constructor(private readonly deps: JournalDeps) {}

  /** Resolves once the row is committed; rejects with a typed 503 when the store cannot take it. */
  record(row: PendingLedgerRow): Promise<void> {
    const store = this.deps.store;
    if (store.insertPendingLedgerNow) {
      try {
        store.insertPendingLedgerNow([row]);
        return RECORDED;
      } catch (err) {
        return Promise.reject(this.refusal(err, 1));
      }
    }
    return new Promise((resolve, reject) => {
      this.batch.push(row);
      this.waiters.push({ resolve, reject });
      if (!this.writing && !this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.write());
      }
    });
  }

  /** Finalises rows of dead processes now, then every quarter of the hold TTL (1 s to 60 s). */
  start(): void {
    void this.sweep();
    const every = Math.min(60_000, Math.max(1000, Math.floor(this.deps.holdTtlMs() / 4)));
    this.timer = setInterval(() => void this.sweep(), every);
    this.timer.unref();
  }

  /** Turns other processes' pending rows older than the hold TTL into `interrupted` ledger rows; returns how many. */
  sweep(): Promise<number> {
    this.sweeping ??= Promise.resolve()
      .then(() => this.deps.store.finalizePendingLedger({ beforeMs: Date.now() - this.deps.holdTtlMs(), exceptOwner: this.owner }))
      .then((n) => {
        if (n > 0) this.deps.logger.warn({ rows: n }, 'ledger: requests left in flight by a stopped process were written as interrupted');
        return n;
      })
      .catch((err) => {
        this.deps.logger.error({ err }, 'ledger: finalising pending rows failed; will retry');
        return 0;
      })
      .finally(() => (this.sweeping = null));
    return this.sweeping;
  }

  /** Stops sweeping and waits for writes under way. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    while (this.writing || this.scheduled || this.batch.length > 0) await (this.writing ?? this.write());
    await this.sweeping;
  }

  private refusal(err: unknown, rows: number): GatewayError {
    this.deps.logger.error({ err, rows }, 'ledger: writing pending rows failed');
    return new GatewayError('server', 'The ledger is unavailable', { status: 503, headers: { 'Retry-After': '1' }, cause: err });
  }

  private write(): Promise<void> {
    this.scheduled = false;
    if (this.writing || this.batch.length === 0) return this.writing ?? Promise.resolve();
    const rows = this.batch;
    const waiters = this.waiters;
    this.batch = [];
    this.waiters = [];
    this.writing = this.deps.store.insertPendingLedger(rows).then(
      () => waiters.forEach((w) => w.resolve()),
      (err) => {
        const refusal = this.refusal(err, rows.length);
        waiters.forEach((w) => w.reject(refusal));
      },
    );
    void this.writing.finally(() => {
      this.writing = null;
      // Rows that arrived during the write: the next group.
      if (this.batch.length > 0) void this.write();
    });
    return this.writing;
  }
}
