import type { Stage } from '../pipeline/types';
import type { Services } from '../services';
import { applicableBudgets, budgetWindow, type ApplicableBudget } from '../spend/budgets';
import { isPrepaid } from '../spend/admission';
import { roundUsd } from '../spend/pricing';
import { freeDailyKey, freeDailyLimit } from '../spend/rate-limits';
import { windowStart } from '../spend/windows';
import type { Account, KeyRecord } from '../store/types';

/** A Budget object of spec 2.1. */
export interface Budget {
  budget_id: string | null;
  guardrail_id: string | null;
  include_byok: boolean;
  limit_usd: number;
  spend_usd: number;
  remaining_usd: number;
  reset_interval: string;
  resets_at: string | null;
  scope: string;
}

/** A budget as GET /key shows it, with its spend in the current window (settled ledger rows). */
export function budgetEntry(b: ApplicableBudget, spendUsd: number, now: Date): Budget {
  const spend = roundUsd(spendUsd);
  const end = budgetWindow(b.interval, now).end;
  return {
    budget_id: b.budgetId,
    guardrail_id: b.guardrailId,
    include_byok: b.includeByok,
    limit_usd: b.limitUsd,
    spend_usd: spend,
    // Spec 2.1: "Limit minus spend", negative once concurrent requests overran the limit (they can, by up
    // to what was in flight), so the overrun shows instead of reading as exactly spent.
    remaining_usd: roundUsd(b.limitUsd - spend),
    reset_interval: b.interval,
    resets_at: end === null ? null : new Date(end).toISOString(),
    scope: b.scope,
  };
}

/**
 * Spec 8.4: when a budget is spent, the one enforcement rejects on (the first spent one in check order;
 * workspace budgets are listed broadest first); otherwise the one with the least remaining (first on a tie).
 */
export function effectiveBudget(budgets: Budget[]): Budget | undefined {
  const spent = budgets.find((b) => b.remaining_usd <= 0);
  if (spent) return spent;
  return budgets.reduce<Budget | undefined>((a, b) => (a === undefined || b.remaining_usd < a.remaining_usd ? b : a), undefined);
}

/** GET /key: the calling key's information (spec 2.1, 4.5). Runs after `auth`. */
export function keyInfoStage(services: Services): Stage {
  return async (ctx) => {
    const state = ctx.state.gateway;
    const key = state.key!;
    const now = new Date(services.spend.clock());
    // Read your own writes: rows of requests that already finished are written before the sums are read.
    await services.ledger.flush();
    // Sums of ledger costs are rounded as each cost is (spend/pricing.ts): a SQL SUM of 0.1 and 0.2 is
    // 0.30000000000000004, shown next to a budget's `spend_usd` of 0.3.
    const [usage, account, workspace] = await Promise.all([
      services.store.usageForKey(key.id, now),
      services.store.findAccount(key.accountId),
      services.spend.workspaceConfig(key, services.config),
    ]);
    const applicable = applicableBudgets(services.config, key, workspace);
    const spends = await Promise.all(applicable.map((b) => services.spend.spendOf(b, now)));
    const budgets = applicable.map((b, i) => budgetEntry(b, spends[i], now));
    const keyBudget = budgets.find((b) => b.scope === 'key_limit');
    const data: Record<string, unknown> = {
      allowed_data_regions: key.allowedDataRegions,
      budgets,
      byok_usage: roundUsd(usage.byokUsage),
      byok_usage_daily: roundUsd(usage.byokUsageDaily),
      byok_usage_weekly: roundUsd(usage.byokUsageWeekly),
      byok_usage_monthly: roundUsd(usage.byokUsageMonthly),
      creator_user_id: key.creatorUserId,
      expires_at: key.expiresAt,
      free_model_daily_requests: await freeModelCounter(services, key, account, now),
      include_byok_in_limit: key.includeByokInLimit,
      // An invoice, enterprise or subscription account is billed outside the gateway: never free tier, though it buys no credits here.
      is_free_tier: isPrepaid(services.config, account) && (account?.purchasedUsd ?? 0) <= 0,
      is_management_key: key.isManagement,
      is_provisioning_key: key.isProvisioning,
      label: key.label,
      limit: key.limitUsd,
      limit_remaining: keyBudget ? keyBudget.remaining_usd : null,
      limit_reset: key.limitReset,
      organization_id: key.accountId,
      workspace_id: key.workspaceId,
      rate_limit: { interval: '10s', note: 'Deprecated; safe to ignore.', requests: -1 },
      usage: roundUsd(usage.usage),
      usage_daily: roundUsd(usage.usageDaily),
      usage_weekly: roundUsd(usage.usageWeekly),
      usage_monthly: roundUsd(usage.usageMonthly),
    };
    const effective = effectiveBudget(budgets);
    if (effective) data.effective_budget = effective;
    state.response = { kind: 'json', status: 200, body: { data } };
  };
}

/** The account's free-model requests today: the live counter, or the ledger when the counter is gone. */
async function freeModelCounter(services: Services, key: KeyRecord, account: Account | null, now: Date) {
  const limit = freeDailyLimit(services.config, account);
  const [live, logged] = await Promise.all([
    // The live counter only adds what the ledger has not written yet: without the shared state (Redis
    // down) the ledger's count still answers, rather than GET /key failing as a whole.
    services.state.rateCount(freeDailyKey(key.accountId, now), now.getTime()).catch((err) => {
      services.logger.warn({ err }, 'GET /key: the free-model counter is unavailable; counting from the ledger');
      return 0;
    }),
    services.store.countFreeModelRequests(key.accountId, windowStart('daily', now).getTime()),
  ]);
  const used = Math.max(live, logged);
  return { limit, remaining: Math.max(0, limit - used), used };
}
