import { describe, expect, it } from 'vitest';
import { middleOut } from '../../plugins/context-compression/middle-out';
import { quoted } from '../../src/errors/gateway-error';
import { classifyUpstreamError } from '../../src/providers/upstream-errors';
import { messagesCitation } from '../../src/search/citations';
import { textHead, textTail } from '../../src/text-cut';

/** A surrogate without its other half: not Unicode (the Anthropic API answers 400 to JSON holding one). */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const EMOJI = '😀'; // U+1F600: two UTF-16 units

describe('cutting text without splitting a surrogate pair', () => {
  it('textHead keeps at most n units and never ends on the first half of a pair; textTail never starts on the second', () => {
    expect(textHead(`ab${EMOJI}`, 3)).toBe('ab');
    expect(textHead(`ab${EMOJI}`, 4)).toBe(`ab${EMOJI}`);
    expect(textHead('abc', 2)).toBe('ab');
    expect(textHead('abc', 0)).toBe('');
    expect(textTail(`${EMOJI}ab`, 3)).toBe('ab');
    expect(textTail(`${EMOJI}ab`, 4)).toBe(`${EMOJI}ab`);
    expect(textTail('abc', 2)).toBe('bc');
    for (let n = 0; n <= 41; n++) {
      const text = EMOJI.repeat(20);
      expect(textHead(text, n)).not.toMatch(LONE_SURROGATE);
      expect(textTail(text, n)).not.toMatch(LONE_SURROGATE);
      expect(textHead(text, n).length).toBeLessThanOrEqual(n);
    }
  });

  it("middle-out cuts the middle of a long emoji text on whole characters (a lone \\ud83d went upstream)", () => {
    const long = EMOJI.repeat(2000);
    for (const budget of [300, 301, 450, 777, 1001]) {
      const c = middleOut({ body: { messages: [{ role: 'user', content: 'first' }, { role: 'assistant', content: long }, { role: 'user', content: 'last' }] }, budget, keepLatest: 2 });
      expect(c!.truncated).toHaveLength(1);
      expect(c!.messages[1].content, `budget ${budget}`).not.toMatch(LONE_SURROGATE);
    }
  });

  it('a web search citation cuts cited_text at 150 units on whole characters', () => {
    const snippet = `a${EMOJI.repeat(100)}`; // the 150th unit is the first half of an emoji
    const cited = messagesCitation({ url: 'https://x.example/', title: 'X', snippet }, 0).cited_text as string;
    expect(cited).toBe(`a${EMOJI.repeat(74)}`);
  });

  it('error messages quoting client or provider text cut it on whole characters', () => {
    expect(quoted(`a${EMOJI.repeat(150)}`)).toBe(`a${EMOJI.repeat(99)}…`);
    const e = classifyUpstreamError(400, JSON.stringify({ error: { message: `a${EMOJI.repeat(300)}` } }), 'p');
    expect(e.message).not.toMatch(LONE_SURROGATE);
    expect(e.message).toBe(`a${EMOJI.repeat(249)}`);
  });
});
