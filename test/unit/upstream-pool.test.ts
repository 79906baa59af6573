import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { agentFor, closeUpstreamPool } from '../../src/providers/http';

/**
 * The last step of `gateway serve`'s shutdown (README "Shutdown and probes"): the upstream pools are closed
 * after the drain, when what is still running there is a call nothing waits for (a timed-out video job's
 * cancel, sent without waiting).
 */

const servers: Server[] = [];
afterAll(() =>
  Promise.all(
    servers.map((s) => {
      s.closeAllConnections();
      return new Promise((r) => s.close(r));
    }),
  ),
);

describe('closeUpstreamPool', () => {
  it('does not wait for a call still running (undici close() waited for it, up to the provider timeout_ms)', async () => {
    let arrived!: () => void;
    const got = new Promise<void>((r) => (arrived = r));
    const server = createServer(() => arrived()); // never answers
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    const stray = agentFor(1000)
      .request({ origin: `http://127.0.0.1:${port}`, path: '/v1/videos/up-1/cancel', method: 'POST', body: '{}', headersTimeout: 60_000 })
      .then(() => 'answered', () => 'ended');
    await got;
    let timer: NodeJS.Timeout | undefined;
    const closed = await Promise.race([closeUpstreamPool().then(() => 'closed'), new Promise((r) => (timer = setTimeout(() => r('late'), 2000)))]);
    clearTimeout(timer);
    expect(closed).toBe('closed');
    expect(await stray).toBe('ended');
  });
});
