import { describe, expect, it } from 'vitest';
import { withOutputCap } from '../../src/routing/dispatch';

describe("a model's max_output_tokens caps what the provider is asked for (the spend hold holds no more)", () => {
  it('chat: max_completion_tokens and max_tokens above the cap are lowered; at or below it, the body is the same object', () => {
    expect(withOutputCap({ model: 'x', max_completion_tokens: 100000, max_tokens: 5000 }, 'chat_completions', 4096)).toEqual({ model: 'x', max_completion_tokens: 4096, max_tokens: 4096 });
    const body = { model: 'x', max_tokens: 4096 };
    expect(withOutputCap(body, 'chat_completions', 4096)).toBe(body);
    const none = { model: 'x' };
    expect(withOutputCap(none, 'chat_completions', 4096)).toBe(none);
  });

  it('messages: max_tokens lowered, a thinking budget kept below it, thinking off when under 1024 would be left', () => {
    expect(withOutputCap({ max_tokens: 100000, thinking: { type: 'enabled', budget_tokens: 50000 } }, 'messages', 8000)).toEqual({
      max_tokens: 8000,
      thinking: { type: 'enabled', budget_tokens: 7999 },
    });
    expect(withOutputCap({ max_tokens: 100000, thinking: { type: 'enabled', budget_tokens: 2000 } }, 'messages', 8000)).toEqual({
      max_tokens: 8000,
      thinking: { type: 'enabled', budget_tokens: 2000 },
    });
    expect(withOutputCap({ max_tokens: 5000, thinking: { type: 'enabled', budget_tokens: 4000 } }, 'messages', 1000)).toEqual({ max_tokens: 1000, thinking: { type: 'disabled' } });
    // The input is never changed in place (it is the body of every attempt).
    const body = { max_tokens: 100000 };
    withOutputCap(body, 'messages', 10);
    expect(body.max_tokens).toBe(100000);
  });
});
