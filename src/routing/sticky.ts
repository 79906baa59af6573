import { LRUCache } from 'lru-cache';

/**
 * Sticky routing: a `session_id` remembers the endpoint that served it, so the next request of the session
 * goes there first (provider-side prompt caches stay warm). The entry expires after `ttlMs` without use.
 * In-process; the shared Redis state arrives with the spending issue.
 *
 * @example const sticky = new StickyRoutes(600_000); sticky.remember('key1:sess', 'openai/gpt-4o'); sticky.lookup('key1:sess');
 */
export class StickyRoutes {
  private readonly routes: LRUCache<string, string>;

  constructor(ttlMs: number, max = 100_000) {
    this.routes = new LRUCache({ max, ttl: ttlMs > 0 ? ttlMs : undefined, updateAgeOnGet: true, ttlAutopurge: false });
  }

  lookup(session: string): string | undefined {
    return this.routes.get(session);
  }

  remember(session: string, endpointKey: string): void {
    this.routes.set(session, endpointKey);
  }

  forget(session: string): void {
    this.routes.delete(session);
  }
}

/** The session of a request: the body's `session_id` wins over the `x-session-id` header (spec 4.1). */
export function sessionOf(body: Record<string, unknown> | null, header: string): string | null {
  const fromBody = body?.session_id;
  if (typeof fromBody === 'string' && fromBody) return fromBody;
  return header || null;
}
