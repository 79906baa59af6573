import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store';
import { startFakeVideoUpstream, type FakeVideoUpstream } from '../fixtures/fake-video-upstream';
import { startTestGateway, testConfigYaml } from '../fixtures/gateway';
import { cancelVideo, fund, startJob, videoConfigYaml } from '../fixtures/videos';

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

describe('a video cancel in flight whose upstream does not answer', () => {
  it('is cut at the drain timeout with the typed 503 and Connection: close (the call went on and the client got a closed connection)', async () => {
    // No poll after the first round; a 60 s upstream timeout; a 300 ms drain.
    const yaml = videoConfigYaml({ upstreamUrl: video.url, pollIntervalMs: 600_000 })
      .replace('timeout_ms: 500', 'timeout_ms: 60000')
      .replace('watch_config: false }', 'watch_config: false, drain_timeout_ms: 300 }');
    const g = await startTestGateway({ yaml });
    await fund(g);
    const id = await startJob(g, { model: 'http/video', prompt: 'to be cancelled' });
    const cancels = () => video.received.filter((r) => r.path.endsWith('/cancel')).length;
    video.faults.push('hang');
    const answer = fetch(`${g.url}/videos/${id}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${g.managementKey}` } });
    await expect.poll(cancels, { timeout: 5000, interval: 10 }).toBe(1);
    const closed = g.close();
    const res = await answer;
    expect(res.status).toBe(503);
    expect(res.headers.get('connection')).toBe('close');
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ code: 503, metadata: { error_type: 'provider_overloaded', reason: 'shutting_down' } });
    expect(await by(closed, 3000)).toBeUndefined();
  }, 30_000);
});

describe('a request whose body is still arriving at the drain timeout', () => {
  it('gets the typed 503 with Connection: close (it got no answer, its connection closed 2 s later)', async () => {
    const yaml = testConfigYaml().replace('watch_config: false }', 'watch_config: false, drain_timeout_ms: 300 }');
    const g = await startTestGateway({ yaml });
    const u = new URL(g.url);
    const sock = connect(Number(u.port), u.hostname);
    let got = '';
    sock.on('data', (d) => (got += d));
    const ended = new Promise((r) => sock.on('close', r));
    const head = `POST ${u.pathname}/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${g.key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n`;
    sock.write(`${head}{"model":`);
    // In flight (counted by the drain) once its key was checked and its body is being read.
    await expect.poll(() => g.gateway.drain.inFlight, { timeout: 5000, interval: 5 }).toBe(1);
    const closed = g.close();
    await by(ended, 5000);
    expect(got).toMatch(/^HTTP\/1\.1 503 /);
    expect(got).toMatch(/\r\nconnection: close\r\n/i);
    expect(got).toContain('"reason":"shutting_down"');
    expect(await by(closed, 3000)).toBeUndefined();
  }, 30_000);
});
