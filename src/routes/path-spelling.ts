/** A character RFC 3986 calls unreserved: its percent-encoded form means the same URI (section 6.2.2.2). */
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * The path with percent-encoded unreserved characters decoded (`/chat/%63ompletions` → `/chat/completions`),
 * everything else as written: `%2F` stays an encoded slash inside a segment (a model id), `%20` stays encoded.
 * Koa and @koa/router match the raw path, so such a spelling of a route had been a 404.
 *
 * @example unreservedDecoded('/api/v1/chat/%63ompletions') // '/api/v1/chat/completions'
 */
export function unreservedDecoded(path: string): string {
  if (!path.includes('%')) return path;
  return path.replace(/%([0-9A-Fa-f]{2})/g, (escape: string, hex: string) => {
    const c = String.fromCharCode(parseInt(hex, 16));
    return UNRESERVED.test(c) ? c : escape;
  });
}
