import { afterEach, describe, expect, it } from 'vitest';
import { post, startTestGateway, type TestGateway } from '../fixtures/gateway';
import { cancelVideo, createVideo, fund, getVideo, startJob, videoConfigYaml, waitForStatus, type VideoYamlOptions } from '../fixtures/videos';

const JOB_ID = /^gen-vid-\d{13}-[A-Za-z0-9]{20}$/;
const GENERATION_ID = /^gen-\d+-[A-Za-z0-9]{20}$/;
/** sim/video: per_job 0.05 + per_second 0.1 × the default 5 s. */
const SIM_COST = 0.55;

let open: TestGateway[] = [];
afterEach(async () => {
  await Promise.all(open.map((g) => g.close()));
  open = [];
});

async function start(o: VideoYamlOptions = {}, clock?: () => number): Promise<TestGateway> {
  const g = await startTestGateway({ yaml: videoConfigYaml(o), clock });
  open.push(g);
  await fund(g);
  return g;
}

/** A management key (and a regular one) of a second workspace of the same account. */
async function otherWorkspace(g: TestGateway) {
  const ws = await g.store.ensureWorkspace('other-team', g.keyRecord.accountId);
  const mgmt = await g.createKey({ workspaceId: ws.id, isManagement: true, name: 'other-mgmt' });
  const regular = await g.createKey({ workspaceId: ws.id, name: 'other-regular' });
  return { ws, mgmt: mgmt.secret, regular: regular.secret };
}

const envelope = (code: number, errorType: string) => ({ error: { code, message: expect.any(String), metadata: expect.objectContaining({ error_type: errorType }) } });



/** A gateway with spend checks, a funded account and a key limited to $0.50 whose counter a chat request built. */
async function limitedKeyGateway() {
  const g = await startTestGateway({ yaml: videoConfigYaml().replace('[auth, validate, upstream]', '[auth, validate, budget-check, upstream]') });
  open.push(g);
  await fund(g);
  const limited = await g.createKey({ name: 'limited', limitUsd: 0.5, limitReset: 'monthly' });
  const chat = () => post(`${g.url}/chat/completions`, limited.secret, { model: 'sim/chat', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
  expect((await chat()).status).toBe(200); // builds the key's counter
  return { g, limited, chat };
}

/** A completed, unbilled job of `keyId` stored as jobs created before spend holds were (no `hold`); its id. */
async function completedWithoutHold(g: TestGateway, keyId: string, letter: string): Promise<string> {
  const now = Date.now();
  const id = `gen-vid-${now}-${letter.repeat(20)}`;
  const base = { workspaceId: g.keyRecord.workspaceId, keyId, accountId: g.keyRecord.accountId, userId: 'user_test', model: 'sim/video', provider: 'sim-video' };
  await g.store.createVideoJob({ ...base, id, upstreamModel: 'sim-video-1', upstreamJobId: `up-old-${letter}`, status: 'pending', previousJobId: null, request: { prompt: 'x', params: {} }, createdAt: now, isByok: false });
  await g.store.updateVideoJob(id, 'pending', { status: 'in_progress', updatedAt: now, generationId: `gen-${now}-${letter.toUpperCase().repeat(20)}` });
  await g.store.updateVideoJob(id, 'in_progress', { status: 'completed', updatedAt: now, costUsd: SIM_COST, completedAt: now, expiresAt: now + 3_600_000 });
  return id;
}

describe('POST /videos', () => {
  it('creates a pending job: the id format, the polling URL with the base path, nothing of a processed job yet', async () => {
    const g = await start({ queuedMs: 60_000 });
    const res = await createVideo(g, { model: 'sim/video', prompt: 'a cat on a skateboard', resolution: '720p' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ id: expect.stringMatching(JOB_ID), status: 'pending', polling_url: `/api/v1/videos/${res.json.id}` });
    const stored = await g.store.getVideoJob(res.json.id, g.keyRecord.workspaceId);
    expect(stored).toMatchObject({
      status: 'pending',
      model: 'sim/video',
      provider: 'sim-video',
      upstreamModel: 'sim-video-1',
      keyId: g.keyRecord.id,
      request: { prompt: 'a cat on a skateboard', params: { resolution: '720p', duration_seconds: 5 }, pricing: { per_second: 0.1, per_job: 0.05 } },
      generationId: null,
      billed: false,
    });
    // Regular and management keys may both create.
    expect((await createVideo(g, { model: 'sim/video', prompt: 'x' }, g.managementKey)).status).toBe(200);
  });

  it('400 invalid_request naming the field for bad bodies', async () => {
    const g = await start();
    const cases: [unknown, string][] = [
      [{ model: 'sim/video' }, 'prompt'],
      [{ prompt: 'x' }, 'model'],
      [{ model: 'sim/video', prompt: '' }, 'prompt'],
      [{ model: 'sim/video', prompt: 'x', duration_seconds: 'long' }, 'duration_seconds'],
      [{ model: 'sim/video', prompt: 'x', duration_seconds: 0 }, 'duration_seconds'],
      [{ model: 'sim/video', prompt: 'x', duration_seconds: 61 }, 'duration_seconds'],
      [{ model: 'sim/video', prompt: 'x', seed: 1.5 }, 'seed'],
      [[1, 2], 'body'],
      // Provider parameters beyond 40 000 characters of JSON: each job is stored and read again by every poll round.
      [{ model: 'sim/video', prompt: 'x', extra: 'z'.repeat(40_000) }, 'body'],
    ];
    for (const [body, field] of cases) {
      const res = await createVideo(g, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json).toEqual(envelope(400, 'invalid_request'));
      expect(res.json.error.metadata.field).toBe(field);
    }
    expect(await g.store.listUnfinishedVideoJobs(10)).toEqual([]);
  });

  it('404 for an unknown video model, also for a chat model id (chat and video models are separate)', async () => {
    const g = await start();
    for (const model of ['sim/nope', 'sim/chat']) {
      const res = await createVideo(g, { model, prompt: 'x' });
      expect(res.status).toBe(404);
      expect(res.json).toEqual(envelope(404, 'not_found'));
    }
  });

  it('401 without a key or with a bad one', async () => {
    const g = await start();
    const none = await createVideo(g, { model: 'sim/video', prompt: 'x' }, null);
    expect(none.status).toBe(401);
    expect(none.json).toEqual({ error: { code: 401, message: 'Missing Authentication header', metadata: { error_type: 'authentication' } } });
    expect((await createVideo(g, { model: 'sim/video', prompt: 'x' }, 'sk-gw-v1-nope')).status).toBe(401);
  });

  it('402 gateway_credits when the prepaid account balance is not positive; nothing is submitted or stored', async () => {
    const g = await startTestGateway({ yaml: videoConfigYaml() });
    open.push(g);
    const res = await createVideo(g, { model: 'sim/video', prompt: 'x' });
    expect(res.status).toBe(402);
    expect(res.json).toEqual(envelope(402, 'payment_required'));
    expect(res.json.error.metadata).toMatchObject({ limit_source: 'gateway_credits', reason: 'insufficient_credits' });
    expect(await g.store.listUnfinishedVideoJobs(10)).toEqual([]);
  });

  it('previous_job_id: a completed job of the same workspace continues; another workspace\'s job is 404; an unfinished one 400', async () => {
    const g = await start();
    const first = await startJob(g);
    await waitForStatus(g, first, 'completed');
    const next = await createVideo(g, { model: 'sim/video', prompt: 'and then it jumps', previous_job_id: first });
    expect(next.status).toBe(200);
    expect((await g.store.getVideoJob(next.json.id, g.keyRecord.workspaceId))?.previousJobId).toBe(first);

    const other = await otherWorkspace(g);
    const foreign = await createVideo(g, { model: 'sim/video', prompt: 'x', previous_job_id: first }, other.regular);
    expect(foreign.status).toBe(404);
    expect(foreign.json).toEqual(envelope(404, 'not_found'));
    const unknown = await createVideo(g, { model: 'sim/video', prompt: 'x', previous_job_id: 'gen-vid-1-aaaaaaaaaaaaaaaaaaaa' });
    expect(unknown.status).toBe(404);

    const g2 = await start({ queuedMs: 60_000 });
    const pending = await startJob(g2);
    const early = await createVideo(g2, { model: 'sim/video', prompt: 'x', previous_job_id: pending });
    expect(early.status).toBe(400);
    expect(early.json.error.metadata).toMatchObject({ error_type: 'invalid_request', field: 'previous_job_id' });
  });
});

describe('GET /videos/{jobId}: the statuses of spec 7.11', () => {
  it('200: the job object of spec 2.3', async () => {
    const g = await start({ queuedMs: 60_000 });
    const id = await startJob(g);
    const res = await getVideo(g, id);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ id, status: 'pending', polling_url: `/api/v1/videos/${id}` });
  });

  it('401 without credentials, with a malformed header and with an unknown or revoked key', async () => {
    const g = await start();
    const id = await startJob(g);
    const none = await getVideo(g, id, null);
    expect(none.status).toBe(401);
    expect(none.json).toEqual({ error: { code: 401, message: 'Missing Authentication header', metadata: { error_type: 'authentication' } } });
    const malformed = await fetch(`${g.url}/videos/${id}`, { headers: { authorization: 'Basic abc' } });
    expect(malformed.status).toBe(401);
    expect((await getVideo(g, id, 'sk-gw-v1-unknown')).json).toEqual(envelope(401, 'authentication'));
    const revoked = await g.createKey({ isManagement: true, name: 'revoked' });
    await g.store.revokeKey(revoked.record.id);
    expect((await getVideo(g, id, revoked.secret)).status).toBe(401);
  });

  it('403 permission_denied for a regular key, before any lookup (the same for unknown ids)', async () => {
    const g = await start();
    const id = await startJob(g);
    for (const jobId of [id, 'gen-vid-1-unknownunknownunknow']) {
      const res = await getVideo(g, jobId, g.key);
      expect(res.status).toBe(403);
      expect(res.json).toEqual(envelope(403, 'permission_denied'));
      expect(res.json.error.message).toBe('Only management keys can perform this operation');
    }
  });

  it('404 not_found for an unknown id and for another workspace\'s job, with the same answer', async () => {
    const g = await start();
    const id = await startJob(g);
    const other = await otherWorkspace(g);
    const foreign = await getVideo(g, id, other.mgmt);
    const unknown = await getVideo(g, 'gen-vid-1-unknownunknownunknow', other.mgmt);
    expect(foreign.status).toBe(404);
    expect(unknown.status).toBe(404);
    expect(foreign.json).toEqual(envelope(404, 'not_found'));
    expect(Object.keys(foreign.json.error.metadata)).toEqual(Object.keys(unknown.json.error.metadata));
    expect(foreign.json.error.message.replace(id, 'ID')).toBe(unknown.json.error.message.replace('gen-vid-1-unknownunknownunknow', 'ID'));
    // The owner's workspace still sees it.
    expect((await getVideo(g, id)).status).toBe(200);
    // A very long id is quoted cut short (the whole 5000 characters were echoed).
    const long = await getVideo(g, 'x'.repeat(5000), other.mgmt);
    expect(long.status).toBe(404);
    expect(long.json.error.message).toBe(`Video job ${'x'.repeat(200)}… not found`);
  });

  it('500 server with the generic message when the store fails', async () => {
    const g = await start();
    const id = await startJob(g);
    const original = g.store.getVideoJob.bind(g.store);
    g.store.getVideoJob = async () => {
      throw new Error('disk I/O error at /secret/path');
    };
    try {
      const res = await getVideo(g, id);
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ error: { code: 500, message: 'Internal server error', metadata: { error_type: 'server' } } });
    } finally {
      g.store.getVideoJob = original;
    }
    expect(g.logs.join('')).toContain('disk I/O error');
  });
});

describe('the job state machine with the simulated provider', () => {
  it('pending → in_progress (generation id) → completed with urls, usage and expiry; billed once to the ledger', async () => {
    const g = await start({ queuedMs: 30, runningMs: 1000 });
    const before = (await g.store.findAccount(g.keyRecord.accountId))!.balanceUsd;
    const id = await startJob(g);
    const running = await waitForStatus(g, id, 'in_progress');
    expect(running).toEqual({ id, status: 'in_progress', polling_url: `/api/v1/videos/${id}`, generation_id: expect.stringMatching(GENERATION_ID) });
    const done = await waitForStatus(g, id, 'completed');
    const now = Math.floor(Date.now() / 1000);
    expect(done).toEqual({
      id,
      status: 'completed',
      polling_url: `/api/v1/videos/${id}`,
      generation_id: running.generation_id,
      unsigned_urls: [expect.stringMatching(/^https:\/\/cdn\.test\/simvid-\d+-5-s-[A-Za-z0-9]+\.mp4$/)],
      usage: { cost: SIM_COST, is_byok: false },
      expires_at: expect.any(Number),
    });
    expect(Number.isInteger(done.expires_at)).toBe(true);
    expect(done.expires_at).toBeGreaterThanOrEqual(now + 3600 - 5);
    expect(done.expires_at).toBeLessThanOrEqual(now + 3600 + 1);
    await expect.poll(async () => (await g.store.getVideoJob(id, g.keyRecord.workspaceId))?.billed).toBe(true);
    expect(await g.store.getLedger(done.generation_id)).toMatchObject({
      endpoint: 'videos',
      model: 'sim/video',
      provider: 'sim-video',
      upstreamModel: 'sim-video-1',
      keyId: g.keyRecord.id,
      costUsd: SIM_COST,
      isByok: false,
      status: 'completed',
    });
    expect((await g.store.findAccount(g.keyRecord.accountId))!.balanceUsd).toBeCloseTo(before - SIM_COST, 9);
    const key = (await (await fetch(`${g.url}/key`, { headers: { authorization: `Bearer ${g.key}` } })).json()) as { data: { usage: number } };
    expect(key.data.usage).toBeCloseTo(SIM_COST, 9);
  });

  it('a billed job counts against the key\'s limit in the spend counters the chat checks already hold', async () => {
    const g = await startTestGateway({ yaml: videoConfigYaml().replace('[auth, validate, upstream]', '[auth, validate, budget-check, upstream]') });
    open.push(g);
    await fund(g);
    const limited = await g.createKey({ name: 'limited', limitUsd: 0.5, limitReset: 'monthly' });
    const chat = () =>
      fetch(`${g.url}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${limited.secret}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim/chat', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
      });
    // The first chat request builds the key's spend counter from the ledger.
    expect((await chat()).status).toBe(200);
    const res = await createVideo(g, { model: 'sim/video', prompt: 'x' }, limited.secret);
    expect(res.status).toBe(200);
    await waitForStatus(g, res.json.id, 'completed');
    await expect.poll(async () => (await g.store.getVideoJob(res.json.id, g.keyRecord.workspaceId))?.billed).toBe(true);
    const refused = await chat();
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as any).error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', scope: 'key_limit' });
  });

  it("a job created before spend holds: its billed cost reaches the spend counters also when the shared state refused it unsent the first time", async () => {
    const { g, limited, chat } = await limitedKeyGateway();
    // A completed job as one created before holds is stored: no `hold` in its request.
    await g.gateway.videos.stop();
    const id = await completedWithoutHold(g, limited.record.id, 'o');
    const state = g.gateway.state;
    const settle = state.settle.bind(state);
    const seen: { costNano: number; retry?: boolean }[] = [];
    let refuse = 1;
    state.settle = async (input) => {
      if (input.groups.length === 0 && refuse-- > 0) throw new Error("Stream isn't writeable and enableOfflineQueue options is false");
      if (input.groups.length === 0) seen.push({ costNano: input.costNano, retry: input.retry });
      return settle(input);
    };
    await g.gateway.videos.poll();
    expect((await g.store.getVideoJob(id, g.keyRecord.workspaceId))?.billed).toBe(true);
    await expect.poll(() => seen.length, { timeout: 5000 }).toBe(1);
    expect(seen[0]).toMatchObject({ retry: false });
    expect(seen[0].costNano).toBeGreaterThan(0);
    expect((await chat()).status).toBe(403); // the video's cost now counts against the key's limit
  });

  it('a job created before spend holds whose cost count timed out (it may have run): the counters are rebuilt from the ledger, so the cost counts once', async () => {
    const { g, limited, chat } = await limitedKeyGateway();
    await g.gateway.videos.stop();
    const id = await completedWithoutHold(g, limited.record.id, 't');
    const state = g.gateway.state;
    const settle = state.settle.bind(state);
    // The count is lost to a timeout without reaching the counter (the worse of the two cases: had it run, a
    // retry would count it twice).
    let refuse = 1;
    state.settle = async (input) => {
      if (input.groups.length === 0 && input.costNano > 0 && refuse-- > 0) throw new Error('Command timed out');
      return settle(input);
    };
    await g.gateway.videos.poll();
    expect((await g.store.getVideoJob(id, g.keyRecord.workspaceId))?.billed).toBe(true);
    // The counter is deleted (retried off the request path) and the next request rebuilds it with the job's cost.
    await expect.poll(async () => (await chat()).status, { timeout: 5000 }).toBe(403);
  });

  it('one poll round reaches every job with work left, beyond one page', async () => {
    const g = await start();
    await g.gateway.videos.stop();
    const now = Date.now();
    const ws = g.keyRecord.workspaceId;
    const ids: string[] = [];
    for (let i = 0; i < 205; i++) {
      const id = `gen-vid-${now}-${String(i).padStart(20, '0')}`;
      ids.push(id);
      const base = { workspaceId: ws, keyId: g.keyRecord.id, accountId: g.keyRecord.accountId, userId: 'user_test', model: 'sim/video', provider: 'sim-video', upstreamModel: 'sim-video-1' };
      await g.store.createVideoJob({ ...base, id, upstreamJobId: `up-${i}`, status: 'pending', previousJobId: null, request: { prompt: 'x', params: {} }, createdAt: now, isByok: false });
      await g.store.updateVideoJob(id, 'pending', { status: 'in_progress', updatedAt: now, generationId: `gen-${i}-${String(i).padStart(20, 'g')}` });
      await g.store.updateVideoJob(id, 'in_progress', { status: 'completed', updatedAt: now, costUsd: 0.01, completedAt: now, expiresAt: now + 3_600_000 });
    }
    await g.gateway.videos.poll();
    const jobs = await Promise.all(ids.map((id) => g.store.getVideoJob(id, ws)));
    expect(jobs.filter((j) => j?.billed)).toHaveLength(205);
    expect((await g.store.usageForKey(g.keyRecord.id)).usage).toBeCloseTo(2.05, 9);
  });

  it('the cost follows the requested duration', async () => {
    const g = await start();
    const id = await startJob(g, { model: 'sim/video', prompt: 'longer', duration_seconds: 12 });
    const done = await waitForStatus(g, id, 'completed');
    expect(done.usage).toEqual({ cost: 1.25, is_byok: false });
  });

  it('failed: the provider fails the job; an error, no urls, no usage, nothing billed', async () => {
    const g = await start();
    const before = (await g.store.findAccount(g.keyRecord.accountId))!.balanceUsd;
    const id = await startJob(g, { model: 'sim/video-broken', prompt: 'doomed' });
    const failed = await waitForStatus(g, id, 'failed');
    expect(failed).toMatchObject({ id, status: 'failed', error: { message: expect.stringContaining('failed') } });
    expect(failed).not.toHaveProperty('unsigned_urls');
    expect(failed).not.toHaveProperty('usage');
    expect(failed).not.toHaveProperty('expires_at');
    if (failed.generation_id) expect(await g.store.getLedger(failed.generation_id)).toBeNull();
    expect((await g.store.findAccount(g.keyRecord.accountId))!.balanceUsd).toBe(before);
    expect(await g.store.listUnfinishedVideoJobs(10)).toEqual([]);
  });

  it('cancelled from pending: no generation id, never polled on, repeated cancels answer the same job', async () => {
    const g = await start({ queuedMs: 60_000 });
    const id = await startJob(g);
    const res = await cancelVideo(g, id);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ id, status: 'cancelled', polling_url: `/api/v1/videos/${id}` });
    expect((await getVideo(g, id)).json.status).toBe('cancelled');
    expect(await g.store.listUnfinishedVideoJobs(10)).toEqual([]);
    const again = await cancelVideo(g, id);
    expect(again.status).toBe(200);
    expect(again.json.status).toBe('cancelled');
  });

  it('cancelled from in_progress keeps its generation id and bills nothing', async () => {
    const g = await start({ queuedMs: 0, runningMs: 60_000 });
    const id = await startJob(g);
    const running = await waitForStatus(g, id, 'in_progress');
    const res = await cancelVideo(g, id);
    expect(res.json).toEqual({ id, status: 'cancelled', polling_url: `/api/v1/videos/${id}`, generation_id: running.generation_id });
    expect(await g.store.getLedger(running.generation_id)).toBeNull();
  });

  it('cancel: 409 conflict for a finished job; 403, 404 and 401 like GET', async () => {
    const g = await start();
    const id = await startJob(g);
    await waitForStatus(g, id, 'completed');
    const conflict = await cancelVideo(g, id);
    expect(conflict.status).toBe(409);
    expect(conflict.json).toEqual(envelope(409, 'conflict'));
    expect(conflict.json.error.metadata.status).toBe('completed');

    const forbidden = await cancelVideo(g, id, g.key);
    expect(forbidden.status).toBe(403);
    expect(forbidden.json.error.message).toBe('Only management keys can perform this operation');
    const other = await otherWorkspace(g);
    expect((await cancelVideo(g, id, other.mgmt)).status).toBe(404);
    expect((await cancelVideo(g, 'gen-vid-1-unknownunknownunknow')).status).toBe(404);
    expect((await cancelVideo(g, id, null)).status).toBe(401);
    expect((await getVideo(g, id)).json.status).toBe('completed');
  });

  it('expired: a completed job past its expiry reads as expired (urls and expiry gone, usage kept); the poller expires it too', async () => {
    let offset = 0;
    const g = await start({ outputTtlS: 60 }, () => Date.now() + offset);
    const [a, b] = [await startJob(g), await startJob(g)];
    const done = await waitForStatus(g, a, 'completed');
    await waitForStatus(g, b, 'completed');
    await expect.poll(async () => (await g.store.getVideoJob(b, g.keyRecord.workspaceId))?.billed).toBe(true);
    offset = 61_000;
    // Read first: the GET applies the expiry itself.
    const expired = (await getVideo(g, a)).json;
    expect(expired).toEqual({ id: a, status: 'expired', polling_url: `/api/v1/videos/${a}`, generation_id: done.generation_id, usage: { cost: SIM_COST, is_byok: false } });
    // Never read: the poller expires it.
    await expect.poll(async () => (await g.store.getVideoJob(b, g.keyRecord.workspaceId))?.status).toBe('expired');
    // Still billed exactly once each.
    await g.gateway.ledger.flush();
    expect((await g.store.usageForKey(g.keyRecord.id)).usage).toBeCloseTo(2 * SIM_COST, 9);
  });
});
