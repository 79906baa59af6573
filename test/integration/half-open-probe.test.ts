import { describe, expect, it } from 'vitest';
import { post, type TestGateway } from '../fixtures/gateway';
import { breakerPairYaml } from '../fixtures/pairs';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

/**
 * A half-open breaker's probe alone decides whether the breaker closes or reopens: what other requests make of
 * the endpoint meanwhile (one that tried it as a last resort, without a pass; one let through before the
 * breaker opened) is measured, but moves no breaker.
 */
const yaml = () => breakerPairYaml(t.upstream.url);
const KEY = 'fake-openai/first-chat';

let g: TestGateway;
const ask = () => post(`${g.url}/chat/completions`, g.key, { model: 'pair/chat', messages: [{ role: 'user', content: 'hi' }] });
/** The upstream models the fake saw since `from`. */
const seen = (from: number) => t.upstream.received.slice(from).map((r) => r.body.model);

/**
 * Opens the first endpoint's breaker (one failure) and waits out its cooldown: the next request is its probe.
 * The cooldown is then made long (as a reload would), so the probe cannot expire while a slow machine runs the test.
 */
async function halfOpen(): Promise<void> {
  t.upstream.scripts.set('first-chat', [{ kind: 'status', status: 503 }]);
  expect((await ask()).status).toBe(200);
  expect(g.gateway.health.state(KEY)).toBe('open');
  await new Promise((r) => setTimeout(r, 350));
  expect(g.gateway.health.state(KEY)).toBe('half_open');
  g.gateway.health.configure({ failureThreshold: 1, cooldownMs: 60_000 });
}

/** Sends a request held at the first endpoint until the returned `release` is called. */
async function held(): Promise<{ request: ReturnType<typeof ask>; release: () => void }> {
  let release!: () => void;
  t.upstream.scripts.set('first-chat', [{ kind: 'hold', until: new Promise<void>((r) => (release = r)) }]);
  const n = t.upstream.received.length;
  const request = ask();
  while (!seen(n).includes('first-chat')) await new Promise((r) => setTimeout(r, 5));
  return { request, release };
}

describe('a half-open probe decides alone', () => {
  it('an endpoint tried as a last resort while its probe is out neither reopens nor closes the breaker', async () => {
    g = await t.start({ yaml: yaml() });
    await halfOpen();
    const { request: probe, release } = await held();
    try {
      const n = t.upstream.received.length;
      // The probe is out: the next requests try the second endpoint first; it fails, and the first is tried
      // anyway, as the last resort.
      t.upstream.scripts.set('second-chat', [{ kind: 'status', status: 503 }, { kind: 'status', status: 503 }]);
      t.upstream.scripts.set('first-chat', [{ kind: 'status', status: 503 }]);
      expect((await ask()).status).toBe(503);
      expect(g.gateway.health.state(KEY)).toBe('half_open'); // its failure had reopened the breaker under the probe
      const served = await ask();
      expect(served.status).toBe(200);
      expect(served.json.model).toBe('pair/chat');
      expect(g.gateway.health.state(KEY)).toBe('half_open'); // its success had closed it, the probe still out
      expect(seen(n)).toEqual(['second-chat', 'first-chat', 'second-chat', 'first-chat']);
    } finally {
      release();
    }
    expect((await probe).status).toBe(200);
    expect(g.gateway.health.state(KEY)).toBe('closed');
  });

  it('a request let through before the breaker opened that succeeds late does not close it while its probe is out', async () => {
    g = await t.start({ yaml: yaml() });
    const early = await held();
    let probe: Awaited<ReturnType<typeof held>> | undefined;
    try {
      await halfOpen();
      probe = await held();
    } finally {
      early.release();
    }
    try {
      expect((await early.request).status).toBe(200); // served by the first endpoint, after its breaker opened
      expect(g.gateway.health.state(KEY)).toBe('half_open');
    } finally {
      probe.release();
    }
    expect((await probe.request).status).toBe(200);
    expect(g.gateway.health.state(KEY)).toBe('closed');
  });

  it('the retry of a 500 on the same endpoint, after the first try opened its breaker, is measured only', async () => {
    g = await t.start({ yaml: yaml() });
    const n = t.upstream.received.length;
    t.upstream.scripts.set('first-chat', [{ kind: 'status', status: 500 }]);
    expect((await ask()).status).toBe(200);
    expect(seen(n)).toEqual(['first-chat', 'first-chat']);
    // The first try's failure opened the breaker (threshold 1); the retry began under the open breaker.
    expect(g.gateway.health.state(KEY)).toBe('open');
  });
});
