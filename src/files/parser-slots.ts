/** Gives back a slot; calling it again does nothing. */
export type ReleaseSlot = () => void;

interface Waiter {
  grant(release: ReleaseSlot): void;
}

/**
 * At most `limit` PDF parses at once (each is a worker thread that may use up to `parse_memory_mb`); the
 * others wait in arrival order. One instance per file-parser definition, shared by every pipeline that
 * uses the stage, so the limit holds across the process. `limit` may change (config reload): a raise lets
 * waiting parses start, a cut lets the running ones finish.
 *
 * @example const release = await slots.acquire(signal, 15_000); if (!release) throw busy; try { … } finally { release(); }
 */
export class ParserSlots {
  #limit: number;
  #running = 0;
  readonly #waiting: Waiter[] = [];

  constructor(limit: number) {
    this.#limit = limit;
  }

  get limit(): number {
    return this.#limit;
  }

  set limit(n: number) {
    this.#limit = n;
    this.#grantWaiting();
  }

  /** Parses holding a slot now. */
  get running(): number {
    return this.#running;
  }

  /** Parses waiting for a slot now. */
  get queued(): number {
    return this.#waiting.length;
  }

  /**
   * Waits for a free slot: resolves with its release, or with null when none came free within `waitMs`;
   * rejects with the signal's reason when it aborts first (the waiter leaves the queue either way).
   */
  acquire(signal: AbortSignal | undefined, waitMs: number): Promise<ReleaseSlot | null> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#running < this.#limit && this.#waiting.length === 0) return Promise.resolve(this.#take());
    return new Promise((resolve, reject) => {
      const leave = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const i = this.#waiting.indexOf(waiter);
        if (i >= 0) this.#waiting.splice(i, 1);
      };
      const onAbort = () => {
        leave();
        reject(signal!.reason);
      };
      const waiter: Waiter = {
        grant: (release) => {
          leave();
          resolve(release);
        },
      };
      const timer = setTimeout(() => {
        leave();
        resolve(null);
      }, waitMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(waiter);
    });
  }

  #take(): ReleaseSlot {
    this.#running++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#running--;
      this.#grantWaiting();
    };
  }

  #grantWaiting(): void {
    while (this.#running < this.#limit && this.#waiting.length > 0) this.#waiting[0].grant(this.#take());
  }
}
