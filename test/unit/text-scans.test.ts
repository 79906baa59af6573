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

  it('web-fetch: URLs in a message with a long run of dots (26 s at 160 000 before); trailing punctuation still dropped', () => {
    expect(urlsInText(`see http://example.com/${'.'.repeat(160_000)}b`)).toHaveLength(1);
    expect(urlsInText('Read https://example.com/a.html, then (https://example.com/b).')).toEqual(['https://example.com/a.html', 'https://example.com/b']);
  });
});
