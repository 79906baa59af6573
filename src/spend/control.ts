import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { GatewayConfig, ModelConfig, WorkspaceConfig } from '../config/types';
import type { GatewayState } from '../pipeline/types';
import { fromNano, holdNano, toNano, type BudgetLine, type ReserveInput, type ReserveResult, type SettleInput } from '../state/types';
import type { Account, KeyRecord, VideoJobHold } from '../store/types';
import { budgetLines, checksUnavailable, COUNT_RETRY_MS, COUNTER_GRACE_MS, isPrepaid, refusal, releaseOf, retryAfter, VIDEO_HOLD_MARGIN_MS, videoInFlightGroup } from './admission';
import type { Admission, Basis, SpendDeps } from './admission';
import { applicableBudgets, budgetWindow, type ApplicableBudget } from './budgets';
import { estimateCalls, estimateOf, priced, pricedCalls, requestFee, requestFees, unpriced, type PlannedCall } from './estimate';
import { creditsRejection, inFlightRejection, videoCreditsRejection } from './rejections';
import { HOLD_MARGIN_MS, neverSent, SettleRetries } from './settle-retry';
import { costParts } from './ledger';
import { requestedModels } from '../routing/candidates';

/**
 * The spend checks of spec 8.2 and 8.4, run before any provider is contacted, and the settlement after.
 *
 * `admit` checks, in order: guardrail budgets, workspace budgets, the key's own limit, the account balance,
 * the in-flight budget; all in one atomic `reserve` of the shared state, which also holds the request's
 * estimate in each budget it counts against. `settle` releases the hold and adds the actual cost.
 * `admitVideoJob` and `settleVideoJob` do the same for video jobs, whose holds are stored with the job and
 * outlive the request (any process may end them). Outlives config reloads (it keeps the account cache); the config is passed in per call.
 *
 * @example const admission = await spend.admit(config, models, state); … spend.settle(admission, state);
 */
export class SpendControl {
  private readonly accounts = new LRUCache<string, Account>({ max: 10_000, ttl: 1000 });
  private readonly workspaceNames = new LRUCache<string, string>({ max: 10_000 });
  /** Admissions of this process not settled yet (for the `gateway_in_flight_holds` gauge). */
  private open = 0;
  readonly clock: () => number;
  /** Settlements and releases the shared state refused, sent again until it takes them. */
  private readonly retries: SettleRetries;

  constructor(private readonly deps: SpendDeps) {
    this.clock = deps.clock ?? Date.now;
    this.retries = new SettleRetries((input) => deps.state.settle(input), deps.logger, this.clock, {}, (counters) => deps.state.dropCounters(counters));
  }

  async admit(config: GatewayConfig, models: ReadonlyMap<string, ModelConfig>, state: GatewayState): Promise<Admission | null> {
    const body = state.body!;
    const p = priced(body, models);
    return this.admitWith(config, state, { p, estimate: () => estimateOf(body, p, config.spend.max_completion_tokens), fees: () => requestFee(p.models) });
  }

  /**
   * Makes the request's hold cover the upstream calls a stage is about to make in its place (fusion's
   * candidates and judge; a tool loop's next turn): the checks of `admit` run again for `calls` (their
   * models, their summed estimate plus `spentUsd`, what the request's earlier calls cost), after the hold
   * `budget-check` took is released. Throws the rejections of `admit`, then nothing is held. Does nothing
   * when the pipeline has no `budget-check` (no spend checks) or it has not run yet.
   */
  async cover(config: GatewayConfig, models: ReadonlyMap<string, ModelConfig>, state: GatewayState, calls: readonly PlannedCall[], spentUsd = 0): Promise<void> {
    const hold = state.spendHold;
    if (!hold) return;
    const previous = hold.admission;
    hold.admission = null;
    // Refused (or unchecked), the request still ends costing what its earlier calls cost: the previous
    // admission is put back, released or not, so the request's settlement counts that cost in the budgets'
    // counters (with its hold gone, settling only counts). Without it the tool loop's billed turns reached the
    // ledger but never the counters, and a key limit could be overspent by any number of such requests.
    const keepPrevious = () => {
      if (!previous) return;
      this.open++;
      hold.admission = previous;
    };
    if (previous) {
      try {
        await this.release(previous);
      } catch (err) {
        this.retries.add(releaseOf(previous.holdId, previous.groups, previous.inFlightGroup), state.requestId ?? null, previous.holdUntil);
        keepPrevious();
        throw checksUnavailable(err);
      }
    }
    const p = pricedCalls(calls, models);
    try {
      hold.admission = await this.admitWith(config, state, {
        p,
        estimate: () => {
          const est = estimateCalls(calls, models, config.spend.max_completion_tokens);
          return { ...est, usd: est.usd + Math.max(0, spentUsd) };
        },
        fees: () => requestFees(calls, models),
      });
    } catch (err) {
      keepPrevious();
      throw err;
    }
  }

  /**
   * The request's models as `budget-check` checks them, one string to compare: `recheck` takes the hold again
   * when they are no longer what the request names.
   */
  static modelsOf(body: Record<string, unknown> | null): string {
    return body ? requestedModels(body).join('\n') : '';
  }

  /**
   * Runs the checks of `admit` again, in place of the hold taken, when a stage after `budget-check` changed the
   * models the request names (a router choosing for `model: "auto"`, the web stage removing `:online`): the
   * checks had seen a model this gateway does not have, held nothing (routing would answer 404), and the chosen
   * model was then served past a spent key limit or a negative balance. Called by `upstream` before any call.
   * Throws the rejections of `admit`. Does nothing when `budget-check` did not run or the models are unchanged.
   */
  async recheck(config: GatewayConfig, models: ReadonlyMap<string, ModelConfig>, state: GatewayState): Promise<void> {
    const hold = state.spendHold;
    if (!hold || !state.body) return;
    const now = SpendControl.modelsOf(state.body);
    if (hold.models === undefined || hold.models === now) return;
    await this.cover(config, models, state, [{ body: state.body }]);
    hold.models = now;
  }

  private async admitWith(config: GatewayConfig, state: GatewayState, basis: Basis): Promise<Admission | null> {
    try {
      return await this.tryAdmit(config, state, basis);
    } catch (err) {
      throw checksUnavailable(err);
    }
  }

  private async tryAdmit(config: GatewayConfig, state: GatewayState, { p, estimate, fees }: Basis): Promise<Admission | null> {
    const key = state.key!;
    if (p.models.length === 0) return null; // no known model: routing answers 404
    const now = this.clock();
    const date = new Date(now);
    const [account, workspace, byokOnly] = await Promise.all([
      this.account(key.accountId, config),
      this.workspaceConfig(key, config),
      p.paid ? this.servedByOwnKeys(config, p.models, state) : false,
    ]);
    const prepaid = isPrepaid(config, account);
    const balance = account?.balanceUsd ?? 0;
    // Spec 8.2.1: a negative balance blocks even free models; a request that spends credits needs a positive
    // balance (a BYOK-only one spends none, so it is treated like a free one).
    const balanceBlocked = prepaid && (p.paid && !byokOnly ? balance <= 0 : balance < 0);
    // Spec 8.2.4: served entirely with the caller's own provider keys, a request spends no gateway credit, so
    // it gets no in-flight hold, and budgets that never count BYOK spend (include_byok false) do not apply.
    const budgets = p.paid ? applicableBudgets(config, key, workspace).filter((b) => !byokOnly || b.includeByok) : [];
    const f = config.spend.in_flight;
    const inFlightApplies = !byokOnly && prepaid && f.enabled && p.tokenPriced && balance < f.applies_below_balance_usd;
    // Tokens are counted only when something will hold the estimate.
    const est = budgets.length > 0 || inFlightApplies ? estimate() : unpriced(p);
    // The in-flight budget holds token prices only (spec 8.2.3); a budget's hold adds the per-request fees,
    // or requests of a fee-priced model would hold nothing and any number could run past a key limit at once.
    const estimateNano = holdNano(est.usd);
    const holdUsd = budgets.length > 0 ? est.usd + fees() : est.usd;
    const inFlight =
      inFlightApplies && estimateNano > 0
        ? { group: `account:${key.accountId}`, capNano: toNano(Math.min(f.fraction * Math.max(0, balance), f.ceiling_usd)), estimateNano }
        : null;
    const lines = budgetLines(budgets, date);
    if (lines.length === 0 && !inFlight && !balanceBlocked) return null;
    const holdId = randomUUID();
    const input = { holdId, now, lines, balanceBlocked, estimateNano: holdNano(holdUsd), holdUntil: now + config.spend.hold_ttl_ms, inFlight };
    let result = await this.reserve(input, state);
    if (!result.ok && result.reason === 'missing') result = await this.reserveBuilt(input, result.counters, budgets, date, state);
    if (result.ok) {
      state.span.setAttribute('gateway.spend.estimate_usd', holdUsd);
      this.open++;
      return {
        holdId,
        groups: [...new Set(lines.map((l) => l.group))],
        counters: [...new Set(lines.map((l) => l.counter))],
        inFlightGroup: inFlight?.group ?? null,
        settlementMs: f.settlement_ms,
        holdUntil: input.holdUntil,
        admittedAt: now,
      };
    }
    if (result.reason === 'in_flight') {
      if (estimateNano > result.capNano) throw creditsRejection('weight_exceeds_budget', balance, est.usd, fromNano(result.capNano));
      throw inFlightRejection(fromNano(result.heldNano), fromNano(result.capNano), est.usd, retryAfter(result.nextExpiry, now, f.retry_after_s));
    }
    throw refusal(result, budgets, balance, date);
  }

  /**
   * The spend checks of a video job (POST /videos), before it is submitted upstream: the same budget lines as a
   * paid chat request (guardrail budgets, workspace budgets, the key's own limit, in spec 8.4's order; every
   * video job is paid, an unpriced endpoint's cost being what its upstream reports), a prepaid account's
   * balance above 0, and, for prepaid accounts, the account's video in-flight group: the estimates of its
   * unfinished jobs together may not exceed its balance. All in one atomic `reserve`, which holds `estimateUsd`
   * (the job's largest possible price) in each group until the job is billed or ends unbilled
   * (`settleVideoJob`), at most until `videos.job_timeout_s` (plus a margin) from now, so a crashed process's
   * holds lapse. For a job served only with the workspace's own keys (`byokOnly`), as for such a chat request:
   * only budgets that count BYOK spend, and a negative balance, are checked; no balance group.
   *
   * Throws the chat requests' rejections (403/402 `budgetRejection`, 402 `insufficient_credits`), a 402
   * `insufficient_credits` when the in-flight group is full (no Retry-After: jobs take minutes), or the 503 of
   * `checksUnavailable`. Returns what to store with the job, or null when nothing is held (no budget applies
   * and the account is not prepaid, or the estimate is 0: an unpriced model).
   *
   * @example const hold = await spend.admitVideoJob(config, state, 1.55); … await spend.settleVideoJob(config, hold, jobId);
   */
  async admitVideoJob(config: GatewayConfig, state: GatewayState, estimateUsd: number, byokOnly = false): Promise<VideoJobHold | null> {
    try {
      return await this.tryAdmitVideoJob(config, state, estimateUsd, byokOnly);
    } catch (err) {
      throw checksUnavailable(err);
    }
  }

  private async tryAdmitVideoJob(config: GatewayConfig, state: GatewayState, estimateUsd: number, byokOnly: boolean): Promise<VideoJobHold | null> {
    const key = state.key!;
    const now = this.clock();
    const date = new Date(now);
    const [account, workspace] = await Promise.all([this.account(key.accountId, config), this.workspaceConfig(key, config)]);
    const prepaid = isPrepaid(config, account);
    const balance = account?.balanceUsd ?? 0;
    // As for chat (spec 8.2.4): served only with the workspace's own keys, a job spends no credit, so only a
    // negative balance blocks it, nothing is held against the balance, and only budgets that count BYOK spend apply.
    const budgets = applicableBudgets(config, key, workspace).filter((b) => !byokOnly || b.includeByok);
    const lines = budgetLines(budgets, date);
    const balanceBlocked = prepaid && (byokOnly ? balance < 0 : balance <= 0);
    const inFlight = prepaid && !byokOnly ? { group: videoInFlightGroup(key.accountId), capNano: toNano(Math.max(0, balance)) } : null;
    if (lines.length === 0 && !inFlight && !balanceBlocked) return null;
    const estimateNano = holdNano(estimateUsd);
    const input: ReserveInput = {
      holdId: randomUUID(),
      now,
      lines,
      balanceBlocked,
      estimateNano,
      holdUntil: now + config.videos.job_timeout_s * 1000 + VIDEO_HOLD_MARGIN_MS,
      inFlight,
    };
    let result = await this.reserve(input, state);
    if (!result.ok && result.reason === 'missing') result = await this.reserveBuilt(input, result.counters, budgets, date, state);
    if (result.ok) {
      state.span.setAttribute('gateway.spend.estimate_usd', estimateUsd);
      if (estimateNano === 0) return null; // checked, but nothing was held
      return { id: input.holdId, groups: [...new Set(lines.map((l) => l.group))], inFlightGroup: inFlight?.group ?? null, until: input.holdUntil, amountNano: estimateNano };
    }
    if (result.reason === 'in_flight') throw videoCreditsRejection(fromNano(result.heldNano), estimateUsd, balance);
    throw refusal(result, budgets, balance, date);
  }

  /**
   * A video job's hold ends: it is released from its groups, and for a billed job (`billed`) the cost is added
   * to the spend counters in the same call, only if the hold was still in one of its groups (`retry`): the
   * writer of the ledger row and a poller that found the row written (its writer may have died before settling)
   * both settle, and only the first counts. A hold in no group has nothing to tell by: the writer alone passes
   * counters then. The ledger row debited
   * the balance already, so the cost stays in the account's video in-flight group only for
   * `spend.balance_cache_ms`, while other processes' cached balances may not show the debit yet. Never throws:
   * a call the state refused is retried (SettleRetries; a retry counts the cost only if the hold was still
   * there, so never twice) until shortly before the hold lapses; past that, only when the state is known never
   * to have run it (`retryCount`).
   */
  async settleVideoJob(
    config: GatewayConfig,
    hold: VideoJobHold,
    jobId: string | null,
    billed?: { counters: string[]; byok: boolean; costUsd: number },
  ): Promise<void> {
    const now = this.clock();
    const costNano = billed ? toNano(billed.costUsd) : 0;
    const linger = billed && !billed.byok && costNano > 0 ? config.spend.balance_cache_ms : 0;
    const input: SettleInput = {
      holdId: hold.id,
      groups: hold.groups,
      counters: billed?.counters ?? [],
      byok: billed?.byok ?? false,
      costNano,
      inFlight: hold.inFlightGroup ? { group: hold.inFlightGroup, until: linger > 0 ? now + linger : 0 } : null,
      retry: billed !== undefined && hold.groups.length > 0,
    };
    try {
      await this.deps.state.settle(input);
    } catch (err) {
      const what = billed ? 'settling a video job hold' : 'releasing a video job hold';
      if (now < hold.until - HOLD_MARGIN_MS) {
        this.retries.add(input, jobId, hold.until, neverSent(err));
        this.deps.logger.warn({ err, video_job_id: jobId }, `${what} failed; retrying until the shared state takes it`);
      } else if (this.retryCount(input, jobId, err)) {
        this.deps.logger.warn({ err, video_job_id: jobId }, `${what} failed; retrying until the shared state takes it`);
      } else {
        this.deps.logger.error({ err, video_job_id: jobId }, `${what} failed${costNano > 0 ? '; its spend counters are rebuilt from the ledger' : ''}`);
      }
    }
  }

  /**
   * Whether every endpoint of the requested models has a workspace provider key: whichever endpoint answers,
   * the request is served with the caller's own key. Routing resolves the same keys for the request.
   */
  async servedByOwnKeys(config: GatewayConfig, models: ModelConfig[], state: GatewayState): Promise<boolean> {
    if (!this.deps.byok) return false;
    const own = await this.deps.byok.forRequest(state, config.byok);
    return own.size > 0 && models.every((m) => m.endpoints.every((e) => own.has(e.provider)));
  }

  /**
   * A reserve that failed (Redis unreachable or too slow) may still have run in Redis and taken its holds:
   * they are released (retried until the state takes it) rather than left to block spend until the hold TTL.
   */
  private async reserve(input: ReserveInput, state: GatewayState): Promise<ReserveResult> {
    try {
      return await this.deps.state.reserve(input);
    } catch (err) {
      const groups = [...new Set(input.lines.map((l) => l.group))];
      this.retries.add(releaseOf(input.holdId, groups, input.inFlight?.group ?? null), state.requestId ?? null, input.holdUntil);
      throw err;
    }
  }

  /** Releases the request's hold and counts its actual cost; never throws (a failure is retried, see SettleRetries). */
  settle(admission: Admission, state: GatewayState): void {
    this.open--;
    const parts = costParts(state);
    // Served both ways (fusion, a tool loop): the hold is settled with the paid part, and the BYOK part is
    // counted on its own (budgets that count BYOK spend see it; the in-flight budget, which guards the
    // balance, does not).
    const both = parts.paid > 0 && parts.byok > 0;
    const byok = !both && parts.byok > 0;
    const now = this.clock();
    const input: SettleInput = {
      holdId: admission.holdId,
      groups: admission.groups,
      counters: admission.counters,
      byok,
      costNano: toNano(byok ? parts.byok : parts.paid),
      inFlight: admission.inFlightGroup ? { group: admission.inFlightGroup, until: now + admission.settlementMs } : null,
    };
    const inputs = both ? [input, { ...releaseOf(`${admission.holdId}-byok`, [], null), counters: admission.counters, byok: true, costNano: toNano(parts.byok) }] : [input];
    for (const one of inputs) {
      this.deps.state.settle(one).catch((err) => {
        this.deps.logger.warn({ err, generation_id: state.requestId }, 'settling a spend hold failed; retrying until the shared state takes it');
        // Refused unsent, the retry counts the cost whether or not a hold is there: a request may have none (its
        // hold was released by a refused `cover`), and a retry that needs its hold would drop that cost.
        this.retries.add(one, state.requestId ?? null, admission.holdUntil, neverSent(err));
      });
    }
  }

  /**
   * A cost to add to spend counters with no hold behind it (a video job's), whose first attempt failed: sent
   * again when the failure proves the state never ran it (`neverSent`); otherwise (a timeout: it may have run)
   * a retry could not tell a lost reply from a refusal and might count the cost twice, so the counters are
   * deleted instead and rebuilt from the ledger, which has the cost. Returns whether it is sent again.
   */
  retryCount(input: SettleInput, generationId: string | null, err: unknown): boolean {
    if (!neverSent(err)) {
      this.retries.markStale(input.counters);
      return false;
    }
    // Counted outright: the hold a `retry` would need may have lapsed by now.
    this.retries.add({ ...input, retry: false }, generationId, this.clock() + COUNT_RETRY_MS, true);
    return true;
  }

  /** Settlements waiting for the shared state to come back. */
  pendingSettlements(): number {
    return this.retries.pending;
  }

  /** At shutdown, before the shared state closes: one last try of the settlements still waiting. */
  close(): Promise<void> {
    return this.retries.close();
  }

  /** Drops a hold without counting any cost (it is being replaced: `cover`). */
  private release(admission: Admission): Promise<void> {
    this.open--;
    return this.deps.state.settle(releaseOf(admission.holdId, admission.groups, admission.inFlightGroup));
  }

  /** Holds this process took for requests still running (admitted, not yet settled). */
  inFlightHolds(): number {
    return this.open;
  }

  /** The account of a key, cached for `spend.balance_cache_ms` (holds cover the balance's lag). */
  async account(accountId: string, config: GatewayConfig): Promise<Account | null> {
    const hit = this.accounts.get(accountId);
    if (hit) return hit;
    const account = await this.deps.store.findAccount(accountId);
    if (account && config.spend.balance_cache_ms > 0) this.accounts.set(accountId, account, { ttl: config.spend.balance_cache_ms });
    return account;
  }

  /** Forgets cached balances (after `credits add` in this process). */
  forgetAccount(accountId: string): void {
    this.accounts.delete(accountId);
  }

  /** The gateway.yaml entry of the key's workspace (matched by name), if any. */
  async workspaceConfig(key: KeyRecord, config: GatewayConfig): Promise<WorkspaceConfig | undefined> {
    if (config.workspaces.length === 0) return undefined;
    let name = this.workspaceNames.get(key.workspaceId);
    if (name === undefined) {
      name = (await this.deps.store.findWorkspace(key.workspaceId))?.name ?? '';
      this.workspaceNames.set(key.workspaceId, name);
    }
    return config.workspaces.find((w) => w.name === name);
  }

  /** Spend of one budget in its current window, from the ledger (the source of truth). */
  async spendOf(budget: ApplicableBudget, date: Date): Promise<number> {
    const t = await this.deps.store.spendTotals(budget.spend, budgetWindow(budget.interval, date).start);
    return t.paid + (budget.includeByok ? t.byok : 0);
  }

  /**
   * `reserve` again after building the spend counters it found missing from the ledger; up to three rounds,
   * as a window may begin (a new counter) between two of them.
   */
  private async reserveBuilt(input: ReserveInput, missing: string[], budgets: ApplicableBudget[], date: Date, state: GatewayState): Promise<ReserveResult> {
    let result: ReserveResult = { ok: false, reason: 'missing', counters: missing };
    for (let i = 0; i < 3 && !result.ok && result.reason === 'missing'; i++) {
      await this.initCounters(result.counters, budgets, input.lines, date);
      result = await this.reserve(input, state);
    }
    return result;
  }

  /** Builds missing spend counters from the ledger (after writing out this process's queued rows). */
  private async initCounters(missing: string[], budgets: ApplicableBudget[], lines: BudgetLine[], date: Date): Promise<void> {
    await this.deps.ledger.flush();
    await Promise.all(
      missing.map(async (counter) => {
        const b = budgets[lines.findIndex((l) => l.counter === counter)];
        const window = budgetWindow(b.interval, date);
        const t = await this.deps.store.spendTotals(b.spend, window.start);
        await this.deps.state.initCounter(counter, toNano(t.paid), toNano(t.byok), window.end === null ? null : window.end + COUNTER_GRACE_MS);
      }),
    );
  }
}
