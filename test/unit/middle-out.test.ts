import { describe, expect, it } from 'vitest';
import { middleOut } from '../../plugins/context-compression/middle-out';
import { inputTokens } from '../../src/spend/estimate';

const filler = (n: number) => `Turn ${n}: ` + Array.from({ length: 60 }, (_, i) => `fact${(i * 7 + n) % 97}`).join(' ');

describe('middle-out truncation', () => {
  it('cuts as many kept texts as the budget needs (it stopped after 32, and sent the prompt over the window)', () => {
    // keep_latest 60: nothing is removable, so 59 long texts must be cut.
    const messages = [...Array.from({ length: 60 }, (_, n) => ({ role: n % 2 ? 'assistant' : 'user', content: filler(n) })), { role: 'user', content: 'LATEST' }];
    const budget = 1000;
    const c = middleOut({ body: { messages }, budget, keepLatest: 60 });
    expect(c?.fits).toBe(true);
    expect(c!.tokensAfter).toBeLessThanOrEqual(budget);
    expect(inputTokens({ messages: c!.messages })).toBe(c!.tokensAfter);
    expect(c!.messages).toHaveLength(messages.length);
    expect(c!.messages.at(-1)).toEqual({ role: 'user', content: 'LATEST' });
    expect(c!.truncated.length).toBeGreaterThan(32);
  });

  it('cuts the middle of one long text by what is over, keeping its head and tail', () => {
    const huge = Array.from({ length: 200 }, (_, i) => filler(i)).join('\n');
    const messages = [{ role: 'system', content: 'System.' }, { role: 'user', content: huge }, { role: 'assistant', content: 'Ok.' }, { role: 'user', content: 'LATEST' }];
    const c = middleOut({ body: { messages }, budget: 2000, keepLatest: 2 });
    expect(c?.fits).toBe(true);
    expect(c!.tokensAfter).toBeGreaterThan(1800); // the rest of the text is kept, not all wiped
    const text = c!.messages[1].content as string;
    expect(text.startsWith(huge.slice(0, 50))).toBe(true);
    expect(text.endsWith(huge.slice(-50))).toBe(true);
    expect(c!.truncated).toEqual([{ index: 1, tokens_removed: expect.any(Number) }]);
  });
});

describe('middle-out on long requests', () => {
  it('cuts to the budget, not far below it, when the request is counted by length past 100 000 characters (prose was cut to a tenth of the budget)', () => {
    const words = ['fox', 'river', 'quietly', 'über', 'jumps', '東京', 'over', 'the'];
    const prose = (k: number) => Array.from({ length: 8_000 }, (_, i) => words[(i * 7 + k) % words.length]).join(' ');
    const messages = [...Array.from({ length: 20 }, (_, k) => ({ role: k % 2 ? 'assistant' : 'user', content: prose(k) })), { role: 'user', content: 'LATEST' }];
    const budget = 5000;
    const c = middleOut({ body: { messages }, budget, keepLatest: 21 });
    expect(c?.fits).toBe(true);
    expect(c!.tokensAfter).toBeLessThanOrEqual(budget);
    expect(c!.tokensAfter).toBeGreaterThan(budget * 0.9);
  });

  it('cuts enough when the total counts a text at less than its tokens (CJK past 100 000 characters: 1 token per 3 characters)', () => {
    const cjk = (k: number) => Array.from({ length: 30_000 }, (_, i) => String.fromCharCode(0x4e00 + ((i * 7 + k * 131) % 20_000))).join('');
    const messages = [...Array.from({ length: 8 }, (_, k) => ({ role: k % 2 ? 'assistant' : 'user', content: cjk(k) })), { role: 'user', content: 'LATEST' }];
    const c = middleOut({ body: { messages }, budget: 20_000, keepLatest: 9 });
    expect(c?.fits).toBe(true);
    expect(c!.tokensAfter).toBeGreaterThan(18_000);
  }, 20_000);
});

describe('middle-out when the prompt cannot fit', () => {
  it('leaves the messages uncut when the system prompt and latest message alone are over the budget (it cut the middle for nothing)', () => {
    const system = Array.from({ length: 40 }, (_, i) => filler(i)).join('\n');
    const messages = [
      { role: 'system', content: system },
      { role: 'user', content: 'FIRST' },
      ...Array.from({ length: 10 }, (_, n) => ({ role: n % 2 ? 'user' : 'assistant', content: filler(n) })),
      { role: 'user', content: 'LATEST' },
    ];
    const before = structuredClone(messages);
    const c = middleOut({ body: { messages }, budget: 500, keepLatest: 2 });
    expect(c).toMatchObject({ fits: false, removed: [], truncated: [] });
    expect(c!.messages).toEqual(before);
    expect(c!.tokensAfter).toBe(c!.tokensBefore);
  });
});
