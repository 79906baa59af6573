import type { Logger } from 'pino';
import type { SharedState } from '../state/types';

/**
 * Sticky routing: a `session_id` remembers the endpoint that served it, so the next request of the session
 * goes there first (provider-side prompt caches stay warm). Kept in the shared state (in-process, or Redis
 * so every gateway process sends a session to the same endpoint); an entry expires after `ttlMs` without
 * use. Best effort: a state failure only loses stickiness, never the request.
 *
 * @example const sticky = new StickyRoutes(state, 600_000, logger); sticky.remember('key1:sess', 'openai/gpt-4o'); await sticky.lookup('key1:sess');
 */
export class StickyRoutes {
  private warned = false;

  constructor(
    private readonly state: SharedState,
    /** How long an unused session keeps its endpoint; a config reload sets it. */
    public ttlMs: number,
    private readonly logger?: Logger,
  ) {}

  async lookup(session: string): Promise<string | undefined> {
    try {
      return await this.state.stickyGet(session, this.ttlMs);
    } catch (err) {
      this.failed(err);
      return undefined;
    }
  }

  remember(session: string, endpointKey: string): void {
    this.state.stickySet(session, endpointKey, this.ttlMs).catch((err) => this.failed(err));
  }

  forget(session: string): void {
    this.state.stickyDelete(session).catch((err) => this.failed(err));
  }

  private failed(err: unknown): void {
    if (this.warned) return;
    this.warned = true;
    this.logger?.warn({ err }, 'sticky sessions unavailable (shared state unreachable); routing without them');
  }
}

/** The session of a request: the body's `session_id` wins over the `x-session-id` header (spec 4.1). */
export function sessionOf(body: Record<string, unknown> | null, header: string): string | null {
  const fromBody = body?.session_id;
  if (typeof fromBody === 'string' && fromBody) return fromBody;
  return header || null;
}
