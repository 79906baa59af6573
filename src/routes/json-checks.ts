/**
 * Cheap checks on a request body's JSON text that JSON.parse does not make: nesting depth and the number
 * of values (before parsing, so a 100k-deep `[[[[…` never reaches code that recurses, and millions of tiny
 * values never reach JSON.parse) and lone UTF-16 surrogates from `\uD800`-style
 * escapes (JSON.parse accepts them; they break UTF-8 re-encoding upstream and in the ledger).
 */

import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COMMA, DOT, OPEN_ARRAY, OPEN_OBJECT, QUOTE } from './json-chars';

/** What one scan of a JSON text's structure found (see `jsonShape`). */
export interface JsonShape {
  /** The limit passed, if any: `depth` or `values`. */
  exceeds: 'depth' | 'values' | null;
  /**
   * True when, outside strings, a run of 16 or more digits not after a decimal point was seen: an integer that
   * may be past 2^53, which JSON.parse cannot hold exactly (src/routes/exact-integers.ts then looks closer).
   */
  longInteger: boolean;
}

/**
 * Which limit a JSON text's shape passes, before it is parsed: `depth` when brackets outside strings nest
 * deeper than `maxDepth` (`{}` is depth 1, `{"a":[1]}` depth 2), `values` when it holds more than `maxValues` values (0 = no limit), counted as
 * the commas and the arrays and objects outside strings (each array element and object member after the
 * first has its comma, and each container counts one: `[0,0,0]` is 3, `[{},{}]` 4). JSON.parse of many
 * small values is what costs (about a microsecond each, most of it the garbage collector's): 10 MB of
 * `{},` took seconds, where 10 MB of text in strings takes milliseconds. One pass over the text: string
 * contents are skipped with native `indexOf`, so a body that is mostly text (prompts, base64 images) costs
 * little. Malformed JSON is not judged here; JSON.parse reports it after. The same pass notes a long
 * integer (`longInteger`), so a body without one pays nothing more for keeping big integers exact.
 *
 * @example jsonShape('[0,0,0]', 100, 2).exceeds // 'values'
 */
export function jsonShape(text: string, maxDepth: number, maxValues: number): JsonShape {
  let depth = 0;
  let values = 0;
  let digits = 0;
  let longInteger = false;
  const most = maxValues > 0 ? maxValues : Infinity;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39) {
      if (++digits === 16) longInteger = true;
      continue;
    }
    // A fraction's digits never count (a float's spelling is not what is at stake: any JSON reader makes it a double).
    digits = c === DOT ? -Infinity : 0;
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      if (end === -1) return { exceeds: null, longInteger };
      i = end;
    } else if (c === COMMA) {
      if (++values > most) return { exceeds: 'values', longInteger };
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return { exceeds: 'depth', longInteger };
      if (++values > most) return { exceeds: 'values', longInteger };
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
    }
  }
  return { exceeds: null, longInteger };
}

/** The index of the quote closing the string opened at `open`, or -1 if it is never closed. */
export function stringEnd(text: string, open: number): number {
  let q = text.indexOf('"', open + 1);
  while (q !== -1) {
    // A quote is escaped when an odd number of backslashes precede it. Each backslash run is looked at
    // once, before the one quote that ends it, so this stays linear in the text.
    let k = q - 1;
    while (k > open && text.charCodeAt(k) === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q;
    q = text.indexOf('"', q + 1);
  }
  return -1;
}

/** A `\u` escape of a surrogate (D800–DFFF), the only way a lone surrogate gets into UTF-8 JSON text. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/g;

/**
 * True when the JSON text has a real `\uD800`–`\uDFFF` escape: one whose backslash is not itself escaped
 * (`\\ud800` in JSON text is a backslash followed by the letters `ud800`, as code and paths often hold).
 *
 * @example hasSurrogateEscape('"\\ud83d\\ude00"') // true; hasSurrogateEscape('"\\\\ud800"') // false
 */
export function hasSurrogateEscape(text: string): boolean {
  if (!text.includes('\\u')) return false;
  SURROGATE_ESCAPE.lastIndex = 0;
  for (let m = SURROGATE_ESCAPE.exec(text); m !== null; m = SURROGATE_ESCAPE.exec(text)) {
    let k = m.index - 1;
    while (k >= 0 && text.charCodeAt(k) === BACKSLASH) k--;
    if ((m.index - 1 - k) % 2 === 0) return true; // an even run before it: this backslash starts the escape
  }
  return false;
}

interface WellFormed {
  isWellFormed(): boolean;
}

/**
 * True when a parsed JSON value holds a string (or key) with an unpaired surrogate. Valid UTF-8 cannot
 * encode one, so the parsed value is only walked when the raw text has a surrogate escape at all: most
 * bodies pay one `includes` (or, with `\\u` in their text, a search for surrogate escapes). (`String.prototype.isWellFormed` is native in Node 20; the ES2023 lib
 * typings lack it.)
 *
 * @example hasLoneSurrogate('"\\ud800"', JSON.parse('"\\ud800"')) // true
 */
export function hasLoneSurrogate(text: string, value: unknown): boolean {
  return loneSurrogateField(text, value) !== null;
}

/**
 * The first field (in document order) holding a string with an unpaired surrogate, as a path like
 * `messages[0].content` (`body` for the body itself; for a key, the object that has it), else null. A key
 * that is not a plain name is shown as `…`: it is the client's text, of any length.
 *
 * @example loneSurrogateField('{"system":"\\ud800"}', { system: '\ud800' }) // 'system'
 */
export function loneSurrogateField(text: string, value: unknown): string | null {
  if (!hasSurrogateEscape(text)) return null;
  const stack: [unknown, string][] = [[value, '']];
  while (stack.length > 0) {
    const [v, at] = stack.pop()!;
    if (typeof v === 'string') {
      if (!(v as unknown as WellFormed).isWellFormed()) return at || 'body';
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push([v[i], `${at}[${i}]`]);
    } else if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v);
      for (const [k] of entries) if (!(k as unknown as WellFormed).isWellFormed()) return at || 'body';
      for (let i = entries.length - 1; i >= 0; i--) {
        const [k, item] = entries[i];
        const shown = /^[A-Za-z0-9_-]{1,64}$/.test(k) ? k : '…';
        stack.push([item, at ? `${at}.${shown}` : shown]);
      }
    }
  }
  return null;
}
