import { rmSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store';
import { ensureBuilt, killAll, perTest, startServe, within } from '../fixtures/cli';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post } from '../fixtures/gateway';
import { cliKey, openStream, processGateway } from '../fixtures/streams';

/**
 * Graceful shutdown of a real `gateway serve` process (README "Shutdown and probes"): SIGTERM turns /readyz to
 * 503 at once, new requests get a typed 503 with `Connection: close`, streams in flight finish (or are cut
 * with an in-band error at the drain timeout), the ledger row is written, and the process exits 0.
 */

const SLOW = { model: 'fake/slow', messages: [{ role: 'user', content: 'hi' }] };
let upstream: FakeUpstream;
const dirs: string[] = [];

beforeAll(async () => {
  ensureBuilt();
  upstream = await startFakeUpstream();
}, 120_000);

afterEach(async () => {
  await killAll(perTest);
  upstream.always.clear();
});

afterAll(async () => {
  await upstream?.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function pausedUpstream(): () => void {
  let release!: () => void;
  upstream.always.set('gpt-slow', { kind: 'pause', until: new Promise<void>((r) => (release = r)) });
  return release;
}

/** Polls until /readyz answers 503 (the signal is handled asynchronously). */
async function readinessAfterSigterm(url: string): Promise<{ status: number; body: unknown }> {
  const origin = new URL(url).origin;
  for (let i = 0; i < 100; i++) {
    const res = await fetch(`${origin}/readyz`);
    const body = await res.json();
    if (res.status === 503) return { status: res.status, body };
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('/readyz never turned 503');
}

describe('SIGTERM drains a real gateway process', () => {
  it('readiness 503 at once, new requests refused in their envelope, the stream in flight completes, exit 0, ledger row written', async () => {
    const gw = processGateway(upstream.url);
    dirs.push(gw.dir);
    const key = await cliKey(gw.dir, gw.file);
    const { proc, url } = await startServe(['--config', gw.file], { cwd: gw.dir });
    const origin = new URL(url).origin;
    expect((await fetch(`${origin}/readyz`)).status).toBe(200);

    const release = pausedUpstream();
    const stream = await openStream(url, key, SLOW);
    proc.child.kill('SIGTERM');
    expect(await readinessAfterSigterm(url)).toEqual({ status: 503, body: { status: 'draining' } });
    const health = await fetch(`${origin}/healthz`);
    expect(health.status).toBe(200); // liveness: still alive while draining
    expect(health.headers.get('connection')).toBe('close');
    // A scraper's kept-alive connection must not hold the shutdown up either (it said keep-alive).
    const scrape = await fetch(`${origin}/metrics`);
    expect(scrape.status).toBe(200);
    expect(scrape.headers.get('connection')).toBe('close');
    expect((await fetch(`${origin}/nowhere`)).headers.get('connection')).toBe('close');

    const chat = await post(`${url}/chat/completions`, key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'new' }] });
    expect(chat.status).toBe(503);
    expect(chat.headers.get('connection')).toBe('close');
    expect(chat.headers.get('retry-after')).toBe('1');
    expect(chat.json.error).toMatchObject({ code: 503, metadata: { error_type: 'provider_overloaded', reason: 'shutting_down' } });
    const messages = await post(`${url}/messages`, key, { model: 'fake/gpt', max_tokens: 10, messages: [{ role: 'user', content: 'new' }] });
    // Spec 7.4 pairs 503 with provider_overloaded; on /messages that is Anthropic's retryable 529.
    expect(messages.status).toBe(529);
    expect(messages.json).toMatchObject({ type: 'error', error: { type: 'overloaded_error', error_type: 'provider_overloaded' } });
    expect(upstream.received.filter((r) => r.body.messages?.[0]?.content === 'new')).toHaveLength(0);

    // Still draining: the process waits for the stream.
    await new Promise((r) => setTimeout(r, 200));
    expect(proc.child.exitCode).toBeNull();
    release();
    const text = await within(stream.rest, 10_000, 'the stream to finish');
    expect(text).toContain('upstream.');
    expect(text).not.toContain('"finish_reason":"error"');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(await within(proc.exited, 10_000, 'the process to exit')).toBe(0);

    const store = await openStore({ driver: 'sqlite', path: gw.db });
    try {
      expect(await store.getLedger(stream.id)).toMatchObject({ status: 'completed', completionTokens: 5, promptTokens: 10 });
      expect(await store.listPendingLedger()).toEqual([]);
    } finally {
      await store.close();
    }
  }, 60_000);

  it('a JSON request in flight that ends in an error while draining gets its error answer, with Connection: close', async () => {
    const gw = processGateway(upstream.url, { server: 'drain_timeout_ms: 400' });
    dirs.push(gw.dir);
    const key = await cliKey(gw.dir, gw.file);
    const { proc, url } = await startServe(['--config', gw.file], { cwd: gw.dir });
    upstream.always.set('gpt-slow', { kind: 'hang' }); // a JSON answer that never comes
    const before = upstream.received.length;
    const answer = post(`${url}/chat/completions`, key, SLOW);
    // The request is in flight (waiting on the paused provider) before the signal.
    for (let i = 0; i < 500 && upstream.received.length === before; i++) await new Promise((r) => setTimeout(r, 10));
    expect(upstream.received.length).toBe(before + 1);
    proc.child.kill('SIGTERM');
    // Cut at the drain timeout: the typed 503 is written out before the connections close (it was an empty reply).
    const r = await within(answer, 10_000, 'the cut request to be answered');
    expect(r.status).toBe(503);
    expect(r.json.error).toMatchObject({ code: 503, message: 'The gateway shut down before the answer was complete' });
    expect(r.headers.get('connection')).toBe('close');
    expect(await within(proc.exited, 10_000, 'the process to exit')).toBe(0);
  }, 60_000);

  it('at the drain timeout a stream still in flight ends with the in-band error; the process exits 0 with its ledger row', async () => {
    const gw = processGateway(upstream.url, { server: 'drain_timeout_ms: 300' });
    dirs.push(gw.dir);
    const key = await cliKey(gw.dir, gw.file);
    const { proc, url } = await startServe(['--config', gw.file], { cwd: gw.dir });
    const release = pausedUpstream();
    const stream = await openStream(url, key, SLOW);
    const cutAt = Date.now();
    proc.child.kill('SIGTERM');
    const text = await within(stream.rest, 10_000, 'the stream to be cut');
    expect(Date.now() - cutAt).toBeGreaterThanOrEqual(250);
    expect(text).toContain('"finish_reason":"error"');
    expect(text).toMatch(/"error":\{"code":503,"message":"The gateway shut down before the answer was complete"/);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(await within(proc.exited, 10_000, 'the process to exit')).toBe(0);
    release();

    const store = await openStore({ driver: 'sqlite', path: gw.db });
    try {
      const row = await store.getLedger(stream.id);
      // Billed for what was relayed before the cut ("Hello from": 10 characters, ~3 tokens).
      expect(row).toMatchObject({ status: 'failed', model: 'fake/slow' });
      expect(row!.completionTokens).toBeGreaterThan(0);
      expect(row!.costUsd).toBeGreaterThan(0);
      expect(await store.listPendingLedger()).toEqual([]);
    } finally {
      await store.close();
    }
  }, 60_000);

  it('a second SIGTERM during the drain cuts the stream in flight at once (no wait for drain_timeout_ms): the in-band error, exit 0, a failed ledger row', async () => {
    const gw = processGateway(upstream.url, { server: 'drain_timeout_ms: 60000' });
    dirs.push(gw.dir);
    const key = await cliKey(gw.dir, gw.file);
    const { proc, url } = await startServe(['--config', gw.file], { cwd: gw.dir });
    const release = pausedUpstream();
    const stream = await openStream(url, key, SLOW);
    proc.child.kill('SIGTERM');
    expect((await readinessAfterSigterm(url)).status).toBe(503);
    proc.child.kill('SIGTERM');
    // Well inside the 60 s drain: only the second signal can have ended it.
    const text = await within(stream.rest, 10_000, 'the stream to be cut by the second signal');
    expect(text).toContain('"finish_reason":"error"');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(await within(proc.exited, 10_000, 'the process to exit')).toBe(0);
    release();

    const store = await openStore({ driver: 'sqlite', path: gw.db });
    try {
      expect(await store.getLedger(stream.id)).toMatchObject({ status: 'failed', model: 'fake/slow' });
      expect(await store.listPendingLedger()).toEqual([]);
    } finally {
      await store.close();
    }
  }, 60_000);
});
