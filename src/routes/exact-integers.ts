/**
 * Integers a request body spells with more digits than a double holds (past 2^53: a `seed` of
 * 9223372036854775807, a tool schema's `maximum`, an id in `metadata`). JSON.parse keeps the nearest double,
 * and JSON.stringify of that double writes other digits (9223372036854776000): the provider, which may read
 * integers exactly (Python does), was sent a different number. These are found in the body's text once (only
 * when the shape scan saw a run of 16+ digits, json-checks.ts `jsonShape`) and written back with the
 * client's digits wherever the same double is sent. A number the gateway computes is never that large, so it
 * is not mistaken for one of these.
 */
import { randomHex } from '../random';
import { QUOTE } from './json-chars';
import { stringEnd } from './json-checks';

/** Each inexact integer of a body (as the double JSON.parse made of it) → its digits; null when two spellings made the same double. */
export type ExactIntegers = ReadonlyMap<number, string | null>;

const INTEGER = /^-?\d+$/;

/**
 * The integers outside strings whose digits JSON.parse does not keep, or null when there are none.
 *
 * @example exactIntegers('{"seed":9223372036854775807}') // Map { 9223372036854776000 => '9223372036854775807' }
 */
export function exactIntegers(text: string): ExactIntegers | null {
  let found: Map<number, string | null> | null = null;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = stringEnd(text, i);
      if (i === -1) break;
      continue;
    }
    if (c !== 0x2d && (c < 0x30 || c > 0x39)) continue;
    // The start of a number: its digits are read up to its end, so none of them starts another.
    let end = i + 1;
    while (end < n && isNumberChar(text.charCodeAt(end))) end++;
    const digits = end - i >= 16 ? text.slice(i, end) : '';
    if (INTEGER.test(digits)) {
      const value = Number(digits);
      if (String(value) !== digits) {
        found ??= new Map();
        const known = found.get(value);
        found.set(value, known === undefined || known === digits ? digits : null);
      }
    }
    i = end - 1;
  }
  return found;
}

function isNumberChar(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;
}

/**
 * A mark no client string can end up as (a random token, new each start): the replacer below puts
 * `"<mark><digits>"` where an inexact integer was, and the quotes and the mark are cut out after.
 */
const MARK = `x${randomHex(12)}`;
const MARKED = new RegExp(`"${MARK}(-?\\d+)"`, 'g');

/**
 * `JSON.stringify(value)`, with each integer of `integers` written in the client's digits. Slower than
 * JSON.stringify (a replacer sees every value), so only used for a body that has such integers.
 *
 * @example stringifyExact({ seed: 9223372036854775807 }, exactIntegers('{"seed":9223372036854775807}')!) // '{"seed":9223372036854775807}'
 */
export function stringifyExact(value: unknown, integers: ExactIntegers): string {
  let marked = false;
  const json = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v !== 'number' || Number.isSafeInteger(v)) return v;
    const digits = integers.get(v);
    if (!digits) return v;
    marked = true;
    return MARK + digits;
  });
  return marked ? json.replace(MARKED, '$1') : json;
}
