import { describe, expect, it } from 'vitest';
import { foldCase, foldedPattern, operatorRegExp, operatorRegExpProblem } from '../../src/operator-regexp';

// A backtracking engine needs ~2^n steps for these: at 40 characters, hours. The linear engine: milliseconds.
const EVIL = `${'a'.repeat(40)}!`;

describe('operator regular expressions', () => {
  it('a catastrophic pattern written with "i" runs in linear time (it held the event loop for seconds)', () => {
    expect(operatorRegExp('(a+)+b', 'gi').test(EVIL)).toBe(false);
    expect(operatorRegExp('(a+)+b', 'i').test(EVIL.toUpperCase())).toBe(false);
    expect([...EVIL.matchAll(operatorRegExp('(a|aa)+b', 'gi'))]).toEqual([]);
    expect(operatorRegExp('(a+)+b', 'im').test(`${'A'.repeat(39)}b`)).toBe(true);
  });

  it('"i" matches either case, at the original text\'s positions', () => {
    const re = operatorRegExp('project\\s+x', 'gi');
    expect(re.test('PROJECT   X')).toBe(true);
    re.lastIndex = 0;
    // İ becomes two code units in toLowerCase: folded to one, positions stay the text's.
    const text = 'İİ about Project X and project x';
    const found = [...text.matchAll(re)].map((m) => [m.index, text.slice(m.index!, m.index! + m[0].length)]);
    expect(found).toEqual([
      [9, 'Project X'],
      [23, 'project x'],
    ]);
    expect(text.replace(re, '#')).toBe('İİ about # and #');
  });

  it('folds letters, classes and hex escapes, and keeps the other escapes as written', () => {
    expect(foldedPattern('A[B-F]\\x41\\u0042\\S\\W\\b\\D\\k<N>(?<N>x)')).toBe('a[b-f]\\u0061\\u0062\\S\\W\\b\\D\\k<n>(?<n>x)');
    expect(operatorRegExp('[A-F]+', 'i').exec('xx abcDEF')![0]).toBe('abcdef');
    expect(operatorRegExp('\\x41\\W', 'i').test('a!')).toBe(true);
    expect(operatorRegExp('\\W', 'i').test('a')).toBe(false);
    expect(operatorRegExp('\\S+', 'i').test('ABC')).toBe(true);
    expect(operatorRegExp('^[^A-Z]+$', 'i').test('abc')).toBe(false);
    expect(foldCase('İx')).toHaveLength(2);
  });

  it('refuses "u" (no linear engine for it) and invalid patterns, with what to do', () => {
    expect(operatorRegExpProblem('\\p{L}+', 'u')).toMatch(/^flag "u" is not accepted/);
    expect(operatorRegExpProblem('a(', 'i')).toMatch(/^invalid regular expression/);
    expect(operatorRegExpProblem('[Z-a]', 'i')).toMatch(/^flag "i" cannot be applied to this pattern by case folding/);
    expect(operatorRegExpProblem('project\\s+x', 'ig')).toBeNull();
    expect(operatorRegExpProblem('a+', '')).toBeNull();
  });
});
