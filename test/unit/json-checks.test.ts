import { describe, expect, it } from 'vitest';
import { hasLoneSurrogate, hasSurrogateEscape, jsonShape, loneSurrogateField } from '../../src/routes/json-checks';
import { jsonDepthExceeds as parsedDepthExceeds } from '../fixtures/json-depth';

/** The depth half of the raw text scan alone (no limit on values). */
const jsonDepthExceeds = (text: string, max: number) => jsonShape(text, max, 0).exceeds === 'depth';

describe('jsonShape: the values a body holds (raw text scan)', () => {
  it('counts commas and containers outside strings; 0 is no limit', () => {
    expect(jsonShape('[0,0,0]', 100, 3).exceeds).toBeNull();
    expect(jsonShape('[0,0,0]', 100, 2).exceeds).toBe('values');
    expect(jsonShape('[{},{}]', 100, 4).exceeds).toBeNull();
    expect(jsonShape('[{},{}]', 100, 3).exceeds).toBe('values');
    expect(jsonShape('{"a":"x,y,z,[{"}', 100, 1).exceeds).toBeNull();
    expect(jsonShape('{"a,\\":"\\",",":1}', 100, 2).exceeds).toBeNull();
    expect(jsonShape('[' + '0,'.repeat(1000) + '0]', 100, 0).exceeds).toBeNull();
  });

  it('reports depth before values when a bracket passes both', () => {
    expect(jsonShape('[[[0]]]', 2, 2).exceeds).toBe('depth');
    expect(jsonShape('[[[0]]]', 3, 2).exceeds).toBe('values');
  });
});

describe('jsonDepthExceeds (raw text scan)', () => {
  it('counts nesting of arrays and objects, {} being depth 1', () => {
    expect(jsonDepthExceeds('{}', 1)).toBe(false);
    expect(jsonDepthExceeds('{"a":[1]}', 1)).toBe(true);
    expect(jsonDepthExceeds('{"a":[1]}', 2)).toBe(false);
    expect(jsonDepthExceeds('[[[1]],[[2]]]', 3)).toBe(false);
    expect(jsonDepthExceeds('[[[1]],[[[2]]]]', 3)).toBe(true);
    expect(jsonDepthExceeds('"just a string"', 0)).toBe(false);
    expect(jsonDepthExceeds('17', 0)).toBe(false);
  });

  it('ignores brackets inside strings, including after escaped quotes and escaped backslashes', () => {
    expect(jsonDepthExceeds(JSON.stringify({ a: '[[[[[[{{{{' }), 1)).toBe(false);
    expect(jsonDepthExceeds(JSON.stringify({ a: 'say \\"[[[[" ok' }), 1)).toBe(false);
    expect(jsonDepthExceeds(JSON.stringify({ a: 'ends in a backslash \\', b: '[[[[' }), 1)).toBe(false);
    expect(jsonDepthExceeds(JSON.stringify({ a: '\\\\\\"', b: ['[['] }), 1)).toBe(true);
    expect(jsonDepthExceeds(JSON.stringify({ a: '\\\\\\"', b: ['[['] }), 2)).toBe(false);
    expect(jsonDepthExceeds(JSON.stringify({ '[[[': { '{{{': 1 } }), 2)).toBe(false);
  });

  it('agrees with the walk over the parsed value on generated bodies', () => {
    const samples: unknown[] = [
      { model: 'x', messages: [{ role: 'user', content: [{ type: 'text', text: 'a "quoted" [b] {c} \\ d' }] }] },
      { tools: [{ input_schema: { type: 'object', properties: { a: { type: 'array', items: { type: 'object' } } } } }] },
      [[], {}, [[{}]], '"]]]"', ['\\'], { '\\"': ['{'] }],
    ];
    for (const v of samples) {
      const text = JSON.stringify(v);
      for (let max = 0; max <= 8; max++) expect(jsonDepthExceeds(text, max), `${text} @${max}`).toBe(parsedDepthExceeds(v, max));
    }
  });

  it('leaves malformed text to JSON.parse (an unterminated string is not "too deep")', () => {
    expect(jsonDepthExceeds('{"a": "[[[[[[', 2)).toBe(false);
    expect(jsonDepthExceeds(']]]]][[', 3)).toBe(false);
  });

  it('answers a 100k-deep body fast and without recursion', () => {
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    expect(jsonDepthExceeds(deep, 100)).toBe(true);
    const unclosed = '{"a":'.repeat(100_000);
    expect(jsonDepthExceeds(unclosed, 100)).toBe(true);
  });

  it('scans a 10 MB body that is mostly one string with 2.5 million escaped quotes in linear time', () => {
    // No timing assertion (the machine's load decides a reading): a scan that went back over the string for each
    // escaped quote would take hours here and fail on the test's timeout; the linear one takes ~0.1 s alone.
    const big = JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'a\\"b'.repeat(2_500_000) }] });
    expect(jsonDepthExceeds(big, 3)).toBe(false);
  });
});

describe('hasSurrogateEscape (whether the parsed body is walked at all)', () => {
  it('a real escape, not an escaped backslash followed by the letters', () => {
    expect(hasSurrogateEscape('{"a":"\\ud83d\\ude00"}')).toBe(true);
    expect(hasSurrogateEscape('{"a":"\\\\\\ud800"}')).toBe(true); // an escaped backslash, then an escape
    expect(hasSurrogateEscape('{"a":"C:\\\\ud800 and \\\\uDFFF"}')).toBe(false);
    expect(hasSurrogateEscape('{"a":"\\u00e9"}')).toBe(false);
    expect(hasSurrogateEscape('{"a":"plain"}')).toBe(false);
  });
});

describe('hasLoneSurrogate', () => {
  const check = (text: string) => hasLoneSurrogate(text, JSON.parse(text));

  it('finds a lone high or low surrogate escape in a value or a key', () => {
    expect(check('{"a":"x\\ud800y"}')).toBe(true);
    expect(check('{"a":"\\uDFFF"}')).toBe(true);
    expect(check('{"a":["ok","\\udc00"]}')).toBe(true);
    expect(check('{"\\ud83d":1}')).toBe(true);
    expect(check('{"a":"\\ude00\\ud83d"}')).toBe(true); // reversed pair
  });

  it('accepts paired surrogates, other escapes, and an escaped backslash followed by "ud800"', () => {
    expect(check('{"a":"\\ud83d\\ude00"}')).toBe(false);
    expect(check('{"a":"\\u00e9\\u65e5"}')).toBe(false);
    expect(check('{"a":"\\\\ud800"}')).toBe(false);
    expect(check(JSON.stringify({ a: 'plain 😀 text' }))).toBe(false);
  });
});

describe('loneSurrogateField', () => {
  const field = (text: string) => loneSurrogateField(text, JSON.parse(text));

  it('names the first field holding one, in document order; the object for a key; `body` for the body itself', () => {
    expect(field('{"model":"m","messages":[{"role":"user","content":"ok"},{"role":"user","content":"x\\ud800"}],"system":"\\udc00"}')).toBe('messages[1].content');
    expect(field('{"metadata":{"\\ud83d":"1"}}')).toBe('metadata');
    expect(field('{"metadata":{"a b":"\\ud83d"}}')).toBe('metadata.…');
    expect(field('"\\ud800"')).toBe('body');
    expect(field('{"a":"\\ud83d\\ude00"}')).toBeNull();
  });
});
