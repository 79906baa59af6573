/**
 * The ledger journal of a SQLite store kept in append-only files instead of the `ledger_pending` table
 * (README "Ledger durability"): a pending row costs one `write(2)` to a file opened with O_APPEND, a few
 * microseconds, where a SQLite transaction costs ~40 µs of CPU and its commit sat between a request and its
 * upstream call. A written line is in the kernel's page cache when `append` returns, so it survives the
 * process being killed (as a WAL commit with `synchronous=NORMAL` does), not necessarily a power cut.
 *
 * Layout: one folder next to the database (`<db>-pending/`), one file (segment) per owner (gateway process)
 * and time slice, named `<owner>-<created ms>-<n>.jsonl`. Lines are JSON: `{"p":[…]}` a pending row,
 * `{"r":[ids]}` pending rows released (their ledger rows are committed, or the request ended without one).
 * A line cut short by a kill or a full disk is skipped when read, and a failed write retires its segment so
 * no later line is glued to it.
 *
 * Deleting files: the owner deletes a segment once every row in it is released and it is no longer the one
 * written to. Another process deletes a segment only when the file was last modified before the sweep's
 * cut-off (the hold TTL, at least 1 s) and all its rows are finalised: an owner never appends a pending row
 * to a segment older than SEGMENT_MAX_AGE_MS, so such a segment can gain no pending row while it is deleted.
 */
import { closeSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import path from 'node:path';
import type { LedgerRow, PendingLedgerRow } from './types';
import { isoMillis } from './iso-time';

/** A segment gets pending rows for at most this long after it is created (4× below the least hold TTL). */
export const SEGMENT_MAX_AGE_MS = 250;
/** …and up to this size. */
const SEGMENT_MAX_BYTES = 4 * 1024 * 1024;
const SEGMENT_NAME = /^(.+)-(\d+)-(\d+)\.jsonl$/;

interface Segment {
  file: string;
  owner: string;
  fd: number;
  /** `performance.now()` when opened: the age that ends its pending rows is real time, whatever the wall clock does. */
  openedAt: number;
  bytes: number;
  /** Rows of this segment written by this store and not yet released. */
  outstanding: number;
}

/** A segment file as read by `segments()`: whose it is, when it was last written, what is unreleased in it. */
interface SegmentOnDisk {
  file: string;
  owner: string;
  mtimeMs: number;
  rows: PendingLedgerRow[];
}

type Entry = [string, string, string, string, string, string, string, string, string, 0 | 1, string, number];

function entryOf(r: PendingLedgerRow): Entry {
  return [r.generationId, r.keyId, r.userId, r.workspaceId, r.accountId, r.endpoint, r.model, r.provider, r.upstreamModel, r.isByok ? 1 : 0, r.owner, isoMillis(r.createdAt)];
}

function rowOf(e: Entry): PendingLedgerRow {
  return {
    generationId: e[0], keyId: e[1], userId: e[2], workspaceId: e[3], accountId: e[4], endpoint: e[5] as LedgerRow['endpoint'],
    model: e[6], provider: e[7], upstreamModel: e[8], isByok: e[9] === 1, owner: e[10], createdAt: new Date(e[11]).toISOString(),
  };
}

/** The rows of a segment's text not released in it, in the order written; unreadable lines are skipped. */
export function unreleasedRows(text: string): PendingLedgerRow[] {
  const rows = new Map<string, Entry>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    let parsed: { p?: unknown; r?: unknown };
    try {
      parsed = JSON.parse(line) as { p?: unknown; r?: unknown };
    } catch {
      continue; // a line cut short
    }
    if (Array.isArray(parsed.p) && parsed.p.length === 12 && typeof parsed.p[0] === 'string') rows.set(parsed.p[0], parsed.p as Entry);
    else if (Array.isArray(parsed.r)) for (const id of parsed.r) rows.delete(String(id));
  }
  return [...rows.values()].map(rowOf);
}

/**
 * @example const files = new PendingFiles('/data/gateway.db-pending');
 *          files.append([row]); … files.release([row.generationId]);
 */
export class PendingFiles {
  /** The segment each owner writes to now. */
  private readonly current = new Map<string, Segment>();
  /** Unreleased rows written by this store, by generation id. */
  private readonly open = new Map<string, Segment>();
  private readonly byFile = new Map<string, Segment>();
  private seq = 0;

  /** The folder is made on the first write (a CLI command opening the store leaves none behind). */
  constructor(readonly dir: string) {}

  /**
   * Writes the rows durably, one write each (a request writes one; this is on its way to the provider);
   * a generation id still pending here is ignored. Throws when the disk refuses.
   */
  append(rows: PendingLedgerRow[]): void {
    const now = performance.now();
    for (const r of rows) {
      if (this.open.has(r.generationId)) continue;
      const seg = this.segmentFor(r.owner, now);
      const line = `{"p":${JSON.stringify(entryOf(r))}}\n`;
      const size = Buffer.byteLength(line);
      let written = 0;
      try {
        written = writeSync(seg.fd, line);
      } finally {
        // A failed or short write may have left part of a line: nothing more goes into that segment.
        if (written !== size) this.retire(seg);
      }
      if (written !== size) throw new Error(`ledger journal: short write to ${seg.file}`);
      seg.bytes += written;
      seg.outstanding++;
      this.open.set(r.generationId, seg);
    }
  }

  /** Marks rows released (after their ledger rows are committed); a segment left with none is deleted. */
  release(ids: string[]): void {
    const bySegment = new Map<Segment, string[]>();
    for (const id of ids) {
      const seg = this.open.get(id);
      if (!seg) continue;
      this.open.delete(id);
      const list = bySegment.get(seg);
      if (list) list.push(id);
      else bySegment.set(seg, [id]);
    }
    for (const [seg, list] of bySegment) {
      seg.outstanding -= list.length;
      if (seg.outstanding === 0 && this.current.get(seg.owner) !== seg) {
        this.drop(seg);
        continue;
      }
      try {
        writeSync(seg.fd, `{"r":${JSON.stringify(list)}}\n`);
      } catch {
        // Not marked: the rows are finalised as `interrupted` later, which leaves an existing ledger row as it is.
      }
    }
  }

  /** Every unreleased row in the folder, of every owner, oldest first. */
  list(): PendingLedgerRow[] {
    return this.segments()
      .flatMap((s) => s.rows)
      .sort((a, b) => compare(a.createdAt, b.createdAt) || compare(a.generationId, b.generationId));
  }

  /**
   * Hands other owners' unreleased rows created before `beforeMs` to `finalise` (which writes their
   * `interrupted` ledger rows), then marks them released, or deletes the segment when it was last modified
   * before `beforeMs` and nothing in it is left. Returns how many rows were finalised.
   */
  finalize(beforeMs: number, exceptOwner: string, finalise: (rows: PendingLedgerRow[]) => void): number {
    let count = 0;
    for (const s of this.segments()) {
      if (s.owner === exceptOwner) continue;
      const stale = s.rows.filter((r) => Date.parse(r.createdAt) < beforeMs);
      if (stale.length > 0) finalise(stale);
      count += stale.length;
      const mine = this.byFile.get(s.file);
      if (mine) {
        this.release(stale.map((r) => r.generationId));
        if (this.byFile.has(s.file) && s.mtimeMs < beforeMs && mine.outstanding === 0) this.drop(mine);
      } else if (s.mtimeMs < beforeMs && stale.length === s.rows.length) {
        unlinkQuietly(s.file);
      } else if (stale.length > 0) {
        appendQuietly(s.file, `{"r":${JSON.stringify(stale.map((r) => r.generationId))}}\n`);
      }
    }
    return count;
  }

  /** Closes the files; segments with unreleased rows stay for a later sweep, empty ones are deleted. */
  close(): void {
    for (const seg of [...this.byFile.values()]) {
      if (seg.outstanding === 0) this.drop(seg);
      else closeQuietly(seg.fd);
    }
    this.byFile.clear();
    this.current.clear();
    this.open.clear();
  }

  private segmentFor(owner: string, now: number): Segment {
    const seg = this.current.get(owner);
    if (seg && now - seg.openedAt < SEGMENT_MAX_AGE_MS && seg.bytes < SEGMENT_MAX_BYTES) return seg;
    if (seg) this.retire(seg);
    // The owner's alone, as the database is: pending rows name keys, accounts and models.
    if (this.byFile.size === 0) mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const file = path.join(this.dir, `${encodeURIComponent(owner)}-${Date.now()}-${++this.seq}.jsonl`);
    const next: Segment = { file, owner, fd: openSync(file, 'a', 0o600), openedAt: now, bytes: 0, outstanding: 0 };
    this.current.set(owner, next);
    this.byFile.set(file, next);
    return next;
  }

  /** No more pending rows go into the segment; it is deleted now if nothing in it is pending. */
  private retire(seg: Segment): void {
    if (this.current.get(seg.owner) === seg) this.current.delete(seg.owner);
    if (seg.outstanding === 0) this.drop(seg);
  }

  private drop(seg: Segment): void {
    if (this.current.get(seg.owner) === seg) this.current.delete(seg.owner);
    this.byFile.delete(seg.file);
    closeQuietly(seg.fd);
    unlinkQuietly(seg.file);
  }

  /** Each segment file in the folder with its unreleased rows, read after its modification time. */
  private segments(): SegmentOnDisk[] {
    const out: SegmentOnDisk[] = [];
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return out; // no journal written here yet
    }
    for (const name of names) {
      const m = SEGMENT_NAME.exec(name);
      if (!m) continue;
      const file = path.join(this.dir, name);
      let fd: number;
      try {
        fd = openSync(file, 'r');
      } catch {
        continue; // deleted meanwhile
      }
      try {
        // The time first: a segment that old can gain no pending row while it is being read.
        const mtimeMs = fstatSync(fd).mtimeMs;
        out.push({ file, owner: decodeURIComponent(m[1]), mtimeMs, rows: unreleasedRows(readFileSync(fd, 'utf8')) });
      } finally {
        closeSync(fd);
      }
    }
    return out;
  }
}

/** Code-unit order, as the table's `ORDER BY`. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}

function unlinkQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // another process deleted it first
  }
}

function appendQuietly(file: string, text: string): void {
  try {
    const fd = openSync(file, 'a', 0o600);
    try {
      writeSync(fd, text);
    } finally {
      closeSync(fd);
    }
  } catch {
    // deleted meanwhile, or not writable: the rows are finalised again next time (no change for rows that exist)
  }
}
