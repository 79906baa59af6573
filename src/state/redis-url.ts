/**
 * Why ioredis could not read `state.url`, or null when it can. ioredis reads a port number, a socket path
 * (`/run/redis.sock`), `redis://` / `rediss://` URLs and a bare `host:port`, the last three through
 * `new URL` (with `redis://` put in front of a bare one), which throws `Invalid URL` for anything else: that
 * came at `serve`, after the store was opened (and a first management key made), naming no setting, where
 * `config check` had said ok. The same reading here lets both refuse it. The value is not shown: it may
 * hold a password.
 *
 * @example redisUrlProblem('redis://127.0.0.1:6379/0') // null
 */
export function redisUrlProblem(url: string): string | null {
  if (/^\d+$/.test(url) || (url.startsWith('/') && !url.startsWith('//'))) return null;
  const full = /^rediss?:\/\//i.test(url) ? url : url.startsWith('//') ? `redis:${url}` : `redis://${url}`;
  try {
    new URL(full);
    return null;
  } catch {
    return 'state.url: is not a Redis URL (write redis://[user:password@]host:6379/0, rediss://… for TLS, host:port, or a socket path such as /run/redis.sock)';
  }
}
