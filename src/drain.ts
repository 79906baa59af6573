import { GatewayError } from './errors/gateway-error';
import type { AbortWatch } from './pipeline/request-abort';

/** The refusal of a request that arrives while the gateway drains, and the reason a cut request was aborted. */
export class ShuttingDown extends GatewayError {
  constructor(message = 'The gateway is shutting down; retry the request') {
    super('provider_overloaded', message, { status: 503, headers: { Connection: 'close', 'Retry-After': '1' }, metadata: { reason: 'shutting_down' } });
  }
}

/** The shutdown error a request was aborted with, or null (it was not cut by a shutdown). */
export function shutdownCut(signal: AbortWatch): ShuttingDown | null {
  return signal.reason instanceof ShuttingDown ? signal.reason : null;
}

/** How a request its abort ended is billed: `failed` when a shutdown cut it (as a cut stream is), else `cancelled` (the client left). */
export function cutOutcome(signal: AbortWatch): 'failed' | 'cancelled' {
  return shutdownCut(signal) ? 'failed' : 'cancelled';
}

/** What the drain can cut: a request's AbortController or RequestAbort. */
export interface Abortable {
  abort(reason?: unknown): void;
}

/**
 * Graceful shutdown of the request side (README "Shutdown and probes"). `begin()` turns readiness to 503 and
 * makes every new request a typed 503 with `Connection: close`; `settle()` waits for the requests in flight,
 * and at the drain timeout aborts the rest with a ShuttingDown reason: a stream then ends with its dialect's
 * in-band error, a JSON request with the 503 (both are billed for what they used, like any other ending).
 *
 * @example const refusal = drain.enter(abort); if (refusal) throw refusal; try { … } finally { drain.leave(abort); }
 */
export class Drain {
  private readonly open = new Set<Abortable>();
  private draining = false;
  private wakeIdle: (() => void) | undefined;
  private wakeCut: (() => void) | undefined;

  /** True once a shutdown began (readiness is 503 from then on). */
  get started(): boolean {
    return this.draining;
  }

  /** Requests admitted and not yet ended. */
  get inFlight(): number {
    return this.open.size;
  }

  /** At a request's arrival: the refusal while draining, else null and the request counts as in flight. */
  enter(abort: Abortable): ShuttingDown | null {
    if (this.draining) return new ShuttingDown();
    this.open.add(abort);
    return null;
  }

  leave(abort: Abortable): void {
    if (this.open.delete(abort) && this.open.size === 0) this.wakeIdle?.();
  }

  begin(): void {
    this.draining = true;
  }

  /** Ends the wait of `settle()` now: what is still in flight is cut (a second SIGTERM). */
  cutNow(): void {
    this.begin();
    this.wakeCut?.();
  }

  /**
   * Waits until nothing is in flight, at most `timeoutMs`; then cuts what is left and waits up to `graceMs`
   * for it to end (a client that stopped reading may never take its last bytes). Returns how many were cut.
   */
  async settle(timeoutMs: number, graceMs = 2000): Promise<number> {
    this.begin();
    await this.until(timeoutMs, true);
    const left = [...this.open];
    for (const abort of left) abort.abort(new ShuttingDown('The gateway shut down before the answer was complete'));
    if (left.length > 0) await this.until(graceMs, false);
    return left.length;
  }

  private until(ms: number, cuttable: boolean): Promise<void> {
    if (this.open.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakeIdle = undefined;
        if (cuttable) this.wakeCut = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wakeIdle = done;
      if (cuttable) this.wakeCut = done;
    });
  }
}
