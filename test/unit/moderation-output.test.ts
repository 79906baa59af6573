import { describe, expect, it } from 'vitest';
import { eventText } from '../../src/moderation/output';

describe('eventText', () => {
  it('chat: delta content is text; a finish_reason, an error chunk and [DONE] end the answer', () => {
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"content":"Hi "}}]}' })).toEqual({ deltas: [{ choice: 0, text: 'Hi ' }], ending: false });
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}' })).toEqual({ deltas: [{ choice: 0, text: 'x' }], ending: true });
    expect(eventText('chat_completions', { data: '{"choices":[],"usage":{"prompt_tokens":1}}' })).toEqual({ deltas: [], ending: false });
    expect(eventText('chat_completions', { data: '{"error":{"code":502},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}' }).ending).toBe(true);
    expect(eventText('chat_completions', { data: '[DONE]' })).toEqual({ deltas: [], ending: true });
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}}]}' }).deltas).toEqual([{ choice: 0, text: 'Hi there' }]);
  });

  it('chat: a delta refusal is answer text (it had passed unjudged)', () => {
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"refusal":"I can\'t"}}]}' }).deltas).toEqual([{ choice: 0, text: "I can't" }]);
  });

  it('chat with n > 1: every choice of a chunk carries its own text, by its index', () => {
    const two = '{"choices":[{"index":0,"delta":{"content":"calm"}},{"index":1,"delta":{"content":"attack"}}]}';
    expect(eventText('chat_completions', { data: two })).toEqual({
      deltas: [
        { choice: 0, text: 'calm' },
        { choice: 1, text: 'attack' },
      ],
      ending: false,
    });
    expect(eventText('chat_completions', { data: '{"choices":[{"index":3,"delta":{"content":"x"}}]}' }).deltas).toEqual([{ choice: 3, text: 'x' }]);
  });

  it('messages: only text_delta and a text block\'s opening text carry text; message_delta, message_stop and error end the answer', () => {
    expect(eventText('messages', { event: 'content_block_delta', data: '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}' })).toEqual({ deltas: [{ choice: 0, text: 'Hi' }], ending: false });
    expect(eventText('messages', { event: 'content_block_delta', data: '{"delta":{"type":"input_json_delta","partial_json":"{}"}}' })).toEqual({ deltas: [], ending: false });
    expect(eventText('messages', { event: 'message_start', data: '{}' })).toEqual({ deltas: [], ending: false });
    expect(eventText('messages', { event: 'content_block_start', data: '{"index":0,"content_block":{"type":"text","text":"Hi"}}' }).deltas).toEqual([{ choice: 0, text: 'Hi' }]);
    expect(eventText('messages', { event: 'content_block_start', data: '{"index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}' }).deltas).toEqual([]);
    for (const event of ['message_delta', 'message_stop', 'error']) expect(eventText('messages', { event, data: '{}' }).ending).toBe(true);
  });
});
