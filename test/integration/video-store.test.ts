import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type StorageConfig, type Store } from '../../src/store';
import type { NewVideoJob, VideoJobStatus } from '../../src/store/types';
import { hashKey, generateKey } from '../../src/store/key-secret';
import { videoJobId } from '../../src/videos/job';

const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const engines: { name: string; config: () => StorageConfig; teardown: (c: StorageConfig) => Promise<void> }[] = [
  // A shared in-memory database is not possible across connections, so two stores use one file.
  {
    name: 'sqlite',
    config: () => ({ driver: 'sqlite', path: join(tmpdir(), `gw-video-store-${randomBytes(6).toString('hex')}.db`) }),
    teardown: async (c) => {
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${(c as { path: string }).path}${suffix}`, { force: true });
    },
  },
  {
    name: 'postgres',
    config: () => ({ driver: 'postgres', url: PG_URL, schema: `gw_vstore_${randomBytes(6).toString('hex')}`, pool_max: 5 }),
    teardown: async (c) => {
      const client = new Client({ connectionString: PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${(c as { schema: string }).schema} CASCADE`);
      await client.end();
    },
  },
];

describe.each(engines)('video_jobs on $name', (engine) => {
  let config: StorageConfig;
  let store: Store;
  let second: Store;
  let ids: { workspaceId: string; accountId: string; keyId: string; otherWorkspaceId: string };

  beforeAll(async () => {
    config = engine.config();
    [store, second] = await Promise.all([openStore(config), openStore(config)]);
    const account = await store.ensureAccount('default');
    const ws = await store.ensureWorkspace('default', account.id);
    const other = await store.ensureWorkspace('other', account.id);
    const key = await store.createKey({ hash: hashKey(generateKey()), label: 'l', name: 'k', workspaceId: ws.id, creatorUserId: 'alice' });
    ids = { workspaceId: ws.id, accountId: account.id, keyId: key.id, otherWorkspaceId: other.id };
  });
  afterAll(async () => {
    await second?.close();
    await store?.close();
    await engine.teardown(config);
  });

  let seq = 0;
  function newJob(over: Partial<NewVideoJob> = {}): NewVideoJob {
    const now = 1_800_000_000_000 + ++seq;
    return {
      id: videoJobId(now),
      workspaceId: ids.workspaceId,
      keyId: ids.keyId,
      accountId: ids.accountId,
      userId: 'alice',
      model: 'sim/video',
      provider: 'sim-video',
      upstreamModel: 'sim-video-1',
      upstreamJobId: `up-${seq}`,
      status: 'pending',
      previousJobId: null,
      request: { prompt: 'a cat', params: { duration_seconds: 5, resolution: '720p' }, pricing: { per_second: 0.1, per_job: 0.05 } },
      createdAt: now,
      isByok: false,
      ...over,
    };
  }

  it('creates and reads a job, only within its workspace', async () => {
    const input = newJob();
    const created = await store.createVideoJob(input);
    expect(created).toEqual({
      ...input,
      generationId: null,
      urls: [],
      costUsd: null,
      isByok: false,
      error: null,
      expiresAt: null,
      completedAt: null,
      billed: false,
      updatedAt: input.createdAt,
    });
    expect(await second.getVideoJob(input.id, ids.workspaceId)).toEqual(created);
    expect(await store.getVideoJob(input.id, ids.otherWorkspaceId)).toBeNull();
    expect(await store.getVideoJob('gen-vid-0-nothing', ids.workspaceId)).toBeNull();
    const next = await store.createVideoJob(newJob({ previousJobId: input.id }));
    expect(next.previousJobId).toBe(input.id);
    // A job submitted with the workspace's own key says so, in each engine's boolean.
    const own = await store.createVideoJob(newJob({ isByok: true }));
    expect(own.isByok).toBe(true);
    expect((await second.getVideoJob(own.id, ids.workspaceId))!.isByok).toBe(true);
  });

  it("a failed job's error with a NUL character from its upstream is stored, the NUL as U+FFFD (PostgreSQL refused the update: the job stayed pending, polled every round)", async () => {
    const job = await store.createVideoJob(newJob({ request: { prompt: 'a\u0000cat 😀', params: {}, pricing: null } as never }));
    expect((await store.getVideoJob(job.id, ids.workspaceId))!.request.prompt).toBe('a\u0000cat 😀');
    const failed = await store.updateVideoJob(job.id, 'pending', { status: 'failed', updatedAt: job.createdAt + 1, error: 'bad\u0000thing é'.repeat(1000), urls: ['https://cdn.test/\u0000.mp4'] });
    expect(failed).toMatchObject({ status: 'failed', error: 'bad\ufffdthing é'.repeat(1000), urls: ['https://cdn.test/\u0000.mp4'] });
    expect((await second.getVideoJob(job.id, ids.workspaceId))!.error).toBe('bad\ufffdthing é'.repeat(1000));
  });

  it('updates compare-and-set on the status: of many concurrent writers from two connections exactly one wins', async () => {
    const job = await store.createVideoJob(newJob());
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? store : second).updateVideoJob(job.id, 'pending', { status: 'in_progress', updatedAt: job.createdAt + 1, generationId: `gen-1-writer${String(i).padStart(14, '0')}` }),
      ),
    );
    const winners = results.filter((r) => r !== null);
    expect(winners).toHaveLength(1);
    expect((await store.getVideoJob(job.id, ids.workspaceId))!.generationId).toBe(winners[0]!.generationId);
    // A stale expectation changes nothing.
    expect(await store.updateVideoJob(job.id, 'pending', { status: 'cancelled', updatedAt: job.createdAt + 2 })).toBeNull();
    // Fields not in the patch are kept; the patch's are set.
    const done = await store.updateVideoJob(job.id, 'in_progress', {
      status: 'completed', updatedAt: job.createdAt + 3, urls: ['https://cdn.test/a.mp4'], costUsd: 0.55, expiresAt: job.createdAt + 3_600_000, completedAt: job.createdAt + 3,
    });
    expect(done).toMatchObject({ status: 'completed', generationId: winners[0]!.generationId, urls: ['https://cdn.test/a.mp4'], costUsd: 0.55, expiresAt: job.createdAt + 3_600_000, completedAt: job.createdAt + 3, updatedAt: job.createdAt + 3 });
    await expect(store.updateVideoJob(job.id, 'completed', { status: 'bogus' as VideoJobStatus, updatedAt: 1 })).rejects.toThrow();
  });

  it('lists the jobs with work left, least recently updated first, and marks billing', async () => {
    const now = 1_900_000_000_000;
    const make = async (status: VideoJobStatus, opts: { billed?: boolean; expiresAt?: number; updatedAt: number }) => {
      const j = await store.createVideoJob(newJob());
      const path: Record<VideoJobStatus, VideoJobStatus[]> = {
        pending: [],
        in_progress: ['in_progress'],
        completed: ['in_progress', 'completed'],
        failed: ['failed'],
        cancelled: ['cancelled'],
        expired: ['in_progress', 'completed', 'expired'],
      };
      let from: VideoJobStatus = 'pending';
      for (const to of path[status]) {
        await store.updateVideoJob(j.id, from, { status: to, updatedAt: opts.updatedAt, generationId: to === 'in_progress' ? `gen-1-${j.id.slice(-20)}` : undefined, expiresAt: to === 'completed' ? opts.expiresAt : undefined });
        from = to;
      }
      if (opts.billed) await store.markVideoJobBilled(j.id);
      if (path[status].length === 0) await store.updateVideoJob(j.id, 'pending', { status: 'pending', updatedAt: opts.updatedAt });
      return j.id;
    };
    // Earlier tests left jobs of their own; only this test's ones are compared, in order.
    const want = [
      await make('in_progress', { updatedAt: now - 50 }),
      await make('pending', { updatedAt: now - 40 }),
      await make('completed', { updatedAt: now - 30, expiresAt: now + 1000 }), // not billed yet
      await make('expired', { updatedAt: now - 10, expiresAt: now - 5 }), // expired before it was billed
    ];
    const due = await make('completed', { billed: true, updatedAt: now - 20, expiresAt: now }); // outputs expired
    const skip = [
      due,
      await make('completed', { billed: true, updatedAt: now - 45, expiresAt: now + 1 }),
      await make('failed', { updatedAt: now - 45 }),
      await make('cancelled', { updatedAt: now - 45 }),
      await make('expired', { billed: true, updatedAt: now - 45, expiresAt: now - 5 }),
    ];
    const listed = (await second.listUnfinishedVideoJobs(1000)).map((j) => j.id);
    expect(listed.filter((id) => want.includes(id) || skip.includes(id))).toEqual(want);
    // Expired outputs are their own list: billed completed jobs whose expiry is at or before now, and only them.
    const expired = (await second.listExpiredVideoJobs(now, 1000)).map((j) => j.id);
    expect(expired.filter((id) => want.includes(id) || skip.includes(id))).toEqual([due]);
    await store.markVideoJobBilled(want[2]);
    expect((await second.getVideoJob(want[2], ids.workspaceId))!.billed).toBe(true);
    expect((await store.listUnfinishedVideoJobs(1000)).map((j) => j.id)).not.toContain(want[2]);
    // Pages: each starts after the last job of the previous one; together they are the whole list.
    const all = (await store.listUnfinishedVideoJobs(1000)).map((j) => j.id);
    const paged: string[] = [];
    let after: { updatedAt: number; id: string } | undefined;
    for (;;) {
      const page = await store.listUnfinishedVideoJobs(2, after);
      paged.push(...page.map((j) => j.id));
      if (page.length < 2) break;
      after = { updatedAt: page[1].updatedAt, id: page[1].id };
    }
    expect(paged).toEqual(all);
    expect(all.length).toBeGreaterThan(3);
  });
});
