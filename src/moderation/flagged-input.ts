/** The longest `flagged_input` a 403 carries (spec 7.6). */
export const FLAGGED_INPUT_MAX = 100;

/**
 * `text` cut to at most `max` characters (Unicode code points, so a surrogate pair is never split): a
 * longer text keeps its beginning and its end, with the middle replaced by one `…` (U+2026). The result
 * of a cut is exactly `max` characters: the head gets the odd one.
 *
 * @example cutMiddle('a'.repeat(60) + 'b'.repeat(60)) // 50 × 'a' + '…' + 49 × 'b'
 */
export function cutMiddle(text: string, max = FLAGGED_INPUT_MAX): string {
  const chars = Array.from(text);
  if (chars.length <= max) return text;
  const kept = max - 1;
  const head = Math.ceil(kept / 2);
  const tail = kept - head;
  return `${chars.slice(0, head).join('')}…${tail > 0 ? chars.slice(chars.length - tail).join('') : ''}`;
}
