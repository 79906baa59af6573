/**
 * The client's request body as it came, for sending its unchanged parts upstream as they are (README
 * Performance, "The client's own bytes"). A request is parsed once; what goes to the provider is a new
 * top-level object (the model replaced, gateway fields left out, `stream_options` added, …) whose big values
 * (the messages, the tools, the system prompt's blocks) are the very objects parsed from the client's bytes.
 * Serializing them again cost ~3 µs a KB, plus a copy of the text the size of the body to collect (an agent's
 * 60 KB conversation: ~180 µs of `JSON.stringify` and ~130 KB allocated, again on every fallback attempt);
 * their bytes are already here.
 *
 * Only sound while nothing changed those objects in place: the endpoint keeps the bytes only when every
 * stage of its pipeline says so (`StageDefinition.keepsBody`), and a value is reused only when it is the same
 * object the parse made (`===`), so a stage that replaced a field (`body.messages = [...]`) gets its new value
 * serialized.
 */
import { stringifyExact, type ExactIntegers } from './exact-integers';
import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COLON, COMMA, OPEN_ARRAY, OPEN_OBJECT, QUOTE } from './json-chars';

/** A value shorter than this is serialized (cheaper than a piece of its own in the concatenation). */
export const REUSED_MIN_BYTES = 512;

/** Where each top-level member's value lies in the body's bytes: `[start, end)`. */
type Members = Map<string, readonly [number, number]>;

export class ClientBytes {
  /** Found on first use; null when the bytes are not one plain JSON object (a byte-order mark, say). */
  #members: Members | null | undefined;
  /**
   * The top-level values as parsed, copied before any stage ran: a stage may put a new value in a field of
   * the body object itself (`state.body.messages = …slice(-10)`), which must then not pass for the parsed one.
   */
  readonly #parsed: Record<string, unknown>;

  /** `raw`: the body's bytes; `parsed`: the object JSON.parse made of them, before any stage ran. */
  constructor(
    readonly raw: Buffer,
    parsed: Record<string, unknown>,
  ) {
    this.#parsed = { ...parsed };
  }

  /**
   * `body` as JSON text: the client's own bytes for each top-level value that is the very object parsed from
   * them (and at least REUSED_MIN_BYTES long), the rest serialized. The same JSON value as
   * `JSON.stringify(body)`, except that reused parts keep the client's spelling (its whitespace, escapes and
   * number forms, including numbers JSON.parse cannot hold exactly: `1e400`, which JSON.stringify would send
   * as `null`, `-0`, integers past 2^53; in the serialized rest such integers are written from `integers`).
   * A string when nothing is reused.
   *
   * @example new ClientBytes(raw, JSON.parse(text)).encode({ ...parsed, model: 'gpt-4o' })
   */
  encode(body: Record<string, unknown>, integers: ExactIntegers | null = null): string | Buffer {
    const stringify = integers ? (v: unknown) => stringifyExact(v, integers) : JSON.stringify;
    const members = this.#reusable(body);
    if (!members) return stringify(body);
    const parts: Buffer[] = [];
    let text = '{';
    let first = true;
    for (const key of Object.keys(body)) {
      const value = body[key];
      const at = this.#reused(members, key, value);
      const name = `${first ? '' : ','}${JSON.stringify(key)}:`;
      if (at) {
        parts.push(Buffer.from(text + name), this.raw.subarray(at[0], at[1]));
        text = '';
      } else {
        const json = stringify(value) as string | undefined;
        if (json === undefined) continue; // undefined or a function: left out, as JSON.stringify leaves it
        text += name + json;
      }
      first = false;
    }
    parts.push(Buffer.from(`${text}}`));
    return Buffer.concat(parts);
  }

  /** The members, when at least one value of `body` can be reused; the bytes are scanned only if some value is a parsed object. */
  #reusable(body: Record<string, unknown>): Members | null {
    let any = false;
    for (const key in body) if ((any = this.#parsedObject(key, body[key]))) break;
    if (!any) return null;
    if (this.#members === undefined) this.#members = topLevelMembers(this.raw); // null (not an object) is kept: never scanned twice
    const members = this.#members;
    if (!members) return null;
    for (const key in body) if (this.#reused(members, key, body[key])) return members;
    return null;
  }

  /** `value` is the object (or array) parsed for `key`. */
  #parsedObject(key: string, value: unknown): boolean {
    return value !== null && typeof value === 'object' && this.#parsed[key] === value;
  }

  #reused(members: Members, key: string, value: unknown): readonly [number, number] | undefined {
    if (!this.#parsedObject(key, value)) return undefined;
    const at = members.get(key);
    return at && at[1] - at[0] >= REUSED_MIN_BYTES ? at : undefined;
  }
}

/**
 * The top-level members of a JSON object's bytes: each key (its last occurrence, as JSON.parse keeps the last)
 * and where its value lies. Null when the bytes do not start with an object after whitespace. Linear: strings
 * are skipped with a native search for their closing quote.
 *
 * @example topLevelMembers(Buffer.from('{"a": [1, 2], "b":"x"}')) // Map { 'a' => [6, 12], 'b' => [18, 21] }
 */
export function topLevelMembers(bytes: Buffer): Members | null {
  let i = skipSpace(bytes, 0);
  if (bytes[i] !== OPEN_OBJECT) return null;
  const out: Members = new Map();
  i = skipSpace(bytes, i + 1);
  if (bytes[i] === CLOSE_OBJECT) return out;
  for (;;) {
    if (bytes[i] !== QUOTE) return null;
    const keyEnd = stringEnd(bytes, i);
    if (keyEnd < 0) return null;
    const key = keyText(bytes, i, keyEnd);
    i = skipSpace(bytes, keyEnd + 1);
    if (bytes[i] !== COLON) return null;
    const start = skipSpace(bytes, i + 1);
    const end = valueEnd(bytes, start);
    if (end < 0) return null;
    out.set(key, [start, end]);
    i = skipSpace(bytes, end);
    if (bytes[i] === COMMA) i = skipSpace(bytes, i + 1);
    else return bytes[i] === CLOSE_OBJECT ? out : null;
  }
}

/** JSON's whitespace: space, tab, line feed, carriage return. */
function skipSpace(b: Buffer, i: number): number {
  while (i < b.length) {
    const c = b[i];
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
  return i;
}

/** The index of the quote closing the string opened at `open`, or -1. */
function stringEnd(b: Buffer, open: number): number {
  let q = b.indexOf(QUOTE, open + 1);
  while (q !== -1) {
    let k = q - 1;
    while (k > open && b[k] === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q; // an even run of backslashes: the quote is not escaped
    q = b.indexOf(QUOTE, q + 1);
  }
  return -1;
}

/** A key's text (its escapes read by JSON.parse when it has any). */
function keyText(b: Buffer, open: number, close: number): string {
  const inner = b.subarray(open + 1, close);
  return inner.includes(BACKSLASH) ? (JSON.parse(b.toString('utf8', open, close + 1)) as string) : inner.toString('utf8');
}

/** The index just past the value starting at `start`, or -1. */
function valueEnd(b: Buffer, start: number): number {
  const c = b[start];
  if (c === QUOTE) {
    const q = stringEnd(b, start);
    return q < 0 ? -1 : q + 1;
  }
  if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
    let depth = 0;
    for (let i = start; i < b.length; i++) {
      const d = b[i];
      if (d === QUOTE) {
        i = stringEnd(b, i);
        if (i < 0) return -1;
      } else if (d === OPEN_OBJECT || d === OPEN_ARRAY) depth++;
      else if (d === CLOSE_OBJECT || d === CLOSE_ARRAY) {
        if (--depth === 0) return i + 1;
      }
    }
    return -1;
  }
  // A number, true, false or null: up to the next delimiter.
  let i = start;
  while (i < b.length) {
    const d = b[i];
    if (d === COMMA || d === CLOSE_OBJECT || d === CLOSE_ARRAY || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break;
    i++;
  }
  return i > start ? i : -1;
}
