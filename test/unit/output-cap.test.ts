import { describe, expect, it } from 'vitest';
import { translateRequest, upstreamMaxTokens } from '../../src/dialects/translate';
import type { Dialect } from '../../src/providers';
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

describe('upstreamMaxTokens: the output limit an upstream call carries, without building it (context-compression reserves it)', () => {
  it('matches what translateRequest and withOutputCap put in the body, for every pair of styles', () => {
    const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
    const msgs = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
    const bodies: [Dialect, Record<string, unknown>][] = [
      ['chat_completions', chat],
      ['chat_completions', { ...chat, max_tokens: 700 }],
      ['chat_completions', { ...chat, max_tokens: 700, max_completion_tokens: 9000 }],
      ['chat_completions', { ...chat, reasoning_effort: 'high' }],
      ['chat_completions', { ...chat, reasoning: { max_tokens: 500 } }],
      ['chat_completions', { ...chat, reasoning: { enabled: false } }],
      ['messages', msgs],
      ['messages', { ...msgs, max_tokens: 700 }],
      ['messages', { ...msgs, max_tokens: 9000 }],
      ['messages', { ...msgs, thinking: { type: 'enabled', budget_tokens: 5000 } }],
    ];
    const limitOf = (b: Record<string, unknown>) => Math.max(Number(b.max_tokens ?? 0), Number(b.max_completion_tokens ?? 0));
    for (const [from, body] of bodies) {
      for (const to of ['chat_completions', 'messages'] as const) {
        for (const maxOutputTokens of [undefined, 2000, 20000]) {
          let sent = translateRequest(from, to, body, { defaultMaxTokens: maxOutputTokens ?? 4096 });
          if (maxOutputTokens !== undefined) sent = withOutputCap(sent, to, maxOutputTokens);
          expect(upstreamMaxTokens({ body, from, to, maxOutputTokens }), `${from} → ${to}, cap ${maxOutputTokens}: ${JSON.stringify(body)}`).toBe(limitOf(sent));
        }
      }
    }
  });
});
