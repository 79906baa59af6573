/**
 * Repairs the JSON text a model wrote when it was asked for JSON: a tolerant recursive-descent parser that
 * re-emits strict, compact JSON text and names every repair it had to make. It fixes only what has one
 * reading (fences, prose around the value, comments, trailing or missing commas, single quotes, unquoted
 * keys, Python literals, raw control characters in strings, a cut-off ending, where a number or literal cut
 * at the end is dropped rather than completed) and refuses the rest
 * (`undefined`, `NaN`, a missing colon, an unbalanced closer): refusing is better than inventing data.
 */

/** The repairs, by name, as they appear in the pipeline record. */
export type Repair =
  | 'code_fence'
  | 'surrounding_text'
  | 'comments'
  | 'trailing_comma'
  | 'missing_comma'
  | 'single_quotes'
  | 'unquoted_keys'
  | 'python_literals'
  | 'control_characters'
  | 'invalid_escapes'
  | 'number_format'
  | 'truncated';

export type HealResult =
  | { status: 'valid'; text: string; value: unknown; repairs: [] }
  | { status: 'repaired'; text: string; value: unknown; repairs: Repair[] }
  | { status: 'unrepairable'; repairs: Repair[]; reason: string };

export interface HealOptions {
  /**
   * What the top-level value must be when it is cut out of surrounding prose: `object` makes the search
   * try only `{` starts (so "see [1] for details: {…}" yields the object and "see [1]" yields nothing).
   */
  expect?: 'object' | 'array' | 'any';
}

type Unhealed = Extract<HealResult, { status: 'unrepairable' }>;

/** `final`: the value was read but the text around it rules the reading out (a stray closer): no later start is tried. */
class Unrepairable extends Error {
  constructor(
    message: string,
    readonly final = false,
  ) {
    super(message);
  }
}

const NO_VALUE = 'no JSON value found in the text';
/** Fenced blocks looked at; the whole text is always tried after them. */
const MAX_FENCES = 32;
/** `{`/`[` starts tried in one text before giving up (each is tried only past the last one's brackets, so work stays linear). */
const MAX_STARTS = 64;

/**
 * @example healJson("```json\n{'a': 1,}\n```") // {status: 'repaired', text: '{"a":1}', repairs: ['code_fence', 'single_quotes', 'trailing_comma']}
 */
export function healJson(input: string, options: HealOptions = {}): HealResult {
  try {
    return { status: 'valid', text: input, value: JSON.parse(input), repairs: [] };
  } catch {
    // not strict JSON: try to repair it below
  }
  const expect = options.expect ?? 'any';
  // Where the value may be, best first: ```json blocks, plain ``` blocks, other fenced blocks, then the whole
  // text (a fence may sit inside a JSON string: `{"code": "```js\nfoo()\n```"}`).
  const rank = (f: Fence) => (/^json[c5]?$/.test(f.lang) ? 0 : f.lang === '' ? 1 : 2);
  const fences = fencedBlocks(input)
    .filter((f) => f.body.trim() !== '')
    .sort((a, b) => rank(a) - rank(b));
  let failed: Unhealed | undefined;
  let cutOff: HealResult | undefined;
  for (const c of [...fences.map((f) => ({ body: f.body, repairs: ['code_fence'] as Repair[], leftOpen: !f.closed })), { body: input, repairs: [], leftOpen: false }]) {
    const r = healText(c.body, expect, c.repairs);
    if (r.status === 'unrepairable') {
      if (!failed || failed.reason === NO_VALUE) failed = r;
      continue;
    }
    // A closed block (or prose) whose value had to be cut short may not hold the whole value (a fence inside a
    // string ended the block early): a later reading that needs no truncation wins, else the first cut one.
    if (!r.repairs.includes('truncated')) return r;
    // A block left open runs to the end of a cut-off answer: that is the value, cut short.
    if (c.leftOpen) return r;
    cutOff ??= r;
  }
  return cutOff ?? failed ?? { status: 'unrepairable', repairs: [], reason: NO_VALUE };
}

interface Fence {
  body: string;
  /** The info string after the opening fence (`json`, `python`), lower case; '' when there is none. */
  lang: string;
  /** false when the text ends before a closing fence (a cut-off answer). */
  closed: boolean;
}

/** A language tag is taken when a newline follows it, or when it is a JSON one (```json {"a": 1}```). */
const FENCE_HEAD = /[ \t]*(?:(json[c5]?|javascript|js)\b|([\w.+#-]+)[ \t]*(?=\r?\n))?[ \t]*\r?\n?/iy;

/** The ``` blocks of the text in order, each opening fence paired with the next one (at most MAX_FENCES). */
function fencedBlocks(s: string): Fence[] {
  const blocks: Fence[] = [];
  let at = s.indexOf('```');
  while (at >= 0 && blocks.length < MAX_FENCES) {
    FENCE_HEAD.lastIndex = at + 3;
    const head = FENCE_HEAD.exec(s);
    const from = FENCE_HEAD.lastIndex;
    const end = s.indexOf('```', from);
    blocks.push({ body: s.slice(from, end < 0 ? s.length : end), lang: (head?.[1] ?? head?.[2] ?? '').toLowerCase(), closed: end >= 0 });
    if (end < 0) break;
    at = s.indexOf('```', end + 3);
  }
  return blocks;
}

/**
 * Repairs the value in one candidate text. When the reading from one start fails, the next `{`/`[` after that
 * start's brackets is tried ("use {name} here: {...}"), never one inside them, which would be a fragment of
 * a broken value.
 */
function healText(s: string, expect: 'object' | 'array' | 'any', base: Repair[]): Exclude<HealResult, { status: 'valid' }> {
  let start = startOf(s, expect);
  if (start < 0) return { status: 'unrepairable', repairs: base, reason: NO_VALUE };
  const lead = s.search(/\S/);
  const openers = expect === 'object' ? /\{/g : expect === 'array' ? /\[/g : /[{[]/g;
  let first: Unhealed | undefined;
  for (let tries = 0; tries < MAX_STARTS; tries++) {
    const repairs = new Set<Repair>(base);
    if (start > lead) repairs.add('surrounding_text');
    const parser = new Parser(s, start, repairs);
    try {
      const text = parser.document();
      const value = JSON.parse(text);
      return { status: 'repaired', text, value, repairs: [...repairs] };
    } catch (err) {
      const reason = err instanceof Unrepairable ? err.message : `repair produced invalid JSON: ${(err as Error).message}`;
      first ??= { status: 'unrepairable', repairs: [...repairs], reason };
      if (err instanceof Unrepairable && err.final) break;
      const end = bracketsEnd(s, start);
      if (end < 0) break;
      openers.lastIndex = Math.max(end, parser.offset + 1);
      const next = openers.exec(s);
      if (!next) break;
      start = next.index;
    }
  }
  return first ?? { status: 'unrepairable', repairs: base, reason: NO_VALUE };
}

/** The offset just past the bracket that closes the one at `start`, or -1 when it is not closed or closed by the wrong kind. */
function bracketsEnd(s: string, start: number): number {
  // The closers expected, as char codes, in a typed array grown by doubling (an array of strings took 0.1 s
  // for 300 000 unclosed "{" in a megabyte).
  let closers = new Uint8Array(64);
  let depth = 0;
  let inString = false;
  for (let i = start; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (depth === closers.length) {
        const grown = new Uint8Array(depth * 2);
        grown.set(closers);
        closers = grown;
      }
      closers[depth++] = c === OPEN_BRACE ? CLOSE_BRACE : CLOSE_BRACKET;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      if (depth === 0 || closers[--depth] !== c) return -1;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

const [QUOTE, BACKSLASH, OPEN_BRACE, CLOSE_BRACE, OPEN_BRACKET, CLOSE_BRACKET] = [...'"\\{}[]'].map((c) => c.charCodeAt(0));

/** Where the JSON value starts: the text itself when it already starts like a value, else the first opener. */
function startOf(s: string, expect: 'object' | 'array' | 'any'): number {
  const lead = s.search(/\S/);
  if (lead < 0) return -1;
  const c = s[lead];
  const opens = expect === 'object' ? '{' : expect === 'array' ? '[' : '{[';
  if (opens.includes(c)) return lead;
  // Without fences, a bare scalar is only taken when it is all there is ("True", "'x'"): never cut out of prose.
  if (expect === 'any' && /^\s*(?:['"]|-?\d|True\b|False\b|None\b|true\b|false\b|null\b)/.test(s) && !/[{[]/.test(s)) return lead;
  let best = -1;
  for (const o of opens) {
    const i = s.indexOf(o);
    if (i >= 0 && (best < 0 || i < best)) best = i;
  }
  return best;
}

/** String characters that need no escaping or repair inside "…" and '…'. */
const PLAIN_IN_DOUBLE = /[^"\\\u0000-\u001f]+/y;
const PLAIN_IN_SINGLE = /[^'"\\\u0000-\u001f]+/y;

/**
 * `out` (a string's JSON text) without a first surrogate half at its end, raw or as a `\uD8xx` escape (one
 * whose backslash is not itself escaped: `\\uD83D` is a backslash and letters).
 */
function withoutCutSurrogate(out: string): string {
  const last = out.charCodeAt(out.length - 1);
  if (last >= 0xd800 && last <= 0xdbff) return out.slice(0, -1);
  if (!/^\\u[dD][89abAB][0-9a-fA-F]{2}$/.test(out.slice(-6))) return out;
  let slashes = 0;
  for (let k = out.length - 7; k >= 0 && out[k] === '\\'; k--) slashes++;
  return slashes % 2 === 0 ? out.slice(0, -6) : out;
}

/** A number as models write it: sign, digits, point, exponent; an exponent without digits is caught after. */
const NUMBER = /[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d*)?/y;

/**
 * A number written loosely (`+3`, `.5`, `1.`, `007`) as JSON, keeping its digits as written.
 * @example jsonNumber('+12345678901234567890') // '12345678901234567890'
 */
function jsonNumber(text: string): string {
  const m = /^([-+]?)(\d*)(?:\.(\d*))?(.*)$/.exec(text) as RegExpExecArray;
  const whole = m[2].replace(/^0+(?=\d)/, '') || '0';
  return `${m[1] === '-' ? '-' : ''}${whole}${m[3] ? `.${m[3]}` : ''}${m[4]}`;
}

const PY: Record<string, string> = { True: 'true', False: 'false', None: 'null' };
const LITERALS = ['true', 'false', 'null', 'True', 'False', 'None'];

class Parser {
  private i: number;

  constructor(
    private readonly s: string,
    start: number,
    private readonly repairs: Set<Repair>,
  ) {
    this.i = start;
  }

  document(): string {
    const out = this.value(false);
    if (out === null) throw new Unrepairable('the text ends before any value');
    this.ws();
    if (this.i < this.s.length) {
      if (this.s[this.i] === '}' || this.s[this.i] === ']') throw new Unrepairable(`unbalanced "${this.s[this.i]}" at offset ${this.i}`, true);
      // "42 apples" is prose that starts with a number, not the number 42.
      if (out[0] !== '{' && out[0] !== '[') throw new Unrepairable(`text after a bare value at offset ${this.i}`);
      this.repairs.add('surrounding_text');
    }
    return out;
  }

  /** Where reading stopped (where it failed, after a throw). */
  get offset(): number {
    return this.i;
  }

  private get eof(): boolean {
    return this.i >= this.s.length;
  }

  private fail(what: string): never {
    throw new Unrepairable(`${what} at offset ${this.i}`);
  }

  /** Skips whitespace and comments (`// …`, `/* … *\/`, `# …`). */
  private ws(): void {
    const s = this.s;
    for (;;) {
      while (this.i < s.length && /\s/.test(s[this.i])) this.i++;
      if (s.startsWith('//', this.i) || s[this.i] === '#') {
        const end = s.indexOf('\n', this.i);
        this.i = end < 0 ? s.length : end + 1;
        this.repairs.add('comments');
      } else if (s.startsWith('/*', this.i)) {
        const end = s.indexOf('*/', this.i + 2);
        this.i = end < 0 ? s.length : end + 2;
        this.repairs.add('comments');
      } else {
        return;
      }
    }
  }

  /**
   * One value, or null when the text ended before it began or was cut inside it (a truncation the caller
   * closes). `inside`: the value is in an array or object (not the whole document).
   */
  private value(inside = true): string | null {
    this.ws();
    if (this.eof) return null;
    const c = this.s[this.i];
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"' || c === "'") return this.string();
    if (/[-+.\d]/.test(c)) return this.number(inside);
    return this.literal();
  }

  private object(): string {
    this.i++;
    const members: string[] = [];
    let needComma = false;
    for (;;) {
      this.ws();
      if (this.eof) return this.truncated(`{${members.join(',')}}`);
      const c = this.s[this.i];
      if (c === '}') {
        this.i++;
        return `{${members.join(',')}}`;
      }
      if (c === ',') {
        this.i++;
        this.ws();
        if (!needComma || this.s[this.i] === '}' || this.s[this.i] === ',') this.repairs.add('trailing_comma');
        needComma = false;
        continue;
      }
      if (needComma) this.repairs.add('missing_comma');
      const key = this.key();
      this.ws();
      if (this.eof) return this.truncated(`{${members.join(',')}}`);
      if (this.s[this.i] !== ':') this.fail('expected ":" after a key');
      this.i++;
      const v = this.value();
      if (v === null) return this.truncated(`{${members.join(',')}}`);
      members.push(`${key}:${v}`);
      needComma = true;
    }
  }

  private key(): string {
    const c = this.s[this.i];
    if (c === '"' || c === "'") return this.string();
    const m = /^[A-Za-z_$][\w$-]*/.exec(this.s.slice(this.i, this.i + 256));
    if (!m) this.fail(`unexpected "${c}" where a key should be`);
    this.i += m[0].length;
    this.repairs.add('unquoted_keys');
    return JSON.stringify(m[0]);
  }

  private array(): string {
    this.i++;
    const items: string[] = [];
    let needComma = false;
    for (;;) {
      this.ws();
      if (this.eof) return this.truncated(`[${items.join(',')}]`);
      const c = this.s[this.i];
      if (c === ']') {
        this.i++;
        return `[${items.join(',')}]`;
      }
      if (c === ',') {
        this.i++;
        this.ws();
        if (!needComma || this.s[this.i] === ']' || this.s[this.i] === ',') this.repairs.add('trailing_comma');
        needComma = false;
        continue;
      }
      if (c === '}') this.fail('unbalanced "}" in an array');
      if (needComma) this.repairs.add('missing_comma');
      const v = this.value();
      if (v === null) return this.truncated(`[${items.join(',')}]`);
      items.push(v);
      needComma = true;
    }
  }

  private truncated(closed: string): string {
    this.repairs.add('truncated');
    return closed;
  }

  /** A double- or single-quoted string, re-emitted double-quoted with control characters escaped. */
  private string(): string {
    const s = this.s;
    const quote = s[this.i];
    if (quote === "'") this.repairs.add('single_quotes');
    this.i++;
    let out = '';
    const plain = quote === '"' ? PLAIN_IN_DOUBLE : PLAIN_IN_SINGLE;
    while (this.i < s.length) {
      // Runs of characters copied as they are, in one step (one character at a time took 0.5 s a megabyte).
      plain.lastIndex = this.i;
      if (plain.test(s)) {
        out += s.slice(this.i, plain.lastIndex);
        this.i = plain.lastIndex;
        if (this.i >= s.length) break;
      }
      const c = s[this.i];
      if (c === quote) {
        this.i++;
        return `"${out}"`;
      }
      if (c === '\\') {
        const n = s[this.i + 1];
        if (n === undefined) {
          this.i++;
          break;
        }
        if (n === 'u' && /^[0-9a-fA-F]{4}$/.test(s.slice(this.i + 2, this.i + 6))) {
          out += s.slice(this.i, this.i + 6);
          this.i += 6;
          continue;
        }
        // The text was cut inside a `\u` escape ("\u00"): the half-written character goes, as a cut "\" does.
        if (n === 'u' && s.length - this.i <= 5 && /^[0-9a-fA-F]*$/.test(s.slice(this.i + 2))) {
          this.i = s.length;
          break;
        }
        if ('"\\/bfnrt'.includes(n)) out += `\\${n}`;
        else if (n === "'") out += "'";
        else {
          // An escape JSON does not have ("\x", "\<newline>"): keep the backslash as a character.
          out += '\\\\';
          this.repairs.add('invalid_escapes');
          this.i += 1;
          continue;
        }
        this.i += 2;
        continue;
      }
      if (c === '"') out += '\\"';
      else if (c < ' ') {
        out += JSON.stringify(c).slice(1, -1);
        this.repairs.add('control_characters');
      } else out += c;
      this.i++;
    }
    this.repairs.add('truncated');
    // Cut between the two halves of a surrogate pair (an emoji): the lone first half is no character, and strict
    // parsers refuse it; the string ends before it.
    return `"${withoutCutSurrogate(out)}"`;
  }

  /**
   * A number, its digits copied as written (never through a double: `+12345678901234567890` keeps every
   * digit). Inside an array or object, a number that runs to the very end of the text was cut off ("12" may
   * have been 1234): it is dropped with its member, like a lone "-" or "1e", never completed. A number that
   * is the whole text is complete.
   */
  private number(inside: boolean): string | null {
    const s = this.s;
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(s);
    const end = m ? NUMBER.lastIndex : this.i;
    if (inside && (end === s.length || (!m && s.length - this.i <= 2 && /^[-+]?\.?$/.test(s.slice(this.i))))) {
      this.i = s.length;
      return null;
    }
    if (!m || /[eE][-+]?$/.test(m[0])) this.fail('malformed number');
    const text = m[0];
    this.i = end;
    if (/^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?$/.test(text)) return text;
    this.repairs.add('number_format');
    return jsonNumber(text);
  }

  private literal(): string | null {
    const rest = this.s.slice(this.i, this.i + 8);
    for (const word of LITERALS) {
      if (rest.startsWith(word) && !/[\w$]/.test(rest[word.length] ?? '')) {
        this.i += word.length;
        if (PY[word]) this.repairs.add('python_literals');
        return PY[word] ?? word;
      }
    }
    // The text was cut inside a literal ("tr", "n"): drop it with its member rather than guess the word.
    const tail = this.s.slice(this.i);
    if (tail.length > 0 && tail.length < 5 && LITERALS.some((w) => w.startsWith(tail))) {
      this.i = this.s.length;
      return null;
    }
    this.fail(`unexpected "${this.s[this.i]}"`);
  }
}
