/**
 * What `SpendControl` (control.ts) works with: its dependencies, what an admitted request holds, the hold
 * timings, and the pure helpers it builds its shared-state calls and rejections with.
 */

import type { Logger } from 'pino';
import type { ByokKeys } from '../auth/byok-keys';
import type { GatewayConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import { fromNano, toNano, type BudgetLine, type ReserveResult, type SettleInput, type SharedState } from '../state/types';
import type { Account, Store } from '../store/types';
import { counterId, type ApplicableBudget } from './budgets';
import type { Estimate, Priced } from './estimate';
import type { LedgerWriter } from './ledger';
import { budgetRejection, creditsRejection } from './rejections';

/** What an admitted request holds, to be settled when it ends. */
export interface Admission {
  holdId: string;
  groups: string[];
  counters: string[];
  inFlightGroup: string | null;
  settlementMs: number;
  /** When the hold expires (epoch ms): settlement retries stop before it (SettleRetries). */
  holdUntil: number;
  /**
   * When the request was admitted (epoch ms, the spend clock): its ledger row is dated then, so the row and
   * the budget counters its cost is added to are of the same window (a stream that ran past midnight had
   * its cost in yesterday's counter and its row in today's, and today's limit let a whole request more through).
   */
  admittedAt: number;
}

export interface SpendDeps {
  store: Store;
  state: SharedState;
  ledger: LedgerWriter;
  logger: Logger;
  /** Workspace provider keys: a request served only with them is exempt from part of the checks (spec 8.2.4). */
  byok?: ByokKeys;
  clock?: () => number;
}

/** How a request's spend is judged: the models it may be served by, and its estimate (made only when something holds it). */
export interface Basis {
  p: Priced;
  /** The token estimate (what the in-flight budget holds). */
  estimate(): Estimate;
  /** The per-request fees the calls may be billed, which budgets hold on top of the estimate. */
  fees(): number;
}

/** Counters live a day past their window so a request near the boundary still finds them. */
export const COUNTER_GRACE_MS = 86_400_000;

/**
 * A video job's hold lasts this long past `videos.job_timeout_s` after its admission: the submission itself
 * (before the job's creation time is set) and the poller reaching a timed-out job take a while, and a hold
 * that lapsed before its job ended would stop counting against the budgets it was taken in.
 */
export const VIDEO_HOLD_MARGIN_MS = 10 * 60_000;

/** How long a settlement whose shared-state call failed is retried when it has no live hold to test (see `retryCount`). */
export const COUNT_RETRY_MS = 10 * 60_000;

/** Whether the account pays from its balance (`prepaid`, the default), rather than being billed outside the gateway. */
export function isPrepaid(config: GatewayConfig, account: Account | null): boolean {
  return (config.accounts.find((a) => a.name === account?.name)?.billing ?? 'prepaid') === 'prepaid';
}

/** The shared-state hold group of a prepaid account's unfinished video jobs, capped by its balance. */
export function videoInFlightGroup(accountId: string): string {
  return `videos:account:${accountId}`;
}

/** The budget lines of `budgets` at `date`, in their order (spec 8.4's). */
export function budgetLines(budgets: ApplicableBudget[], date: Date): BudgetLine[] {
  return budgets.map((b) => ({
    counter: counterId(b.group, b.interval, date),
    group: b.group,
    limitNano: toNano(b.limitUsd),
    includeByok: b.includeByok,
  }));
}

/** The rejection of a reserve refused by a budget line or the balance (the in-flight budget's differs per caller). */
export function refusal(result: Exclude<ReserveResult, { ok: true } | { reason: 'in_flight' }>, budgets: ApplicableBudget[], balance: number, date: Date): GatewayError {
  switch (result.reason) {
    case 'budget':
      return budgetRejection(budgets[result.line], fromNano(result.spentNano), fromNano(result.heldNano), date);
    case 'balance':
      return creditsRejection('insufficient_credits', balance);
    default:
      return new GatewayError('server', 'spend counters could not be initialized');
  }
}

/** A settlement that only drops a hold (no cost counted): a replaced hold, or one a failed reserve may have taken. */
export function releaseOf(holdId: string, groups: string[], inFlightGroup: string | null): SettleInput {
  return { holdId, groups, counters: [], byok: false, costNano: 0, inFlight: inFlightGroup ? { group: inFlightGroup, until: 0 } : null };
}

/**
 * The shared state or the store failed (Redis or PostgreSQL unreachable): fail closed, with a typed 503 and
 * a short Retry-After rather than admitting unchecked spend. The cause is logged, never shown.
 */
export function checksUnavailable(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  return new GatewayError('server', 'Spend and rate-limit checks are unavailable', { status: 503, headers: { 'Retry-After': '1' }, cause: err });
}

/** Seconds until the in-flight budget frees up: the next hold expiry, at most the configured hint. */
export function retryAfter(nextExpiry: number | null, now: number, max: number): number {
  if (nextExpiry === null) return max;
  return Math.max(1, Math.min(max, Math.ceil((nextExpiry - now) / 1000)));
}
