/**
 * Request headers whose values are not secret: the protocol's own, which the gateway sets (and the Anthropic
 * headers the client may pass on). Every other header of an upstream call is taken for a credential: an
 * operator's `headers:` may carry one under any name (`Ocp-Apim-Subscription-Key`, `Cookie`, `X-Auth`, Azure's
 * `api-key`), and a name pattern missed the ones it did not list (an audit found `X-Custom-Auth` echoed back to
 * a client in `metadata.raw`).
 */
const NOT_SECRET = new Set(['content-type', 'accept', 'accept-encoding', 'content-length', 'user-agent', 'anthropic-version', 'anthropic-beta']);

/**
 * The credentials among a call's request headers: each value of a header not in `NOT_SECRET`, and for
 * `Bearer <key>` the key alone. Values under 8 characters are left out: too short to be a real key, and
 * replacing them would mangle ordinary text.
 *
 * @example credentialsIn({ authorization: 'Bearer sk-abc123456' }) // ['Bearer sk-abc123456', 'sk-abc123456']
 */
export function credentialsIn(headers: Record<string, string>): string[] {
  const out: string[] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (!value || NOT_SECRET.has(name.toLowerCase())) continue;
    out.push(value);
    const scheme = /^[A-Za-z]+\s+(\S.*)$/.exec(value);
    if (scheme) out.push(scheme[1]);
  }
  // As a JSON text may carry it: `/` written `\/` (valid JSON, PHP's default), which the literal would miss.
  for (const c of [...out]) if (c.includes('/')) out.push(c.replaceAll('/', '\\/'));
  return out.filter((c) => c.length >= 8);
}

/**
 * `text` with every credential replaced by `[redacted]`. Some providers echo the key they were sent in
 * their error ("Incorrect API key provided: sk-…"); that text becomes the caller's error message,
 * `metadata.raw`, a span status and a log line, so it is scrubbed once, where it enters the gateway.
 */
export function withoutCredentials(text: string, credentials: readonly string[]): string {
  let out = text;
  const prefixes = prefixesOf(credentials);
  for (let i = 0; i < credentials.length; i++) {
    const c = credentials[i];
    // The key's first characters find it whole and cut short alike: a provider that quotes the key it refused
    // often quotes a part ("sk-proj-abc…"), and the key less its last characters had reached the caller.
    if (out.includes(prefixes[i])) out = c.length >= SHORTENED_MIN ? withoutPrefixRuns(out, c, prefixes[i]) : out.split(c).join('[redacted]');
  }
  return out;
}

/** A credential this long is also found cut short: any run of its first `PREFIX_CHARS` or more characters. */
const SHORTENED_MIN = 16;
const PREFIX_CHARS = 12;
const prefixCache = new WeakMap<readonly string[], string[]>();

function prefixesOf(credentials: readonly string[]): string[] {
  let p = prefixCache.get(credentials);
  if (!p) prefixCache.set(credentials, (p = credentials.map((c) => (c.length >= SHORTENED_MIN ? c.slice(0, PREFIX_CHARS) : c))));
  return p;
}

/** `text` with every run that starts like `c` and goes on like it for at least `prefix`'s length replaced. */
function withoutPrefixRuns(text: string, c: string, prefix: string): string {
  let out = '';
  let from = 0;
  for (let at = text.indexOf(prefix); at >= 0; at = text.indexOf(prefix, from)) {
    let n = prefix.length;
    while (n < c.length && at + n < text.length && text.charCodeAt(at + n) === c.charCodeAt(n)) n++;
    out += `${text.slice(from, at)}[redacted]`;
    from = at + n;
  }
  return from === 0 ? text : out + text.slice(from);
}

/**
 * `value` (parsed JSON) with every credential taken out of its strings (keys too), at any depth: a key an
 * answer wrote with JSON escapes (`\u0073k-…`) is not in its text, only in what the text parses to.
 *
 * @example scrubbed(JSON.parse(text), credentials)
 */
export function scrubbed(value: unknown, credentials: readonly string[]): unknown {
  if (credentials.length === 0) return value;
  if (typeof value === 'string') return withoutCredentials(value, credentials);
  if (Array.isArray(value)) return value.map((v) => scrubbed(v, credentials));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[withoutCredentials(k, credentials)] = scrubbed(v, credentials);
    return out;
  }
  return value;
}

/**
 * A `\u` escape of a character keys are made of (letters, digits, `-`, `_`, `.`, `+`, `/`, `=`), which no JSON
 * encoder escapes unasked.
 */
const ESCAPED_KEY_CHAR = /\\u00(?:3[0-9d]|[46][1-9a-f]|[57][0-9af]|2[b-f])/i;

/**
 * A JSON text (an answer, a stream event's data) with every credential taken out of what it parses to, when it
 * writes a key character as a `\u` escape (`\u0073k-…` is `sk-…` to any JSON reader, and the text scrub does
 * not see it); otherwise, and when it is not JSON, the text as it is. Escapes of other characters (non-ASCII,
 * Go's HTML-safe `\u003c`) do not trigger the parse, so ordinary answers cost one scan.
 *
 * @example withoutEscapedCredentials('{"m":"\\u0073k-abc123456"}', ['sk-abc123456']) // '{"m":"[redacted]"}'
 */
export function withoutEscapedCredentials(json: string, credentials: readonly string[]): string {
  if (credentials.length === 0 || !json.includes('\\u00') || !ESCAPED_KEY_CHAR.test(json)) return json;
  try {
    return JSON.stringify(scrubbed(JSON.parse(json), credentials));
  } catch {
    return json;
  }
}
