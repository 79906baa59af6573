import { isObj, type Obj } from '../../src/dialects/common';
import { chatThinkingBudget, MIN_BUDGET } from '../../src/dialects/translate/request';
import { GatewayError } from '../../src/errors/gateway-error';
import type { GatewayState } from '../../src/pipeline/types';

type Body = Record<string, unknown>;
/** A whole number above 0 (the translator's `posInt` also takes fractions). */
const posInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0;

/**
 * The thinking tokens a request asks for, which count within its completion limit: messages
 * `thinking.budget_tokens` (type enabled); chat `reasoning.max_tokens`, else its effort as the translator
 * reads it (`reasoning_effort` high = 16384, …). `field` is set when the budget is a number in the body.
 *
 * @example thinkingBudget('messages', { thinking: { type: 'enabled', budget_tokens: 3000 } }) // { tokens: 3000, field: 'thinking.budget_tokens' }
 */
export function thinkingBudget(endpoint: GatewayState['endpoint'], body: Body): { tokens: number; field?: string } | undefined {
  if (endpoint === 'messages') {
    const t = body.thinking;
    return isObj(t) && t.type === 'enabled' && posInt(t.budget_tokens) ? { tokens: t.budget_tokens, field: 'thinking.budget_tokens' } : undefined;
  }
  const tokens = chatThinkingBudget(body);
  if (tokens === undefined) return undefined;
  return isObj(body.reasoning) && body.reasoning.max_tokens === tokens ? { tokens, field: 'reasoning.max_tokens' } : { tokens };
}

/**
 * Keeps a thinking budget below the completion limit the stage has just set (`limit`): a budget at or above
 * it is an invalid request (the Messages API: "max_tokens must be greater than thinking.budget_tokens").
 * `reject` refuses it (400 naming the field); `clamp` lowers it to `limit - 1`, or, when that is under the
 * Messages API's least budget (1024), turns thinking off (messages `thinking: {type: disabled}`, chat
 * `reasoning.enabled: false`, its `reasoning_effort` removed). New top-level values, never edits in place (the stage keeps the body's bytes).
 */
export function fitThinking(input: { state: GatewayState; body: Body; limit: number; mode: 'clamp' | 'reject' }): void {
  const { state, body, limit, mode } = input;
  const budget = thinkingBudget(state.endpoint, body);
  if (!budget?.field || budget.tokens < limit) return;
  const { field, tokens: asked } = budget;
  if (mode === 'reject') {
    throw new GatewayError('invalid_request', `\`${field}\` must be below the completion limit, at most ${limit - 1} on this gateway (asked ${asked})`, { metadata: { field } });
  }
  const value = limit - 1;
  const messages = state.endpoint === 'messages';
  if (value >= MIN_BUDGET) {
    if (messages) body.thinking = { ...(body.thinking as Obj), budget_tokens: value };
    else body.reasoning = { ...(body.reasoning as Obj), max_tokens: value };
    state.pipeline.push({ type: 'max-tokens-cap', name: 'max-tokens-cap', summary: `lowered ${field} from ${asked} to ${value}`, data: { action: 'clamp', field, asked, value } });
    return;
  }
  if (messages) body.thinking = { type: 'disabled' };
  else {
    const { max_tokens: _, ...rest } = body.reasoning as Obj;
    body.reasoning = { ...rest, enabled: false };
    // A `reasoning_effort` beside the budget would ask for reasoning again (and is what an endpoint listing
    // only that argument gets: `none` there, from `enabled: false`, see src/routing/parameters.ts).
    delete body.reasoning_effort;
  }
  const summary = `turned thinking off: ${field} ${asked} does not fit below ${limit} with the least budget of ${MIN_BUDGET}`;
  state.pipeline.push({ type: 'max-tokens-cap', name: 'max-tokens-cap', summary, data: { action: 'thinking_off', field, asked, limit } });
}
