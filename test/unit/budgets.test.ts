import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { parseConfigText } from '../../src/config/load';
import { effectiveBudget, type Budget } from '../../src/routes/key';
import { applicableBudgets, counterId } from '../../src/spend/budgets';
import { budgetRejection, formatUsd } from '../../src/spend/rejections';
import type { KeyRecord } from '../../src/store/types';

const config = parseConfigText(
  `
providers: [{ id: local, kind: simulated }]
models: [{ id: m, endpoints: [{ provider: local, upstream_model: m }] }]
pipelines: { default: [auth, upstream] }
guardrails:
  - { id: team, budget: { limit_usd: 10 } }
  - { id: solo, budget: { limit_usd: 2, reset_interval: daily, include_byok: true } }
  - { id: rules-only }
workspaces:
  - name: w
    default_guardrail: team
    members: [{ user_id: alice, guardrail: solo }]
    keys: [{ key: k-name, guardrail: rules-only }]
    budgets:
      - { id: day, limit_usd: 5, reset_interval: daily }
      - { id: life, limit_usd: 100, reset_interval: lifetime }
`,
  { registry },
);

const key = (over: Partial<KeyRecord> = {}): KeyRecord => ({
  id: 'k1', hash: '', label: '', name: 'k-name', workspaceId: 'ws1', accountId: 'a1', creatorUserId: 'alice', isManagement: false,
  isProvisioning: false, limitUsd: 1, limitReset: 'weekly', includeByokInLimit: false, allowedDataRegions: [], expiresAt: null,
  disabled: false, revokedAt: null, createdAt: '', ...over,
});

describe('applicableBudgets', () => {
  it('lists budgets in spec 8.4 order; workspace budgets broadest first; guardrails without a budget add none', () => {
    const list = applicableBudgets(config, key(), config.workspaces[0]);
    expect(list.map((b) => [b.scope, b.guardrailId ?? b.budgetId, b.interval, b.group])).toEqual([
      ['workspace_default_member', 'team', 'monthly', 'member:ws1:alice'],
      ['workspace_default_key', 'team', 'monthly', 'key:k1'],
      ['member', 'solo', 'daily', 'member:ws1:alice'],
      ['workspace', 'life', 'lifetime', 'workspace:ws1'],
      ['workspace', 'day', 'daily', 'workspace:ws1'],
      ['key_limit', null, 'weekly', 'key:k1'],
    ]);
    expect(list.map((b) => b.limitSource)).toEqual([
      'gateway_guardrail_budget', 'gateway_guardrail_budget', 'gateway_guardrail_budget', 'gateway_workspace_budget', 'gateway_workspace_budget', 'gateway_key_limit',
    ]);
  });

  it('a key outside any declared workspace has only its own limit; no limit, nothing', () => {
    expect(applicableBudgets(config, key(), undefined).map((b) => b.scope)).toEqual(['key_limit']);
    expect(applicableBudgets(config, key({ limitUsd: null }), undefined)).toEqual([]);
  });

  it('counter ids name the window start (UTC), lifetime counters none', () => {
    const now = new Date('2026-11-22T12:00:00Z'); // a Sunday
    expect(counterId('key:k1', 'weekly', now)).toBe(`key:k1:weekly:${Date.parse('2026-11-16T00:00:00Z')}`);
    expect(counterId('workspace:w', 'lifetime', now)).toBe('workspace:w:lifetime');
  });
});

describe('effective budget and rejections', () => {
  const b = (scope: string, remaining: number): Budget => ({
    budget_id: null, guardrail_id: null, include_byok: false, limit_usd: 10, spend_usd: 10 - remaining, remaining_usd: remaining,
    reset_interval: 'monthly', resets_at: null, scope,
  });

  it('the first spent one in order, else the least remaining', () => {
    expect(effectiveBudget([b('member', 3), b('workspace', 0), b('key_limit', 0)])?.scope).toBe('workspace');
    expect(effectiveBudget([b('member', 3), b('workspace', 2), b('key_limit', 2)])?.scope).toBe('workspace');
    expect(effectiveBudget([])).toBeUndefined();
  });

  it('formats money with at least two and at most six decimals', () => {
    expect(formatUsd(2)).toBe('$2.00');
    expect(formatUsd(0.1 + 0.2)).toBe('$0.30');
    expect(formatUsd(0.000123)).toBe('$0.000123');
    expect(formatUsd(-0.5)).toBe('$-0.50');
  });

  it('a windowed budget is a 403; the message ends with spend, limit and reset', () => {
    const [first] = applicableBudgets(config, key(), config.workspaces[0]);
    const err = budgetRejection(first, 9.5, 0.75, new Date('2026-11-22T12:00:00Z'));
    expect(err.status).toBe(403);
    expect(err.message).toBe(
      "The workspace's default guardrail budget for this member (monthly) is spent: spend $10.25 ($0.75 of it held for requests in flight) of limit $10.00, resets at 2026-12-01T00:00:00.000Z",
    );
    expect(err.headers).toBeUndefined();
  });
});
