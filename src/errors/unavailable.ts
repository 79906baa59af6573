/** Node socket errors that mean "the other side cannot be reached now". */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * PostgreSQL SQLSTATEs of a server that is going away or cannot take us: class 08 (connection exception),
 * 57P01–57P03 (admin/crash shutdown, cannot connect now), 53300 (too many connections).
 */
const PG_UNAVAILABLE = /^(08...|57P0[123]|53300)$/;

/** pg's own messages for a connection that dropped, never came up or stopped answering (they carry no code). */
const PG_MESSAGES = /^(Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Connection is closed|Query read timeout)/i;

/**
 * ioredis's (and the Redis state's own) messages for a Redis that is down or too slow: no offline queue while
 * disconnected, the command timeout, the first connection not made in time, closed before it was.
 */
const REDIS_MESSAGES = /^(Stream isn't writeable|Command timed out|redis not ready after|redis connection closed|Reached the max retries per request limit)/i;

/**
 * Whether an error thrown by the store or another backing service (not a provider: those are classified in
 * providers/upstream-errors.ts) means the service is unreachable right now, so the request should fail
 * closed with a 503 and Retry-After rather than a 500: the caller may retry, nothing was wrong with its
 * request. ioredis's "Connection is closed" and socket errors count too.
 *
 * @example isUnavailable(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })) // true
 */
export function isUnavailable(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (NETWORK_CODES.has(code) || PG_UNAVAILABLE.test(code))) return true;
  return typeof message === 'string' && (PG_MESSAGES.test(message) || REDIS_MESSAGES.test(message));
}
