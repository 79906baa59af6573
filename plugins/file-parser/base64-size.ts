/**
 * The number of bytes `Buffer.from(data, 'base64')` gives, without decoding: Node's decoder skips every
 * character outside the alphabet (line breaks, spaces) and stops at the first `=`; each 4 characters it reads
 * are 3 bytes, so n characters are `floor(n * 3 / 4)` (the padding taken off).
 *
 * @example base64Bytes('QUJD\r\nRA==') // 4
 */
export function base64Bytes(data: string): number {
  let count = 0;
  for (let i = 0; i < data.length; i++) {
    const c = data.charCodeAt(i);
    if (c === 61) break; // '='
    if (isAlphabet(c)) count++;
  }
  return Math.floor((count * 3) / 4);
}

/**
 * At least `base64Bytes(data)`, from the length alone (the trailing padding taken off): what a string of only
 * alphabet characters decodes to. Line breaks or other skipped characters make it larger than the decoded size.
 */
export function base64BytesAtMost(data: string): number {
  const padding = data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0;
  return Math.floor(((data.length - padding) * 3) / 4);
}

/** A-Z a-z 0-9 + / and the URL-safe - _, which Node's decoder reads too. */
function isAlphabet(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 43 || c === 47 || c === 45 || c === 95;
}
