import { linearRegExpFallback } from './regexp-fallback';

/**
 * The regular expressions an operator writes (guardrail `patterns`, moderation `rules`) run on client text,
 * so each must stay linear in time whatever the text: V8's linear engine takes over a match that backtracks
 * too long (`linearRegExpFallback`), but it has no case-insensitive and no Unicode mode, and with `i` or `u`
 * `(a+)+b` on 27 characters held the event loop (every request) for 10 s. So:
 * - `i` is applied by case folding instead: the pattern's letters are lower-cased (escapes such as `\S` and
 *   `\W` kept) and it runs without `i` on a lower-cased copy of the text of the same length, so match
 *   positions (what a redaction replaces) are the original text's. A few letters fold differently from JavaScript's
 *   own `i` (the long `ſ` is not an `s`).
 * - `u` is refused (`operatorRegExpProblem`): nothing would bound such a pattern's time.
 *
 * @example operatorRegExp('project\\s+x', 'ig').test('PROJECT X') // true
 */
export function operatorRegExp(source: string, flags: string): RegExp {
  linearRegExpFallback();
  if (!flags.includes('i')) return new RegExp(source, flags);
  return new FoldedRegExp(foldedPattern(source), flags.replace('i', ''));
}

/** Why an operator's pattern cannot be used (invalid, or a flag without a linear-time engine), or null. */
export function operatorRegExpProblem(source: string, flags: string): string | null {
  return problemOf(source, flags)?.message ?? null;
}

/**
 * The config error of an operator's rule at `at` (a guardrail pattern, a moderation rule), naming the field at
 * fault: its `regex` (invalid, or matching the empty string: it would match everywhere) or its `flags`.
 *
 * @example operatorPatternProblem('a*', 'g', 'guardrails[0].patterns[1]') // 'guardrails[0].patterns[1].regex: matches the empty string'
 */
export function operatorPatternProblem(source: string, flags: string, at: string): string | null {
  const problem = problemOf(source, flags);
  if (problem) return `${at}.${problem.field}: ${problem.message}`;
  return operatorRegExp(source, flags).test('') ? `${at}.regex: matches the empty string` : null;
}

function problemOf(source: string, flags: string): { field: 'regex' | 'flags'; message: string } | null {
  if (flags.includes('u')) {
    const message = 'flag "u" is not accepted: V8\'s linear-time fallback has no Unicode mode, so a pattern with it could hold the gateway on one request (write the pattern without it; "i" is applied by case folding)';
    return { field: 'flags', message };
  }
  try {
    new RegExp(source, flags);
  } catch (err) {
    return { field: 'regex', message: `invalid regular expression (${(err as Error).message})` };
  }
  try {
    operatorRegExp(source, flags);
  } catch (err) {
    return { field: 'flags', message: `flag "i" cannot be applied to this pattern by case folding (${(err as Error).message}); write both cases out instead` };
  }
  return null;
}

/**
 * A RegExp that matches a case-folded copy of its input (its own pattern already folded). `test`, `matchAll`,
 * `replace` and `match` all read through `exec`, so overriding it is enough; the last input's fold is kept,
 * as `matchAll` calls `exec` once per match on the same text.
 */
class FoldedRegExp extends RegExp {
  private lastInput: string | undefined;
  private lastFolded = '';

  override exec(input: string): RegExpExecArray | null {
    if (input !== this.lastInput) {
      this.lastInput = input;
      this.lastFolded = foldCase(input);
    }
    return super.exec(this.lastFolded);
  }
}

/**
 * The text lower-cased with its length and positions kept: `toLowerCase` keeps them but for `İ` (U+0130),
 * which becomes two code units; it is folded to `i` first.
 */
export function foldCase(text: string): string {
  const lower = text.toLowerCase();
  if (lower.length === text.length) return lower;
  return text.replace(/\u0130/g, 'i').toLowerCase();
}

/**
 * The pattern with its letters lower-cased: literal letters, letters in classes and ranges, and letters
 * written as `\xHH` / `\uHHHH`; every other escape (`\S`, `\W`, `\b`, `\d`, `\k<name>`…) is kept as written.
 */
export function foldedPattern(source: string): string {
  let out = '';
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c !== '\\') {
      out += c === '\u0130' ? 'i' : c.toLowerCase();
      continue;
    }
    const next = source[i + 1] ?? '';
    const hex = next === 'x' ? source.slice(i + 2, i + 4) : next === 'u' ? source.slice(i + 2, i + 6) : '';
    if (hex && /^[0-9a-fA-F]+$/.test(hex) && hex.length === (next === 'x' ? 2 : 4)) {
      const ch = String.fromCharCode(parseInt(hex, 16));
      const lower = ch.toLowerCase();
      out += lower.length === 1 && lower !== ch ? `\\u${lower.charCodeAt(0).toString(16).padStart(4, '0')}` : source.slice(i, i + 2 + hex.length);
      i += 1 + hex.length;
      continue;
    }
    out += c + next;
    i++;
  }
  return out;
}
