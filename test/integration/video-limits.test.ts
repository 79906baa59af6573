import { afterEach, describe, expect, it } from 'vitest';
import { post, startTestGateway, type TestGateway } from '../fixtures/gateway';
import { fund, videoConfigYaml } from '../fixtures/videos';

let open: TestGateway[] = [];
afterEach(async () => {
  await Promise.all(open.map((g) => g.close()));
  open = [];
});

/** A gateway whose clock the test moves (jobs stay pending: the simulated provider follows the clock too). */
async function start(extra: string, clock: () => number, pipeline?: string): Promise<TestGateway> {
  const g = await startTestGateway({ yaml: videoConfigYaml({ extra, pipeline }), clock });
  open.push(g);
  await fund(g);
  return g;
}

const job = (model = 'sim/video') => ({ model, prompt: 'a cat on a skateboard' });
const chat = { model: 'sim/chat', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] };

describe('POST /videos is rate-limited by rate_limits, as chat requests are', () => {
  it("the key's window, shared with its chat requests: 429 in the standard envelope with X-RateLimit-* and Retry-After, and no job", async () => {
    let now = Date.UTC(2026, 10, 22, 10, 0, 10);
    const g = await start('rate_limits: { key: { requests: 3, window_s: 60 } }\n', () => now, '[auth, validate, rate-limit, upstream]');
    // A bad body is refused before it is counted.
    expect((await post(`${g.url}/videos`, g.key, { model: 'sim/video' })).status).toBe(400);
    for (let i = 0; i < 2; i++) {
      const ok = await post(`${g.url}/videos`, g.key, job());
      expect(ok.status).toBe(200);
      expect([...ok.headers.keys()].filter((h) => h.startsWith('x-ratelimit'))).toEqual([]);
    }
    expect((await post(`${g.url}/chat/completions`, g.key, chat)).status).toBe(200); // the third request of the window
    const r = await post(`${g.url}/videos`, g.key, job());
    expect(r.status).toBe(429);
    expect(r.json).toEqual({
      error: { code: 429, message: expect.any(String), metadata: expect.objectContaining({ error_type: 'rate_limit_exceeded', scope: 'key', limit: 3 }) },
    });
    expect(r.headers.get('x-ratelimit-limit')).toBe('3');
    expect(r.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(r.headers.get('x-ratelimit-reset')).toBe(String(Date.UTC(2026, 10, 22, 10, 1)));
    expect(r.headers.get('retry-after')).toBe('50');
    expect(await g.store.listUnfinishedVideoJobs(10)).toHaveLength(2); // the refused one stored nothing
    // The chat side sees the same window full.
    expect((await post(`${g.url}/chat/completions`, g.key, chat)).status).toBe(429);
    // Another key has its own window; the next window admits the key again.
    const other = await g.createKey();
    expect((await post(`${g.url}/videos`, other.secret, job())).status).toBe(200);
    now += 50_000;
    expect((await post(`${g.url}/videos`, g.key, job())).status).toBe(200);
  });

  it('a rate_limits.models line naming a video model limits the creation of its jobs only', async () => {
    const now = Date.UTC(2026, 10, 22, 10, 0, 10);
    const g = await start('rate_limits: { models: [{ model: sim/video, requests: 1, window_s: 60, per: key }] }\n', () => now, '[auth, validate, rate-limit, upstream]');
    expect((await post(`${g.url}/videos`, g.key, job())).status).toBe(200);
    const r = await post(`${g.url}/videos`, g.key, job());
    expect(r.status).toBe(429);
    expect(r.json.error.metadata).toMatchObject({ error_type: 'rate_limit_exceeded', scope: 'model', limit: 1 });
    expect(r.headers.get('retry-after')).toBe('50');
    // Other models and other keys are not in that window.
    expect((await post(`${g.url}/videos`, g.key, job('sim/video-broken'))).status).toBe(200);
    expect((await post(`${g.url}/chat/completions`, g.key, chat)).status).toBe(200);
    expect((await post(`${g.url}/videos`, (await g.createKey()).secret, job())).status).toBe(200);
  });

  it('a rate_limits.models line naming neither a chat nor a video model still fails the config', async () => {
    await expect(start('rate_limits: { models: [{ model: sim/nope, requests: 1 }] }\n', Date.now)).rejects.toThrow(/rate_limits\.models\[0\]\.model: unknown model "sim\/nope"/);
  });
});
