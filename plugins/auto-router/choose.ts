import type { ModelCapability, ModelConfig } from '../../src/config/types';
import { modelPrice } from '../../src/routing/model-pool';
import type { RequestFeatures } from './features';

export const COST_TIERS = ['low', 'medium', 'high'] as const;
export type CostTier = (typeof COST_TIERS)[number];

export interface Thresholds {
  long_prompt_tokens: number;
  very_long_prompt_tokens: number;
}

export interface AutoChoice {
  model: ModelConfig;
  /** Every eligible model, best first (`model` is the first): the next ones are its fallbacks. */
  ranked: ModelConfig[];
  /** 1..3: the tier the request needs, after the cost tier's shift. */
  targetTier: number;
  points: number;
  /** One line a person can read: why this model. */
  reason: string;
}

const tierOf = (m: ModelConfig) => m.tier ?? 2;
const has = (m: ModelConfig, c: ModelCapability) => (m.capabilities ?? []).includes(c);

/**
 * Whether some endpoint of the model is sent a request's tools. An endpoint's `supported_parameters` decides
 * (one whose list leaves `tools` out gets the request without them: src/routing/parameters.ts); the model's
 * declared `tools` capability speaks only for the endpoints that list nothing. The filter had read the
 * capability alone, so it could choose a model whose every endpoint drops the tools.
 */
export function takesTools(m: ModelConfig): boolean {
  return m.endpoints.some((e) => (e.supported_parameters === undefined ? has(m, 'tools') : e.supported_parameters.includes('tools')));
}

/** How demanding a request is: length +1 (+2 when very long), code +1, tools +1, reasoning +2. */
export function demandPoints(f: RequestFeatures, t: Thresholds): { points: number; why: string[] } {
  const why: string[] = [];
  let points = 0;
  if (f.tokens >= t.very_long_prompt_tokens) (points += 2), why.push(`very long prompt (${f.tokens} tokens) +2`);
  else if (f.tokens >= t.long_prompt_tokens) (points += 1), why.push(`long prompt (${f.tokens} tokens) +1`);
  if (f.code) (points += 1), why.push('code +1');
  if (f.tools) (points += 1), why.push('tools +1');
  if (f.reasoning) (points += 2), why.push('reasoning +2');
  return { points, why };
}

/**
 * The auto-router's deterministic choice (README "Routers and context compression"):
 * 1. needed tier from demand points (0 → 1, 1–2 → 2, 3+ → 3), shifted by the cost tier (low −1, high +1), kept in 1..3;
 * 2. hard filters, each skipped when it would leave nothing: fits the context (prompt + max tokens ≤
 *    `context_length`), `vision` when the request has images, an endpoint that takes tools when it has tools
 *    (`takesTools`);
 * 3. rank: the most of the soft capabilities asked for (`code`, `reasoning`), then the lowest tier at or above
 *    the target (a tier below it only when none is), then for `low` the price before the quality, else the
 *    quality before the price, then configured order.
 * Last, a model `down` says is out of service (every endpoint's breaker open or resting) is left out, unless
 * that would leave nothing.
 */
export function chooseModel(input: {
  pool: ModelConfig[];
  features: RequestFeatures;
  costTier: CostTier;
  maxTokens: number;
  thresholds: Thresholds;
  /** Whether every endpoint of the model is known down (routing health); none is when absent. */
  down?: (m: ModelConfig) => boolean;
}): AutoChoice {
  const { features: f, costTier } = input;
  const { points, why } = demandPoints(f, input.thresholds);
  const needed = points === 0 ? 1 : points <= 2 ? 2 : 3;
  const shift = costTier === 'low' ? -1 : costTier === 'high' ? 1 : 0;
  const targetTier = Math.min(3, Math.max(1, needed + shift));
  const notes: string[] = [];

  let pool = input.pool;
  const narrow = (label: string, keep: (m: ModelConfig) => boolean) => {
    const left = pool.filter(keep);
    if (left.length > 0) pool = left;
    else notes.push(`no allowed model ${label}, ignored`);
  };
  const need = f.tokens + input.maxTokens;
  narrow(`fits ${need} tokens`, (m) => m.context_length === undefined || m.context_length >= need);
  if (f.images) narrow('declares vision', (m) => has(m, 'vision'));
  if (f.tools) narrow('takes tools', takesTools);
  const down = input.down;
  if (down) narrow('with an endpoint up', (m) => !down(m));

  const soft: ModelCapability[] = [...(f.code ? (['code'] as const) : []), ...(f.reasoning ? (['reasoning'] as const) : [])];
  const order = new Map(input.pool.map((m, i) => [m.id, i]));
  const key = (m: ModelConfig): number[] => {
    const tier = tierOf(m);
    const gap = tier >= targetTier ? tier - targetTier : 10 + (targetTier - tier);
    const softMiss = soft.filter((c) => !has(m, c)).length;
    const price = modelPrice(m);
    const quality = -(m.quality ?? 0.5);
    return [softMiss, gap, ...(costTier === 'low' ? [price, quality] : [quality, price]), order.get(m.id)!];
  };
  const ranked = [...pool].sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i] - kb[i];
    return 0;
  });
  const model = ranked[0];
  const demand = why.length > 0 ? why.join(', ') : 'short plain prompt';
  const reason =
    `${demand} → tier ${needed}; cost_tier ${costTier} → target tier ${targetTier}; ` +
    `chose ${model.id} (tier ${tierOf(model)}${model.capabilities?.length ? `, ${model.capabilities.join('+')}` : ''}) of ${pool.length} eligible` +
    (notes.length ? ` (${notes.join('; ')})` : '');
  return { model, ranked, targetTier, points, reason };
}
