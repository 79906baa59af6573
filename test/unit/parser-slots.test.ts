import { afterEach, describe, expect, it, vi } from 'vitest';
import { ParserSlots, type ReleaseSlot } from '../../src/files/parser-slots';
import { PdfBusy, pdfText, PdfUnreadable } from '../../src/files/pdf-text';
import { bombPdf } from '../fixtures/minimal-pdf';

/** Settles pending promise callbacks. */
const tick = () => new Promise<void>((r) => setImmediate(r));

describe('ParserSlots', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('grants up to the limit; the others wait and are granted in arrival order; a second release does nothing', async () => {
    const slots = new ParserSlots(2);
    const order: string[] = [];
    const take = (name: string) => slots.acquire(undefined, 60_000).then((release) => (order.push(name), release!));
    const [a, b] = await Promise.all([take('a'), take('b')]);
    const c = take('c');
    const d = take('d');
    await tick();
    expect({ running: slots.running, queued: slots.queued, order }).toEqual({ running: 2, queued: 2, order: ['a', 'b'] });
    a();
    a();
    await tick();
    expect({ running: slots.running, queued: slots.queued, order }).toEqual({ running: 2, queued: 1, order: ['a', 'b', 'c'] });
    b();
    (await c)();
    (await d)();
    expect({ running: slots.running, queued: slots.queued, order }).toEqual({ running: 0, queued: 0, order: ['a', 'b', 'c', 'd'] });
  });

  it('a waiter whose signal aborts rejects with its reason and leaves the queue; an aborted signal never waits', async () => {
    const slots = new ParserSlots(1);
    const held = (await slots.acquire(undefined, 60_000))!;
    const gone = new AbortController();
    const cancelled = slots.acquire(gone.signal, 60_000);
    const next = slots.acquire(undefined, 60_000);
    expect(slots.queued).toBe(2);
    const reason = new DOMException('The client closed the request', 'AbortError');
    gone.abort(reason);
    await expect(cancelled).rejects.toBe(reason);
    expect(slots.queued).toBe(1);
    held();
    const release = await next;
    expect(slots.running).toBe(1);
    await expect(slots.acquire(gone.signal, 60_000)).rejects.toBe(reason);
    release!();
    expect(slots.running).toBe(0);
  });

  it('a waiter not granted within waitMs gets null and leaves the queue', async () => {
    vi.useFakeTimers();
    const slots = new ParserSlots(1);
    const held = (await slots.acquire(undefined, 1000))!;
    const waiting = slots.acquire(undefined, 1000);
    await vi.advanceTimersByTimeAsync(999);
    expect(slots.queued).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(await waiting).toBeNull();
    expect(slots.queued).toBe(0);
    held();
    expect(slots.running).toBe(0);
  });

  it('raising the limit starts waiters at once; cutting it lets the running finish and holds the waiters', async () => {
    const slots = new ParserSlots(1);
    const first = (await slots.acquire(undefined, 60_000))!;
    const waiters = [slots.acquire(undefined, 60_000), slots.acquire(undefined, 60_000)];
    slots.limit = 3;
    const [second, third] = (await Promise.all(waiters)) as ReleaseSlot[];
    expect(slots.running).toBe(3);
    slots.limit = 1;
    const fourth = slots.acquire(undefined, 60_000);
    first();
    second();
    await tick();
    expect({ running: slots.running, queued: slots.queued }).toEqual({ running: 1, queued: 1 });
    third();
    (await fourth)!();
    expect(slots.running).toBe(0);
  });
});

describe('pdfText at its deadline', () => {
  it('a PDF that waited for a parser more than half of timeoutMs and then ran out of time is busy, not unreadable', async () => {
    const slots = new ParserSlots(1);
    const holder = (await slots.acquire(undefined, 1000))!;
    // The one parser is busy for 700 of the PDF's 1000 ms (a timer only fires late, so the wait is at least that).
    setTimeout(holder, 700);
    // A page that inflates to 10 MB takes pdf.js seconds: the 300 ms left cannot parse it.
    const err = await pdfText(bombPdf(10_000_000), { maxPages: 5, maxChars: 1000, timeoutMs: 1000, maxMemoryMb: 256, slots }).catch((e) => e);
    expect(err).toBeInstanceOf(PdfBusy);
    expect(err.message).toMatch(/^waiting for a PDF parser left \d+ of 1000 ms to parse$/);
  });

  it('a PDF that had the parser at once and ran out of time is unreadable', async () => {
    const slots = new ParserSlots(1);
    const err = await pdfText(bombPdf(10_000_000), { maxPages: 5, maxChars: 1000, timeoutMs: 300, maxMemoryMb: 256, slots }).catch((e) => e);
    expect(err).toBeInstanceOf(PdfUnreadable);
    expect(err.message).toBe('parsing took longer than 300 ms');
  });
});
