/**
 * Cutting text at a length counted in UTF-16 code units (JavaScript's `length`) without splitting a surrogate
 * pair: `text.slice(0, n)` can keep the first half of an emoji, and a lone surrogate is not Unicode. The
 * Anthropic API refuses a request whose JSON holds one (400), and other readers replace it with U+FFFD.
 */

const isHigh = (c: number) => c >= 0xd800 && c <= 0xdbff;
const isLow = (c: number) => c >= 0xdc00 && c <= 0xdfff;

/**
 * The first `max` code units of `text`, one fewer when the last of them would be the first half of a pair.
 *
 * @example textHead('ab😀', 3) // 'ab' (not 'ab\ud83d')
 */
export function textHead(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= 0) return '';
  return text.slice(0, isHigh(text.charCodeAt(max - 1)) ? max - 1 : max);
}

/**
 * The last `max` code units of `text`, one fewer when the first of them would be the second half of a pair.
 *
 * @example textTail('😀ab', 3) // 'ab' (not '\ude00ab')
 */
export function textTail(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= 0) return '';
  const start = text.length - max;
  return text.slice(isLow(text.charCodeAt(start)) ? start + 1 : start);
}
