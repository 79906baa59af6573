/**
 * What the schema's type coercion would hide: a key written with no value (`port:`, `prompt: ~`) is YAML
 * null, which Ajv's `coerceTypes` turns into 0, false or "" (a free model, a random port, a drain timeout of
 * 0); and `.inf` or `1e400`, which are numbers to JSON Schema but no price or limit (a cost of Infinity
 * cannot be written to the ledger). Both are refused, naming the path. A stage's own section may be empty
 * (`plugins: { web: }` means "web with its defaults").
 *
 * @example configValueProblem({ server: { port: null } }) // 'server.port: has no value (write one, or remove the line for the default)'
 */
export function configValueProblem(root: unknown): string | undefined {
  return walk(root, '');
}

function walk(value: unknown, at: string, key = ''): string | undefined {
  if (value === null) {
    if (/^plugins\.[^.[\]]+$/.test(at)) return undefined;
    // `api_key:sk-…`: without a space after the colon YAML reads one key, value and all, with no value.
    if (key.includes(':')) return `${at}: has no value (a key and its value need a space after the colon: \`key: value\`)`;
    return `${at || '(root)'}: has no value (write one, or remove the line for the default)`;
  }
  if (typeof value === 'number') return Number.isFinite(value) ? undefined : `${at}: must be a finite number`;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = walk(value[i], `${at}[${i}]`);
      if (problem) return problem;
    }
    return undefined;
  }
  if (typeof value === 'object') {
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      const problem = walk(v, at ? `${at}.${shownKey(k)}` : shownKey(k), k);
      if (problem) return problem;
    }
  }
  return undefined;
}

/** A boolean or number as written in the config, with where it is (keys and indexes). */
interface Scalar {
  path: (string | number)[];
  value: boolean | number;
}

/**
 * The booleans and numbers of a parsed config, before the schema's coercion changes any: `scalarChange`
 * compares them with what the schema made of them.
 */
export function scalarsOf(root: unknown, path: (string | number)[] = [], out: Scalar[] = []): Scalar[] {
  if (typeof root === 'boolean' || typeof root === 'number') out.push({ path, value: root });
  else if (Array.isArray(root)) root.forEach((v, i) => scalarsOf(v, [...path, i], out));
  else if (root && typeof root === 'object') for (const [k, v] of Object.entries(root)) scalarsOf(v, [...path, k], out);
  return out;
}

/**
 * A boolean the schema's coercion turned into a number, or a number it turned into a boolean: refused, naming
 * the path. Coercion is there for `port: ${PORT:-8080}` (text that is a number); `port: true` became port 1,
 * `max_in_flight: false` 0 (no limit), `prompt: true` a price of 1 (found by an operator audit).
 *
 * @example scalarChange(scalarsOf(raw), coerced) // 'server.port: must be a number (true is not one)'
 */
export function scalarChange(before: Scalar[], after: unknown): string | undefined {
  for (const { path, value } of before) {
    let now: unknown = after;
    for (const step of path) now = now && typeof now === 'object' ? (now as Record<string | number, unknown>)[step] : undefined;
    if (typeof value === typeof now) continue;
    const at = pathText(path);
    if (typeof value === 'boolean' && typeof now === 'number') return `${at}: must be a number (${value} is not one)`;
    if (typeof value === 'number' && typeof now === 'boolean') return `${at}: must be true or false (${value} is not)`;
  }
  return undefined;
}

/**
 * A key of the operator's config as an error message (and so the log of a refused reload) shows it. A key is
 * the operator's own text and may hold a secret: `api_key:sk-live-…` written without a space after the colon
 * is one key, and a key pasted where a field name goes is another (both were echoed whole; found by an
 * operator audit). Text after a colon is cut, and so is a key that looks like a credential: 12 characters or
 * more with a digit in them (no field name of the config's has one but those of LONG_FIELDS_WITH_DIGITS).
 *
 * @example shownKey('api_key:sk-live-0123') // 'api_key:…'
 */
export function shownKey(key: string): string {
  const colon = key.indexOf(':');
  if (colon >= 0) return `${key.slice(0, colon)}:…`;
  return key.length >= 12 && /\d/.test(key) && !LONG_FIELDS_WITH_DIGITS.has(key) ? `${key.slice(0, 3)}…` : key;
}

/** The config's field names that shownKey would take for a credential. */
const LONG_FIELDS_WITH_DIGITS: ReadonlySet<string> = new Set(['cache_write_1h']);

/** A field path as config errors write it: `providers[1].api_key`, keys through `shownKey`; `(root)` when empty. */
export function pathText(parts: readonly (string | number)[], prefix = ''): string {
  let out = prefix;
  for (const p of parts) out += typeof p === 'number' || /^\d+$/.test(p) ? `[${p}]` : out ? `.${shownKey(p)}` : shownKey(p);
  return out || '(root)';
}

/** The longest delay Node.js's timers take (ms): a longer one fires after 1 ms, with only a warning. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A duration (a field named `…_ms` or `…_s`, the gateway's and every stage's) too long to be one: a timer
 * given more than `MAX_TIMER_MS` fires at once (`latency_ms: 3e9` made the simulated provider answer
 * immediately), and a date that far ahead is no date (`output_ttl_s: 1e300` failed the job's completion).
 * Milliseconds up to `MAX_TIMER_MS` (~24.8 days), seconds up to the same number (~68 years) are accepted.
 *
 * @example durationProblem({ routing: { retry_wait_max_ms: 3e9 } }) // 'routing.retry_wait_max_ms: must be at most 2147483647 …'
 */
export function durationProblem(root: unknown): string | undefined {
  return fieldProblem(root, (k, v, path) => {
    const unit = k.endsWith('_ms') ? 'ms' : k.endsWith('_s') ? 's' : undefined;
    if (!unit || typeof v !== 'number' || v <= MAX_TIMER_MS) return undefined;
    const why = unit === 'ms' ? 'about 24.8 days, the longest timer Node.js runs' : 'about 68 years';
    return `${pathText([...path, k])}: must be at most ${MAX_TIMER_MS} (${why})`;
  });
}

/** The fields that hold an HTTP(S) URL, the gateway's and every stage's (`state.url`, `storage.url` have checks of their own). */
const URL_FIELDS = new Set(['base_url', 'classifier_url', 'output_url', 'endpoint']);

/**
 * An HTTP(S) URL field that passes the schema's `^https?://` but is no URL (`http://h:port/v1`, a space in
 * the host): `new URL` threw `Invalid URL` when the providers or stages were built, and `config check`,
 * `serve` and a reload said only `error: Invalid URL`, naming no field (the OTLP exporter's own message, at
 * `serve` only, named no setting either). The value is not shown: a URL may hold a password.
 *
 * @example urlProblem({ providers: [{ base_url: 'http://h:port' }] }) // 'providers[0].base_url: is not a URL …'
 */
export function urlProblem(root: unknown): string | undefined {
  return fieldProblem(root, (k, v, path) => {
    // Header names and values are the operator's own, whatever they are called.
    if (k === 'headers' || (path.length === 0 && (k === 'state' || k === 'storage'))) return SKIP;
    if (URL_FIELDS.has(k) && typeof v === 'string' && !URL.canParse(v)) {
      return `${pathText([...path, k])}: is not a URL (write scheme://host[:port]/path, e.g. https://api.example.com/v1: a port of digits, no spaces)`;
    }
    return undefined;
  });
}

/**
 * What undici refuses in a header value: control characters other than tab (a line break, a key file's
 * trailing newline carried by an environment variable), and any character above U+00FF (curly quotes or a
 * zero-width space pasted with a key).
 */
const NOT_IN_HEADER_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * An `api_key` or a `headers:` entry (the gateway's and every stage's) that cannot go into an HTTP header:
 * undici refused every call that carried it, which the caller saw as `Provider … could not be reached`
 * (network: reset), with nothing in the log naming the setting, where `config check` said ok. The value is
 * not shown: it is a credential.
 *
 * @example headerProblem({ providers: [{ api_key: 'sk-abc\n' }] }) // 'providers[0].api_key: holds a character …'
 */
export function headerProblem(root: unknown): string | undefined {
  const why = 'holds a character an HTTP header cannot carry (a line break or another control character, or one such as a curly quote or a zero-width space pasted with it; the value is not shown)';
  return fieldProblem(root, (k, v, path) => {
    if (k === 'api_key' && typeof v === 'string' && NOT_IN_HEADER_VALUE.test(v)) return `${pathText([...path, k])}: ${why}`;
    if (k !== 'headers' || !v || typeof v !== 'object' || Array.isArray(v)) return undefined;
    for (const [name, value] of Object.entries(v)) {
      if (!HEADER_NAME.test(name)) return `${pathText([...path, k, name])}: is no HTTP header name (letters, digits and !#$%&'*+-.^_\`|~ only: no spaces or colons)`;
      if (typeof value === 'string' && NOT_IN_HEADER_VALUE.test(value)) return `${pathText([...path, k, name])}: ${why}`;
    }
    return SKIP;
  });
}

const SKIP = Symbol('skip');

/**
 * The first problem `check` finds at a field of the config tree, depth first in the file's order: `check` gets
 * each object member's key, value and the path of the object holding it, and returns a problem, nothing, or
 * `SKIP` to leave that member's value unread.
 */
function fieldProblem(root: unknown, check: (key: string, value: unknown, path: (string | number)[]) => string | typeof SKIP | undefined, path: (string | number)[] = []): string | undefined {
  if (Array.isArray(root)) {
    for (let i = 0; i < root.length; i++) {
      const problem = fieldProblem(root[i], check, [...path, i]);
      if (problem) return problem;
    }
  } else if (root && typeof root === 'object') {
    for (const [k, v] of Object.entries(root as Record<string, unknown>)) {
      const found = check(k, v, path);
      if (found === SKIP) continue;
      const problem = found ?? fieldProblem(v, check, [...path, k]);
      if (problem) return problem;
    }
  }
  return undefined;
}
