import { GatewayError } from '../errors/gateway-error';
import type { ApplicableBudget } from './budgets';
import { roundUsd } from './pricing';
import { budgetWindow } from './budgets';

/**
 * Why the spend checks or the rate limits refused a request, for `gateway_budget_rejections_total`. Kept
 * beside the error rather than read back from its metadata: an error from an upstream never gets one.
 */
export type RejectionReason =
  | 'guardrail_budget'
  | 'workspace_budget'
  | 'key_limit'
  | 'key_limit_exhausted'
  | 'insufficient_credits'
  | 'weight_exceeds_budget'
  | 'in_flight_budget'
  | 'rate_limit_key'
  | 'rate_limit_model'
  | 'rate_limit_free_model_per_minute'
  | 'rate_limit_free_model_daily';

const reasons = new WeakMap<GatewayError, RejectionReason>();

/** Marks `err` as a spend or rate-limit rejection; returns it. */
export function asRejection(err: GatewayError, reason: RejectionReason): GatewayError {
  reasons.set(err, reason);
  return err;
}

/** The reason a spend check or rate limit refused with `err`; undefined for any other error. */
export function rejectionReason(err: GatewayError): RejectionReason | undefined {
  return reasons.get(err);
}

const BUDGET_REASON: Record<ApplicableBudget['limitSource'], RejectionReason> = {
  gateway_guardrail_budget: 'guardrail_budget',
  gateway_workspace_budget: 'workspace_budget',
  gateway_key_limit: 'key_limit',
};

/** `$0.50`, `$0.000123`: at least two decimals, up to six, no binary noise. */
export function formatUsd(usd: number): string {
  const fixed = roundUsd(usd).toFixed(6).replace(/0+$/, '');
  const [whole, frac = ''] = fixed.split('.');
  return `$${whole}.${frac.padEnd(2, '0')}`;
}

const WHAT: Record<ApplicableBudget['scope'], string> = {
  workspace_default_member: "The workspace's default guardrail budget for this member",
  workspace_default_key: "The workspace's default guardrail budget for this key",
  member: "This member's guardrail budget",
  api_key: "This key's guardrail budget",
  workspace: 'The workspace budget',
  key_limit: "This key's credit limit",
};

const REMEDY: Record<ApplicableBudget['limitSource'], string> = {
  gateway_guardrail_budget: 'Wait for the budget window to reset, or ask a workspace admin to raise the guardrail budget in gateway.yaml.',
  gateway_workspace_budget: 'Wait for the budget window to reset, or ask a workspace admin to raise the workspace budget in gateway.yaml.',
  gateway_key_limit: "Wait for the key's limit window to reset, or ask an admin to raise the key's limit.",
};

/**
 * A spent budget (spec 7.7): 403 with `limit_source`, `scope`, `limit_usd`, `spend_usd`, `resets_at`,
 * `remedy_hint`; the message ends with the figures. `spend_usd` counts what is held for requests still in
 * flight, since those are committed. A key limit without a reset window is the key's credit running out
 * (spec 7.9 `gateway_key_limit`): 402, with `reason` too. No Retry-After on either.
 */
export function budgetRejection(b: ApplicableBudget, spentUsd: number, heldUsd: number, now: Date): GatewayError {
  const spend = roundUsd(spentUsd + heldUsd);
  const end = budgetWindow(b.interval, now).end;
  const resetsAt = end === null ? null : new Date(end).toISOString();
  const held = heldUsd > 0 ? ` (${formatUsd(heldUsd)} of it held for requests in flight)` : '';
  const figures = `spend ${formatUsd(spend)}${held} of limit ${formatUsd(b.limitUsd)}, ${resetsAt ? `resets at ${resetsAt}` : 'never resets'}`;
  const metadata: Record<string, unknown> = {
    limit_source: b.limitSource,
    scope: b.scope,
    limit_usd: b.limitUsd,
    spend_usd: spend,
    resets_at: resetsAt,
    remedy_hint: REMEDY[b.limitSource],
  };
  if (b.scope === 'key_limit' && b.interval === 'lifetime') {
    metadata.reason = 'key_limit_exhausted';
    metadata.remedy_hint = "Ask an admin to raise this key's credit limit, or use another key.";
    return asRejection(new GatewayError('payment_required', `This key's credit limit is exhausted: ${figures}`, { metadata }), 'key_limit_exhausted');
  }
  const what = b.interval === 'lifetime' ? WHAT[b.scope] : `${WHAT[b.scope]} (${b.interval})`;
  return asRejection(new GatewayError('permission_denied', `${what} is spent: ${figures}`, { metadata }), BUDGET_REASON[b.limitSource]);
}

/** The account cannot pay (spec 7.9 `gateway_credits`): not a wait-and-retry case, no Retry-After. */
export function creditsRejection(reason: 'insufficient_credits' | 'weight_exceeds_budget', balanceUsd: number, estimateUsd?: number, capUsd?: number): GatewayError {
  if (reason === 'weight_exceeds_budget') {
    return asRejection(new GatewayError(
      'payment_required',
      `This request's estimated cost exceeds what the account may have in flight; lower max_tokens or add credits: estimate ${formatUsd(estimateUsd!)}, in-flight budget ${formatUsd(capUsd!)}, balance ${formatUsd(balanceUsd)}`,
      { metadata: { limit_source: 'gateway_credits', reason, remedy_hint: 'Lower max_tokens or shorten the prompt, or add credits to raise the in-flight budget.' } },
    ), reason);
  }
  return asRejection(new GatewayError('payment_required', `Insufficient credits; add credits to continue: balance ${formatUsd(balanceUsd)}`, {
    metadata: { limit_source: 'gateway_credits', reason, remedy_hint: 'Add credits to the account (gateway credits add --account <name> --usd <amount>).' },
  }), reason);
}

/**
 * A prepaid account's unfinished video jobs and this one together would hold more than its balance (spec 7.9
 * `gateway_credits`, `insufficient_credits`): the balance cannot cover them. Not the transient in-flight 402:
 * jobs take minutes to end, so no Retry-After.
 */
export function videoCreditsRejection(heldUsd: number, estimateUsd: number, balanceUsd: number): GatewayError {
  return asRejection(new GatewayError(
    'payment_required',
    `Insufficient credits for this video job and the account's unfinished ones; add credits or wait for them to end: held ${formatUsd(heldUsd)} + estimate ${formatUsd(estimateUsd)} exceeds balance ${formatUsd(balanceUsd)}`,
    { metadata: { limit_source: 'gateway_credits', reason: 'insufficient_credits', remedy_hint: "Add credits to the account, or wait for its unfinished video jobs to end." } },
  ), 'insufficient_credits');
}

/** Too much already in flight for the balance (spec 7.9 `gateway_in_flight_budget`): transient, with Retry-After. */
export function inFlightRejection(heldUsd: number, capUsd: number, estimateUsd: number, retryAfterS: number): GatewayError {
  return asRejection(new GatewayError(
    'payment_required',
    `Too much spending is in flight for the account balance; retry shortly: held ${formatUsd(heldUsd)} + estimate ${formatUsd(estimateUsd)} exceeds in-flight budget ${formatUsd(capUsd)}`,
    {
      metadata: { limit_source: 'gateway_in_flight_budget', reason: 'in_flight_budget_exhausted', remedy_hint: 'Retry after the Retry-After delay, send fewer requests at once, or add credits.' },
      headers: { 'Retry-After': String(retryAfterS) },
    },
  ), 'in_flight_budget');
}
