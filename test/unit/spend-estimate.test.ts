import { describe, expect, it, vi } from 'vitest';
import type { ModelConfig } from '../../src/config/types';
import { countTokens, estimate, estimateCalls, inputTokens } from '../../src/spend/estimate';

const model = (id: string, pricing: Partial<ModelConfig['endpoints'][0]['pricing']>, over: Partial<ModelConfig> = {}): ModelConfig => ({
  id,
  endpoints: [{ provider: 'p', upstream_model: id, pricing: { prompt: 0, completion: 0, request: 0, ...pricing } }],
  ...over,
});
const models = new Map<string, ModelConfig>([
  ['cheap', model('cheap', { prompt: 1, completion: 2 })],
  ['dear', model('dear', { prompt: 10, completion: 30 }, { max_output_tokens: 1000 })],
  ['free:free', model('free:free', {})],
  ['fee', model('fee', { request: 0.01 })],
]);

describe('token counting', () => {
  it('counts BPE tokens, not characters / 4', () => {
    expect(countTokens('hello world')).toBe(2);
    expect(countTokens('')).toBe(0);
    // A long word that chars/4 would call 7 tokens.
    expect(countTokens('antidisestablishmentarianism')).toBeLessThan(7);
  });

  it('reads messages, system and tools of both dialects; images count a fixed amount, their data never', () => {
    const chat = { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'hi' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(100_000)}` } }] }] };
    const n = inputTokens(chat);
    expect(n).toBeGreaterThan(1000);
    expect(n).toBeLessThan(1100);
    const messages = { system: 'Be brief.', messages: [{ role: 'user', content: 'hi' }], tools: [{ name: 'get_weather', input_schema: { type: 'object' } }] };
    expect(inputTokens(messages)).toBeGreaterThan(inputTokens({ system: 'Be brief.', messages: [{ role: 'user', content: 'hi' }] }));
  });

  it('a base64 PDF, file or audio counts by its size, not its base64 as text (a 5 MB PDF counted 2.2 M tokens)', () => {
    const user = (block: Record<string, unknown>) => ({ messages: [{ role: 'user', content: [block] }] });
    const text = inputTokens({ messages: [{ role: 'user', content: [] }] });
    const b64 = (bytes: number) => 'A'.repeat(Math.ceil(bytes / 3) * 4);
    const pdf5mb = b64(5_000_000);
    // messages: a document; chat: a file as a data URL, or as raw base64 (taken as a PDF).
    expect(inputTokens(user({ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: pdf5mb } })) - text).toBe(500_000);
    expect(inputTokens(user({ type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${pdf5mb}` } })) - text).toBe(500_000);
    expect(inputTokens(user({ type: 'file', file: { file_data: b64(1_200_000) } })) - text).toBe(120_000);
    // A small PDF counts a page at least.
    expect(inputTokens(user({ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: b64(3_000) } })) - text).toBe(5_000);
    // An image sent as a file counts as an image; audio 1 token per 64 bytes.
    expect(inputTokens(user({ type: 'file', file: { file_data: `data:image/png;base64,${b64(3_000_000)}` } })) - text).toBe(1000);
    expect(inputTokens(user({ type: 'input_audio', input_audio: { format: 'wav', data: b64(63_936) } })) - text).toBe(999);
    // A plain-text document is still read as text, a PDF by URL by its URL.
    expect(inputTokens(user({ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'word '.repeat(1000) } })) - text).toBeGreaterThan(900);
    expect(inputTokens(user({ type: 'file', file: { file_data: 'https://example.com/a.pdf' } })) - text).toBeLessThan(20);
  });
});

describe('remembered counts of long texts', () => {
  // The tokenizer module estimate.ts loads on first use (the same instance: Node's module cache).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const bpe = require('gpt-tokenizer/cjs/encoding/cl100k_base') as { countTokens(text: string): number };
  const words = ['fox', 'river', 'quietly', 'über', 'jumps', '東京', 'over', 'the', 'lazy', 'dog,', 'and', 'then'];
  const prose = (seed: number, chars: number) => {
    let out = '';
    for (let i = seed; out.length < chars; i++) out += `${words[(i * 7) % words.length]} `;
    return out.slice(0, chars);
  };

  it('a long text seen again is not tokenized again, and counts the same', () => {
    const text = prose(1, 20_000);
    const spy = vi.spyOn(bpe, 'countTokens');
    try {
      const first = countTokens(text);
      const calls = spy.mock.calls.length;
      expect(calls).toBeGreaterThan(1); // in pieces of at most 256 characters
      // The same content in another string (as the next request's parsed body has it).
      const again = countTokens(`${text.slice(0, 10_000)}${text.slice(10_000)}`);
      expect(again).toBe(first);
      expect(spy.mock.calls.length).toBe(calls);
    } finally {
      spy.mockRestore();
    }
  });

  it('by content: a text one character apart is counted anew; short texts are always tokenized', () => {
    const text = prose(2, 5_000);
    const base = countTokens(text);
    const spy = vi.spyOn(bpe, 'countTokens');
    try {
      const other = countTokens(`${text.slice(0, -1)}東`);
      expect(spy).toHaveBeenCalled();
      expect(other).toBeGreaterThanOrEqual(base);
      spy.mockClear();
      expect(countTokens('hello world')).toBe(2);
      expect(countTokens('hello world')).toBe(2);
      expect(spy).toHaveBeenCalledTimes(2);
    } finally {
      spy.mockRestore();
    }
  });

  it('counts a request the same whether its texts were seen before or not', () => {
    const system = prose(3, 12_000);
    const tools = [{ type: 'function', function: { name: 'search', description: prose(4, 3_000), parameters: { type: 'object' } } }];
    const body = { messages: [{ role: 'system', content: system }, { role: 'user', content: 'hi' }], tools };
    const cold = inputTokens(body);
    expect(inputTokens(JSON.parse(JSON.stringify(body)))).toBe(cold);
  });
});

describe('estimate', () => {
  const body = { model: 'cheap', messages: [{ role: 'user', content: 'hello world' }] };

  it('input tokens plus max_tokens at the token prices', () => {
    const e = estimate({ ...body, max_tokens: 100 }, models, 4096);
    // 4 framing tokens per message, `user`, `hello world`.
    expect(e).toMatchObject({ paid: true, inputTokens: 7, completionTokens: 100 });
    expect(e.usd).toBeCloseTo((7 * 1 + 100 * 2) / 1e6, 12);
    expect(estimate({ ...body, max_completion_tokens: 10 }, models, 4096).completionTokens).toBe(10);
    // Both names set: the larger is held (a small max_tokens beside a large max_completion_tokens, which the
    // translation and many providers honour, must not shrink the hold).
    expect(estimate({ ...body, max_tokens: 1, max_completion_tokens: 2000 }, models, 4096).completionTokens).toBe(2000);
    expect(estimate({ ...body, max_tokens: 300, max_completion_tokens: 20 }, models, 4096).completionTokens).toBe(300);
  });

  it('chat n: every choice may use max_tokens, so the completion part is held n times', () => {
    const one = estimate({ ...body, max_tokens: 100 }, models, 4096);
    const many = estimate({ ...body, max_tokens: 100, n: 128 }, models, 4096);
    expect(many).toMatchObject({ inputTokens: 7, completionTokens: 12_800 });
    expect(many.usd).toBeCloseTo((7 * 1 + 12_800 * 2) / 1e6, 12);
    expect(estimate({ ...body, max_tokens: 100, n: 1 }, models, 4096)).toEqual(one);
    expect(estimate({ ...body, model: 'dear', n: 3 }, models, 4096).completionTokens).toBe(3000);
    expect(estimateCalls([{ body: { ...body, max_tokens: 10, n: 4 } }], models, 4096).completionTokens).toBe(40);
  });

  it('the per-request cap when max_tokens is unset, capped by the model’s max_output_tokens', () => {
    expect(estimate(body, models, 4096).completionTokens).toBe(4096);
    expect(estimate({ ...body, model: 'dear' }, models, 4096).completionTokens).toBe(1000);
  });

  it('input at the cache-write price when it is dearer than the prompt price (a prompt written to the cache is billed so)', () => {
    const cached = new Map([...models, ['cw', model('cw', { prompt: 3, completion: 15, cache_write: 3.75 })]]);
    const e = estimate({ ...body, model: 'cw', max_tokens: 10 }, cached, 4096);
    expect(e.usd).toBeCloseTo((7 * 3.75 + 10 * 15) / 1e6, 12);
    // A 1-hour write is dearer still (2× at Anthropic): the hold stays above the bill.
    const hour = new Map([...models, ['cw', model('cw', { prompt: 3, completion: 15, cache_write: 3.75, cache_write_1h: 6 })]]);
    expect(estimate({ ...body, model: 'cw', max_tokens: 10 }, hour, 4096).usd).toBeCloseTo((7 * 6 + 10 * 15) / 1e6, 12);
  });

  it('the most expensive endpoint among the requested models and fallbacks', () => {
    const e = estimate({ ...body, max_tokens: 10, models: ['cheap', 'dear'] }, models, 4096);
    expect(e.usd).toBeCloseTo((7 * 10 + 10 * 30) / 1e6, 12);
  });

  it('free models and per-request fees hold nothing; unknown models are not estimated', () => {
    expect(estimate({ ...body, model: 'free:free' }, models, 4096)).toMatchObject({ paid: false, usd: 0 });
    expect(estimate({ ...body, model: 'fee' }, models, 4096)).toMatchObject({ paid: true, usd: 0 });
    expect(estimate({ ...body, model: 'nope' }, models, 4096)).toMatchObject({ models: [], usd: 0 });
  });
});

describe('estimateCalls (several upstream calls for one request)', () => {
  const ask = (model: string, max_tokens: number) => ({ model, max_tokens, messages: [{ role: 'user', content: 'hello world' }] });

  it('sums each call at its own model; a call that reads the earlier ones counts their completions as input', () => {
    const e = estimateCalls([{ body: ask('cheap', 100) }, { body: ask('dear', 10) }], models, 4096);
    expect(e).toMatchObject({ paid: true, inputTokens: 14, completionTokens: 110 });
    expect(e.models.map((m) => m.id)).toEqual(['cheap', 'dear']);
    expect(e.usd).toBeCloseTo((7 * 1 + 100 * 2 + 7 * 10 + 10 * 30) / 1e6, 12);
    const judged = estimateCalls([{ body: ask('cheap', 100) }, { body: ask('cheap', 100) }, { body: ask('dear', 10), readsEarlier: true }], models, 4096);
    expect(judged.usd).toBeCloseTo((2 * (7 + 200) + (7 + 200) * 10 + 10 * 30) / 1e6, 12);
  });

  it('free and unknown models add nothing; no token price anywhere is unpriced', () => {
    const e = estimateCalls([{ body: ask('cheap', 100) }, { body: ask('free:free', 100) }, { body: ask('nope', 100) }], models, 4096);
    expect(e.usd).toBeCloseTo((7 + 200) / 1e6, 12);
    expect(estimateCalls([{ body: ask('free:free', 100) }, { body: ask('fee', 100) }], models, 4096)).toMatchObject({ paid: true, usd: 0, inputTokens: 0 });
  });
});


describe('countTokens on long texts', () => {
  it('counts prose in pieces exactly as whole; runs without breaks in linear time; very long texts by length', () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const exact = require('gpt-tokenizer/cjs/encoding/cl100k_base').countTokens as (t: string) => number;
    const prose = 'The quick brown fox jumps over the lazy dog, and then it runs away into the forest. '.repeat(300);
    expect(countTokens(prose)).toBe(exact(prose));
    // 8 letters a token either way; whole, 99 000 letters took the tokenizer ~8 s (quadratic in the run).
    expect(countTokens('a'.repeat(99_000))).toBe(99_000 / 8);
    expect(countTokens('😀'.repeat(5000))).toBeGreaterThan(0); // pieces never split a surrogate pair
    expect(countTokens('x'.repeat(300_000))).toBe(100_000);
    // A request's texts are tokenized up to 100 000 characters in all, the rest estimated by length.
    const text = 'word '.repeat(19_000); // 95 000 characters
    const body = { messages: [{ role: 'user', content: text }, { role: 'user', content: text }] };
    expect(inputTokens(body)).toBe(8 + 2 * countTokens('user') + countTokens(text) + Math.ceil(95_000 / 3));
  });
});
