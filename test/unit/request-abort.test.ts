import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ShuttingDown, shutdownCut } from '../../src/drain';
import { RequestAbort } from '../../src/pipeline/request-abort';

describe('RequestAbort: a request cancellation that makes an AbortSignal only when asked', () => {
  it('runs each listener once at the abort, not one removed before or added after it', () => {
    const abort = new RequestAbort();
    const calls: string[] = [];
    const a = () => calls.push('a');
    const b = () => calls.push('b');
    abort.addEventListener('abort', a);
    abort.addEventListener('abort', a); // the same listener twice is one listener, as on an AbortSignal
    abort.addEventListener('abort', b);
    abort.removeEventListener('abort', b);
    expect(abort.aborted).toBe(false);
    abort.abort();
    abort.abort(); // a second abort changes nothing
    abort.addEventListener('abort', () => calls.push('late'));
    expect(calls).toEqual(['a']);
    expect(abort.aborted).toBe(true);
    expect((abort.reason as DOMException).name).toBe('AbortError');
  });

  it('a signal asked for before the abort follows it, with the same reason', async () => {
    const abort = new RequestAbort();
    const signal = abort.signal;
    expect(abort.signal).toBe(signal); // made once
    expect(signal.aborted).toBe(false);
    const reason = new ShuttingDown();
    abort.abort(reason);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(reason);
    expect(shutdownCut(abort)).toBe(reason);
    expect(shutdownCut(signal)).toBe(reason);
  });

  it('a signal first asked for after the abort is already aborted, and cancels what it is given to', async () => {
    const abort = new RequestAbort();
    const reason = new Error('client gone');
    abort.abort(reason);
    expect(abort.signal.aborted).toBe(true);
    expect(abort.signal.reason).toBe(reason);
    await expect(sleep(10_000, undefined, { signal: abort.signal })).rejects.toMatchObject({ name: 'AbortError' });
    expect(shutdownCut(abort)).toBeNull();
  });
});
