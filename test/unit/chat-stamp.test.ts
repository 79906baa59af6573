import { describe, expect, it } from 'vitest';
import { chatCompletions, stampChunk } from '../../src/dialects/chat-completions';

const stamp = { id: '"gen-1-abc"', model: '"gw/model"', provider: '"prov"' };

describe('stampChunk (the string path for content chunks)', () => {
  it('gives the same object a parse-and-stringify would', () => {
    const chunk = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'up-model', choices: [{ index: 0, delta: { content: 'he said \\"model\\":\\"x\\"' }, finish_reason: null }] };
    const out = stampChunk(JSON.stringify(chunk), stamp)!;
    expect(JSON.parse(out)).toEqual({ ...chunk, id: 'gen-1-abc', model: 'gw/model', provider: 'prov' });
  });

  it('declines shapes it cannot edit safely (the caller parses those)', () => {
    expect(stampChunk('{ "id": "x", "model": "m" }', stamp)).toBeNull(); // spaces
    expect(stampChunk('{"object":"chat.completion.chunk","id":"x","model":"m"}', stamp)).toBeNull(); // id not first
    expect(stampChunk('{"id":"x","choices":[]}', stamp)).toBeNull(); // no model
    expect(stampChunk(String.raw`{"id":"a\"b","model":"m"}`, stamp)).toBeNull(); // escaped quote in the id
    expect(stampChunk(String.raw`{"id":"a","model":"m\"x"}`, stamp)).toBeNull(); // escaped quote in the model
  });

  it('the stream rewriter gives identical results on both paths', () => {
    const info = { generationId: 'gen-1-abc', model: 'gw/model', provider: 'prov', isByok: false, costOf: () => 0.5, clientWantsUsage: true };
    const rw = chatCompletions.streamRewriter(info);
    const compact = JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 5, model: 'u', choices: [{ index: 0, delta: { content: 'hi' } }] });
    const spaced = JSON.stringify(JSON.parse(compact), null, 1);
    expect(JSON.parse(rw.rewrite({ data: compact })!.data)).toEqual(JSON.parse(rw.rewrite({ data: spaced })!.data));
    const usage = rw.rewrite({ data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 5, model: 'u', choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } }) })!;
    expect(JSON.parse(usage.data).usage).toMatchObject({ cost: 0.5, is_byok: false });
  });
});
