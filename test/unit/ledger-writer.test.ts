import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { LedgerWriter } from '../../src/spend/ledger';
import type { LedgerRow, Store } from '../../src/store/types';

function row(i: number): LedgerRow {
  return {
    generationId: `gen-${i}`, keyId: 'k', userId: 'u', workspaceId: 'w', accountId: 'a', endpoint: 'chat_completions', model: 'm', provider: 'p',
    upstreamModel: 'u', promptTokens: 1, completionTokens: 1, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: 0.5,
    isByok: false, status: 'completed', createdAt: new Date().toISOString(),
  };
}

/** A store double that records batches and can be told to fail. */
function fakeStore() {
  const batches: string[][] = [];
  let failNext = 0;
  const store = {
    async insertLedgerBatch(rows: LedgerRow[]) {
      if (failNext > 0) {
        failNext--;
        throw new Error('database is down');
      }
      batches.push(rows.map((r) => r.generationId));
      return rows.length;
    },
  } as unknown as Store;
  return { store, batches, fail: (n: number) => (failNext = n) };
}

const silent = pino({ level: 'silent' });

describe('LedgerWriter', () => {
  it('writes rows handed over in one tick as one batch, off the caller', async () => {
    const f = fakeStore();
    const w = new LedgerWriter(f.store, silent, { flushMs: 10_000, maxBatch: 100 });
    for (let i = 0; i < 5; i++) w.add(row(i));
    expect(f.batches).toEqual([]);
    expect(w.pending).toBe(5);
    await w.flush();
    expect(f.batches).toEqual([['gen-0', 'gen-1', 'gen-2', 'gen-3', 'gen-4']]);
  });

  it('writes at once when a batch is full', async () => {
    const f = fakeStore();
    const w = new LedgerWriter(f.store, silent, { flushMs: 10_000, maxBatch: 3 });
    for (let i = 0; i < 3; i++) w.add(row(i));
    await w.flush(); // waits for the write the full batch started
    expect(f.batches[0]).toEqual(['gen-0', 'gen-1', 'gen-2']);
  });

  it('writes by itself after flushMs', async () => {
    const f = fakeStore();
    const w = new LedgerWriter(f.store, silent, { flushMs: 1, maxBatch: 100 });
    w.add(row(1));
    for (let i = 0; i < 200 && f.batches.length === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(f.batches).toEqual([['gen-1']]);
  });

  it('a row whose cost is no finite number is written at cost 0 and logged, so it cannot hold the rows behind it', async () => {
    const written: LedgerRow[] = [];
    const store = { insertLedgerBatch: async (rows: LedgerRow[]) => { for (const r of rows) if (!Number.isFinite(r.costUsd)) throw new Error('ledger cost must be a finite number'); written.push(...rows); return rows.length; } } as unknown as Store;
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });
    const ledger = new LedgerWriter(store, logger, { flushMs: 5, maxBatch: 100 });
    ledger.add({ ...row(1), costUsd: Number.NaN });
    ledger.add(row(2));
    await ledger.flush();
    expect(written.map((r) => [r.generationId, r.costUsd])).toEqual([['gen-1', 0], ['gen-2', 0.5]]);
    expect(lines.join('')).toContain('ledger row cost is not a finite number; written at cost 0');
  });

  it('keeps the rows of a failed write, in order, and writes them on the next flush', async () => {
    const f = fakeStore();
    const w = new LedgerWriter(f.store, silent, { flushMs: 10_000, maxBatch: 100 });
    w.add(row(1));
    f.fail(1);
    await w.flush();
    expect(w.pending).toBe(1);
    w.add(row(2));
    await w.flush();
    expect(f.batches).toEqual([['gen-1', 'gen-2']]);
    expect(w.pending).toBe(0);
  });

  it('close() writes everything still queued and gives up only after repeated failures', async () => {
    const f = fakeStore();
    const w = new LedgerWriter(f.store, silent, { flushMs: 10_000, maxBatch: 100 });
    w.add(row(1));
    f.fail(2);
    await w.close();
    expect(f.batches).toEqual([['gen-1']]);
    const g = fakeStore();
    const w2 = new LedgerWriter(g.store, silent, { flushMs: 10_000, maxBatch: 100 });
    w2.add(row(9));
    g.fail(99);
    await w2.close(3);
    expect(w2.pending).toBe(1);
  });

  it('close() retries a failed write after a growing wait (0.1 s, then 0.2 s), not five times back to back', async () => {
    const attempts: number[] = [];
    let fail = 2;
    const store = {
      async insertLedgerBatch(rows: LedgerRow[]) {
        attempts.push(performance.now());
        if (fail-- > 0) throw new Error('database is locked');
        return rows.length;
      },
    } as unknown as Store;
    const w = new LedgerWriter(store, silent, { flushMs: 10_000, maxBatch: 100 });
    w.add(row(1));
    await w.close();
    expect(w.pending).toBe(0);
    expect(attempts).toHaveLength(3);
    expect(attempts[1] - attempts[0]).toBeGreaterThanOrEqual(90);
    expect(attempts[2] - attempts[1]).toBeGreaterThanOrEqual(190);
  });

  it('a row handed over while close() waits to retry, or after it returned, is written at once (ledger.journal off had lost it)', async () => {
    const f = fakeStore();
    const w = new LedgerWriter(f.store, silent, { flushMs: 10_000, maxBatch: 100 });
    w.add(row(1));
    f.fail(1);
    const closing = w.close();
    await new Promise((r) => setTimeout(r, 20)); // close() is waiting before its second attempt
    w.add(row(2));
    await closing;
    expect(f.batches.flat()).toEqual(['gen-1', 'gen-2']);
    // A request that ends after the ledger step of the shutdown: no flush_ms timer (unref'd, and the store closes next).
    w.add(row(3));
    await new Promise((r) => setImmediate(r));
    expect(f.batches.flat()).toEqual(['gen-1', 'gen-2', 'gen-3']);
    expect(w.pending).toBe(0);
  });
});
