import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Client } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store';
import { generateKey, hashKey } from '../../src/store/key-secret';
import { VIDEO_JOB_QUERIES } from '../../src/store/video-jobs';
import { dropSchemas, PG_URL, uniqueSchema } from '../fixtures/backing';
import { startFakeVideoUpstream, type FakeVideoUpstream } from '../fixtures/fake-video-upstream';
import { startTestGateway, type TestGateway } from '../fixtures/gateway';
import { fund, videoConfigYaml } from '../fixtures/videos';

/** As many pending jobs as the audit's poller had to follow (it took 82 % of a core scanning them). */
const PENDING = 60_000;
const T0 = 1_800_000_000_000;
/** Job ids are `gen-vid-<1000000 + n>`, updated at T0 + n: the same order by (updated_at, id) and by n. */
const jobId = (n: number) => `gen-vid-${1_000_000 + n}`;
/** A cursor in the middle of the pending jobs. */
const MIDDLE = { updatedAt: T0 + PENDING, id: jobId(PENDING) };

/**
 * One statement for both engines: PENDING pending jobs (even n) among as many failed ones, then 20 billed
 * completed jobs whose outputs expire at T0 + 1 … T0 + 20.
 */
function seedSql(ids: { ws: string; key: string; account: string }, b: { yes: string; no: string }): string {
  const last = 2 * PENDING;
  return `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${last + 20})
    INSERT INTO video_jobs (id, workspace_id, key_id, account_id, user_id, model, provider, upstream_model, upstream_job_id,
      status, request, created_at, updated_at, billed, expires_at)
    SELECT 'gen-vid-' || (1000000 + i), '${ids.ws}', '${ids.key}', '${ids.account}', 'u', 'm', 'p', 'u', 'up-' || i,
      CASE WHEN i > ${last} THEN 'completed' WHEN i % 2 = 0 THEN 'pending' ELSE 'failed' END, '{"prompt":"x","params":{}}', ${T0} + i, ${T0} + i,
      CASE WHEN i > ${last} THEN ${b.yes} ELSE ${b.no} END, CASE WHEN i > ${last} THEN ${T0} + i - ${last} END
    FROM n`;
}

async function seededStore(config: Parameters<typeof openStore>[0]): Promise<{ store: Store; ids: { ws: string; key: string; account: string } }> {
  const store = await openStore(config);
  const account = await store.ensureAccount('default');
  const ws = await store.ensureWorkspace('default', account.id);
  const key = await store.createKey({ hash: hashKey(generateKey()), label: 'l', name: 'k', workspaceId: ws.id, creatorUserId: 'u' });
  return { store, ids: { ws: ws.id, key: key.id, account: account.id } };
}

describe(`the poller's reads with ${PENDING} pending jobs are index reads of their own rows`, () => {
  it('SQLite: a page and the expired outputs are SEARCHes of their indexes, never a SCAN of the table or a sort', async () => {
    const path = join(tmpdir(), `gw-video-poller-${randomBytes(6).toString('hex')}.db`);
    const { store, ids } = await seededStore({ driver: 'sqlite', path });
    const db = new Database(path);
    try {
      db.exec(seedSql(ids, { yes: '1', no: '0' }));
      db.exec('ANALYZE');
      const plan = (sql: string, params: Record<number, unknown>) =>
        (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(params) as { detail: string }[]).map((r) => r.detail);
      expect(plan(VIDEO_JOB_QUERIES.unfinished('0'), { 1: 200, 2: MIDDLE.updatedAt, 3: MIDDLE.id })).toEqual([
        'SEARCH video_jobs USING INDEX video_jobs_work_page ((updated_at,id)>(?,?))',
      ]);
      expect(plan(VIDEO_JOB_QUERIES.expired('1'), { 1: T0 + 10, 2: 200 })).toEqual(['SEARCH video_jobs USING INDEX video_jobs_expiry (expires_at<?)']);
      // What the store answers with them: the page after the cursor, and only the outputs due.
      const page = await store.listUnfinishedVideoJobs(200, MIDDLE);
      expect(page.map((j) => j.id)).toEqual(Array.from({ length: 200 }, (_, i) => jobId(PENDING + 2 * (i + 1))));
      expect((await store.listExpiredVideoJobs(T0 + 10, 200)).map((j) => j.expiresAt)).toEqual(Array.from({ length: 10 }, (_, i) => T0 + i + 1));
    } finally {
      db.close();
      await store.close();
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
    }
  });

  it('PostgreSQL: each is an Index Scan of its index that reads no more rows than it returns, with no Sort', async () => {
    const schema = uniqueSchema('vpoller');
    const { store, ids } = await seededStore({ driver: 'postgres', url: PG_URL, schema, pool_max: 2 });
    const pg = new Client({ connectionString: PG_URL, options: `-c search_path=${schema}` });
    await pg.connect();
    try {
      await pg.query(seedSql(ids, { yes: 'TRUE', no: 'FALSE' }));
      await pg.query('ANALYZE video_jobs');
      const plan = async (sql: string, params: unknown[]) => {
        const rows = (await pg.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, params)).rows;
        return rows[0]['QUERY PLAN'][0].Plan as PlanNode;
      };
      for (const [sql, params, index, returned] of [
        [VIDEO_JOB_QUERIES.unfinished('FALSE'), [200, MIDDLE.updatedAt, MIDDLE.id], 'video_jobs_work_page', 200],
        [VIDEO_JOB_QUERIES.expired('TRUE'), [T0 + 10, 200], 'video_jobs_expiry', 10],
      ] as const) {
        const top = await plan(sql, [...params]);
        const nodes = flatten(top);
        expect(nodes.map((n) => n['Node Type'])).toEqual(['Limit', 'Index Scan']);
        expect(nodes[1]['Index Name']).toBe(index);
        expect(nodes[1]['Actual Rows']).toBe(returned);
        expect(nodes[1]['Rows Removed by Filter'] ?? 0).toBe(0);
      }
      expect((await store.listUnfinishedVideoJobs(200, MIDDLE))[0].id).toBe(jobId(PENDING + 2));
    } finally {
      await pg.end();
      await store.close();
      await dropSchemas(schema);
    }
  });
});

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}
const flatten = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(flatten)];

describe('a poll round advances at most videos.max_jobs_per_round jobs; the next one continues after them', () => {
  let upstream: FakeVideoUpstream;
  let g: TestGateway | undefined;
  beforeAll(async () => {
    upstream = await startFakeVideoUpstream();
  });
  afterAll(async () => {
    await upstream.close();
  });
  afterEach(async () => {
    await g?.close();
    g = undefined;
  });

  it('7 pending jobs, 3 a round: rounds poll 3, 3, 1 distinct jobs upstream, then start over', async () => {
    g = await startTestGateway({ yaml: videoConfigYaml({ upstreamUrl: upstream.url, maxJobsPerRound: 3 }) });
    await fund(g);
    await g.gateway.videos.stop(); // driven by hand
    const now = Date.now();
    const base = { workspaceId: g.keyRecord.workspaceId, keyId: g.keyRecord.id, accountId: g.keyRecord.accountId, userId: 'u', model: 'http/video', provider: 'job-upstream', upstreamModel: 'upstream-video-1' };
    const upstreamIds: string[] = [];
    for (let i = 0; i < 7; i++) {
      upstreamIds.push(`up-round-${i}`);
      upstream.jobs.set(`up-round-${i}`, { status: 'queued' });
      await g.store.createVideoJob({ ...base, id: `gen-vid-${now}-${String(i).padStart(20, '0')}`, upstreamJobId: `up-round-${i}`, status: 'pending', previousJobId: null, request: { prompt: 'x', params: {} }, createdAt: now + i, isByok: false });
    }
    const round = async () => {
      upstream.received.length = 0;
      await g!.gateway.videos.poll();
      return upstream.received.filter((r) => r.method === 'GET').map((r) => r.path.split('/').pop()!);
    };
    const rounds = [await round(), await round(), await round()];
    expect(rounds.map((r) => r.length)).toEqual([3, 3, 1]);
    expect(rounds.flat()).toEqual(upstreamIds); // each job once, least recently updated first
    expect(await round()).toEqual(upstreamIds.slice(0, 3));
  });
});
