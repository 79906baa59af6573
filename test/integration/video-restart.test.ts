import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type StorageConfig, type Store } from '../../src/store';
import { advanceJob } from '../../src/videos/advance';
import { startTestGateway, type TestGateway } from '../fixtures/gateway';
import { fund, getVideo, startJob, videoConfigYaml, waitForStatus } from '../fixtures/videos';

const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SIM_COST = 0.55;

/** Where two gateways (as two processes would) share one store: a SQLite file, or a PostgreSQL schema. */
interface Engine {
  name: string;
  setup(): Promise<StorageConfig>;
  teardown(): Promise<void>;
}

const engines: Engine[] = [
  (() => {
    let dir = '';
    return {
      name: 'sqlite',
      async setup() {
        dir = mkdtempSync(join(tmpdir(), 'gw-video-'));
        return { driver: 'sqlite', path: join(dir, 'gateway.db') } as StorageConfig;
      },
      async teardown() {
        if (dir) rmSync(dir, { recursive: true, force: true });
      },
    };
  })(),
  (() => {
    const schema = `gw_video_${randomBytes(6).toString('hex')}`;
    return {
      name: 'postgres',
      async setup() {
        return { driver: 'postgres', url: PG_URL, schema, pool_max: 4 } as StorageConfig;
      },
      async teardown() {
        const c = new Client({ connectionString: PG_URL });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await c.end();
      },
    };
  })(),
];

describe.each(engines)('video jobs across processes on $name', (engine) => {
  let config: StorageConfig;
  /** Each gateway gets its own store connection, as a separate process would. */
  const stores: Store[] = [];
  const gateways: TestGateway[] = [];

  beforeAll(async () => {
    config = await engine.setup();
  });
  afterEach(async () => {
    await Promise.all(gateways.splice(0).map((g) => g.close()));
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await engine.teardown();
  });

  async function gateway(options: { queuedMs?: number; runningMs?: number; pollIntervalMs?: number } = {}): Promise<TestGateway> {
    const store = await openStore(config);
    stores.push(store);
    const g = await startTestGateway({ yaml: videoConfigYaml(options), store });
    gateways.push(g);
    return g;
  }

  async function stop(g: TestGateway): Promise<void> {
    gateways.splice(gateways.indexOf(g), 1);
    await g.close();
  }

  const balance = async (g: TestGateway) => (await g.store.findAccount(g.keyRecord.accountId))!.balanceUsd;

  it('a restart in the middle of a job: the new gateway resumes polling and the job completes, billed once', async () => {
    const first = await gateway({ queuedMs: 0, runningMs: 1000 });
    await fund(first);
    const before = await balance(first);
    const id = await startJob(first);
    const running = await waitForStatus(first, id, 'in_progress');
    await stop(first);
    expect((await stores[0].getVideoJob(id, first.keyRecord.workspaceId))?.status).toBe('in_progress');

    const second = await gateway({ queuedMs: 0, runningMs: 1000 });
    const done = await waitForStatus(second, id, 'completed');
    expect(done.generation_id).toBe(running.generation_id);
    expect(done.usage).toEqual({ cost: SIM_COST, is_byok: false });
    await expect.poll(async () => (await second.store.getVideoJob(id, second.keyRecord.workspaceId))?.billed).toBe(true);
    expect(await balance(second)).toBeCloseTo(before - SIM_COST, 9);
  });

  it('a restart between completion and billing: the next gateway writes the one ledger row', async () => {
    const first = await gateway({ queuedMs: 60_000 });
    await fund(first);
    const before = await balance(first);
    const id = await startJob(first);
    await stop(first);
    // What a process that died right after its completion write leaves behind: completed, not billed.
    const store = stores[0];
    const ws = first.keyRecord.workspaceId;
    const pending = (await store.getVideoJob(id, ws))!;
    const running = (await store.updateVideoJob(id, 'pending', { status: 'in_progress', updatedAt: Date.now(), generationId: `gen-${Math.floor(Date.now() / 1000)}-restartrestartrestart` }))!;
    expect(pending.status).toBe('pending');
    await store.updateVideoJob(id, 'in_progress', { status: 'completed', updatedAt: Date.now(), urls: ['https://cdn.test/x.mp4'], costUsd: 0.3, expiresAt: Date.now() + 3_600_000, completedAt: Date.now() });
    expect(await store.getLedger(running.generationId!)).toBeNull();

    const second = await gateway();
    await expect.poll(async () => (await second.store.getVideoJob(id, ws))?.billed, { timeout: 5000 }).toBe(true);
    expect(await second.store.getLedger(running.generationId!)).toMatchObject({ endpoint: 'videos', costUsd: 0.3, status: 'completed' });
    expect(await balance(second)).toBeCloseTo(before - 0.3, 9);
    expect((await getVideo(second, id)).json).toMatchObject({ status: 'completed', usage: { cost: 0.3, is_byok: false } });
  });

  it('two gateways polling the same jobs: each job gets one generation id and one ledger row, and the balance is debited once', async () => {
    const a = await gateway({ queuedMs: 20, runningMs: 40, pollIntervalMs: 5 });
    const b = await gateway({ queuedMs: 20, runningMs: 40, pollIntervalMs: 5 });
    await fund(a);
    const before = await balance(a);
    const ids = await Promise.all(Array.from({ length: 6 }, (_, i) => startJob(i % 2 ? a : b, { model: 'sim/video', prompt: `clip ${i}` })));
    const done = await Promise.all(ids.map((id, i) => waitForStatus(i % 2 ? b : a, id, 'completed')));
    const ws = a.keyRecord.workspaceId;
    await expect.poll(async () => (await Promise.all(ids.map((id) => a.store.getVideoJob(id, ws)))).every((j) => j?.billed)).toBe(true);
    for (const d of done) expect(await a.store.getLedger(d.generation_id)).toMatchObject({ costUsd: SIM_COST, endpoint: 'videos' });
    // A second generation id for a job would be a second row: the key's total shows every row.
    const usage = (await a.store.usageForKey(a.keyRecord.id)).usage + (await a.store.usageForKey(b.keyRecord.id)).usage;
    expect(usage).toBeCloseTo(6 * SIM_COST, 9);
    expect(await balance(b)).toBeCloseTo(before - 6 * SIM_COST, 9);
  });

  it('two pollers acting on the same stale read of a job: the compare-and-set lets one apply each step', async () => {
    const a = await gateway({ queuedMs: 0, runningMs: 0 });
    const b = await gateway({ queuedMs: 0, runningMs: 0 });
    // Drive the pollers by hand, from the same snapshot, as two processes that read the job at the same time.
    await Promise.all([a.gateway.videos.stop(), b.gateway.videos.stop()]);
    await fund(a);
    const before = await balance(a);
    const ws = a.keyRecord.workspaceId;
    const ids = await Promise.all(Array.from({ length: 5 }, (_, i) => startJob(a, { model: 'sim/video', prompt: `race ${i}` })));
    for (const id of ids) {
      const snapshot = (await a.store.getVideoJob(id, ws))!;
      const results = await Promise.all(
        [a, b].map((g) => advanceJob({ services: g.gateway.runtime().services, clock: Date.now }, snapshot)),
      );
      // Exactly one of them took the job from pending; the other saw its status move and stopped.
      expect(results.filter((r) => r !== null)).toHaveLength(1);
      const job = (await a.store.getVideoJob(id, ws))!;
      expect(job).toMatchObject({ status: 'completed', billed: true });
    }
    const usage = (await a.store.usageForKey(a.keyRecord.id)).usage;
    expect(usage).toBeCloseTo(5 * SIM_COST, 9);
    expect(await balance(b)).toBeCloseTo(before - 5 * SIM_COST, 9);
  });
});
