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

function titleOf(head: string): string {
  const m = /<title\b[^<>]*>([\s\S]*?)<\/title\s*>/i.exec(head);
  return m ? `\n${m[1]}\n` : ' ';
}

const NAMED: Record<string, string> = {
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ', ndash: '–', mdash: '—', hellip: '…', copy: '©',
  reg: '®', trade: '™', laquo: '«', raquo: '»', lsquo: '‘', rsquo: '’', ldquo: '“', rdquo: '”', bull: '•',
  middot: '·', deg: '°', euro: '€', pound: '£', yen: '¥', cent: '¢', sect: '§', para: '¶', times: '×',
  divide: '÷', shy: '', zwj: '', zwnj: '', eacute: 'é', egrave: 'è', agrave: 'à', aacute: 'á', uuml: 'ü',
  ouml: 'ö', auml: 'ä', szlig: 'ß', ccedil: 'ç', ntilde: 'ñ', iexcl: '¡', iquest: '¿', larr: '←', rarr: '→',
};

/** Numeric references and the common named ones; an unknown name is left as written. */
export function decodeEntities(text: string): string {
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z][a-z0-9]*);?/gi, (whole, ref: string) => {
    if (ref[0] === '#') {
      const code = ref[1] === 'x' || ref[1] === 'X' ? parseInt(ref.slice(2), 16) : parseInt(ref.slice(1), 10);
      if (!Number.isFinite(code) || code <= 0 || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return '\uFFFD';
      return String.fromCodePoint(code);
    }
    const named = NAMED[ref] ?? NAMED[ref.toLowerCase()];
    return named ?? whole;
  });
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
