import { shownKey } from './values';

/** A `${NAME}` or `${NAME:-default}` reference (a literal `$${` is removed before this is matched). */
const REFERENCE = /\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}/g;

/**
 * The environment variables that gave each field of the parsed config its value: the ones it references that
 * are set and not empty (a default used in their place is written in the file). Paths are written as config
 * errors write them (`server.port`, `providers[0].api_key`).
 *
 * @example envSources({ server: { port: '${GATEWAY_PORT:-8080}' } }, { GATEWAY_PORT: 'abc' }) // Map { 'server.port' => ['GATEWAY_PORT'] }
 */
export function envSources(value: unknown, env: NodeJS.ProcessEnv, at = '', out = new Map<string, string[]>()): Map<string, string[]> {
  if (typeof value === 'string') {
    const names = [...value.replaceAll('$${', '').matchAll(REFERENCE)].map((m) => m[1]).filter((n) => env[n] !== undefined && env[n] !== '');
    if (names.length > 0) out.set(at || '(root)', [...new Set(names)]);
  } else if (Array.isArray(value)) value.forEach((v, i) => envSources(v, env, `${at}[${i}]`, out));
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) envSources(v, env, at ? `${at}.${shownKey(k)}` : shownKey(k), out);
  }
  return out;
}

/**
 * A config error's message with the variables its field's value came from: `server.port: must be integer`
 * named the field, not the `GATEWAY_PORT=abc` the operator had set. The value is not shown (it may be a secret).
 *
 * @example withEnvSources('server.port: must be integer', sources) // 'server.port: must be integer (the value of environment variable GATEWAY_PORT)'
 */
export function withEnvSources(message: string, sources: Map<string, string[]>): string {
  let field = '';
  for (const path of sources.keys()) if (path.length > field.length && message.startsWith(`${path}:`)) field = path;
  if (!field) return message;
  const names = sources.get(field)!;
  return `${message} (the value of environment variable${names.length > 1 ? 's' : ''} ${names.join(', ')})`;
}
