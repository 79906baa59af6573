import { appendFileSync, closeSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GatewayError } from '../../src/errors/gateway-error';
import { LedgerJournal } from '../../src/spend/journal';
import { PendingFiles, SEGMENT_MAX_AGE_MS, unreleasedRows } from '../../src/store/pending-files';
import type { PendingLedgerRow, Store } from '../../src/store/types';

/** The SQLite store's ledger journal in append-only files (README "Ledger durability"). */

let root = '';
let dir = '';
beforeEach(() => {
  root = mkdtempSync(path.join(tmpdir(), 'gw-pending-'));
  dir = path.join(root, 'gateway.db-pending');
});
afterEach(() => {
  vi.useRealTimers();
  rmSync(root, { recursive: true, force: true });
});

function row(id: string, owner = 'proc-a', createdMs = Date.now()): PendingLedgerRow {
  return {
    generationId: id, keyId: 'key-1', userId: 'u', workspaceId: 'ws', accountId: 'acct', endpoint: 'messages', model: 'fake/gpt',
    provider: 'fake-openai', upstreamModel: 'gpt-upstream', isByok: true, owner, createdAt: new Date(createdMs).toISOString(),
  };
}

const files = () => (readdirSync(dir, { withFileTypes: false }) as string[]).sort();
const ids = (rows: PendingLedgerRow[]) => rows.map((r) => r.generationId);

describe('PendingFiles', () => {
  it('makes no folder until the first row, then lists every field of unreleased rows; released ones go', () => {
    const journal = new PendingFiles(dir);
    expect(journal.list()).toEqual([]);
    expect(() => files()).toThrow(); // nothing created by opening the store
    const a = { ...row('gen-a', 'proc-a', 1_700_000_000_000), model: 'modèle/日本-“x”' }; // multi-byte text: the write is checked in bytes
    journal.append([a, row('gen-b'), row('gen-c')]);
    journal.append([row('gen-a')]); // a known id is ignored
    expect(files()).toHaveLength(1);
    expect(journal.list()[0]).toEqual(a);
    journal.release(['gen-b', 'gen-unknown']);
    expect(ids(journal.list())).toEqual(['gen-a', 'gen-c']);
    // The release is a line of its own: another reader of the file sees the same.
    expect(ids(new PendingFiles(dir).list())).toEqual(['gen-a', 'gen-c']);
  });

  it('starts a new segment after SEGMENT_MAX_AGE_MS and deletes an old one once all its rows are released', () => {
    vi.useFakeTimers({ toFake: ['Date', 'performance'] });
    const journal = new PendingFiles(dir);
    journal.append([row('gen-1'), row('gen-2')]);
    vi.advanceTimersByTime(SEGMENT_MAX_AGE_MS - 1);
    journal.append([row('gen-3')]);
    expect(files()).toHaveLength(1);
    vi.advanceTimersByTime(1);
    journal.append([row('gen-4')]);
    expect(files()).toHaveLength(2);
    journal.release(['gen-1', 'gen-3']);
    expect(files()).toHaveLength(2); // gen-2 still pending in the first
    journal.release(['gen-2']);
    expect(files()).toHaveLength(1);
    journal.release(['gen-4']); // the segment written to now stays until the next one starts
    expect(files()).toHaveLength(1);
    vi.advanceTimersByTime(SEGMENT_MAX_AGE_MS);
    journal.append([row('gen-5')]);
    expect(files()).toHaveLength(1);
    expect(ids(journal.list())).toEqual(['gen-5']);
  });

  it('skips a line cut short by a kill, and keeps reading the lines after it', () => {
    const text = '{"p":["gen-1","k","u","w","a","messages","m","p","u",0,"o",1]}\n{"p":["gen-2","k","u","w",\n{"r":["gen-9"]}\n{"p":["gen-3","k","u","w","a","messages","m","p","u",1,"o",2]}\n{"r":["gen-1"]}\n';
    expect(ids(unreleasedRows(text))).toEqual(['gen-3']);
    expect(unreleasedRows(text)[0]).toMatchObject({ isByok: true, owner: 'o', createdAt: new Date(2).toISOString() });
  });

  it('finalises another owner\'s rows older than the cut-off; deletes its segment only once untouched since before the cut-off', () => {
    const dead = new PendingFiles(dir);
    const now = Date.now();
    dead.append([row('gen-old', 'proc-dead', now - 5000), row('gen-young', 'proc-dead', now), row('gen-done', 'proc-dead', now - 5000)]);
    dead.release(['gen-done']);
    const mine = new PendingFiles(dir);
    mine.append([row('gen-mine', 'proc-live', now - 5000)]);
    const [deadFile] = files().filter((f) => f.startsWith('proc-dead'));

    const finalised: string[][] = [];
    const sweeper = new PendingFiles(dir);
    expect(sweeper.finalize(now - 1000, 'proc-live', (rows) => finalised.push(ids(rows)))).toBe(1);
    expect(finalised).toEqual([['gen-old']]);
    expect(ids(sweeper.list()).sort()).toEqual(['gen-mine', 'gen-young']);
    expect(files()).toContain(deadFile); // modified just now: its owner may still be writing to it

    utimesSync(path.join(dir, deadFile), (now - 2000) / 1000, (now - 2000) / 1000);
    expect(sweeper.finalize(now - 1000, 'proc-live', (rows) => finalised.push(ids(rows)))).toBe(0); // gen-young is too young
    expect(files()).toContain(deadFile);
    expect(sweeper.finalize(now + 1000, 'proc-live', (rows) => finalised.push(ids(rows)))).toBe(1);
    expect(finalised).toEqual([['gen-old'], ['gen-young']]);
    expect(files()).not.toContain(deadFile);
    expect(ids(sweeper.list())).toEqual(['gen-mine']); // never its own owner's
  });

  it('keeps a segment modified after the cut-off even when every row in it is finalised, and never finalises a row twice', () => {
    const now = Date.now();
    new PendingFiles(dir).append([row('gen-old', 'proc-other', now - 5000)]);
    const [file] = files();
    const finalised: string[][] = [];
    const sweeper = new PendingFiles(dir);
    expect(sweeper.finalize(now - 1000, 'me', (rows) => finalised.push(ids(rows)))).toBe(1);
    expect(files()).toEqual([file]);
    expect(sweeper.finalize(now - 1000, 'me', (rows) => finalised.push(ids(rows)))).toBe(0);
    expect(finalised).toEqual([['gen-old']]);
    utimesSync(path.join(dir, file), (now - 2000) / 1000, (now - 2000) / 1000);
    expect(sweeper.finalize(now - 1000, 'me', (rows) => finalised.push(ids(rows)))).toBe(0);
    expect(files()).toEqual([]);
  });

  it('a sweep that throws in finalise keeps the rows pending', () => {
    const dead = new PendingFiles(dir);
    dead.append([row('gen-x', 'proc-dead', Date.now() - 5000)]);
    const sweeper = new PendingFiles(dir);
    expect(() =>
      sweeper.finalize(Date.now(), 'me', () => {
        throw new Error('database is locked');
      }),
    ).toThrow('locked');
    expect(ids(sweeper.list())).toEqual(['gen-x']);
  });

  it('close deletes empty segments and leaves those with unreleased rows for a sweep', () => {
    vi.useFakeTimers({ toFake: ['Date', 'performance'] });
    const journal = new PendingFiles(dir);
    journal.append([row('gen-1')]);
    vi.advanceTimersByTime(SEGMENT_MAX_AGE_MS);
    journal.append([row('gen-2')]);
    journal.release(['gen-2']);
    journal.close();
    expect(files()).toHaveLength(1);
    expect(ids(new PendingFiles(dir).list())).toEqual(['gen-1']);
  });

  it('a file that is not a segment is left alone', () => {
    new PendingFiles(dir).append([row('gen-1')]);
    writeFileSync(path.join(dir, 'notes.txt'), 'operator notes');
    appendFileSync(path.join(dir, files().find((f) => f.endsWith('.jsonl'))!), 'garbage\n');
    expect(ids(new PendingFiles(dir).list())).toEqual(['gen-1']);
    new PendingFiles(dir).finalize(Date.now() + 10_000, 'me', () => {});
    expect(readFileSync(path.join(dir, 'notes.txt'), 'utf8')).toBe('operator notes');
  });
});

describe('LedgerJournal on a store that writes pending rows at once', () => {
  it('a write that fails retires its segment: the error reaches the caller, the rows before stay, the next row goes to a new segment', () => {
    const f = new PendingFiles(dir);
    f.append([row('gen-1')]);
    const [segment] = files();
    // The disk refusing, as the process sees it: the segment's descriptor stops working (Linux: found by its path).
    const fd = readdirSync('/proc/self/fd').map(Number).find((n) => {
      try {
        return readlinkSync(`/proc/self/fd/${n}`) === path.join(dir, segment);
      } catch {
        return false;
      }
    });
    expect(fd).toBeDefined();
    closeSync(fd!);
    expect(() => f.append([row('gen-2')])).toThrow();
    f.append([row('gen-3')]);
    expect(files()).toHaveLength(2);
    expect(ids(f.list()).sort()).toEqual(['gen-1', 'gen-3']);
  });

  it('writes each row before record() returns and refuses with a typed 503 when the disk does', async () => {
    writeFileSync(path.join(root, 'not-a-folder'), '');
    const ok = new PendingFiles(dir);
    const blocked = new PendingFiles(path.join(root, 'not-a-folder', 'gateway.db-pending'));
    const storeOf = (f: PendingFiles) => ({ insertPendingLedgerNow: (rows: PendingLedgerRow[]) => f.append(rows) }) as unknown as Store;
    const logger = pino({ level: 'silent' });

    const journal = new LedgerJournal({ store: storeOf(ok), logger, holdTtlMs: () => 1000 });
    const recorded = journal.record(row('gen-1', journal.owner));
    expect(ids(ok.list())).toEqual(['gen-1']); // already on disk, before any await
    await recorded;

    const refused = await new LedgerJournal({ store: storeOf(blocked), logger, holdTtlMs: () => 1000 }).record(row('gen-2')).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(GatewayError);
    expect(refused).toMatchObject({ errorType: 'server', status: 503 });
  });
});
