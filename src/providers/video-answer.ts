/**
 * Checks on what a job-style video upstream answers, before any of it is stored or shown to a client. The
 * answer is an upstream's text: both store engines must take whatever passes (PostgreSQL's text holds no NUL,
 * its BIGINT no fraction and nothing past 2^63), and a client must be able to open an output URL as a link.
 */

/** The longest output URL kept (a signed object-store URL is one or two kilobytes). */
export const MAX_OUTPUT_URL_CHARS = 8192;

/** C0 controls, space, DEL and C1 controls. */
const CONTROL_OR_SPACE = /[\u0000-\u0020\u007f-\u009f]/;

/**
 * The output URLs a client gets: absolute `http:`/`https:` URLs of at most `MAX_OUTPUT_URL_CHARS` characters,
 * with no whitespace or control character, as written. Anything else is left out (`javascript:`, `file:`,
 * `data:` — a video inlined in every store row and every GET — relative paths, non-strings).
 *
 * @example outputUrls(['https://v.example/a.mp4', 'javascript:alert(1)']) // ['https://v.example/a.mp4']
 */
export function outputUrls(value: unknown): string[] {
  if (!Array.isArray(value)) return [];
  return value.filter((u): u is string => typeof u === 'string' && isContentUrl(u));
}

function isContentUrl(u: string): boolean {
  if (u.length > MAX_OUTPUT_URL_CHARS || CONTROL_OR_SPACE.test(u)) return false;
  let url: URL;
  try {
    url = new URL(u);
  } catch {
    return false;
  }
  return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
}
