import { describe, expect, it } from 'vitest';
import { requestedModels } from '../../src/routing/candidates';

describe('requestedModels', () => {
  it('model, then models, then fallbacks, each name once, in first-seen order', () => {
    expect(requestedModels({ model: 'a', models: ['b', 'a', 'c', 'b', '', 7], fallbacks: [{ model: 'c' }, { model: 'd' }, null] })).toEqual(['a', 'b', 'c', 'd']);
  });

  it('a list of 200 000 distinct names comes back whole (the check is a Set: the list search made it quadratic)', () => {
    const models = Array.from({ length: 200_000 }, (_, i) => `m${i}`);
    const out = requestedModels({ model: 'm0', models });
    expect(out).toHaveLength(200_000);
    expect(out[199_999]).toBe('m199999');
  });
});
