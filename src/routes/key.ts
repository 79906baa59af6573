import type { Stage } from '../pipeline/types';
import type { Services } from '../services';
import { roundUsd } from '../spend/pricing';
import { windowEnd } from '../spend/windows';
import type { KeyRecord, UsageTotals } from '../store/types';

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

/** Spend counted against the key's own limit in its current window. */
export function keyLimitSpend(key: KeyRecord, usage: UsageTotals): number {
  const pick = { daily: ['usageDaily', 'byokUsageDaily'], weekly: ['usageWeekly', 'byokUsageWeekly'], monthly: ['usageMonthly', 'byokUsageMonthly'] } as const;
  const [paid, byok] = key.limitReset ? pick[key.limitReset] : (['usage', 'byokUsage'] as const);
  return roundUsd(usage[paid] + (key.includeByokInLimit ? usage[byok] : 0));
}

/** The key's own limit as a budget entry (scope `key_limit`); null when the key has no limit. */
export function keyLimitBudget(key: KeyRecord, usage: UsageTotals, now: Date): Budget | null {
  if (key.limitUsd === null) return null;
  const spend = keyLimitSpend(key, usage);
  return {
    budget_id: null,
    guardrail_id: null,
    include_byok: key.includeByokInLimit,
    limit_usd: key.limitUsd,
    spend_usd: spend,
    remaining_usd: roundUsd(Math.max(0, key.limitUsd - spend)),
    reset_interval: key.limitReset ?? 'lifetime',
    resets_at: key.limitReset ? windowEnd(key.limitReset, now).toISOString() : null,
    scope: 'key_limit',
  };
}

/** GET /key: the calling key's information (spec 2.1, 4.5). Runs after `auth`. */
export function keyInfoStage(services: Services): Stage {
  return async (ctx) => {
    const state = ctx.state.gateway;
    const key = state.key!;
    const now = new Date();
    // Read your own writes: rows of requests that already finished are written before the sums are read.
    await services.ledger.flush();
    const [usage, account] = await Promise.all([
      services.store.usageForKey(key.id, now),
      services.store.findAccount(key.accountId),
    ]);
    const keyBudget = keyLimitBudget(key, usage, now);
    const budgets = keyBudget ? [keyBudget] : [];
    const data: Record<string, unknown> = {
      allowed_data_regions: key.allowedDataRegions,
      budgets,
      byok_usage: usage.byokUsage,
      byok_usage_daily: usage.byokUsageDaily,
      byok_usage_weekly: usage.byokUsageWeekly,
      byok_usage_monthly: usage.byokUsageMonthly,
      creator_user_id: key.creatorUserId,
      expires_at: key.expiresAt,
      free_model_daily_requests: await freeModelCounter(services, key, now),
      include_byok_in_limit: key.includeByokInLimit,
      is_free_tier: (account?.purchasedUsd ?? 0) <= 0,
      is_management_key: key.isManagement,
      is_provisioning_key: key.isProvisioning,
      label: key.label,
      limit: key.limitUsd,
      limit_remaining: keyBudget ? keyBudget.remaining_usd : null,
      limit_reset: key.limitReset,
      organization_id: key.accountId,
      workspace_id: key.workspaceId,
      rate_limit: { interval: '10s', note: 'Deprecated; safe to ignore.', requests: -1 },
      usage: usage.usage,
      usage_daily: usage.usageDaily,
      usage_weekly: usage.usageWeekly,
      usage_monthly: usage.usageMonthly,
    };
    // Spec 8.4: the entry with the least remaining (a spent one is at 0 and blocks first).
    if (budgets.length > 0) data.effective_budget = budgets.reduce((a, b) => (b.remaining_usd < a.remaining_usd ? b : a));
    state.response = { kind: 'json', status: 200, body: { data } };
  };
}

async function freeModelCounter(services: Services, key: KeyRecord, now: Date) {
  const limit = services.config.free_models.daily_requests;
  const used = await services.store.countFreeModelRequests(key.id, now);
  return { limit, remaining: Math.max(0, limit - used), used };
}
