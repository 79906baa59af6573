import { describe, expect, it } from 'vitest';
import { messages } from '../../src/dialects/messages';

describe('messages stream rewriter', () => {
  it('collects usage from message_start and message_delta, reasoning tokens included, and stamps cost', () => {
    const rw = messages.streamRewriter({ generationId: 'gen-1', model: 'gw/m', provider: 'p', isByok: false, costOf: (u) => u.outputTokens / 1000, clientWantsUsage: false });
    const start = rw.rewrite({ event: 'message_start', data: JSON.stringify({ type: 'message_start', message: { id: 'x', model: 'u', usage: { input_tokens: 7, cache_read_input_tokens: 3, output_tokens: 1 } } }) })!;
    expect(JSON.parse(start.data).message).toMatchObject({ id: 'gen-1', model: 'gw/m', provider: 'p' });
    const delta = rw.rewrite({
      event: 'message_delta',
      data: JSON.stringify({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 40, output_tokens_details: { reasoning_tokens: 25 } } }),
    })!;
    expect(JSON.parse(delta.data).usage).toMatchObject({ output_tokens: 40, cost: 0.04, is_byok: false });
    expect(rw.usage()).toEqual({ inputTokens: 10, outputTokens: 40, cachedTokens: 3, cacheWriteTokens: 0, reasoningTokens: 25 });
    rw.rewrite({ event: 'message_stop', data: '{"type":"message_stop"}' });
    expect(rw.end()).toEqual([{ data: '[DONE]' }]);
    expect(rw.failed()).toBe(false);
  });

  it('a stream cut before message_stop ends with an error event, not a clean end', () => {
    const rw = messages.streamRewriter({ generationId: 'gen-1', model: 'gw/m', provider: 'p', isByok: false, costOf: () => 0, clientWantsUsage: false });
    rw.rewrite({ event: 'message_start', data: JSON.stringify({ type: 'message_start', message: { id: 'x', usage: { input_tokens: 1 } } }) });
    const end = rw.end();
    expect(end[0].event).toBe('error');
    expect(JSON.parse(end[0].data).error).toMatchObject({ type: 'api_error', error_type: 'provider_unavailable' });
    expect(end.at(-1)).toEqual({ data: '[DONE]' });
    expect(rw.failed()).toBe(true);
  });

  it('a stream that stops after its message_delta (the stop reason) gets the message_stop it is owed, at its end or at [DONE]', () => {
    const info = { generationId: 'gen-1', model: 'gw/m', provider: 'p', isByok: false, costOf: () => 0, clientWantsUsage: false };
    const delta = { event: 'message_delta', data: JSON.stringify({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 4 } }) };
    const start = { event: 'message_start', data: JSON.stringify({ type: 'message_start', message: { id: 'x', usage: { input_tokens: 1 } } }) };
    const atEnd = messages.streamRewriter(info);
    atEnd.rewrite(start);
    expect(atEnd.answered()).toBe(false);
    atEnd.rewrite(delta);
    expect(atEnd.answered()).toBe(true);
    expect(atEnd.end()).toEqual([{ event: 'message_stop', data: '{"type":"message_stop"}' }, { data: '[DONE]' }]);
    expect(atEnd.failed()).toBe(false);
    const atDone = messages.streamRewriter(info);
    atDone.rewrite(start);
    atDone.rewrite(delta);
    expect(atDone.rewrite({ data: '[DONE]' })).toEqual({ event: 'message_stop', data: '{"type":"message_stop"}' });
    expect(atDone.complete()).toBe(true);
    expect(atDone.end()).toEqual([{ data: '[DONE]' }]);
    // A message_delta without a stop reason is no end.
    const noStop = messages.streamRewriter(info);
    noStop.rewrite({ event: 'message_delta', data: JSON.stringify({ type: 'message_delta', delta: {}, usage: { output_tokens: 4 } }) });
    expect(noStop.answered()).toBe(false);
    expect(() => noStop.rewrite({ data: '[DONE]' })).toThrow();
  });

  it('a malformed message_delta fails the stream', () => {
    const rw = messages.streamRewriter({ generationId: 'gen-1', model: 'gw/m', provider: 'p', isByok: false, costOf: () => 0, clientWantsUsage: false });
    expect(() => rw.rewrite({ event: 'message_delta', data: '{not json' })).toThrow(/malformed/);
  });
});
