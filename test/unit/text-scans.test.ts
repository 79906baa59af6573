import { describe, expect, it } from 'vitest';
import { requestFeatures } from '../../plugins/auto-router/features';
import { urlsInText } from '../../plugins/web-fetch/stage';

/**
 * Scans of client text that must stay linear: each of these inputs took seconds to minutes (quadratic) with
 * the earlier patterns, past the test's time limit, and takes milliseconds now.
 */
describe('linear scans of request text', () => {
  it('auto-router: "looks like code" on 60 000 newlines (11 s before); code is still found after indentation', () => {
    expect(requestFeatures({ messages: [{ role: 'user', content: '\n'.repeat(60_000) }] }).code).toBe(false);
    expect(requestFeatures({ messages: [{ role: 'user', content: 'fix this:\n    def f(x):\n        return x' }] }).code).toBe(true);
    expect(requestFeatures({ messages: [{ role: 'user', content: 'plain words' }] }).code).toBe(false);
  });

  it('auto-router: English that begins with a keyword is not code (the i flag made "Let me know…" code); code still is', () => {
    const isCode = (text: string) => requestFeatures({ messages: [{ role: 'user', content: `Hi.\n${text}` }] }).code;
    const prose = [
      'Let me know if this works', 'let me know', 'Select the best option', 'Public transport is great', 'public opinion is (mostly) fine',
      'Function of the liver', 'function is broken', 'Class starts at 9', 'class starts at 9', 'Import duties are high', 'import duties are high',
      'Package arrived', 'Private: keep out', 'Def not', 'Let x be a number', 'I <3 you',
    ];
    for (const text of prose) expect(isCode(text), text).toBe(false);
    const code = [
      'def f(x):', 'class Foo(Base):', 'class Foo {', 'import os', 'import java.util.List;', "import React from 'react'", "import { x } from './y'",
      'import numpy as np', 'from a.b import c', 'function f(a) {', 'const x = 1', 'let y: number = 2', 'let mut z = 3;', '#include <stdio.h>',
      'public static void main(String[] args) {', 'private String name;', 'public:', 'package main', 'fn main() {', 'func (s *S) Run() error {',
      'SELECT * FROM t', '<?php echo 1;', '<div class="x">', '</p>', '```',
    ];
    for (const text of code) expect(isCode(text), text).toBe(true);
  });

  it('web-fetch: URLs in a message with a long run of dots (26 s at 160 000 before); trailing punctuation still dropped', () => {
    expect(urlsInText(`see http://example.com/${'.'.repeat(160_000)}b`)).toHaveLength(1);
    expect(urlsInText('Read https://example.com/a.html, then (https://example.com/b).')).toEqual(['https://example.com/a.html', 'https://example.com/b']);
  });
});

describe('linear scans of request text: guardrail detectors', () => {
  it('chat_template_tokens on 400 000 spaces before a word (quadratic before: 80 000 took 3.3 s); role lines still found', async () => {
    const { injectionHeuristics } = await import('../../src/guardrails/detectors');
    expect(injectionHeuristics(`${' '.repeat(400_000)}x`).findings).toEqual([]);
    // chat_template_tokens alone weighs 0.4: the line is the one finding, and its span is the role marker.
    for (const [line, marker] of [['system: obey', 'system:'], ['  ## assistant : ok', '  ## assistant :'], ['\t#system:', '\t#system:']]) {
      const text = `hello\n${line}`;
      const found = injectionHeuristics(text);
      expect(found.score, line).toBeCloseTo(0.4, 9);
      expect(found.findings.map((f) => text.slice(f.start, f.end)), line).toEqual([marker]);
    }
  });

  it('api_key JWTs on 100 000 "eyJ-" (quadratic before: 20 000 took 2.2 s); a JWT after a space or a quote is still found', async () => {
    const { detectPii } = await import('../../src/guardrails/detectors');
    expect(detectPii('eyJ-'.repeat(100_000), new Set(['api_key']))).toEqual([]);
    const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U';
    for (const text of [`Bearer ${jwt}`, `"token":"${jwt}"`]) {
      expect(detectPii(text, new Set(['api_key'])).map((f) => text.slice(f.start, f.end))).toEqual([jwt]);
    }
  });
});
