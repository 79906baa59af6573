import { describe, expect, it } from 'vitest';
import { isoMillis, isoTime } from '../../src/store/iso-time';

describe('iso-time', () => {
  it('reads any text as Date.parse does, also before a second was entered', () => {
    for (const text of ['2026-11-23T05:00:00.123Z', '2026-11-23T05:00:00Z', '2026-11-23', 'not a time', '', '2026-11-23T05:00:00.12xZ']) {
      expect(Object.is(isoMillis(text), Date.parse(text)), text).toBe(true);
    }
  });

  it('writes the text toISOString writes, across seconds, years and the edges of the range', () => {
    const times = [0, 1, 999, 1000, 1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_999, 1_700_000_001_000, 951_782_400_000, 253_402_300_799_999];
    for (let i = 0; i < 2000; i++) times.push(1_790_000_000_000 + i * 7);
    for (let i = 0; i < 500; i++) times.push(Math.floor(Math.random() * 253_402_300_799_999));
    for (const ms of times) expect(isoTime(ms), String(ms)).toBe(new Date(ms).toISOString());
    // Outside the 24-character form, or a fraction of a millisecond: the builtin's own text.
    for (const ms of [-1, -62_198_755_200_000, 253_402_300_800_000, 1_700_000_000_000.5]) expect(isoTime(ms)).toBe(new Date(ms).toISOString());
  });

  it('reads back what it wrote, in the current second and outside it', () => {
    const older = isoTime(1_700_000_000_250);
    for (const ms of [1_790_000_000_000, 1_790_000_000_007, 1_790_000_000_099, 1_790_000_000_999]) {
      const text = isoTime(ms);
      expect(isoMillis(text)).toBe(ms);
      expect(isoMillis(text)).toBe(Date.parse(text));
    }
    expect(isoMillis(older)).toBe(1_700_000_000_250); // another second: through Date.parse
  });
});
