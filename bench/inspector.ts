import { WebSocket } from 'undici';

/** A DevTools protocol session with a process started with `--inspect=127.0.0.1:0`. */
export interface Inspector {
  /** Sends one protocol command and resolves with its result. */
  call(method: string, params?: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** Forces a full garbage collection and returns the heap in use after it: live objects, not garbage. */
  liveHeapBytes(): Promise<number>;
  close(): void;
}

/** Opens the session at the `ws://` address the process printed ("Debugger listening on ws://…"). */
export async function connectInspector(url: string): Promise<Inspector> {
  const ws = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error(`inspector at ${url} did not open`));
  });
  let id = 0;
  const waiting = new Map<number, (result: Record<string, unknown>) => void>();
  ws.onmessage = (ev) => {
    const msg = JSON.parse(String(ev.data)) as { id?: number; result?: Record<string, unknown> };
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg.result ?? {});
  };
  const call = (method: string, params: Record<string, unknown> = {}) =>
    new Promise<Record<string, unknown>>((resolve) => {
      waiting.set(++id, resolve);
      ws.send(JSON.stringify({ id, method, params }));
    });
  return {
    call,
    async liveHeapBytes() {
      await call('HeapProfiler.collectGarbage');
      return Number((await call('Runtime.getHeapUsage')).usedSize);
    },
    close: () => ws.close(),
  };
}
