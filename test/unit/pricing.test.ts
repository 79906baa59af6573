import { createHash } from 'node:crypto';
import { describe, it, expect } from 'vitest';
import { costOf, roundUsd } from '../../src/spend/pricing';
import { alphanumerics, generationId } from '../../src/routing/generation-id';
import { generateKey, hashKey, maskKey } from '../../src/store/key-secret';
import type { NormalizedUsage } from '../../src/pipeline/types';
import type { Pricing } from '../../src/config/types';

function usage(u: Partial<NormalizedUsage>): NormalizedUsage {
  return { inputTokens: 0, outputTokens: 0, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, ...u };
}

function pricing(p: Partial<Pricing>): Pricing {
  return { prompt: 0, completion: 0, request: 0, ...p };
}

describe('costOf', () => {
  it('prices prompt and completion tokens per 1M tokens', () => {
    expect(costOf(usage({ inputTokens: 1000, outputTokens: 200 }), pricing({ prompt: 0.15, completion: 0.6 }))).toBe(0.00027);
    expect(costOf(usage({ inputTokens: 1_000_000 }), pricing({ prompt: 3 }))).toBe(3);
    expect(costOf(usage({ outputTokens: 1_000_000 }), pricing({ completion: 15 }))).toBe(15);
  });

  it('is 0 for free models and for no usage', () => {
    expect(costOf(usage({ inputTokens: 5000, outputTokens: 5000 }), pricing({}))).toBe(0);
    expect(costOf(usage({}), pricing({ prompt: 3, completion: 15 }))).toBe(0);
  });

  it('prices cached reads at cached_read; inputTokens includes them', () => {
    // 600 plain at $3 + 400 cached at $0.30 per 1M
    const cost = costOf(usage({ inputTokens: 1000, cachedTokens: 400 }), pricing({ prompt: 3, cached_read: 0.3 }));
    expect(cost).toBe(roundUsd((600 * 3 + 400 * 0.3) / 1e6));
    expect(cost).toBeCloseTo(0.00192, 12);
  });

  it('prices cache writes at cache_write', () => {
    // 700 plain at $3 + 300 written at $3.75
    const cost = costOf(usage({ inputTokens: 1000, cacheWriteTokens: 300 }), pricing({ prompt: 3, cache_write: 3.75 }));
    expect(cost).toBeCloseTo((700 * 3 + 300 * 3.75) / 1e6, 12);
  });

  it('prices plain, cached, written and output tokens together', () => {
    const cost = costOf(
      usage({ inputTokens: 10_000, cachedTokens: 4_000, cacheWriteTokens: 1_000, outputTokens: 2_000 }),
      pricing({ prompt: 3, completion: 15, cached_read: 0.3, cache_write: 3.75 }),
    );
    expect(cost).toBeCloseTo((5_000 * 3 + 4_000 * 0.3 + 1_000 * 3.75 + 2_000 * 15) / 1e6, 12);
  });

  it('prices 1-hour cache writes at cache_write_1h, else at cache_write, else at the prompt price', () => {
    // 500 plain, 500 written: 200 of them to the 1-hour cache.
    const u = usage({ inputTokens: 1000, cacheWriteTokens: 500, cacheWrite1hTokens: 200 });
    expect(costOf(u, pricing({ prompt: 3, cache_write: 3.75, cache_write_1h: 6 }))).toBeCloseTo((500 * 3 + 300 * 3.75 + 200 * 6) / 1e6, 12);
    expect(costOf(u, pricing({ prompt: 3, cache_write: 3.75 }))).toBeCloseTo((500 * 3 + 500 * 3.75) / 1e6, 12);
    expect(costOf(u, pricing({ prompt: 3 }))).toBeCloseTo((1000 * 3) / 1e6, 12);
    // Never more 1-hour writes than writes.
    expect(costOf(usage({ inputTokens: 1000, cacheWriteTokens: 100, cacheWrite1hTokens: 900 }), pricing({ prompt: 3, cache_write: 3.75, cache_write_1h: 6 }))).toBeCloseTo(
      (900 * 3 + 100 * 6) / 1e6,
      12,
    );
  });

  it('falls back to the prompt price when cached_read / cache_write are not declared', () => {
    const withCache = costOf(usage({ inputTokens: 1000, cachedTokens: 300, cacheWriteTokens: 200 }), pricing({ prompt: 2 }));
    const plain = costOf(usage({ inputTokens: 1000 }), pricing({ prompt: 2 }));
    expect(withCache).toBe(plain);
    expect(plain).toBeCloseTo(0.002, 12);
  });

  it('never bills more cached/written tokens than input tokens', () => {
    // cached > input: every input token is a cached one, nothing is billed twice.
    expect(costOf(usage({ inputTokens: 1000, cachedTokens: 5000 }), pricing({ prompt: 3, cached_read: 0.3 }))).toBeCloseTo(
      (1000 * 0.3) / 1e6,
      12,
    );
    // cached + written > input: written is what is left after cached.
    expect(
      costOf(usage({ inputTokens: 1000, cachedTokens: 800, cacheWriteTokens: 800 }), pricing({ prompt: 3, cached_read: 0.3, cache_write: 3.75 })),
    ).toBeCloseTo((800 * 0.3 + 200 * 3.75) / 1e6, 12);
  });

  it('adds the per-request price once', () => {
    expect(costOf(usage({}), pricing({ request: 0.01 }))).toBe(0.01);
    expect(costOf(usage({ inputTokens: 1_000_000 }), pricing({ prompt: 1, request: 0.5 }))).toBe(1.5);
  });

  it('does not bill reasoning tokens on top of output tokens (they are part of them)', () => {
    const p = pricing({ prompt: 1, completion: 10 });
    expect(costOf(usage({ inputTokens: 100, outputTokens: 500, reasoningTokens: 400 }), p)).toBe(
      costOf(usage({ inputTokens: 100, outputTokens: 500 }), p),
    );
  });

  it('rounds away binary noise', () => {
    expect(roundUsd(0.1 + 0.2)).toBe(0.3);
    expect(costOf(usage({ inputTokens: 100_000, outputTokens: 200_000 }), pricing({ prompt: 1, completion: 1 }))).toBe(0.3);
  });
});

describe('generationId', () => {
  const FORMAT = /^gen-\d{10}-[A-Za-z0-9]{20}$/;

  it('has the format gen-<unix seconds>-<20 alphanumerics>', () => {
    const id = generationId();
    expect(id).toMatch(FORMAT);
    const seconds = Number(id.split('-')[1]);
    expect(Math.abs(seconds - Date.now() / 1000)).toBeLessThan(5);
  });

  it('uses the given time in whole seconds', () => {
    expect(generationId(1_700_000_000_999)).toMatch(/^gen-1700000000-[A-Za-z0-9]{20}$/);
  });

  it('is unique over 1000 ids within the same second', () => {
    const now = Date.now();
    const ids = Array.from({ length: 1000 }, () => generationId(now));
    for (const id of ids) expect(id).toMatch(FORMAT);
    expect(new Set(ids).size).toBe(1000);
  });

  it('sorts by time to the millisecond, as strings compare (ledger rows go in at the end of the index)', () => {
    const start = 1_700_000_000_000;
    const times = Array.from({ length: 2500 }, (_, i) => start + i); // 2.5 s, every millisecond
    const ids = times.map((t) => generationId(t));
    const sorted = [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    expect(sorted).toEqual(ids);
    // The millisecond part: 000 → '00', 61 → '0z', 62 → '10', 999 → 'G7'.
    expect(generationId(start).slice(15, 17)).toBe('00');
    expect(generationId(start + 61).slice(15, 17)).toBe('0z');
    expect(generationId(start + 62).slice(15, 17)).toBe('10');
    expect(generationId(start + 999).slice(15, 17)).toBe('G7');
  });

  it('keeps 18 random alphanumerics after the millisecond', () => {
    const now = 1_700_000_000_123;
    const tails = Array.from({ length: 500 }, () => generationId(now).slice(17));
    expect(new Set(tails).size).toBe(500);
    expect(new Set(tails.join('')).size).toBe(62);
  });

  it('alphanumerics gives n characters from [A-Za-z0-9] and uses the whole alphabet', () => {
    expect(alphanumerics(0)).toBe('');
    expect(alphanumerics(1)).toMatch(/^[A-Za-z0-9]$/);
    const long = alphanumerics(20_000);
    expect(long).toMatch(/^[A-Za-z0-9]{20000}$/);
    expect(new Set(long).size).toBe(62);
  });
});

describe('key secrets', () => {
  it('generates keys sk-gw-v1- + 48 hex characters, all different', () => {
    const keys = Array.from({ length: 200 }, () => generateKey());
    for (const k of keys) expect(k).toMatch(/^sk-gw-v1-[0-9a-f]{48}$/);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('hashes with SHA-256 (hex), deterministically, never equal to the key', () => {
    const key = generateKey();
    const h = hashKey(key);
    expect(h).toMatch(/^[0-9a-f]{64}$/);
    expect(h).toBe(createHash('sha256').update(key, 'utf8').digest('hex'));
    expect(h).not.toBe(key);
    expect(h).not.toContain(key.slice(9));
    expect(hashKey(key)).toBe(h);
    expect(hashKey(generateKey())).not.toBe(h);
  });

  it('hashes a known value to its SHA-256', () => {
    expect(hashKey('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });

  it('masks a key to its prefix and last 4 characters only', () => {
    const key = generateKey();
    const masked = maskKey(key);
    expect(masked).toBe(`sk-gw-v1-...${key.slice(-4)}`);
    const hidden = key.slice('sk-gw-v1-'.length, -4);
    expect(hidden).toHaveLength(44);
    expect(masked).not.toContain(hidden.slice(0, 8));
    expect(masked).not.toContain(hidden.slice(-8));
  });
});
