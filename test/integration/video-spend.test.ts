import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type StorageConfig } from '../../src/store';
import { toNano, type SettleInput } from '../../src/state/types';
import { deleteRedisKeys, REDIS_URL, uniquePrefix } from '../fixtures/backing';
import { startFakeVideoUpstream, type FakeVideoJob, type FakeVideoUpstream } from '../fixtures/fake-video-upstream';
import { post, startTestGateway, type TestGateway } from '../fixtures/gateway';
import { billVideoJob } from '../../src/videos/billing';
import { cancelVideo, createVideo, fund, videoConfigYaml } from '../fixtures/videos';
import { spent } from '../fixtures/ledger';

/**
 * A video job is a paid request: before it is submitted, its estimate is checked against the budgets, the
 * key's limit and a prepaid account's balance, and held until the job is billed or ends unbilled.
 */

/** `http/video`'s price: a job of the default 5 s is estimated at 0.05 + 0.1 × 5 = 0.55. */
const PRICE = '{ per_second: 0.1, per_job: 0.05 }';
const EST = 0.55;
/** What a job the upstream reports as 2 s long costs: 0.05 + 0.1 × 2. */
const COST_2S = 0.25;
const JOB = { model: 'http/video', prompt: 'a lighthouse in a storm' };
const CHAT = { model: 'sim/chat', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] };

let upstream: FakeVideoUpstream;
const prefixes: string[] = [];
let open: TestGateway[] = [];

beforeAll(async () => {
  upstream = await startFakeVideoUpstream();
});
afterEach(async () => {
  await Promise.all(open.map((g) => g.close()));
  open = [];
  upstream.jobs.clear();
  upstream.received.length = 0;
  upstream.faults.length = 0;
});
afterAll(async () => {
  await upstream.close();
  for (const prefix of prefixes) await deleteRedisKeys(prefix);
});


/** The fake upstream's copy of a gateway job (a test moves it on through it). */
async function upstreamJob(g: TestGateway, id: string): Promise<FakeVideoJob> {
  const job = await g.store.getVideoJob(id, g.keyRecord.workspaceId);
  return upstream.jobs.get(job!.upstreamJobId)!;
}

async function billed(g: TestGateway, id: string): Promise<void> {
  await expect.poll(async () => (await g.store.getVideoJob(id, g.keyRecord.workspaceId))?.billed, { timeout: 5000 }).toBe(true);
}

/** USD held in a shared-state group now. */
async function held(g: TestGateway, group: string): Promise<number> {
  return (await g.gateway.state.held(group, g.gateway.spend.clock())) / 1e9;
}

describe.each(['memory', 'redis'] as const)('video job spend checks and holds (%s state)', (driver) => {
  async function start(o: { extra?: string; clock?: () => number; credits?: number } = {}): Promise<TestGateway> {
    let state = '';
    if (driver === 'redis') {
      const prefix = uniquePrefix('vidspend');
      prefixes.push(prefix);
      state = `state: { driver: redis, url: '${REDIS_URL}', prefix: '${prefix}' }\n`;
    }
    const yaml = videoConfigYaml({ upstreamUrl: upstream.url, upstreamPricing: PRICE, pipeline: '[auth, validate, budget-check, upstream]', extra: state + (o.extra ?? '') });
    const g = await startTestGateway({ yaml, clock: o.clock });
    open.push(g);
    await fund(g, o.credits ?? 100);
    return g;
  }

  it("a key whose limit is spent gets the chat requests' 403 on POST /videos: nothing submitted upstream, no job stored", async () => {
    const g = await start();
    const limited = await g.createKey({ name: 'limited', limitUsd: 1, limitReset: 'monthly' });
    await spent(g, limited.record.id, 1.2); // the counter is built from the ledger on first use
    const res = await createVideo(g, JOB, limited.secret);
    expect(res.status).toBe(403);
    expect(res.json.error.metadata).toMatchObject({
      error_type: 'permission_denied',
      limit_source: 'gateway_key_limit',
      scope: 'key_limit',
      limit_usd: 1,
      spend_usd: 1.2,
      resets_at: expect.any(String),
    });
    // Exactly what a chat request of that key gets.
    const chat = await post(`${g.url}/chat/completions`, limited.secret, CHAT);
    expect(chat.status).toBe(403);
    expect(res.json).toEqual(chat.json);
    expect(upstream.received.filter((r) => r.method !== 'GET')).toEqual([]); // nothing submitted (a poll a closed gateway aborted may still arrive)
    expect(await g.store.listUnfinishedVideoJobs(10)).toEqual([]);
    // A model without a price is checked too (its cost is the upstream's), though it holds nothing.
    expect((await createVideo(g, { model: 'sim/video-broken', prompt: 'x' }, limited.secret)).status).toBe(403);
    const unpriced = await createVideo(g, { model: 'sim/video-broken', prompt: 'x' });
    expect(unpriced.status).toBe(200);
    expect((await g.store.getVideoJob(unpriced.json.id, g.keyRecord.workspaceId))!.request.hold).toBeUndefined();
    // Other keys of the workspace are not limited by it.
    expect((await createVideo(g, JOB)).status).toBe(200);
  });

  it.runIf(driver === 'memory')('a restart puts the holds of unfinished jobs back (in-process state starts empty): the limit still counts them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-vidhold-'));
    const store = await openStore({ driver: 'sqlite', path: join(dir, 'gateway.db') } as StorageConfig);
    try {
      const yaml = videoConfigYaml({ upstreamUrl: upstream.url, upstreamPricing: PRICE, pipeline: '[auth, validate, budget-check, upstream]' });
      const first = await startTestGateway({ yaml, store });
      open.push(first);
      await fund(first, 100);
      const limited = await first.createKey({ name: 'limited', limitUsd: 1.5, limitReset: 'monthly' });
      const group = `key:${limited.record.id}`;
      for (let i = 0; i < 3; i++) expect((await createVideo(first, JOB, limited.secret)).status).toBe(200);
      expect((await createVideo(first, JOB, limited.secret)).status).toBe(403);
      await first.close();
      open = open.filter((g) => g !== first);

      const second = await startTestGateway({ yaml, store });
      open.push(second);
      // The three unfinished jobs' estimates are held again: a fourth job is still refused (it was admitted,
      // and so were two more, committing 3.30 against a 1.50 limit).
      expect(await held(second, group)).toBeCloseTo(3 * EST, 9);
      const refused = await createVideo(second, JOB, limited.secret);
      expect(refused.status).toBe(403);
      expect(refused.json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit' });
      // A job that ends after the restart releases its restored hold.
      const [first_] = await store.listUnfinishedVideoJobs(1);
      expect((await cancelVideo(second, first_.id)).status).toBe(200);
      await expect.poll(() => held(second, group), { timeout: 5000 }).toBeCloseTo(2 * EST, 9);
      await second.close();
      open = open.filter((g) => g !== second);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a spent workspace budget refuses video jobs too (403 gateway_workspace_budget)', async () => {
    const g = await start({ extra: 'workspaces:\n  - { name: default, budgets: [{ id: ws-daily, limit_usd: 2, reset_interval: daily }] }\n' });
    const other = await g.createKey({ name: 'other' });
    await spent(g, other.record.id, 2);
    const res = await createVideo(g, JOB);
    expect(res.status).toBe(403);
    expect(res.json.error.metadata).toMatchObject({ limit_source: 'gateway_workspace_budget', scope: 'workspace', limit_usd: 2, spend_usd: 2 });
    expect(upstream.received.filter((r) => r.method !== 'GET')).toEqual([]); // nothing submitted (a poll a closed gateway aborted may still arrive)
  });

  it('key limit: only the jobs whose estimates fit start; billing one counts its cost once and frees its hold, as failing or cancelling one does', async () => {
    const g = await start();
    // 1.5 admits while settled + held < 1.5: 0, 0.55, 1.10 (three jobs); 1.65 refuses.
    const limited = await g.createKey({ name: 'limited', limitUsd: 1.5, limitReset: 'monthly' });
    const group = `key:${limited.record.id}`;
    const answers = await Promise.all(Array.from({ length: 5 }, () => createVideo(g, JOB, limited.secret)));
    const ok = answers.filter((a) => a.status === 200);
    expect(ok).toHaveLength(3);
    for (const refused of answers.filter((a) => a.status !== 200)) {
      expect(refused.status).toBe(403);
      expect(refused.json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', spend_usd: expect.closeTo(3 * EST, 9) });
    }
    expect(upstream.jobs.size).toBe(3);
    expect(await held(g, group)).toBeCloseTo(3 * EST, 9);
    const [a, b, c] = ok.map((r) => r.json.id as string);

    // a completes (2 s: 0.25) and is billed: its hold goes, its cost is counted.
    Object.assign(await upstreamJob(g, a), { status: 'succeeded', seconds: 2, output_urls: ['https://cdn.test/a.mp4'] });
    await billed(g, a);
    expect(await held(g, group)).toBeCloseTo(2 * EST, 9);
    const d = await createVideo(g, JOB, limited.secret); // 0.25 + 1.10 < 1.5
    expect(d.status).toBe(200);
    const full = await createVideo(g, JOB, limited.secret);
    expect(full.status).toBe(403);
    expect(full.json.error.metadata.spend_usd).toBeCloseTo(COST_2S + 3 * EST, 9); // the billed cost once, three holds
    await g.gateway.videos.poll(); // billing again changes nothing
    expect((await createVideo(g, JOB, limited.secret)).json.error.metadata.spend_usd).toBeCloseTo(COST_2S + 3 * EST, 9);

    // b fails upstream: its hold is released, nothing is counted.
    (await upstreamJob(g, b)).status = 'failed';
    await expect.poll(() => held(g, group), { timeout: 5000 }).toBeCloseTo(2 * EST, 9);
    const e = await createVideo(g, JOB, limited.secret);
    expect(e.status).toBe(200);
    expect((await createVideo(g, JOB, limited.secret)).json.error.metadata.spend_usd).toBeCloseTo(COST_2S + 3 * EST, 9);

    // c is cancelled: the same.
    expect((await cancelVideo(g, c)).status).toBe(200);
    expect(await held(g, group)).toBeCloseTo(2 * EST, 9);
    expect((await createVideo(g, JOB, limited.secret)).status).toBe(200);
    expect((await createVideo(g, JOB, limited.secret)).json.error.metadata.spend_usd).toBeCloseTo(COST_2S + 3 * EST, 9);
    expect((await g.store.usageForKey(limited.record.id)).usage).toBeCloseTo(COST_2S, 9);
  });

  it("prepaid account: its unfinished jobs' estimates may not exceed its balance (402 insufficient_credits, no Retry-After); failed, cancelled, timed-out and billed jobs free their holds", async () => {
    let offset = 0;
    // Balances are cached for a minute here, so the billed cost's short stay in the in-flight group is not a race with the test.
    const g = await start({ credits: 1.2, clock: () => Date.now() + offset, extra: 'spend: { balance_cache_ms: 60000 }\n' });
    const group = `videos:account:${g.keyRecord.accountId}`;
    const a = await createVideo(g, JOB);
    const b = await createVideo(g, JOB);
    expect([a.status, b.status]).toEqual([200, 200]);
    const refused = await post(`${g.url}/videos`, g.key, JOB); // 0.55 + 0.55 + 0.55 > 1.20
    expect(refused.status).toBe(402);
    expect(refused.json).toEqual({
      error: {
        code: 402,
        message: expect.stringContaining('balance $1.20'),
        metadata: expect.objectContaining({ error_type: 'payment_required', limit_source: 'gateway_credits', reason: 'insufficient_credits', remedy_hint: expect.any(String) }),
      },
    });
    expect(refused.headers.get('retry-after')).toBeNull();
    expect(upstream.jobs.size).toBe(2);
    expect(await held(g, group)).toBeCloseTo(2 * EST, 9);
    // A job larger than the balance alone never fits.
    expect((await createVideo(g, { ...JOB, duration_seconds: 12 })).status).toBe(402);

    // a fails upstream: room for one more.
    (await upstreamJob(g, a.json.id)).status = 'failed';
    await expect.poll(() => held(g, group), { timeout: 5000 }).toBeCloseTo(EST, 9);
    const c = await createVideo(g, JOB);
    expect(c.status).toBe(200);
    expect((await createVideo(g, JOB)).status).toBe(402);

    // b is cancelled: the same.
    expect((await cancelVideo(g, b.json.id)).status).toBe(200);
    const d = await createVideo(g, JOB);
    expect(d.status).toBe(200);
    expect((await createVideo(g, JOB)).status).toBe(402);

    // c completes and is billed: the balance is debited at once; the cost stays held only while other
    // processes' cached balances may not show it (spend.balance_cache_ms), then only d is held.
    Object.assign(await upstreamJob(g, c.json.id), { status: 'succeeded', seconds: 2 });
    await billed(g, c.json.id);
    expect((await g.store.findAccount(g.keyRecord.accountId))!.balanceUsd).toBeCloseTo(1.2 - COST_2S, 9);
    expect(await held(g, group)).toBeCloseTo(EST + COST_2S, 9);
    offset += 60_001;
    expect(await held(g, group)).toBeCloseTo(EST, 9);
    expect((await createVideo(g, JOB)).status).toBe(402); // 0.55 + 0.55 > 0.95

    // d times out (videos.job_timeout_s, 600 s here): its hold goes with it.
    offset += 601_000;
    await expect.poll(async () => (await g.store.getVideoJob(d.json.id, g.keyRecord.workspaceId))?.status, { timeout: 5000 }).toBe('failed');
    await expect.poll(() => held(g, group), { timeout: 5000 }).toBe(0);
    expect((await createVideo(g, JOB)).status).toBe(200);
  });

  it('a failed upstream submission or store write releases the hold at once', async () => {
    const g = await start();
    // 0.5 admits one job of 0.55 at a time.
    const limited = await g.createKey({ name: 'limited', limitUsd: 0.5, limitReset: 'monthly' });
    upstream.faults.push({ status: 503, on: 'submit' });
    const failed = await createVideo(g, JOB, limited.secret);
    expect(failed.status).toBeGreaterThanOrEqual(500);
    expect(await held(g, `key:${limited.record.id}`)).toBe(0);
    expect((await createVideo(g, JOB, limited.secret)).status).toBe(200);
    expect((await createVideo(g, JOB, limited.secret)).status).toBe(403);

    const second = await g.createKey({ name: 'second', limitUsd: 0.5, limitReset: 'monthly' });
    const create = g.store.createVideoJob.bind(g.store);
    g.store.createVideoJob = async () => {
      throw new Error('disk I/O error');
    };
    try {
      expect((await createVideo(g, JOB, second.secret)).status).toBe(500);
    } finally {
      g.store.createVideoJob = create;
    }
    expect(await held(g, `key:${second.record.id}`)).toBe(0);
    expect((await createVideo(g, JOB, second.secret)).status).toBe(200);
  });

  it('a process that dies between writing a job’s ledger row and settling its hold: the next poller settles it, counting the cost once', async () => {
    const g = await start();
    // 0.5 admits one job of 0.55 at a time; the billed 0.25 leaves room for one more.
    const limited = await g.createKey({ name: 'limited', limitUsd: 0.5 });
    const group = `key:${limited.record.id}`;
    const res = await createVideo(g, JOB, limited.secret);
    expect(res.status).toBe(200);
    // The first billing "dies" right after its row is committed: no settlement, not marked billed (what a
    // kill -9 or OOM kill of that process leaves). The next round (this process's or another's) finds the
    // row already written.
    const insert = g.store.insertLedger.bind(g.store);
    let died = false;
    g.store.insertLedger = async (row) => {
      const inserted = await insert(row);
      if (row.endpoint === 'videos' && !died) {
        died = true;
        throw new Error('process killed');
      }
      return inserted;
    };
    try {
      Object.assign(await upstreamJob(g, res.json.id), { status: 'succeeded', seconds: 2 });
      await billed(g, res.json.id);
    } finally {
      g.store.insertLedger = insert;
    }
    expect(died).toBe(true);
    expect((await g.store.usageForKey(limited.record.id)).usage).toBeCloseTo(COST_2S, 9);
    // Before, the hold stayed until it lapsed (job_timeout_s + 10 min) and the cost never reached the spend
    // counters: with a lifetime limit the key could spend it again for good.
    expect(await held(g, group)).toBe(0);
    expect((await createVideo(g, JOB, limited.secret)).status).toBe(200);
    const refused = await createVideo(g, JOB, limited.secret);
    expect(refused.status).toBe(402);
    expect(refused.json.error.metadata.spend_usd).toBeCloseTo(COST_2S + EST, 9);
    await g.gateway.videos.poll(); // billing again changes nothing
    expect((await createVideo(g, JOB, limited.secret)).json.error.metadata.spend_usd).toBeCloseTo(COST_2S + EST, 9);
  });

  it('two pollers billing one job at once count its cost once', async () => {
    const g = await start();
    const limited = await g.createKey({ name: 'limited', limitUsd: 0.5 });
    const res = await createVideo(g, JOB, limited.secret);
    expect(res.status).toBe(200);
    // The other poller's billing runs between this one's row and its settlement (both see the completion).
    const insert = g.store.insertLedger.bind(g.store);
    let raced = false;
    g.store.insertLedger = async (row) => {
      const inserted = await insert(row);
      if (row.endpoint === 'videos' && inserted && !raced) {
        raced = true;
        const job = (await g.store.getVideoJob(res.json.id, g.keyRecord.workspaceId))!;
        await billVideoJob(g.gateway.runtime().services, job);
      }
      return inserted;
    };
    try {
      Object.assign(await upstreamJob(g, res.json.id), { status: 'succeeded', seconds: 2 });
      await billed(g, res.json.id);
    } finally {
      g.store.insertLedger = insert;
    }
    expect(raced).toBe(true);
    expect(await held(g, `key:${limited.record.id}`)).toBe(0);
    expect((await createVideo(g, JOB, limited.secret)).status).toBe(200);
    expect((await createVideo(g, JOB, limited.secret)).json.error.metadata.spend_usd).toBeCloseTo(COST_2S + EST, 9);
  });

  it('shared state unreachable: the 503 of the chat checks, nothing submitted or stored', async () => {
    const g = await start();
    const state = g.gateway.state;
    const reserve = state.reserve.bind(state);
    state.reserve = async () => {
      throw new Error('Connection is closed.');
    };
    try {
      const res = await post(`${g.url}/videos`, g.key, JOB);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(res.json.error.metadata).toMatchObject({ error_type: 'server' });
    } finally {
      state.reserve = reserve;
    }
    expect(upstream.received.filter((r) => r.method !== 'GET')).toEqual([]); // nothing submitted (a poll a closed gateway aborted may still arrive)
    expect(await g.store.listUnfinishedVideoJobs(10)).toEqual([]);
    expect((await createVideo(g, JOB)).status).toBe(200);
  });

  it('a billing settlement the state failed is retried with its hold, so its cost is counted exactly once', async () => {
    const g = await start();
    const state = g.gateway.state;
    const settle = state.settle.bind(state);
    // How the first attempt fails: a timeout after it ran (its reply lost), a timeout before it ran, refused unsent.
    for (const first of ['ran', 'lost', 'unsent'] as const) {
      const limited = await g.createKey({ name: `limited-${first}`, limitUsd: 0.5, limitReset: 'monthly' });
      const res = await createVideo(g, JOB, limited.secret);
      expect(res.status).toBe(200);
      const holdId = (await g.store.getVideoJob(res.json.id, g.keyRecord.workspaceId))!.request.hold!.id;
      const calls: SettleInput[] = [];
      state.settle = async (input) => {
        if (input.holdId !== holdId) return settle(input);
        calls.push(input);
        if (calls.length > 1) return settle(input);
        if (first === 'ran') await settle(input);
        throw new Error(first === 'unsent' ? "Stream isn't writeable and enableOfflineQueue options is false" : 'Command timed out');
      };
      try {
        Object.assign(await upstreamJob(g, res.json.id), { status: 'succeeded', seconds: 2 });
        await billed(g, res.json.id);
        await expect.poll(() => calls.length, { timeout: 5000 }).toBe(2);
        await expect.poll(() => g.gateway.spend.pendingSettlements(), { timeout: 5000 }).toBe(0);
      } finally {
        state.settle = settle;
      }
      // Every billing settlement counts the cost only if the hold is still there (another poller may have
      // settled the job: see billVideoJob), a first attempt never sent too: its hold is still there.
      expect(calls[0]).toMatchObject({ costNano: toNano(COST_2S), retry: true });
      expect(calls[1]).toMatchObject({ costNano: toNano(COST_2S), retry: true });
      // Counted once: 0.25 < 0.5 admits one more job, whose refusal shows 0.25 + its 0.55.
      expect((await createVideo(g, JOB, limited.secret)).status).toBe(200);
      const refused = await createVideo(g, JOB, limited.secret);
      expect(refused.status).toBe(403);
      expect(refused.json.error.metadata.spend_usd).toBeCloseTo(COST_2S + EST, 9);
    }
  });
});
