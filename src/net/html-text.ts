/**
 * HTML reduced to readable text for a model's prompt: no scripts, styles or markup, entities decoded,
 * whitespace collapsed, block elements on their own lines. Deliberately a small regex pass rather than a
 * DOM parser dependency: the output is prompt text, not a rendering, and a tag the pass misreads costs a
 * stray word, never a security property (the text is data either way).
 *
 * @example htmlToText('<p>Fish &amp; chips</p><script>x()</script>') // 'Fish & chips'
 */
export function htmlToText(html: string): string {
  let s = html
    .replace(/<!--[\s\S]*?(?:-->|$)/g, ' ')
    .replace(/<!\[CDATA\[[\s\S]*?(?:\]\]>|$)/g, ' ')
    .replace(/<(script|style|noscript|template|svg|math|iframe|object|head)\b[\s\S]*?(?:<\/\1\s*>|$)/gi, (m, tag: string) =>
      tag.toLowerCase() === 'head' ? titleOf(m) : ' ',
    )
    .replace(/<[!?][^<>]*>/g, ' ');
  s = s.replace(TAG, (_m, name: string) => {
    const tag = name.toLowerCase();
    if (BLOCK.has(tag)) return '\n';
    if (INLINE.has(tag)) return '';
    return ' ';
  });
  return collapse(decodeEntities(s));
}

/**
 * A start or end tag, with attributes whose quoted values may contain `>`: the name, then any run of quoted
 * values and other characters but `<`, `>` and quotes, then `>`. The three pieces begin with different
 * characters, so there is one way to match a tag and the time is linear in the page (an attribute grammar with
 * optional `=value` parts backtracked exponentially: a 122-byte `<a x= x= x=…` held the event loop 10 s; and
 * with `<` allowed inside, each unclosed tag scanned to the end of the page).
 */
const TAG = /<\/?([a-zA-Z][a-zA-Z0-9-]*)(?=[\s/>])(?:"[^"]*"|'[^']*'|[^<>"'])*>/g;

const BLOCK = new Set(
  'address article aside blockquote br dd div dl dt fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr li main nav ol p pre section table tbody thead tfoot tr ul title caption details summary'.split(' '),
);
const INLINE = new Set('a abbr b bdi bdo cite code data dfn em font i kbd mark q s samp small span strong sub sup time u var wbr'.split(' '));

/**
 * The text of the head's first `<title>`, found with two forward searches: the opening tag, then the first
 * `</title>` after it. One pattern with a lazy body (`<title\b[^<>]*>([\s\S]*?)<\/title\s*>`) scanned to the end
 * of the head from every `<title>` that had no closing tag: quadratic, 0.5 MB of `<title>` took 6 s. The
 * result is the same: if the first opening tag has no closing tag after it, no later one has.
 */
function titleOf(head: string): string {
  const open = /<title\b[^<>]*>/i.exec(head);
  if (!open) return ' ';
  const start = open.index + open[0].length;
  const close = /<\/title\s*>/gi;
  close.lastIndex = start;
  const end = close.exec(head);
  return end ? `\n${head.slice(start, end.index)}\n` : ' ';
}

const NAMED = new Map(
  Object.entries({
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ', ndash: '–', mdash: '—', hellip: '…', copy: '©',
  reg: '®', trade: '™', laquo: '«', raquo: '»', lsquo: '‘', rsquo: '’', ldquo: '“', rdquo: '”', bull: '•',
  middot: '·', deg: '°', euro: '€', pound: '£', yen: '¥', cent: '¢', sect: '§', para: '¶', times: '×',
  divide: '÷', shy: '', zwj: '', zwnj: '', eacute: 'é', egrave: 'è', agrave: 'à', aacute: 'á', uuml: 'ü',
  ouml: 'ö', auml: 'ä', szlig: 'ß', ccedil: 'ç', ntilde: 'ñ', iexcl: '¡', iquest: '¿', larr: '←', rarr: '→',
  }),
);
const LONGEST_NAME = Math.max(...[...NAMED.keys()].map((name) => name.length));

/**
 * Numeric references and the common named ones; an unknown name is left as written. A reference is `&`, then
 * `#x` and hex digits, `#` and decimal digits, or a letter and letters or digits, then an optional `;`.
 * Read by hand from one `&` to the next: a regex replace with a callback cost about a microsecond per `&`
 * even when nothing was decoded (a 2 MB page of `&a` took 0.9 s). Names are looked up in a Map, so
 * `&constructor;` is not read as `Object.prototype.constructor`.
 */
export function decodeEntities(text: string): string {
  let amp = text.indexOf('&');
  if (amp < 0) return text;
  let out = '';
  let copied = 0;
  while (amp >= 0) {
    const end = referenceEnd(text, amp + 1);
    if (end < 0) {
      amp = text.indexOf('&', amp + 1);
      continue;
    }
    const after = text.charCodeAt(end) === SEMICOLON ? end + 1 : end;
    const decoded = decodeReference(text.slice(amp + 1, end));
    if (decoded !== null) {
      out += text.slice(copied, amp) + decoded;
      copied = after;
    }
    amp = text.indexOf('&', after);
  }
  return out + text.slice(copied);
}

const SEMICOLON = 59;

/** Where the reference that starts at `from` (just after `&`) ends, or -1 when none starts there. */
function referenceEnd(text: string, from: number): number {
  const first = text.charCodeAt(from);
  if (first === 35 /* # */) {
    const x = text.charCodeAt(from + 1);
    if ((x === 120 || x === 88) /* x X */ && isHex(text.charCodeAt(from + 2))) return skip(text, from + 3, isHex);
    return isDigit(x) ? skip(text, from + 2, isDigit) : -1;
  }
  return isLetter(first) ? skip(text, from + 1, isAlphanumeric) : -1;
}

function skip(text: string, from: number, accept: (code: number) => boolean): number {
  let at = from;
  while (at < text.length && accept(text.charCodeAt(at))) at++;
  return at;
}

const isDigit = (c: number) => c >= 48 && c <= 57;
const isLetter = (c: number) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
const isAlphanumeric = (c: number) => isDigit(c) || isLetter(c);
const isHex = (c: number) => isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);

/** The text a reference (without `&` and `;`) stands for, or null to leave it as written. */
function decodeReference(ref: string): string | null {
  if (ref[0] === '#') {
    const code = ref[1] === 'x' || ref[1] === 'X' ? parseInt(ref.slice(2), 16) : parseInt(ref.slice(1), 10);
    if (!Number.isFinite(code) || code <= 0 || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return '\uFFFD';
    return String.fromCodePoint(code);
  }
  if (ref.length > LONGEST_NAME) return null;
  return NAMED.get(ref) ?? NAMED.get(ref.toLowerCase()) ?? null;
}

/** Spaces and tabs collapsed inside lines, lines trimmed, blank lines dropped (markup leaves many). */
function collapse(text: string): string {
  return text
    .replace(/\r\n?/g, '\n')
    .split('\n')
    .map((line) => line.replace(/[ \t\f\v\u00a0]+/g, ' ').trim())
    .filter((line) => line !== '')
    .join('\n');
}
