import { randomFillSync } from 'node:crypto';

// Random bytes are drawn 4 KiB at a time: one syscall serves ~100 ids instead of one each.
const pool = Buffer.alloc(4096);
let offset = pool.length;

function refill(need: number): void {
  if (offset + need > pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
}

/** One random byte from the pool. */
export function randomByte(): number {
  refill(1);
  return pool[offset++];
}

/**
 * `bytes` random bytes as lowercase hex, never all zeros (an all-zero trace or span id is invalid).
 *
 * @example randomHex(8) // '5f0c2a9e1b7d4c36'
 */
export function randomHex(bytes: number): string {
  for (;;) {
    refill(bytes);
    const start = offset;
    offset += bytes;
    for (let i = start; i < offset; i++) if (pool[i] !== 0) return pool.toString('hex', start, offset);
  }
}
