import type { GatewayConfig, ResetInterval, WorkspaceConfig } from '../config/types';
import type { KeyRecord, SpendScope } from '../store/types';
import { windowEnd, windowStart } from './windows';

export type BudgetScope = 'workspace_default_member' | 'workspace_default_key' | 'member' | 'api_key' | 'workspace' | 'key_limit';
export type LimitSource = 'gateway_guardrail_budget' | 'gateway_workspace_budget' | 'gateway_key_limit';

/** One budget that applies to a key, in spec 8.4's enforcement order. */
export interface ApplicableBudget {
  scope: BudgetScope;
  limitSource: LimitSource;
  guardrailId: string | null;
  budgetId: string | null;
  limitUsd: number;
  interval: ResetInterval;
  includeByok: boolean;
  /** Whose spend counts against it. */
  spend: SpendScope;
  /** The shared-state hold group of that spend (`key:<id>`, `member:<ws>:<user>`, `workspace:<id>`). */
  group: string;
}

const BREADTH: Record<ResetInterval, number> = { lifetime: 0, monthly: 1, weekly: 2, daily: 3 };

/** The window a budget counts at `now`: [start, end); lifetime budgets count from 0 and never reset. */
export function budgetWindow(interval: ResetInterval, now: Date): { start: number; end: number | null } {
  if (interval === 'lifetime') return { start: 0, end: null };
  return { start: windowStart(interval, now).getTime(), end: windowEnd(interval, now).getTime() };
}

/** The spend counter of a group's window, e.g. `key:abc:monthly:1764547200000` or `workspace:w:lifetime`. */
export function counterId(group: string, interval: ResetInterval, now: Date): string {
  return interval === 'lifetime' ? `${group}:lifetime` : `${group}:${interval}:${budgetWindow(interval, now).start}`;
}

/**
 * Every budget that applies to `key`, in the order spec 8.4 checks them: the workspace default guardrail
 * (the member's combined spend, then the key's own), the member's guardrail, the key's guardrail, the
 * workspace budgets, then the key's own limit. `workspace` is the key's workspace's entry in gateway.yaml.
 */
export function applicableBudgets(config: GatewayConfig, key: KeyRecord, workspace: WorkspaceConfig | undefined): ApplicableBudget[] {
  const memberScope: SpendScope = { kind: 'member', workspaceId: key.workspaceId, userId: key.creatorUserId };
  const keyScope: SpendScope = { kind: 'key', keyId: key.id };
  const memberGroup = `member:${key.workspaceId}:${key.creatorUserId}`;
  const keyGroup = `key:${key.id}`;
  const out: ApplicableBudget[] = [];
  const guardrail = (id: string | undefined, scope: BudgetScope, spend: SpendScope, group: string) => {
    const budget = id === undefined ? undefined : config.guardrails.find((g) => g.id === id)?.budget;
    if (!budget) return;
    out.push({
      scope,
      limitSource: 'gateway_guardrail_budget',
      guardrailId: id!,
      budgetId: null,
      limitUsd: budget.limit_usd,
      interval: budget.reset_interval,
      includeByok: budget.include_byok,
      spend,
      group,
    });
  };
  if (workspace) {
    guardrail(workspace.default_guardrail, 'workspace_default_member', memberScope, memberGroup);
    guardrail(workspace.default_guardrail, 'workspace_default_key', keyScope, keyGroup);
    guardrail(workspace.members.find((m) => m.user_id === key.creatorUserId)?.guardrail, 'member', memberScope, memberGroup);
    guardrail(workspace.keys.find((k) => k.key === key.id || k.key === key.name)?.guardrail, 'api_key', keyScope, keyGroup);
    // The broadest first (lifetime, monthly, weekly, daily): when several are spent, the broadest is the one
    // reported, and it is also the one that stays spent longest.
    for (const b of [...workspace.budgets].sort((x, y) => BREADTH[x.reset_interval] - BREADTH[y.reset_interval])) {
      out.push({
        scope: 'workspace',
        limitSource: 'gateway_workspace_budget',
        guardrailId: null,
        budgetId: b.id,
        limitUsd: b.limit_usd,
        interval: b.reset_interval,
        includeByok: b.include_byok,
        spend: { kind: 'workspace', workspaceId: key.workspaceId },
        group: `workspace:${key.workspaceId}`,
      });
    }
  }
  if (key.limitUsd !== null) {
    out.push({
      scope: 'key_limit',
      limitSource: 'gateway_key_limit',
      guardrailId: null,
      budgetId: null,
      limitUsd: key.limitUsd,
      interval: key.limitReset ?? 'lifetime',
      includeByok: key.includeByokInLimit,
      spend: keyScope,
      group: keyGroup,
    });
  }
  return out;
}
