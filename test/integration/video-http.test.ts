import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { HttpVideoProviderConfig } from '../../src/config/types';
import { GatewayError } from '../../src/errors/gateway-error';
import { createHttpVideoProvider } from '../../src/providers/http-video';
import { startFakeVideoUpstream, type FakeVideoUpstream } from '../fixtures/fake-video-upstream';
import { startTestGateway, type TestGateway } from '../fixtures/gateway';
import { cancelVideo, createVideo, fund, getVideo, startJob, videoConfigYaml, waitForStatus } from '../fixtures/videos';

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

  it('cancel: POST {base_url}/videos/{id}/cancel', async () => {
    const p = adapter();
    const { upstreamJobId: id } = await p.submit({ model: 'm', prompt: 'x', params: {} }, new AbortController().signal);
    await p.cancel(id);
    expect(upstream.received.at(-1)).toMatchObject({ method: 'POST', path: `/v1/videos/${id}/cancel` });
    expect(upstream.jobs.get(id)?.status).toBe('cancelled');
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
    const started = Date.now();
    expect((await failure(p.poll('up-1'))).errorType).toBe('timeout');
    expect(Date.now() - started).toBeLessThan(3000);
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

  async function start(jobTimeoutS = 600): Promise<TestGateway> {
    g = await startTestGateway({ yaml: videoConfigYaml({ upstreamUrl: upstream.url, jobTimeoutS }), clock: () => Date.now() + offset });
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

  it('an upstream that fails the submission: its typed error, and no job', async () => {
    const gw = await start();
    upstream.faults.push({ status: 503, on: 'submit' });
    const res = await createVideo(gw, { model: 'http/video', prompt: 'x' });
    expect(res.status).toBe(503);
    expect(res.json).toEqual({ error: { code: 503, message: expect.any(String), metadata: expect.objectContaining({ error_type: 'provider_overloaded', provider_code: 503 }) } });
    expect(await gw.store.listUnfinishedVideoJobs(Date.now(), 10)).toEqual([]);
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
