/**
 * What code needs to follow a request's cancellation without a real AbortSignal: whether it was aborted, why,
 * and an 'abort' listener. An AbortSignal is one; so is RequestAbort.
 */
export interface AbortWatch {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/**
 * The reason a request's abort carries when its client went away (the connection closed before the answer
 * was written), so code that sees the abort can tell it from a shutdown's cut or a stage's own timeout.
 */
export const CLIENT_CLOSED = new DOMException('The client closed the request', 'AbortError');

/** True when the abort watched is the client going away. */
export function clientClosed(watch: AbortWatch): boolean {
  return watch.reason === CLIENT_CLOSED;
}

/**
 * A request's cancellation (the client went away, or a shutdown cut it) that makes an AbortSignal only when
 * something asks for `signal`. Node allocates every AbortSignal so that it is promoted out of V8's young
 * generation (~400 bytes of old space each, measured with `npm run bench:alloc -- --survivors`), and most
 * requests never need one: the gateway's own hot path (routing, the upstream call, the stream writer)
 * watches this object instead. Stages and plugins keep `state.signal`, a real AbortSignal made on first use
 * (already aborted, with the same reason, if the request was aborted before).
 *
 * Listeners follow AbortSignal's rules: each runs once, at the abort; one added after the abort never runs.
 *
 * @example const abort = new RequestAbort(); res.once('close', () => abort.abort()); … if (abort.aborted) stop();
 */
export class RequestAbort implements AbortWatch {
  aborted = false;
  reason: unknown = undefined;
  private listeners: (() => void)[] | null = null;
  private controller: AbortController | null = null;

  /** A real AbortSignal following this abort, made on first use. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** Aborts once: `reason` defaults to an AbortError, as AbortController's does. */
  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason ?? new DOMException('This operation was aborted', 'AbortError');
    this.controller?.abort(this.reason);
    const listeners = this.listeners;
    this.listeners = null;
    for (const listener of listeners ?? []) {
      try {
        listener();
      } catch (err) {
        // As EventTarget does: the other listeners still run, the error surfaces as an uncaught exception.
        process.nextTick(() => {
          throw err;
        });
      }
    }
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.aborted) return;
    const listeners = (this.listeners ??= []);
    if (!listeners.includes(listener)) listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const i = this.listeners?.indexOf(listener) ?? -1;
    if (i >= 0) this.listeners!.splice(i, 1);
  }
}
