import { describe, expect, it } from 'vitest';
import type { ModelConfig } from '../../src/config/types';
import { modelPrice } from '../../src/routing/model-pool';

const model = (prices: [number, number][]): ModelConfig => ({
  id: 'm',
  endpoints: prices.map(([prompt, completion], i) => ({ provider: 'p', upstream_model: `u${i}`, pricing: { prompt, completion, request: 0 } })),
});

describe('modelPrice', () => {
  it("is the cheapest endpoint's prompt + completion price, without float noise (a router summary showed $0.30000000000000004)", () => {
    expect(modelPrice(model([[0.1, 0.2]]))).toBe(0.3);
    expect(String(modelPrice(model([[0.1, 0.2]])))).toBe('0.3');
    expect(modelPrice(model([[3, 15], [0.15, 0.6]]))).toBe(0.75);
    expect(modelPrice(model([[0, 0]]))).toBe(0);
  });
});
