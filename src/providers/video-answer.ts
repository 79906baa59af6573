import { isHttpUrl } from '../net/http-url';

/**
 * Checks on what a job-style video upstream answers, before any of it is stored or shown to a client. The
 * answer is an upstream's text: both store engines must take whatever passes (PostgreSQL's text holds no NUL,
 * its BIGINT no fraction and nothing past 2^63), and a client must be able to open an output URL as a link.
 */

/** The longest upstream job id kept (ids seen in the wild are under 100 characters). */
export const MAX_UPSTREAM_JOB_ID_CHARS = 256;

/** The longest output URL kept (a signed object-store URL is one or two kilobytes). */
export const MAX_OUTPUT_URL_CHARS = 8192;

/** The latest expiry kept: 9999-12-31T23:59:59Z, in unix seconds. */
const LATEST_EXPIRY_S = 253_402_300_799;

/** C0 controls, space, DEL and C1 controls. */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * Why an upstream job id is not usable, or null when it is: a non-empty string of at most
 * `MAX_UPSTREAM_JOB_ID_CHARS` characters without control characters.
 *
 * @example upstreamJobIdProblem('job\u0000x') // 'a job id with a control character'
 */
export function upstreamJobIdProblem(id: unknown): string | null {
  if (typeof id !== 'string' || id === '') return 'no job id';
  if (id.length > MAX_UPSTREAM_JOB_ID_CHARS) return `a job id over ${MAX_UPSTREAM_JOB_ID_CHARS} characters`;
  if (CONTROL.test(id)) return 'a job id with a control character';
  return null;
}

/**
 * The output URLs a client gets: absolute `http:`/`https:` URLs of at most `MAX_OUTPUT_URL_CHARS` characters,
 * with no whitespace or control character, as written. Anything else is left out (`javascript:`, `file:`,
 * `data:` — a video inlined in every store row and every GET — relative paths, non-strings).
 *
 * @example outputUrls(['https://v.example/a.mp4', 'javascript:alert(1)']) // ['https://v.example/a.mp4']
 */
export function outputUrls(value: unknown): string[] {
  if (!Array.isArray(value)) return [];
  return value.filter((u): u is string => typeof u === 'string' && u.length <= MAX_OUTPUT_URL_CHARS && isHttpUrl(u));
}

/**
 * An upstream's `expires_at` (unix seconds) as whole epoch ms, or undefined when it is not a number of seconds
 * between 1970 and the end of year 9999 (the configured `output_ttl_s` then applies).
 *
 * @example expiryMs(1_900_000_000.5) // 1_900_000_000_500
 */
export function expiryMs(value: unknown): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > LATEST_EXPIRY_S) return undefined;
  return Math.round(value * 1000);
}
