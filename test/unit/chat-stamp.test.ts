import { describe, expect, it } from 'vitest';
import { chatCompletions, stampChunk } from '../../src/dialects/chat-completions';
import { keyAt } from '../../src/dialects/common';

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

  it('a chunk with its own provider member is left to the parser, which replaces it (no duplicate key)', () => {
    expect(stampChunk('{"id":"x","provider":"OpenAI","model":"m","choices":[]}', stamp)).toBeNull();
    const rw = chatCompletions.streamRewriter({ generationId: 'gen-1-abc', model: 'gw/model', provider: 'prov', isByok: false, costOf: () => 0, clientWantsUsage: false });
    const out = rw.rewrite({ data: '{"id":"c","object":"chat.completion.chunk","created":1,"model":"u","provider":"OpenAI","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}' })!;
    expect(out.data.match(/"provider":/g)).toHaveLength(1);
    expect(JSON.parse(out.data).provider).toBe('prov');
  });

  it('the stream rewriter gives identical results on both paths', () => {
    const info = { generationId: 'gen-1-abc', model: 'gw/model', provider: 'prov', isByok: false, costOf: () => 0.5, clientWantsUsage: true };
    const rw = chatCompletions.streamRewriter(info);
    rw.rewrite({ data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 5, model: 'u', choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] }) }); // the provider's first chunk, with the role
    const compact = JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 5, model: 'u', choices: [{ index: 0, delta: { content: 'hi' } }] });
    const spaced = JSON.stringify(JSON.parse(compact), null, 1);
    expect(JSON.parse(rw.rewrite({ data: compact })!.data)).toEqual(JSON.parse(rw.rewrite({ data: spaced })!.data));
    const usage = rw.rewrite({ data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 5, model: 'u', choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } }) })!;
    expect(JSON.parse(usage.data).usage).toMatchObject({ cost: 0.5, is_byok: false });
  });

  describe('content chunks with "usage":null (OpenAI sends it in every chunk once include_usage is set)', () => {
    const info = (clientWantsUsage: boolean) => ({ generationId: 'gen-1-abc', model: 'gw/model', provider: 'prov', isByok: false, costOf: () => 0.5, clientWantsUsage });
    const chunk = (extra: object = {}) => ({ id: 'c', object: 'chat.completion.chunk', created: 5, model: 'u', choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }], ...extra });
    const stamped = { id: 'gen-1-abc', model: 'gw/model', provider: 'prov' };
    /** A rewriter past the provider's first chunk, which gives the role (one without it gets it added). */
    const opened = (clientWantsUsage: boolean) => {
      const rw = chatCompletions.streamRewriter(info(clientWantsUsage));
      rw.rewrite({ data: JSON.stringify({ ...chunk(), choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }) });
      return rw;
    };

    it('a client that did not ask for usage gets none, on the string path and the parsing path alike', () => {
      const rw = opened(false);
      const last = JSON.stringify(chunk({ usage: null }));
      const first = `{"id":"c","usage":null,${JSON.stringify(chunk()).slice('{"id":"c",'.length)}`; // the member before a comma
      const spaced = JSON.stringify(chunk({ usage: null }), null, 1); // not compact: parsed
      for (const data of [last, first, spaced]) {
        const out = rw.rewrite({ data })!.data;
        expect(out).not.toContain('usage');
        expect(JSON.parse(out)).toEqual({ ...chunk(), ...stamped });
      }
    });

    it('a client that asked for usage keeps the null, as the provider sent it', () => {
      const rw = opened(true);
      const out = rw.rewrite({ data: JSON.stringify(chunk({ usage: null })) })!.data;
      expect(JSON.parse(out)).toEqual({ ...chunk({ usage: null }), ...stamped });
    });

    it('still reads the finish and the real usage chunk after them', () => {
      const rw = chatCompletions.streamRewriter(info(false));
      rw.rewrite({ data: JSON.stringify(chunk({ usage: null })) });
      expect(rw.end()).toHaveLength(2); // no finish_reason yet: ending now is the in-band failure and [DONE]
      const rw2 = chatCompletions.streamRewriter(info(false));
      rw2.rewrite({ data: JSON.stringify({ ...chunk({ usage: null }), choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) });
      const final = rw2.rewrite({ data: JSON.stringify({ ...chunk(), choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } }) });
      expect(final).toBeNull(); // the usage-only chunk is the gateway's, not the client's
      expect(rw2.usage()).toMatchObject({ inputTokens: 1, outputTokens: 2 });
      expect(rw2.cost()).toBe(0.5);
      expect(rw2.end()).toEqual([{ data: '[DONE]' }]);
    });
  });
});


describe('reading chunks without parsing them', () => {
  it('keyAt finds a key only where its opening quote is', () => {
    expect(keyAt('{"a":1,"usage":{}}', 'usage":')).toBe(7);
    expect(keyAt('{"xusage":{},"b":2}', 'usage":')).toBe(-1);
    expect(keyAt('{"content":"say usage\\":{"}', 'usage":')).toBe(-1); // in a string the quote is escaped
    expect(keyAt('{"model":"a","m":{"model":"b"}}', 'model":"', 3)).toBe(18); // from the given index on
  });

  it('opensOutput takes a plain text chunk as output and leaves everything else to the parser', () => {
    const opens = (data: string) => chatCompletions.opensOutput({ data }, 'prov');
    expect(opens('{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}')).toBe(true);
    // An empty text, a role alone: no output yet (the parser's answer).
    expect(opens('{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}')).toBe(false);
    // A cut-off chunk fails the attempt as malformed, so the next endpoint is tried.
    expect(() => opens('{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_rea')).toThrow(/malformed/);
    // Text beside an error is the error: the attempt fails before any output.
    expect(() => opens('{"id":"c","error":{"message":"overloaded"},"choices":[{"index":0,"delta":{"content":"x"}}]}')).toThrow();
    expect(() => opens('{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"error"}]}')).toThrow();
  });
});
