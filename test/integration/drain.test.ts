import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store';
import { startFakeVideoUpstream, type FakeVideoUpstream } from '../fixtures/fake-video-upstream';
import { startTestGateway } from '../fixtures/gateway';
import { fund, startJob, videoConfigYaml } from '../fixtures/videos';

/**
 * Gateway.close() (the drain `gateway serve` runs on SIGTERM) with work under way that is not a request in
 * flight (README "Shutdown and probes"): it must end within the drain, not at an upstream's timeout.
 */

let video: FakeVideoUpstream;
beforeAll(async () => {
  video = await startFakeVideoUpstream();
});
afterAll(async () => {
  await video?.close();
});

/** `p`, or 'late' once `ms` passed. */
function by<T>(p: Promise<T>, ms: number): Promise<T | 'late'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<'late'>((r) => (timer = setTimeout(() => r('late'), ms)))]).finally(() => clearTimeout(timer));
}

describe('a shutdown while a video poll round waits on its upstream', () => {
  it('aborts the poll (it waited for the provider timeout_ms); the job is polled again after the restart', async () => {
    // An upstream that does not answer the poll, with a 60 s timeout: the exit had waited for all of it.
    const yaml = videoConfigYaml({ upstreamUrl: video.url, pollIntervalMs: 10 }).replace('timeout_ms: 500', 'timeout_ms: 60000');
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    const g = await startTestGateway({ yaml, store });
    await fund(g);
    const id = await startJob(g, { model: 'http/video', prompt: 'a slow one' });
    const polls = () => video.received.filter((r) => r.method === 'GET').length;
    const before = polls();
    video.faults.push('hang');
    await expect.poll(polls, { timeout: 5000, interval: 10 }).toBeGreaterThan(before);
    expect(await by(g.close(), 3000)).toBeUndefined();
    // Left as it was, no error logged for the stop, for the next start's poller.
    expect((await store.getVideoJob(id, g.keyRecord.workspaceId))?.status).toBe('pending');
    expect(g.logs.join('')).not.toContain('polling a video job failed');
    await store.close();
  }, 30_000);
});
