import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { byokContext, maskProviderKey, sealProviderKey } from '../../src/auth/byok-seal';
import type { HttpVideoProviderConfig } from '../../src/config/types';
import { GatewayError } from '../../src/errors/gateway-error';
import { createHttpVideoProvider } from '../../src/providers/http-video';
import { startFakeVideoUpstream, type FakeVideoUpstream } from '../fixtures/fake-video-upstream';
import { openStore } from '../../src/store';
import type { Store, VideoJobPatch, VideoJobStatus } from '../../src/store/types';
import { startTestGateway, type TestGateway } from '../fixtures/gateway';
import { spent } from '../fixtures/ledger';
import { cancelVideo, createVideo, fund, getVideo, startJob, videoConfigYaml, waitForStatus, type Answer } from '../fixtures/videos';

let upstream: FakeVideoUpstream;
beforeAll(async () => {
  upstream = await startFakeVideoUpstream();
});
afterAll(async () => {
  await upstream.close();
});
afterEach(() => {
  upstream.jobs.clear();
  upstream.received.length = 0;
  upstream.faults.length = 0;
});

function adapter(over: Partial<HttpVideoProviderConfig> = {}) {
  return createHttpVideoProvider({
    id: 'job-upstream',
    kind: 'http-video',
    base_url: upstream.url,
    api_key: 'sk-video-upstream-secret',
    headers: { 'x-team': 'video' },
    timeout_ms: 300,
    connect_timeout_ms: 1000,
    region: 'global',
    data_collection: 'deny',
    ...over,
  });
}

/** The GatewayError a promise rejects with. */
async function failure(p: Promise<unknown>): Promise<GatewayError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(GatewayError);
  return err as GatewayError;
}

describe('the http-video adapter against a fake job upstream', () => {
  it('submit: POST {base_url}/videos with the model, prompt, parameters and previous job, the key as a bearer token', async () => {
    const p = adapter();
    const { upstreamJobId } = await p.submit(
      { model: 'upstream-video-1', prompt: 'a fox', params: { duration_seconds: 4, resolution: '1080p' }, previousUpstreamJobId: 'up-0' },
      new AbortController().signal,
    );
    expect(upstreamJobId).toBe('up-1');
    expect(upstream.received[0]).toMatchObject({
      method: 'POST',
      path: '/v1/videos',
      headers: { authorization: 'Bearer sk-video-upstream-secret', 'x-team': 'video', 'content-type': 'application/json' },
      body: { model: 'upstream-video-1', prompt: 'a fox', duration_seconds: 4, resolution: '1080p', previous_job_id: 'up-0' },
    });
  });

  it('poll: GET {base_url}/videos/{id}, statuses and their synonyms, outputs, cost, seconds, expiry and errors', async () => {
    const p = adapter();
    const { upstreamJobId: id } = await p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal);
    expect(await p.poll(id)).toEqual({ status: 'queued' });
    expect(upstream.received.at(-1)).toMatchObject({ method: 'GET', path: `/v1/videos/${id}` });
    for (const [given, mapped] of [['running', 'running'], ['in_progress', 'running'], ['pending', 'queued'], ['canceled', 'cancelled']] as const) {
      upstream.jobs.set(id, { status: given });
      expect((await p.poll(id)).status).toBe(mapped);
    }
    upstream.jobs.set(id, { status: 'succeeded', output_urls: ['https://v.test/1.mp4', 7 as never], cost: 0.42, seconds: 8, expires_at: 1_900_000_000 });
    expect(await p.poll(id)).toEqual({ status: 'succeeded', urls: ['https://v.test/1.mp4'], usage: { cost: 0.42, seconds: 8 }, expiresAt: 1_900_000_000_000 });
    upstream.jobs.set(id, { status: 'failed', error: { message: 'nsfw' } });
    expect(await p.poll(id)).toEqual({ status: 'failed', error: 'nsfw' });
    // A job the upstream no longer knows will never finish.
    expect(await p.poll('up-404')).toMatchObject({ status: 'failed', error: expect.stringContaining('no longer knows') });
    upstream.jobs.set(id, { status: 'exploded' });
    expect((await failure(p.poll(id))).errorType).toBe('provider_unavailable');
  });

  it('poll: only absolute http(s) output URLs are kept; other schemes, relative, oversized and spaced ones are left out', async () => {
    const p = adapter();
    const { upstreamJobId: id } = await p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal);
    const kept = ['https://v.test/a.mp4', 'http://v.test/b.mp4?sig=abc%20def'];
    const dropped = [
      'javascript:alert(document.cookie)',
      'JAVASCRIPT:alert(1)',
      'file:///etc/passwd',
      `data:video/mp4;base64,${'A'.repeat(1000)}`,
      'ftp://v.test/c.mp4',
      '/relative/d.mp4',
      ' https://v.test/leading-space.mp4',
      'https://v.test/new\nline.mp4',
      'https://v.test/nul\u0000.mp4',
      `https://v.test/${'x'.repeat(9000)}.mp4`,
    ];
    upstream.jobs.set(id, { status: 'succeeded', output_urls: [dropped[0], kept[0], ...dropped.slice(1), kept[1]] });
    expect((await p.poll(id)).urls).toEqual(kept);
  });

  it('submit: a job id with a control character or over 256 characters is a bad answer, and a nameable one is cancelled upstream', async () => {
    const p = adapter();
    const submit = () => p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal);
    for (const id of ['up\u0000nul', 'up\nline', 'up\u007fdel', 'u'.repeat(257), 42, '']) {
      upstream.faults.push({ status: 200, body: { id }, on: 'submit' });
      const e = await failure(submit());
      expect(e.errorType).toBe('provider_unavailable');
      expect(e.metadata).toMatchObject({ provider_name: 'job-upstream' });
    }
    await expect.poll(() => upstream.received.filter((r) => r.path.endsWith('/cancel')).map((r) => r.path).sort()).toEqual(
      ['up%00nul', 'up%0Aline', 'up%7Fdel'].map((id) => `/v1/videos/${id}/cancel`).sort(),
    );
    upstream.faults.push({ status: 200, body: { id: 'u'.repeat(256) }, on: 'submit' });
    expect((await submit()).upstreamJobId).toBe('u'.repeat(256));
  });

  it('poll: expires_at is kept as whole ms from 1970 to 9999; a negative, zero, absurd or non-numeric one is dropped', async () => {
    const p = adapter();
    const { upstreamJobId: id } = await p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal);
    const expiry = async (expires_at: unknown) => {
      upstream.jobs.set(id, { status: 'succeeded', output_urls: [], expires_at: expires_at as number });
      return (await p.poll(id)).expiresAt;
    };
    expect(await expiry(1_900_000_000)).toBe(1_900_000_000_000);
    expect(await expiry(1_900_000_000.0004)).toBe(1_900_000_000_000); // a fraction of a ms: PostgreSQL's BIGINT refused it
    expect(await expiry(253_402_300_799)).toBe(253_402_300_799_000);
    for (const absurd of [9_400_000_000_000, 1e300, -5, 0, '1900000000', null]) expect(await expiry(absurd)).toBeUndefined();
  });

  it('cancel: POST {base_url}/videos/{id}/cancel', async () => {
    const p = adapter();
    const { upstreamJobId: id } = await p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal);
    await p.cancel(id);
    expect(upstream.received.at(-1)).toMatchObject({ method: 'POST', path: `/v1/videos/${id}/cancel` });
    expect(upstream.jobs.get(id)?.status).toBe('cancelled');
  });

  it('a workspace key given to a call is its bearer token instead of api_key, and is scrubbed from an error that echoes it', async () => {
    const p = adapter();
    const own = 'sk-own-workspace-video-key';
    const { upstreamJobId: id } = await p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal, own);
    await p.poll(id, own);
    await p.cancel(id, own);
    expect(upstream.received.map((r) => r.headers.authorization)).toEqual([`Bearer ${own}`, `Bearer ${own}`, `Bearer ${own}`]);
    expect(upstream.received[0].headers['x-team']).toBe('video');
    upstream.faults.push({ status: 401, body: { error: { message: `bad key ${own}` } }, on: 'poll' });
    const e = await failure(p.poll(id, own));
    expect(JSON.stringify({ message: e.message, metadata: e.metadata })).not.toContain(own);
  });

  it('a 2xx poll answer that echoes the key (in its error, in an output URL) loses it, whichever key the call used', async () => {
    const p = adapter();
    const own = 'sk-own-workspace-video-key';
    const { upstreamJobId: id } = await p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal);
    upstream.jobs.set(id, { status: 'failed', error: { message: 'Upstream rejected using key sk-video-upstream-secret' } });
    expect(await p.poll(id)).toEqual({ status: 'failed', error: 'Upstream rejected using key [redacted]' });
    upstream.jobs.set(id, { status: 'succeeded', output_urls: [`https://v.test/a.mp4?token=${own}`] });
    const done = await p.poll(id, own);
    expect(JSON.stringify(done)).not.toContain(own);
    expect(done.urls).toEqual(['https://v.test/a.mp4?token=[redacted]']);
  });

  it('errors are classified once: 400 is the caller\'s, 5xx and 429 the provider\'s, a silent upstream a timeout, a missing id a bad answer', async () => {
    const p = adapter();
    const signal = new AbortController().signal;
    const submit = () => p.submit({ model: 'm', prompt: 'x', params: {} }, signal);
    upstream.faults.push({ status: 400, body: { error: { message: 'prompt too long' } } });
    expect(await failure(submit())).toMatchObject({ errorType: 'invalid_request', message: 'prompt too long' });
    upstream.faults.push({ status: 500 });
    expect(await failure(submit())).toMatchObject({ errorType: 'provider_unavailable', metadata: expect.objectContaining({ provider_name: 'job-upstream', provider_code: 500 }) });
    upstream.faults.push({ status: 429 });
    expect((await failure(submit())).errorType).toBe('rate_limit_exceeded');
    upstream.faults.push({ status: 200, body: { nope: true } });
    expect((await failure(submit())).errorType).toBe('provider_unavailable');
    upstream.faults.push('hang');
    expect((await failure(p.poll('up-1'))).errorType).toBe('timeout');
    const dead = adapter({ base_url: 'http://127.0.0.1:9/v1' });
    expect((await failure(dead.poll('up-1'))).errorType).toBe('provider_unavailable');
  });
});

describe('the gateway with an http-video provider', () => {
  let g: TestGateway | undefined;
  let offset = 0;
  afterEach(async () => {
    await g?.close();
    g = undefined;
    offset = 0;
  });

  async function start(jobTimeoutS = 600, pollIntervalMs = 10): Promise<TestGateway> {
    g = await startTestGateway({ yaml: videoConfigYaml({ upstreamUrl: upstream.url, jobTimeoutS, pollIntervalMs }), clock: () => Date.now() + offset });
    await fund(g);
    return g;
  }

  it('follows the upstream job to completion, with the upstream\'s cost (the model has no price) and expiry', async () => {
    const gw = await start();
    const id = await startJob(gw, { model: 'http/video', prompt: 'a lighthouse', aspect_ratio: '16:9' });
    expect(upstream.received[0].body).toMatchObject({ model: 'upstream-video-1', prompt: 'a lighthouse', aspect_ratio: '16:9', duration_seconds: 5 });
    const upId = (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId;
    expect((await getVideo(gw, id)).json.status).toBe('pending');
    upstream.jobs.set(upId, { status: 'running' });
    await waitForStatus(gw, id, 'in_progress');
    const expiry = Math.floor(Date.now() / 1000) + 120;
    upstream.jobs.set(upId, { status: 'succeeded', output_urls: ['https://v.test/a.mp4', 'https://v.test/b.mp4'], cost: 0.42, expires_at: expiry });
    const done = await waitForStatus(gw, id, 'completed');
    expect(done).toMatchObject({ unsigned_urls: ['https://v.test/a.mp4', 'https://v.test/b.mp4'], usage: { cost: 0.42, is_byok: false }, expires_at: expiry });
    await expect.poll(async () => (await gw.store.getLedger(done.generation_id))?.costUsd).toBe(0.42);
  });

  it('an absurd upstream duration is billed as the requested seconds at the price, and the job completes', async () => {
    g = await startTestGateway({ yaml: videoConfigYaml({ upstreamUrl: upstream.url, upstreamPricing: '{ per_second: 2, per_job: 0.05 }' }) });
    await fund(g, 100);
    const gw = g;
    const finish = async (job: Record<string, unknown>) => {
      const id = await startJob(gw, { model: 'http/video', prompt: 'a lighthouse', duration_seconds: 4 });
      upstream.jobs.set((await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId, { status: 'succeeded', output_urls: ['https://v.test/a.mp4'], ...job });
      const done = await waitForStatus(gw, id, 'completed');
      await expect.poll(async () => (await gw.store.getLedger(done.generation_id))?.costUsd).toBe(done.usage.cost);
      return done.usage.cost as number;
    };
    // 1e308 s × $2 had been Infinity: the store refused the completion, and the job was polled until it timed out.
    expect(await finish({ seconds: 1e308 })).toBeCloseTo(0.05 + 2 * 4, 9);
    expect(await finish({ seconds: 3 })).toBeCloseTo(0.05 + 2 * 3, 9);
  });

  it('an unpriced model bills the cost its upstream reports, at most about $9 M', async () => {
    const gw = await start();
    const id = await startJob(gw, { model: 'http/video', prompt: 'a lighthouse' });
    upstream.jobs.set((await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId, { status: 'succeeded', output_urls: ['https://v.test/a.mp4'], cost: 1e300 });
    const done = await waitForStatus(gw, id, 'completed');
    expect(done.usage.cost).toBeCloseTo(Number.MAX_SAFE_INTEGER / 1e9, 3);
    await expect.poll(async () => (await gw.store.getLedger(done.generation_id))?.costUsd).toBe(done.usage.cost);
  });

  it('cancel reaches the upstream; a refused cancel leaves the job as it was', async () => {
    const gw = await start();
    const id = await startJob(gw, { model: 'http/video', prompt: 'x' });
    const upId = (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId;
    upstream.faults.push({ status: 503, on: 'cancel' });
    const refused = await cancelVideo(gw, id);
    expect(refused.status).toBe(503);
    expect(refused.json.error.metadata.error_type).toBe('provider_overloaded');
    expect((await getVideo(gw, id)).json.status).toBe('pending');
    const res = await cancelVideo(gw, id);
    expect(res.json.status).toBe('cancelled');
    expect(upstream.jobs.get(upId)?.status).toBe('cancelled');
  });

  it('a cancel the upstream refuses because the job already ended, before the gateway polled it: 409 conflict with the status it ended in', async () => {
    const gw = await start(600, 60_000); // the poller's first round ran at start, before the jobs: none is polled
    const done = await startJob(gw, { model: 'http/video', prompt: 'done' });
    const broken = await startJob(gw, { model: 'http/video', prompt: 'broken' });
    const upIdOf = async (id: string) => (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId;
    upstream.jobs.set(await upIdOf(done), { status: 'succeeded', output_urls: ['https://v.test/d.mp4'], cost: 0.2 });
    upstream.jobs.set(await upIdOf(broken), { status: 'failed', error: 'out of frames' });
    upstream.faults.push({ status: 409, body: { error: { message: 'job already finished' } }, on: 'cancel' });
    const lost = await cancelVideo(gw, done);
    expect(lost.status).toBe(409);
    expect(lost.json).toEqual({ error: { code: 409, message: expect.any(String), metadata: { error_type: 'conflict', status: 'completed' } } });
    const job = (await getVideo(gw, done)).json;
    expect(job).toMatchObject({ status: 'completed', usage: { cost: 0.2, is_byok: false } });
    expect((await gw.store.getLedger(job.generation_id))?.costUsd).toBe(0.2);
    upstream.faults.push({ status: 400, body: { error: { message: 'job is not running' } }, on: 'cancel' });
    const failed = await cancelVideo(gw, broken);
    expect(failed.status).toBe(409);
    expect(failed.json.error.metadata).toEqual({ error_type: 'conflict', status: 'failed' });
    // A refusal for a job the upstream still runs stays the upstream's error.
    const running = await startJob(gw, { model: 'http/video', prompt: 'running' });
    upstream.jobs.set(await upIdOf(running), { status: 'running' });
    upstream.faults.push({ status: 409, on: 'cancel' });
    const refused = await cancelVideo(gw, running);
    expect(refused.status).toBe(502);
    expect(refused.json.error.metadata).toMatchObject({ error_type: 'provider_unavailable', provider_code: 409 });
  });

  it('an upstream that fails the submission: its typed error, and no job', async () => {
    const gw = await start();
    upstream.faults.push({ status: 503, on: 'submit' });
    const res = await createVideo(gw, { model: 'http/video', prompt: 'x' });
    expect(res.status).toBe(503);
    expect(res.json).toEqual({ error: { code: 503, message: expect.any(String), metadata: expect.objectContaining({ error_type: 'provider_overloaded', provider_code: 503 }) } });
    expect(await gw.store.listUnfinishedVideoJobs(10)).toEqual([]);
  });

  it('a job that never finishes fails after videos.job_timeout_s and is cancelled upstream', async () => {
    const gw = await start(60);
    const id = await startJob(gw, { model: 'http/video', prompt: 'forever' });
    const upId = (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId;
    offset = 61_000;
    const failed = await waitForStatus(gw, id, 'failed');
    expect(failed.error.message).toContain('did not finish within 60 s');
    await expect.poll(() => upstream.jobs.get(upId)?.status).toBe('cancelled');
  });

  it('an upstream that is down while polling: the job waits and completes once it answers again', async () => {
    const gw = await start();
    const id = await startJob(gw, { model: 'http/video', prompt: 'x' });
    const upId = (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId;
    const polls = () => upstream.received.filter((r) => r.method === 'GET').length;
    for (let i = 0; i < 5; i++) upstream.faults.push({ status: 502, on: 'poll' });
    upstream.jobs.set(upId, { status: 'succeeded', output_urls: ['https://v.test/c.mp4'], cost: 0.1 });
    await waitForStatus(gw, id, 'completed');
    expect(polls()).toBeGreaterThanOrEqual(6);
    expect(gw.logs.join('')).toContain('polling a video job failed');
  });
});

/**
 * A cancel racing the job's completion, each order forced by holding one side's compare-and-set until the
 * other side has finished (in-memory state, SQLite in memory). Whichever write lands first decides: a cancel
 * answered 2xx is never billed, a billed job is never reported cancelled, and a cancel that lost is a 409
 * `conflict` naming the status.
 */
describe('a cancel racing the completion of a job', () => {
  let g: TestGateway | undefined;
  let store: Store | undefined;
  /** Runs before the next status write to `to`, once. */
  const before: Partial<Record<string, () => Promise<void>>> = {};
  afterEach(async () => {
    await g?.close();
    await store?.close();
    g = store = undefined;
    for (const k of Object.keys(before)) delete before[k];
  });

  async function running(): Promise<{ gw: TestGateway; id: string; upId: string }> {
    const real = await openStore({ driver: 'sqlite', path: ':memory:' });
    store = real;
    const held = new Proxy(real, {
      get(target, prop, receiver) {
        if (prop === 'updateVideoJob') {
          return async (id: string, expected: VideoJobStatus, patch: VideoJobPatch) => {
            const hook = before[patch.status];
            delete before[patch.status];
            if (hook) await hook();
            return target.updateVideoJob(id, expected, patch);
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    g = await startTestGateway({ yaml: videoConfigYaml({ upstreamUrl: upstream.url }), store: held });
    await fund(g);
    const id = await startJob(g, { model: 'http/video', prompt: 'a race' });
    const upId = (await g.store.getVideoJob(id, g.keyRecord.workspaceId))!.upstreamJobId;
    upstream.jobs.set(upId, { status: 'running' });
    await waitForStatus(g, id, 'in_progress');
    return { gw: g, id, upId };
  }

  const balance = async (gw: TestGateway) => (await gw.store.findAccount(gw.keyRecord.accountId))!.balanceUsd;

  it('the completion lands first: the job is billed once and the cancel is 409 conflict with status completed', async () => {
    const { gw, id, upId } = await running();
    // The cancel has read the job in_progress and reached the upstream (which accepts it and goes on: it had
    // finished); before the cancel's write, the poller sees the job done and completes and bills it.
    upstream.faults.push({ status: 200, body: {}, on: 'cancel' });
    before.cancelled = async () => {
      upstream.jobs.set(upId, { status: 'succeeded', output_urls: ['https://v.test/r.mp4'], cost: 0.3 });
      await expect.poll(async () => (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))?.billed, { timeout: 5000, interval: 10 }).toBe(true);
    };
    const res = await cancelVideo(gw, id);
    expect(res.status).toBe(409);
    expect(res.json).toEqual({ error: { code: 409, message: expect.any(String), metadata: { error_type: 'conflict', status: 'completed' } } });
    const job = (await getVideo(gw, id)).json;
    expect(job).toMatchObject({ status: 'completed', usage: { cost: 0.3, is_byok: false } });
    expect((await gw.store.getLedger(job.generation_id))?.costUsd).toBe(0.3);
    expect(await balance(gw)).toBeCloseTo(10 - 0.3, 9);
  });

  it('the cancel lands first: 200 cancelled, and the completion the poller had seen is never billed', async () => {
    const { gw, id, upId } = await running();
    let answer: Answer | undefined;
    // The poller has seen the upstream's success; before its write, the whole cancel runs.
    before.completed = async () => {
      answer = await cancelVideo(gw, id);
    };
    upstream.jobs.set(upId, { status: 'succeeded', output_urls: ['https://v.test/r.mp4'], cost: 0.3 });
    await expect.poll(() => answer?.status, { timeout: 5000, interval: 10 }).toBe(200);
    expect(answer!.json.status).toBe('cancelled');
    await new Promise((r) => setTimeout(r, 100)); // poll rounds go by
    const job = (await getVideo(gw, id)).json;
    expect(job.status).toBe('cancelled');
    expect(job).not.toHaveProperty('usage');
    expect(await gw.store.getLedger(job.generation_id)).toBeNull();
    expect((await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))?.billed).toBe(false);
    expect(await gw.store.listUnfinishedVideoJobs(10)).toEqual([]);
    expect(await balance(gw)).toBe(10);
  });
});

describe('video jobs with the workspace\'s own provider key (BYOK)', () => {
  const ENCRYPTION_KEY = randomBytes(32);
  const OWN = `sk-own-video-${randomBytes(12).toString('hex')}`;
  let g: TestGateway | undefined;
  afterEach(async () => {
    await g?.close();
    g = undefined;
  });

  /** A gateway with an encryption key, no credit, and the workspace's own key for the http-video provider. */
  async function start(extra = ''): Promise<TestGateway> {
    g = await startTestGateway({ yaml: `${videoConfigYaml({ upstreamUrl: upstream.url, extra })}byok: { encryption_key: ${ENCRYPTION_KEY.toString('base64')} }\n` });
    const ws = g.keyRecord.workspaceId;
    await g.store.putByokKey({ workspaceId: ws, provider: 'job-upstream', secret: sealProviderKey(OWN, ENCRYPTION_KEY, byokContext(ws, 'job-upstream')), label: maskProviderKey(OWN) });
    return g;
  }

  const bearers = () => upstream.received.map((r) => r.headers.authorization);

  it('is submitted, polled and billed with it: no credit needed or spent, is_byok in the job and its ledger row', async () => {
    const gw = await start();
    const before = (await gw.store.findAccount(gw.keyRecord.accountId))!.balanceUsd;
    expect(before).toBe(0); // a prepaid account without credit: only a job on its own key is accepted
    const id = await startJob(gw, { model: 'http/video', prompt: 'a lighthouse' });
    const upId = (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId;
    upstream.jobs.set(upId, { status: 'succeeded', output_urls: ['https://v.test/own.mp4'], cost: 0.3 });
    const done = await waitForStatus(gw, id, 'completed');
    expect(done.usage).toEqual({ cost: 0.3, is_byok: true });
    expect(new Set(bearers())).toEqual(new Set([`Bearer ${OWN}`]));
    expect(upstream.received.map((r) => r.method)).toEqual(expect.arrayContaining(['POST', 'GET']));
    await expect.poll(async () => (await gw.store.getLedger(done.generation_id))?.isByok).toBe(true);
    expect((await gw.store.findAccount(gw.keyRecord.accountId))!.balanceUsd).toBe(before);
    expect(gw.logs.join('')).not.toContain(OWN);
  });

  it("is checked as a BYOK chat request is: budgets that count BYOK spend apply, others do not; a negative balance refuses it", async () => {
    const budget = (includeByok: boolean) => `workspaces:\n  - { name: default, budgets: [{ id: ws-daily, limit_usd: 1, reset_interval: daily, include_byok: ${includeByok} }] }\n`;
    const byokSpend = (gw: TestGateway) => spent(gw, gw.keyRecord.id, 1.5, { isByok: true, endpoint: 'videos', model: 'http/video' });
    // A budget that counts BYOK spend, spent by BYOK spend: the job is refused before it is submitted.
    let gw = await start(budget(true));
    await byokSpend(gw);
    const refused = await createVideo(gw, { model: 'http/video', prompt: 'x' });
    expect(refused.status).toBe(403);
    expect(refused.json.error.metadata).toMatchObject({ limit_source: 'gateway_workspace_budget', spend_usd: 1.5, limit_usd: 1 });
    expect(upstream.received.filter((r) => r.method !== 'GET')).toEqual([]); // nothing submitted (a poll a closed gateway aborted may still arrive)
    await gw.close();
    // One that does not count it does not apply; with no credit at all (balance 0) the job still starts.
    gw = await start(budget(false));
    await byokSpend(gw);
    expect((await createVideo(gw, { model: 'http/video', prompt: 'x' })).status).toBe(200);
    // A negative balance refuses even a job on the workspace's own key (spec 8.2.1, as for chat).
    await gw.store.addCredits(gw.keyRecord.accountId, -0.5);
    gw.gateway.spend.forgetAccount(gw.keyRecord.accountId);
    const negative = await createVideo(gw, { model: 'http/video', prompt: 'y' });
    expect(negative.status).toBe(402);
    expect(negative.json.error.metadata).toMatchObject({ limit_source: 'gateway_credits', reason: 'insufficient_credits' });
  });

  it('is cancelled with it; a job whose key was deleted since waits, and its cancel is a 502 provider_unavailable, never the operator key', async () => {
    const gw = await start();
    const id = await startJob(gw, { model: 'http/video', prompt: 'x' });
    const upId = (await gw.store.getVideoJob(id, gw.keyRecord.workspaceId))!.upstreamJobId;
    const cancelled = await cancelVideo(gw, id);
    expect(cancelled.json.status).toBe('cancelled');
    // (found by its path: a poll round under way may still log a GET after it)
    expect(upstream.received.find((r) => r.path === `/v1/videos/${upId}/cancel`)).toMatchObject({ method: 'POST', headers: { authorization: `Bearer ${OWN}` } });

    const second = await startJob(gw, { model: 'http/video', prompt: 'y' });
    await gw.store.deleteByokKey(gw.keyRecord.workspaceId, 'job-upstream');
    await new Promise((r) => setTimeout(r, 5_200)); // the workspace's keys are cached for 5 s
    const seen = upstream.received.length;
    const refused = await cancelVideo(gw, second);
    expect(refused.status).toBe(502);
    expect(refused.json.error.metadata).toMatchObject({ error_type: 'provider_unavailable', provider_name: 'job-upstream' });
    expect((await getVideo(gw, second)).json.status).toBe('pending');
    expect(upstream.received.slice(seen).some((r) => r.headers.authorization === 'Bearer sk-video-upstream-secret')).toBe(false);
    expect(gw.logs.join('')).toContain('polling a video job failed');
  }, 15_000);

  it('a workspace without its own key for the provider: the configured key, not BYOK, and the balance is checked', async () => {
    const gw = await start();
    await gw.store.deleteByokKey(gw.keyRecord.workspaceId, 'job-upstream');
    const other = await gw.store.ensureWorkspace('other', gw.keyRecord.accountId);
    const key = await gw.createKey({ workspaceId: other.id, name: 'other' });
    const broke = await createVideo(gw, { model: 'http/video', prompt: 'x' }, key.secret);
    expect(broke.status).toBe(402);
    await fund(gw);
    const ok = await createVideo(gw, { model: 'http/video', prompt: 'x' }, key.secret);
    expect(ok.status).toBe(200);
    expect(upstream.received.filter((r) => r.method === 'POST').at(-1)!.headers.authorization).toBe('Bearer sk-video-upstream-secret');
    expect((await gw.store.getVideoJob(ok.json.id, other.id))!.isByok).toBe(false);
  });
});
