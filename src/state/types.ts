/**
 * The shared fast state (DESIGN "State and scale"): spend counters, in-flight holds, rate-limit windows and
 * sticky sessions. `memory` keeps it in this process; `redis` shares it between gateway processes, with every
 * check-and-reserve done atomically in one Lua script. Both drivers pass the same contract test
 * (test/integration/shared-state.test.ts).
 *
 * Money here is integer nano-USD (1e-9 USD): sums stay exact in JS and in Lua (both use doubles, exact for
 * integers up to 2^53, i.e. about 9 million USD per counter).
 *
 * Spend counters are caches of ledger sums. A counter that does not exist (never used, a new window, or lost
 * with Redis) makes `reserve` answer `missing`; the caller then sums the ledger, `initCounter`s, and retries.
 */

/** One budget a request is checked against, in enforcement order. */
export interface BudgetLine {
  /** Spend counter id, e.g. `key:<id>:monthly:1730419200000` or `workspace:<id>:lifetime`. */
  counter: string;
  /** Hold group whose holds count against this budget, e.g. `key:<id>`, `member:<ws>:<user>`, `workspace:<id>`. */
  group: string;
  limitNano: number;
  /** Whether BYOK spend counts against it. */
  includeByok: boolean;
}

/** A hold to put back: see `SharedState.restoreHolds`. */
export interface RestoredHold {
  id: string;
  groups: readonly string[];
  amountNano: number;
  until: number;
}

export interface ReserveInput {
  /** Fresh for every reserve (a random UUID): a hold id is added to its groups, never replaced there. */
  holdId: string;
  /** Epoch ms: holds whose expiry is at or before it no longer count. */
  now: number;
  /** Budgets in enforcement order: the first whose spend plus holds reached its limit rejects. */
  lines: BudgetLine[];
  /** The account balance cannot pay (checked after every budget line, before the in-flight budget). */
  balanceBlocked: boolean;
  /** The estimate to hold in every line's group (and the in-flight group unless it has its own); 0 holds nothing. */
  estimateNano: number;
  /** Expiry of the hold (epoch ms), so a crashed process's holds lapse. */
  holdUntil: number;
  /**
   * The account's in-flight budget, when it applies: holds of `group` plus its estimate must fit `capNano`.
   * `estimateNano`, when given, is what the in-flight budget holds instead of the lines' estimate: it counts
   * token prices only (spec 8.2.3), where a budget line also holds the per-request fee.
   */
  inFlight: { group: string; capNano: number; estimateNano?: number } | null;
}

export type ReserveResult =
  | { ok: true }
  | { ok: false; reason: 'budget'; line: number; spentNano: number; heldNano: number }
  | { ok: false; reason: 'balance' }
  | { ok: false; reason: 'in_flight'; heldNano: number; capNano: number; nextExpiry: number | null }
  /** These counters do not exist: initialize them from the ledger and call again. Nothing was held. */
  | { ok: false; reason: 'missing'; counters: string[] };

export interface SettleInput {
  holdId: string;
  /** Hold groups to release the hold from (the budget lines' groups). */
  groups: string[];
  /** Spend counters the actual cost is added to (existing ones only; a missing one is rebuilt from the ledger). */
  counters: string[];
  byok: boolean;
  costNano: number;
  /** The in-flight hold turns into the actual cost until `until` (epoch ms), covering the balance's lag. */
  inFlight: { group: string; until: number } | null;
  /**
   * The cost is counted only if the hold was still in one of `groups`, so it is never counted twice: set on a
   * settlement sent again after the state refused it (a first attempt that ran, its reply lost, removed it),
   * and on every billed video job's (two pollers may both settle one job: see `billVideoJob`).
   */
  retry?: boolean;
}

/** A fixed-window request counter. */
export interface RateLine {
  key: string;
  limit: number;
  /** End of the current window (epoch ms); the counter expires then. */
  resetAt: number;
  /** Counted from the ledger when missing (the free-model daily counter) instead of starting at zero. */
  rebuild?: boolean;
}

export type RateResult =
  | { ok: true; counts: number[] }
  | { ok: false; reason: 'limited'; line: number; count: number }
  | { ok: false; reason: 'missing'; keys: string[] };

export interface SharedState {
  readonly driver: 'memory' | 'redis';
  reserve(input: ReserveInput): Promise<ReserveResult>;
  /**
   * Puts holds back as they were (each `amountNano` in each of its groups, until `until`; lapsed ones skipped,
   * one still there left as it is), without checking any limit: what the state lost of the holds stored
   * elsewhere (video jobs'). The in-process driver starts empty: at every start. Redis keeps its holds across a
   * gateway restart: only once `holdsLost` says it lost them.
   */
  restoreHolds?(holds: readonly RestoredHold[]): Promise<void>;
  /**
   * Redis only: whether the state may have lost its holds since `markHolds` (Redis restarted without
   * persistence, flushed, or the keys evicted), told by a marker key `markHolds` sets going missing.
   */
  holdsLost?(): Promise<boolean>;
  /** Sets the marker `holdsLost` looks for, once the holds it lost are put back. */
  markHolds?(): Promise<void>;
  settle(input: SettleInput): Promise<void>;
  /** Sets a spend counter unless it exists (first writer wins); `expiresAt` null for lifetime counters. */
  initCounter(counter: string, paidNano: number, byokNano: number, expiresAt: number | null): Promise<void>;
  /**
   * Deletes spend counters, so the next reserve that needs one finds it missing and builds it from the ledger
   * (what a settlement given up for good could not add). Idempotent.
   */
  dropCounters(counters: string[]): Promise<void>;
  /** Held nano-USD of a group at `now` (for GET /key and tests). */
  held(group: string, now: number): Promise<number>;
  /** Checks every line; when none is full, counts the request in all of them. All or nothing. */
  hit(lines: RateLine[], now: number): Promise<RateResult>;
  /** Sets a rate counter unless it exists. */
  initRate(key: string, count: number, resetAt: number): Promise<void>;
  /** Takes one back from a rate counter that exists in its window and is above 0 (a request it counted was not served). */
  unhit(key: string, now: number): Promise<void>;
  /** A rate counter's value (0 when absent). */
  rateCount(key: string, now: number): Promise<number>;
  /** Sticky routing: session → endpoint key, with a TTL refreshed on use. */
  stickyGet(session: string, ttlMs: number): Promise<string | undefined>;
  stickySet(session: string, endpointKey: string, ttlMs: number): Promise<void>;
  stickyDelete(session: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * USD → integer nano-USD, within ±Number.MAX_SAFE_INTEGER (about $9 M); no number (NaN) is 0. Why the
 * ceiling: a larger cost (a provider's absurd usage, a video's absurd duration) is no integer Redis's HINCRBY
 * takes once JS writes it with an exponent (1e21 and up), so its settlement was refused and retried forever;
 * a count of $9 M blocks any budget the same, and the sums stay exact.
 *
 * @example toNano(0.25) // 250000000
 */
export function toNano(usd: number): number {
  const n = Math.round(usd * 1e9);
  if (Number.isNaN(n)) return 0;
  return Math.max(-Number.MAX_SAFE_INTEGER, Math.min(n, Number.MAX_SAFE_INTEGER));
}

/**
 * A hold's amount: `toNano`, at most Number.MAX_SAFE_INTEGER (about $9 M). An estimate past it (a client's
 * `max_tokens: 9007199254740991`) is no integer Redis's INCRBY takes (2^63 at most, and JS writes 1e21 and up
 * with an exponent): the Redis state refused the request with a 503 that the memory state admitted. A hold of
 * $9 M blocks any budget the same; the sums stay exact.
 *
 * @example holdNano(1.8e13) // 9007199254740991
 */
export function holdNano(usd: number): number {
  return Math.min(toNano(usd), Number.MAX_SAFE_INTEGER);
}

/** Integer nano-USD → USD. */
export function fromNano(nano: number): number {
  return nano / 1e9;
}
