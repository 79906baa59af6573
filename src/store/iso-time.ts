/**
 * ISO 8601 timestamps of the request path (a ledger row's and a pending row's `createdAt`), made and read
 * back once per row: `toISOString` and `Date.parse` are C++ builtins that cost ~1 µs each on the request
 * path (bench:profile). Both keep the current second: within it, a timestamp is its text plus three digits.
 */
let second = Number.NaN;
/** `YYYY-MM-DDTHH:MM:SS.` of `second`. */
let prefix = '\u0000'; // matches no timestamp until the first second is entered

function enter(epochSecond: number): void {
  second = epochSecond;
  prefix = new Date(epochSecond * 1000).toISOString().slice(0, 20);
}

/** Epoch ms → `new Date(ms).toISOString()`, the same text. */
export function isoTime(ms: number): string {
  const s = Math.floor(ms / 1000);
  // Years 0–9999 have the 24-character form; anything else (or a fractional ms) goes to the builtin.
  if (!Number.isInteger(ms) || ms < 0 || ms >= 253402300800000) return new Date(ms).toISOString();
  if (s !== second) enter(s);
  const frac = ms - s * 1000;
  return `${prefix}${frac < 10 ? '00' : frac < 100 ? '0' : ''}${frac}Z`;
}

/** `Date.parse(iso)` for any text; the form `isoTime` makes, in the current second, without the builtin. */
export function isoMillis(iso: string): number {
  if (iso.length === 24 && iso.charCodeAt(23) === 90 /* Z */ && iso.startsWith(prefix)) {
    const a = iso.charCodeAt(20) - 48;
    const b = iso.charCodeAt(21) - 48;
    const c = iso.charCodeAt(22) - 48;
    if (a >= 0 && a <= 9 && b >= 0 && b <= 9 && c >= 0 && c <= 9) return second * 1000 + a * 100 + b * 10 + c;
  }
  return Date.parse(iso);
}
