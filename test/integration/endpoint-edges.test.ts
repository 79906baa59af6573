import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { post, startTestGateway, type TestGateway } from '../fixtures/gateway';
import { cancelVideo, createVideo, fund, getVideo, videoConfigYaml } from '../fixtures/videos';

/** Spec 4.3-4.5 edge cases: what a client can put in a path or a body that an answer quotes or a store is asked. */

let open: TestGateway[] = [];
afterEach(async () => {
  await Promise.all(open.map((g) => g.close()));
  open = [];
});

async function start(yaml = videoConfigYaml(), clock?: () => number): Promise<TestGateway> {
  const g = await startTestGateway({ yaml, clock });
  open.push(g);
  return g;
}

describe('POST /presets/{slug}/messages: odd values', () => {
  it('an unknown model is named cut at 200 characters, in the message and in metadata.model, as the inference endpoints do', async () => {
    const g = await start();
    const long = 'x'.repeat(5000);
    for (const body of [{ model: long }, { model: 'sim/chat', models: [long] }, { model: 'sim/chat', fallbacks: [{ model: long }] }]) {
      const res = await post(`${g.url}/presets/p/messages`, g.managementKey, { ...body, messages: [] });
      expect(res.status).toBe(404);
      expect(res.json.error.message).toBe(`Model \`${'x'.repeat(200)}…\` is not available on this gateway (see GET /models)`);
      expect(res.json.error.metadata).toEqual({ error_type: 'not_found', model: `${'x'.repeat(200)}…` });
    }
  });
});

/** A completed, billed job of the test key whose outputs expire `ttlMs` from now, stored as the poller leaves one; its id. */
async function completedJob(g: TestGateway, letter: string, ttlMs: number): Promise<string> {
  const now = Date.now();
  const id = `gen-vid-${now}-${letter.repeat(20)}`;
  const k = g.keyRecord;
  await g.store.createVideoJob({
    id, workspaceId: k.workspaceId, keyId: k.id, accountId: k.accountId, userId: 'user_test', model: 'sim/video', provider: 'sim-video',
    upstreamModel: 'sim-video-1', upstreamJobId: `simvid-${now}-5-s-${letter.repeat(10)}`, status: 'pending', previousJobId: null,
    request: { prompt: 'x', params: { duration_seconds: 5 } }, createdAt: now, isByok: false,
  });
  await g.store.updateVideoJob(id, 'pending', { status: 'in_progress', updatedAt: now, generationId: `gen-${now}-${letter.toUpperCase().repeat(20)}` });
  await g.store.updateVideoJob(id, 'in_progress', { status: 'completed', updatedAt: now, urls: ['https://cdn.test/x.mp4'], costUsd: 0.55, completedAt: now, expiresAt: now + ttlMs });
  await g.store.markVideoJobBilled(id);
  return id;
}

describe('a preset an inference request names that no write could have made', () => {
  it('is 404 not_found naming it cut at 200 characters, without a store lookup (one holding a NUL failed a store whose text cannot hold it)', async () => {
    const g = await start();
    const original = g.store.findPreset.bind(g.store);
    // A store whose text columns cannot hold U+0000 refuses the query (SQLite just finds nothing).
    g.store.findPreset = async (workspaceId, slug) => {
      if (slug.includes('\u0000')) throw new Error('invalid byte sequence for encoding "UTF8": 0x00');
      return original(workspaceId, slug);
    };
    const ask = (body: Record<string, unknown>) => post(`${g.url}/messages`, g.key, { max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], ...body });
    const long = await ask({ model: 'sim/chat', preset: 'q'.repeat(5000) });
    expect(long.status).toBe(404);
    expect(long.json.error).toMatchObject({ type: 'not_found_error', message: `Preset \`${'q'.repeat(200)}…\` not found` });
    expect(long.json.metadata).toEqual({ preset: `${'q'.repeat(200)}…` });
    for (const body of [{ model: 'sim/chat', preset: 'p\u0000' }, { model: '@preset/p\u0000' }]) {
      const res = await ask(body);
      expect(res.status).toBe(404);
      expect(res.json.error).toMatchObject({ type: 'not_found_error', message: 'Preset `p\u0000` not found' });
    }
  });
});

describe('a completed job past its expiry, before the poller expired it', () => {
  it('is expired for the cancel (409 naming `expired`) and for a continuation (400), as GET shows it', async () => {
    let offset = 0;
    const g = await start(videoConfigYaml(), () => Date.now() + offset);
    await g.gateway.videos.stop(); // only the requests can expire the jobs
    await fund(g);
    const [a, b] = [await completedJob(g, 'a', 60_000), await completedJob(g, 'b', 60_000)];
    offset = 61_000;
    const next = await createVideo(g, { model: 'sim/video', prompt: 'the storm clears', previous_job_id: a });
    expect(next.status).toBe(400);
    expect(next.json.error).toMatchObject({ message: `Only a completed job can be continued; video job ${a} is expired`, metadata: { error_type: 'invalid_request', field: 'previous_job_id' } });
    const cancel = await cancelVideo(g, b);
    expect(cancel.status).toBe(409);
    expect(cancel.json.error.metadata).toEqual({ error_type: 'conflict', status: 'expired' });
    for (const id of [a, b]) expect((await getVideo(g, id)).json.status).toBe('expired');
  });
});

describe('a job id with a NUL character', () => {
  it('is 404 not_found on GET, cancel and as previous_job_id, also on a store whose text cannot hold one', async () => {
    const g = await start();
    await fund(g);
    const original = g.store.getVideoJob.bind(g.store);
    // A store whose text columns cannot hold U+0000 refuses the query (SQLite just finds nothing).
    g.store.getVideoJob = async (id, workspaceId) => {
      if (id.includes('\u0000')) throw new Error('invalid byte sequence for encoding "UTF8": 0x00');
      return original(id, workspaceId);
    };
    for (const res of [await getVideo(g, 'gen-vid-1-%00'), await cancelVideo(g, 'gen-vid-1-%00')]) {
      expect(res.status).toBe(404);
      expect(res.json.error).toEqual({ code: 404, message: 'Video job gen-vid-1-\u0000 not found', metadata: { error_type: 'not_found' } });
    }
    const next = await createVideo(g, { model: 'sim/video', prompt: 'x', previous_job_id: 'gen-vid-1-\u0000' });
    expect(next.status).toBe(404);
    expect(next.json.error.metadata).toEqual({ error_type: 'not_found', field: 'previous_job_id' });
  });
});

/** A request with any method (fetch refuses TRACE); status, Allow and the parsed body. */
function call(method: string, url: string, key: string): Promise<{ status: number; allow: string | undefined; json: any }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: { authorization: `Bearer ${key}` } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, allow: res.headers.allow, json: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('methods a path is not served with', () => {
  it('405 with Allow also for a method no route has (TRACE, PROPFIND), not the router\'s 501', async () => {
    const g = await start();
    const cases: [string, string, string][] = [
      ['TRACE', '/key', 'HEAD, GET'],
      ['PROPFIND', '/videos/gen-vid-1-aaaaaaaaaaaaaaaaaaaa', 'HEAD, GET'],
      ['TRACE', '/presets/p/messages', 'POST'],
    ];
    for (const [method, path, allow] of cases) {
      const res = await call(method, `${g.url}${path}`, g.managementKey);
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.allow).toBe(allow);
      expect(res.json).toEqual({ error: { code: 405, message: `${method} is not allowed on /api/v1${path} (allowed: ${allow})`, metadata: { error_type: 'invalid_request' } } });
    }
  });
});

describe('paths no route serves', () => {
  it('a long path is named cut at 200 characters in the 404 and the 405 (a 10 KB path was echoed whole)', async () => {
    const g = await start();
    const tail = 'z'.repeat(10_000);
    const missing = await call('GET', `${g.url}/nowhere/${tail}`, g.managementKey);
    expect(missing.status).toBe(404);
    expect(missing.json.error.message).toBe(`No route for GET ${`/api/v1/nowhere/${tail}`.slice(0, 200)}…`);
    const wrong = await call('DELETE', `${g.url}/videos/${tail}`, g.managementKey);
    expect(wrong.status).toBe(405);
    expect(wrong.json.error.message).toBe(`DELETE is not allowed on ${`/api/v1/videos/${tail}`.slice(0, 200)}… (allowed: HEAD, GET)`);
  });
});
