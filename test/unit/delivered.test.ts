import { describe, expect, it } from 'vitest';
import { DIALECTS } from '../../src/dialects';
import type { FinishInfo } from '../../src/dialects/types';
import { billedByDelivery, boundedUsage, outputChars } from '../../src/spend/delivered';
import { addUsage } from '../../src/spend/usage-sum';

const info: FinishInfo = {
  generationId: 'gen-1', model: 'm', provider: 'p', isByok: false, clientWantsUsage: false,
  costOf: (u) => (u.inputTokens * 1 + u.outputTokens * 2) / 1e6,
};
const chunk = (delta: Record<string, unknown>) => ({ data: JSON.stringify({ id: 'x', model: 'u', choices: [{ index: 0, delta, finish_reason: null }] }) });

describe('billing a stream by what was delivered', () => {
  it('counts output text in chat chunks and messages deltas, escapes included, nothing else', () => {
    expect(outputChars('chat_completions', chunk({ content: 'Hello "you"' }))).toBe(13);
    expect(outputChars('chat_completions', chunk({ role: 'assistant', content: '' }))).toBe(0);
    expect(outputChars('chat_completions', chunk({ tool_calls: [{ index: 0, function: { arguments: '{"a":1}' } }] }))).toBe(9);
    expect(outputChars('messages', { event: 'content_block_delta', data: '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi\\\\"}}' })).toBe(4);
    expect(outputChars('messages', { event: 'message_start', data: '{"message":{"content":[],"text":"not output"}}' })).toBe(0);
    // Every output key, several in one event; a key-like text inside a value is not a key.
    expect(outputChars('chat_completions', chunk({ reasoning_content: 'abc', reasoning: 'de', refusal: 'f', content: 'say "content":"x"' }))).toBe(3 + 2 + 1 + 21);
    expect(outputChars('messages', { event: 'content_block_delta', data: '{"delta":{"type":"thinking_delta","thinking":"hmm"}}' })).toBe(3);
    expect(outputChars('messages', { event: 'content_block_delta', data: '{"delta":{"type":"input_json_delta","partial_json":"{\\"a\\""}}' })).toBe(6);
  });

  it('a chat stream cut before its usage chunk is billed for the relayed text; a finished one keeps the reported usage', () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'hello there' }] };
    const cut = billedByDelivery(DIALECTS.chat_completions.streamRewriter(info), { dialect: 'chat_completions', info, body });
    cut.rewrite(chunk({ content: 'abcdefghij' }));
    expect(cut.usage()).toMatchObject({ outputTokens: 3 });
    expect(cut.usage()!.inputTokens).toBeGreaterThan(0);
    expect(cut.cost()).toBeCloseTo((cut.usage()!.inputTokens + 6) / 1e6, 12);

    const done = billedByDelivery(DIALECTS.chat_completions.streamRewriter(info), { dialect: 'chat_completions', info, body });
    done.rewrite(chunk({ content: 'abcdefghij'.repeat(10) }));
    done.rewrite({ data: JSON.stringify({ id: 'x', model: 'u', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) });
    done.rewrite({ data: JSON.stringify({ id: 'x', model: 'u', choices: [], usage: { prompt_tokens: 7, completion_tokens: 20 } }) });
    done.end();
    expect(done.usage()).toMatchObject({ inputTokens: 7, outputTokens: 20 });
  });

  it("a cut stream billed by the provider's partial usage (a translated message_start) keeps it within the bounds", () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'hello there' }] };
    const partial = { inputTokens: 1e300, outputTokens: 0, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 };
    const bounds = { maxOutputTokens: 2, maxInputTokens: 1000 };
    const cut = billedByDelivery(DIALECTS.chat_completions.streamRewriter(info), { dialect: 'chat_completions', info, body, reported: () => partial, bounds });
    cut.rewrite(chunk({ content: 'abcdefghijklmnopqrst' }));
    expect(cut.usage()).toMatchObject({ inputTokens: 1000, outputTokens: 2 });
    expect(cut.cost()).toBeCloseTo((1000 + 2 * 2) / 1e6, 12);
  });

  it('counts every relayed event of a long cut stream exactly once, also above a usage the provider reported on the way', () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'hello there' }] };
    const cut = billedByDelivery(DIALECTS.chat_completions.streamRewriter(info), { dialect: 'chat_completions', info, body });
    for (let i = 0; i < 150; i++) cut.rewrite(chunk({ content: 'abcd' })); // 4 characters a token
    cut.end();
    expect(cut.usage()!.outputTokens).toBe(150);
    expect(cut.usage()!.outputTokens).toBe(150);

    const partial = billedByDelivery(DIALECTS.chat_completions.streamRewriter(info), { dialect: 'chat_completions', info, body });
    for (let i = 0; i < 100; i++) partial.rewrite(chunk({ content: 'abcdefgh' }));
    partial.rewrite({ data: JSON.stringify({ id: 'x', model: 'u', choices: [], usage: { prompt_tokens: 7, completion_tokens: 5 } }) });
    for (let i = 0; i < 100; i++) partial.rewrite(chunk({ content: 'abcdefgh' }));
    partial.end();
    expect(partial.usage()).toMatchObject({ inputTokens: 7, outputTokens: 400 });
  });
});

describe('1-hour cache writes in bounded and summed usage', () => {
  const u = { inputTokens: 1000, outputTokens: 10, cachedTokens: 0, cacheWriteTokens: 800, cacheWrite1hTokens: 600, reasoningTokens: 0 };

  it('are kept within the bounds, and never more than the writes', () => {
    expect(boundedUsage(u, { maxInputTokens: 2000, maxOutputTokens: 100 })).toBe(u);
    expect(boundedUsage(u, { maxInputTokens: 500, maxOutputTokens: 100 })).toMatchObject({ inputTokens: 500, cacheWriteTokens: 500, cacheWrite1hTokens: 500 });
    expect(boundedUsage({ ...u, cacheWrite1hTokens: 900 }, { maxInputTokens: 2000, maxOutputTokens: 100 })).toMatchObject({ cacheWriteTokens: 800, cacheWrite1hTokens: 800 });
  });

  it('are summed over several calls', () => {
    const plain = { ...u, cacheWrite1hTokens: undefined };
    expect(addUsage([u, plain, u])).toMatchObject({ cacheWriteTokens: 2400, cacheWrite1hTokens: 1200 });
    expect(addUsage([plain])).not.toHaveProperty('cacheWrite1hTokens');
  });
});
