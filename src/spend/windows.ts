/**
 * UTC spend windows of spec 8.4: daily resets at 00:00 UTC, weekly on Monday 00:00 UTC,
 * monthly on the 1st of the month 00:00 UTC. Pure functions of `now`; no local time zone is involved.
 */

export type WindowInterval = 'daily' | 'weekly' | 'monthly';

const DAY_MS = 86_400_000;

/**
 * Start (inclusive) of the UTC window that contains `now`.
 *
 * @example
 * windowStart('weekly', new Date('2025-06-15T23:59:00Z')); // Sunday → 2025-06-09T00:00:00.000Z (Monday)
 * windowStart('monthly', new Date('2025-06-15T12:00:00Z')); // → 2025-06-01T00:00:00.000Z
 */
export function windowStart(interval: WindowInterval, now: Date): Date {
  const y = now.getUTCFullYear();
  const m = now.getUTCMonth();
  const d = now.getUTCDate();
  switch (interval) {
    case 'daily':
      return new Date(Date.UTC(y, m, d));
    case 'weekly': {
      // getUTCDay() is 0 on Sunday; shift so Monday is 0 and Sunday is 6.
      const sinceMonday = (now.getUTCDay() + 6) % 7;
      return new Date(Date.UTC(y, m, d - sinceMonday));
    }
    case 'monthly':
      return new Date(Date.UTC(y, m, 1));
    default:
      throw new Error(`unknown window interval: ${String(interval)}`);
  }
}

/**
 * End (exclusive) of the UTC window that contains `now`: the next reset instant, as in `resets_at`.
 *
 * @example
 * windowEnd('daily', new Date('2025-06-15T08:00:00Z'));   // → 2025-06-16T00:00:00.000Z
 * windowEnd('monthly', new Date('2025-12-31T23:00:00Z')); // → 2026-01-01T00:00:00.000Z
 */
export function windowEnd(interval: WindowInterval, now: Date): Date {
  const start = windowStart(interval, now);
  switch (interval) {
    case 'daily':
      return new Date(start.getTime() + DAY_MS); // UTC has no DST: a day is always 24 h
    case 'weekly':
      return new Date(start.getTime() + 7 * DAY_MS);
    case 'monthly':
      return new Date(Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + 1, 1));
    default:
      throw new Error(`unknown window interval: ${String(interval)}`);
  }
}
