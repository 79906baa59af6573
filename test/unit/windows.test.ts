import { describe, expect, it } from 'vitest';
import { windowEnd, windowStart } from '../../src/spend/windows';

const at = (iso: string) => new Date(iso);
const iso = (d: Date) => d.toISOString();

describe('windowStart / windowEnd (UTC, spec 8.4)', () => {
  it('daily: midnight UTC to the next midnight', () => {
    const now = at('2025-06-11T17:45:12.345Z');
    expect(iso(windowStart('daily', now))).toBe('2025-06-11T00:00:00.000Z');
    expect(iso(windowEnd('daily', now))).toBe('2025-06-12T00:00:00.000Z');
  });

  it('daily: the reset instant itself starts the new day', () => {
    const now = at('2025-06-12T00:00:00.000Z');
    expect(iso(windowStart('daily', now))).toBe('2025-06-12T00:00:00.000Z');
    expect(iso(windowStart('daily', at('2025-06-11T23:59:59.999Z')))).toBe('2025-06-11T00:00:00.000Z');
  });

  it('weekly: Sunday 23:59 UTC still belongs to the week that began the previous Monday', () => {
    const sunday = at('2025-06-15T23:59:00.000Z'); // a Sunday
    expect(sunday.getUTCDay()).toBe(0);
    expect(iso(windowStart('weekly', sunday))).toBe('2025-06-09T00:00:00.000Z');
    expect(iso(windowEnd('weekly', sunday))).toBe('2025-06-16T00:00:00.000Z');
  });

  it('weekly: Monday 00:00 UTC starts a new week; windows cross month and year ends', () => {
    expect(iso(windowStart('weekly', at('2025-06-16T00:00:00.000Z')))).toBe('2025-06-16T00:00:00.000Z');
    // Thursday 2026-01-01 → week began Monday 2025-12-29.
    expect(iso(windowStart('weekly', at('2026-01-01T10:00:00.000Z')))).toBe('2025-12-29T00:00:00.000Z');
    expect(iso(windowEnd('weekly', at('2026-01-01T10:00:00.000Z')))).toBe('2026-01-05T00:00:00.000Z');
  });

  it('monthly: the 1st 00:00 UTC to the next 1st, including year end and leap February', () => {
    expect(iso(windowStart('monthly', at('2025-06-15T12:00:00.000Z')))).toBe('2025-06-01T00:00:00.000Z');
    expect(iso(windowEnd('monthly', at('2025-06-15T12:00:00.000Z')))).toBe('2025-07-01T00:00:00.000Z');
    expect(iso(windowEnd('monthly', at('2025-12-31T23:59:59.999Z')))).toBe('2026-01-01T00:00:00.000Z');
    expect(iso(windowEnd('monthly', at('2024-02-10T00:00:00.000Z')))).toBe('2024-03-01T00:00:00.000Z');
    expect(iso(windowStart('monthly', at('2024-03-01T00:00:00.000Z')))).toBe('2024-03-01T00:00:00.000Z');
  });

  it('does not depend on the process time zone', () => {
    const saved = process.env.TZ;
    try {
      // Sunday 20:00 UTC is already Monday 10:00 in UTC+14: a local-time implementation would start a new week.
      process.env.TZ = 'Pacific/Kiritimati';
      const now = at('2025-06-15T20:00:00.000Z');
      expect(now.getDay()).toBe(1); // local Monday: the zone really is in effect
      expect(iso(windowStart('weekly', now))).toBe('2025-06-09T00:00:00.000Z');
      expect(iso(windowStart('daily', now))).toBe('2025-06-15T00:00:00.000Z');
      expect(iso(windowStart('monthly', at('2025-06-30T20:00:00.000Z')))).toBe('2025-06-01T00:00:00.000Z');
    } finally {
      if (saved === undefined) delete process.env.TZ;
      else process.env.TZ = saved;
    }
  });
});
