import { describe, expect, it } from 'vitest';
import { chooseModel } from '../../plugins/auto-router/choose';
import type { RequestFeatures } from '../../plugins/auto-router/features';
import type { ModelConfig, ModelEndpointConfig } from '../../src/config/types';

const PRICE = { prompt: 1, completion: 2, request: 0 };
const endpoint = (upstream: string, supported?: string[]): ModelEndpointConfig => ({
  provider: 'p',
  upstream_model: upstream,
  pricing: PRICE,
  ...(supported ? { supported_parameters: supported } : {}),
});
const features = (over: Partial<RequestFeatures> = {}): RequestFeatures => ({ tokens: 10, code: false, tools: false, images: false, reasoning: false, ...over });
const thresholds = { long_prompt_tokens: 4000, very_long_prompt_tokens: 32000 };
const choose = (pool: ModelConfig[], f: RequestFeatures) => chooseModel({ pool, features: f, costTier: 'medium', maxTokens: 0, thresholds });

describe('auto-router: the tools filter reads what the endpoints take', () => {
  it("skips a model that declares tools when every endpoint's supported_parameters leaves tools out", () => {
    const pool: ModelConfig[] = [
      { id: 'declared', tier: 2, quality: 0.9, capabilities: ['tools'], endpoints: [endpoint('d', ['temperature', 'stop'])] },
      { id: 'listed', tier: 2, quality: 0.5, endpoints: [endpoint('a', ['temperature']), endpoint('b', ['tools', 'tool_choice'])] },
    ];
    const choice = choose(pool, features({ tools: true }));
    expect(choice.model.id).toBe('listed');
    expect(choice.reason).toContain('of 1 eligible');
  });

  it('an endpoint without a list takes tools when the model declares the capability', () => {
    const pool: ModelConfig[] = [
      { id: 'plain', tier: 2, quality: 0.9, endpoints: [endpoint('p')] },
      { id: 'declared', tier: 2, quality: 0.5, capabilities: ['tools'], endpoints: [endpoint('d')] },
    ];
    expect(choose(pool, features({ tools: true })).model.id).toBe('declared');
  });
});

describe('auto-router: endpoint health', () => {
  const pool: ModelConfig[] = [
    { id: 'small', tier: 1, endpoints: [endpoint('s1'), endpoint('s2')] },
    { id: 'mid', tier: 2, quality: 0.7, endpoints: [endpoint('m')] },
    { id: 'mid2', tier: 2, quality: 0.6, endpoints: [endpoint('m2')] },
  ];

  it('skips a model whose every endpoint is down and ranks the rest (the fallbacks come from `ranked`)', () => {
    const choice = chooseModel({ pool, features: features(), costTier: 'medium', maxTokens: 0, thresholds, down: (m) => m.id === 'small' });
    expect(choice.model.id).toBe('mid');
    expect(choice.ranked.map((m) => m.id)).toEqual(['mid', 'mid2']);
  });

  it('chooses among down models when every one is down (nothing is left out then)', () => {
    const choice = chooseModel({ pool, features: features(), costTier: 'medium', maxTokens: 0, thresholds, down: () => true });
    expect(choice.model.id).toBe('small');
    expect(choice.ranked.map((m) => m.id)).toEqual(['small', 'mid', 'mid2']);
    expect(choice.reason).toContain('no allowed model with an endpoint up, ignored');
  });
});
