import { describe, expect, it } from 'vitest';
import { HoldGroup } from '../../src/state/hold-group';

describe('HoldGroup', () => {
  it('sums live holds, drops expired ones, reports the next expiry', () => {
    const g = new HoldGroup();
    g.set('a', 100, 50);
    g.set('b', 10, 20);
    g.set('c', 1, 30);
    expect(g.sum(0)).toBe(111);
    expect(g.nextExpiry(0)).toBe(20);
    expect(g.sum(20)).toBe(101);
    expect(g.nextExpiry(20)).toBe(30);
    g.delete('c');
    expect(g.nextExpiry(20)).toBe(50);
    expect(g.sum(50)).toBe(0);
    expect(g.nextExpiry(50)).toBeNull();
  });

  it('replacing a hold moves its amount and expiry', () => {
    const g = new HoldGroup();
    g.set('a', 100, 1_000);
    g.set('a', 7, 10);
    expect(g.sum(0)).toBe(7);
    expect(g.sum(10)).toBe(0);
    expect(g.size).toBe(0);
  });

  it('keeps the heap bounded when holds are replaced with shorter expiries (settlement)', () => {
    const g = new HoldGroup();
    for (let i = 0; i < 100_000; i++) {
      g.set(`h${i}`, 5, 1_800_000 + i); // held for the hold TTL
      g.set(`h${i}`, 3, 5_000 + i); // settled: the actual cost for the settlement window
      if (i % 1000 === 0) g.sum(0);
    }
    expect(g.sum(0)).toBe(300_000);
    expect((g as unknown as { heap: unknown[] }).heap.length).toBeLessThan(2 * 100_000 + 1100);
    expect(g.sum(5_000 + 100_000)).toBe(0);
    expect((g as unknown as { heap: unknown[] }).heap.length).toBeLessThan(1100);
  });
});
