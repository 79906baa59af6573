import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, type TestGateway } from '../fixtures/gateway';
import { breakerPairYaml } from '../fixtures/pairs';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

/**
 * A half-open breaker's probe that is a stream reports back when the stream ends. A stream that ends in a way
 * that tells nothing about the endpoint (the client left, the provider blamed the caller) gives the probe back,
 * as such an attempt does before its answer began: the next request probes.
 */
const yaml = () => breakerPairYaml(t.upstream.url);
const KEY = 'fake-openai/first-chat';
const chunk = (delta: Record<string, unknown>) =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'first-chat', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;

let g: TestGateway;
const body = { model: 'pair/chat', stream: true, messages: [{ role: 'user', content: 'hi' }] };

/** Opens the first endpoint's breaker (one failure) and waits out its cooldown: the next request is its probe. */
async function halfOpen(): Promise<void> {
  t.upstream.scripts.set('first-chat', [{ kind: 'status', status: 503 }]);
  expect((await post(`${g.url}/chat/completions`, g.key, { ...body, stream: false })).status).toBe(200);
  expect(g.gateway.health.state(KEY)).toBe('open');
  await new Promise((r) => setTimeout(r, 350));
  expect(g.gateway.health.state(KEY)).toBe('half_open');
}

describe('a half-open probe that streams', () => {
  it('is given back when the client leaves after the answer began (it stayed out for a whole cooldown)', async () => {
    g = await t.start({ yaml: yaml() });
    await halfOpen();
    t.upstream.scripts.set('first-chat', [{ kind: 'stall' }]);
    const probed = Date.now();
    const controller = new AbortController();
    const res = await fetch(`${g.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${g.key}` },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    const first = new TextDecoder().decode((await res.body!.getReader().read()).value);
    const id = JSON.parse(first.split('\n\n')[0].replace(/^data: /, '')).id;
    controller.abort();
    expect((await ledgerRowSoon(g, id))?.status).toBe('cancelled');
    expect(g.gateway.health.state(KEY)).toBe('half_open');
    // Asked as of just after the probe went out: a probe never given back only expires after a cooldown.
    expect(g.gateway.health.tryAcquire(KEY, probed + 50)).not.toBeNull();
  });

  it('is given back when the provider blames the caller after the answer began', async () => {
    g = await t.start({ yaml: yaml() });
    await halfOpen();
    const flagged = `data: ${JSON.stringify({ error: { code: 400, message: 'Output flagged by the content filter' } })}\n\n`;
    t.upstream.scripts.set('first-chat', [{ kind: 'raw-stream', text: chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hel' }) + flagged }]);
    const probed = Date.now();
    const r = await post(`${g.url}/chat/completions`, g.key, body);
    const failure = sseEvents(r.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data)).find((c) => c.error)!;
    expect(failure.error.metadata.error_type).toBe('content_policy_violation');
    expect(g.gateway.health.state(KEY)).toBe('half_open');
    expect(g.gateway.health.tryAcquire(KEY, probed + 50)).not.toBeNull();
  });
  it('a stream that was let through before the breaker opened, and that the client leaves, gives back nothing of the probe out now (a second probe had gone out)', async () => {
    g = await t.start({ yaml: yaml() });
    // The early stream: its answer has begun on the first endpoint and is held there.
    t.upstream.scripts.set('first-chat', [{ kind: 'stall' }]);
    const controller = new AbortController();
    const early = await fetch(`${g.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${g.key}` },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    const earlyId = JSON.parse(new TextDecoder().decode((await early.body!.getReader().read()).value).split('\n\n')[0].replace(/^data: /, '')).id;
    await halfOpen();
    // The probe: its answer begins and is held, so it is out.
    t.upstream.scripts.set('first-chat', [{ kind: 'stall' }]);
    const probeController = new AbortController();
    const probe = await fetch(`${g.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${g.key}` },
      body: JSON.stringify(body),
      signal: probeController.signal,
    });
    try {
      await probe.body!.getReader().read();
      controller.abort();
      expect((await ledgerRowSoon(g, earlyId))?.status).toBe('cancelled');
      // The probe is still out: the next request goes to the other endpoint, not to a second probe.
      const n = t.upstream.received.length;
      const next = await post(`${g.url}/chat/completions`, g.key, { ...body, stream: false });
      expect(next.status).toBe(200);
      expect(t.upstream.received.slice(n).map((r) => r.body.model)).toEqual(['second-chat']);
    } finally {
      probeController.abort();
    }
  });
});
