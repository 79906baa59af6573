import { createRequire } from 'node:module';

/**
 * Why pg could not read `storage.url`, or null when it can. pg reads it only when the first connection is
 * made: `serve` then died with `error: Invalid URL` (or the ENOENT of an `sslrootcert=` file), naming no
 * setting, where `config check` had said ok. Read here with pg's own parser (its dependency, loaded only for
 * this driver), so both refuse it alike. The URL is not shown: it may hold a password.
 *
 * @example postgresUrlProblem('postgres://gw:secret@db:5432/gateway') // null
 */
export function postgresUrlProblem(url: string): string | null {
  const { parse } = createRequire(require.resolve('pg'))('pg-connection-string') as { parse(url: string): unknown };
  try {
    parse(url);
    return null;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ERR_INVALID_URL') return 'storage.url: is not a URL PostgreSQL can read (write postgres://user:password@host:5432/database, the password percent-encoded)';
    return `storage.url: PostgreSQL cannot use it (${e.message})`; // a parameter's file (sslrootcert=…) that cannot be read
  }
}
