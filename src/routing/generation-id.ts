import { randomByte } from '../random';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** `n` random alphanumerics (rejection sampling keeps them uniform). */
export function alphanumerics(n: number): string {
  let out = '';
  while (out.length < n) {
    const b = randomByte();
    if (b < 248) out += ALPHABET[b % 62];
  }
  return out;
}

/** A generation id: `gen-<unix seconds>-<20 alphanumerics>`, the `request_id` of errors after routing. */
export function generationId(now = Date.now()): string {
  return `gen-${Math.floor(now / 1000)}-${alphanumerics(20)}`;
}
