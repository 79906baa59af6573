import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { SettleRetries } from '../../src/spend/settle-retry';
import type { SettleInput } from '../../src/state/types';

/** A hold that expires long after these tests. */
const FAR = Number.MAX_SAFE_INTEGER;
const input = (holdId: string): SettleInput => ({ holdId, groups: ['key:k'], counters: ['key:k:lifetime'], byok: false, costNano: 10, inFlight: null });

function logs() {
  const lines: string[] = [];
  return { lines, logger: pino({ level: 'info' }, { write: (l: string) => lines.push(l) }) };
}

describe('SettleRetries', () => {
  it('sends refused settlements again, in order, marked retry, until the state takes them', async () => {
    const sent: SettleInput[] = [];
    let down = 2;
    const retries = new SettleRetries(async (i) => {
      if (down-- > 0) throw new Error('Command timed out');
      sent.push(i);
    }, logs().logger, Date.now, { firstDelayMs: 1 });
    retries.add(input('h1'), 'gen-1', FAR);
    retries.add(input('h2'), 'gen-2', FAR);
    expect(retries.pending).toBe(2);
    await retries.retryNow(); // down: the round stops at the first failure
    expect(sent).toEqual([]);
    await retries.retryNow();
    expect(sent).toEqual([]);
    await retries.retryNow();
    expect(sent.map((i) => [i.holdId, i.retry])).toEqual([['h1', true], ['h2', true]]);
    expect(retries.pending).toBe(0);
  });

  it('a settlement refused unsent counts on retry whatever is held, until an attempt may have run: then it needs its hold', async () => {
    const sent: SettleInput[] = [];
    const failures = [new Error("Stream isn't writeable and enableOfflineQueue options is false"), new Error('Command timed out')];
    const retries = new SettleRetries(async (i) => {
      const err = failures.shift();
      if (err) {
        sent.push({ ...i, holdId: 'failed' });
        throw err;
      }
      sent.push(i);
    }, logs().logger, Date.now, { firstDelayMs: 1 });
    retries.add(input('h1'), 'gen-1', FAR, true); // the first attempt was refused unsent
    await retries.retryNow(); // refused unsent again: still counts whatever is held
    await retries.retryNow(); // timed out: it may have run
    await retries.retryNow();
    expect(sent.map((i) => [i.holdId, i.retry])).toEqual([['failed', false], ['failed', false], ['h1', true]]);
  });

  it('retries by itself on a timer', async () => {
    const sent: string[] = [];
    let down = 1;
    const retries = new SettleRetries(async (i) => {
      if (down-- > 0) throw new Error('down');
      sent.push(i.holdId);
    }, logs().logger, Date.now, { firstDelayMs: 5, maxDelayMs: 10 });
    retries.add(input('h1'), null, FAR);
    for (let i = 0; i < 200 && sent.length === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(sent).toEqual(['h1']);
  });

  it('gives up shortly before the hold expires (a retry could no longer tell a settled hold from an expired one)', async () => {
    let now = 0;
    const { lines, logger } = logs();
    const sent: string[] = [];
    let down = true;
    const retries = new SettleRetries(async (i) => {
      if (down) throw new Error('down');
      sent.push(i.holdId);
    }, logger, () => now, { firstDelayMs: 1_000_000 });
    retries.add(input('short'), 'gen-short', 10_000);
    retries.add(input('long'), 'gen-long', 60_000);
    now = 8_500; // within 2 s of the short hold's expiry
    down = false;
    await retries.retryNow();
    expect(sent).toEqual(['long']);
    expect(lines.join('')).toContain('"generation_id":"gen-short"');
    expect(lines.join('')).toContain('its hold expires');
  });

  it('gives up (logged) after maxAgeMs, past maxWaiting, and at close', async () => {
    let now = 0;
    const { lines, logger } = logs();
    const retries = new SettleRetries(async () => {
      throw new Error('down');
    }, logger, () => now, { firstDelayMs: 1_000_000, maxAgeMs: 100, maxWaiting: 2 });
    retries.add(input('old'), 'gen-old', FAR);
    now = 50;
    retries.add(input('a'), 'gen-a', FAR);
    retries.add(input('b'), 'gen-b', FAR); // over maxWaiting: the oldest goes
    expect(retries.pending).toBe(2);
    now = 200;
    await retries.retryNow(); // both are past maxAgeMs
    expect(retries.pending).toBe(0);
    retries.add(input('c'), 'gen-c', FAR);
    await retries.close();
    expect(retries.pending).toBe(0);
    const text = lines.join('');
    for (const [id, why] of [['gen-old', 'too many settlements waiting'], ['gen-a', 'retried for too long'], ['gen-b', 'retried for too long'], ['gen-c', 'shutting down']]) {
      expect(text).toContain(`"generation_id":"${id}"`);
      expect(text).toContain(why);
    }
  });

  it('a settlement given up deletes its spend counters once the state takes it, so they are rebuilt from the ledger; a release (no cost) deletes none', async () => {
    let now = 0;
    const { lines, logger } = logs();
    let down = true;
    const dropped: string[][] = [];
    const retries = new SettleRetries(
      async () => {
        if (down) throw new Error('Command timed out');
      },
      logger,
      () => now,
      { firstDelayMs: 1_000_000 },
      async (counters) => {
        if (down) throw new Error('Command timed out');
        dropped.push(counters);
      },
    );
    retries.add(input('h1'), 'gen-1', 10_000);
    retries.add({ ...input('h2'), counters: ['key:k:lifetime', 'ws:w:2026-11'] }, 'gen-2', 10_000);
    retries.add({ ...input('release'), costNano: 0, counters: [] }, null, 10_000);
    now = 9_000; // all three hold expiries are within 2 s: given up while the state is still down
    await retries.retryNow();
    expect(retries.pending).toBe(0);
    expect(retries.staleCounters).toBe(2);
    await retries.retryNow(); // still down: the deletes wait
    expect(dropped).toEqual([]);
    down = false;
    await retries.retryNow();
    expect(dropped).toEqual([['key:k:lifetime', 'ws:w:2026-11']]);
    expect(retries.staleCounters).toBe(0);
    expect(lines.join('')).toContain('rebuilt from the ledger');
  });

  it('at close, counters of settlements given up then are deleted in the last try', async () => {
    let down = true;
    const dropped: string[][] = [];
    const retries = new SettleRetries(
      async () => {
        if (down) throw new Error('Command timed out');
      },
      logs().logger,
      Date.now,
      { firstDelayMs: 1_000_000 },
      async (counters) => {
        dropped.push(counters);
      },
    );
    retries.add(input('h1'), 'gen-1', FAR);
    await retries.close();
    expect(dropped).toEqual([['key:k:lifetime']]);
    down = false;
  });

  it('deletes counters only once no settlement waits, and a settlement still waiting then no longer adds to a deleted counter', async () => {
    let now = 0;
    let down = true;
    const order: string[] = [];
    const retries = new SettleRetries(
      async (i) => {
        if (down) throw new Error('Command timed out');
        order.push(`settle ${i.holdId} [${i.counters.join(',')}]`);
      },
      logs().logger,
      () => now,
      { firstDelayMs: 1_000_000 },
      async (counters) => {
        order.push(`drop [${counters.join(',')}]`);
      },
    );
    retries.add(input('expiring'), 'gen-1', 10_000);
    retries.add({ ...input('live'), counters: ['key:k:lifetime', 'ws:w:2026-11'] }, 'gen-2', Number.MAX_SAFE_INTEGER);
    now = 9_000; // the first is given up (its counter goes stale); the second still waits
    await retries.retryNow();
    expect(order).toEqual([]); // the state is down: nothing settled, nothing deleted
    down = false;
    await retries.retryNow();
    // The waiting settlement went first (its cost counted), then the stale counter was deleted.
    expect(order).toEqual(['settle live [key:k:lifetime,ws:w:2026-11]', 'drop [key:k:lifetime]']);
  });
});
