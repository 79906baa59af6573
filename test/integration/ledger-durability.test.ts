import { readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import { Client } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store';
import { dropSchemas, PG_URL, uniqueSchema } from '../fixtures/backing';
import { ensureBuilt, killAll, perTest, startServe, within } from '../fixtures/cli';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { cliKey, openStream, processGateway } from '../fixtures/streams';

/**
 * Every admitted request ends with exactly one ledger row (README "Ledger durability"): when the client goes
 * away mid-stream, when the provider dies mid-stream, and when the gateway is killed with requests in flight.
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
  upstream.faults.length = 0;
});

afterAll(async () => {
  await upstream?.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('streams cut short are billed for what was delivered', () => {
  it('a client that disconnects mid-stream gets a cancelled row with the completion tokens relayed so far', async () => {
    const gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
    try {
      let release!: () => void;
      upstream.always.set('gpt-upstream', { kind: 'pause', until: new Promise<void>((r) => (release = r)) });
      const stream = await openStream(gw.url, gw.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
      stream.abort();
      await expect.poll(async () => (await gw.ledgerRow(stream.id))?.status, { timeout: 5000 }).toBe('cancelled');
      const row = (await gw.ledgerRow(stream.id))!;
      // The upstream never sent its usage chunk: output estimated from "Hello from" (10 characters), input counted.
      expect(row.completionTokens).toBeGreaterThan(0);
      expect(row.promptTokens).toBeGreaterThan(0);
      expect(row.costUsd).toBeGreaterThan(0);
      expect(await gw.store.listPendingLedger()).toEqual([]);
      release();
    } finally {
      await gw.close();
    }
  });

  it('a provider that dies mid-stream leaves a failed row with the completion tokens relayed so far', async () => {
    const gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
    try {
      upstream.faults.push({ kind: 'midstream' });
      const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', stream: true, messages: [{ role: 'user', content: 'hi' }] });
      expect(res.text).toContain('"finish_reason":"error"');
      const id = /"id":"(gen-[^"]+)"/.exec(res.text)![1];
      const row = (await gw.ledgerRow(id))!;
      expect(row).toMatchObject({ status: 'failed' });
      expect(row.completionTokens).toBeGreaterThan(0);
      expect(await gw.store.listPendingLedger()).toEqual([]);

      // The same death seen by a messages client (the stream translated): billed the same input tokens, counted
      // from the request, not the zeros the translated message_start carries before any usage is known.
      upstream.faults.push({ kind: 'midstream' });
      const translated = await post(`${gw.url}/messages`, gw.key, { model: 'fake/gpt', max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'hi' }] });
      expect(translated.text).toContain('event: error');
      const tid = /"id":"(gen-[^"]+)"/.exec(translated.text)![1];
      const trow = (await gw.ledgerRow(tid))!;
      expect(trow).toMatchObject({ status: 'failed', promptTokens: row.promptTokens });
      expect(trow.promptTokens).toBeGreaterThan(0);
    } finally {
      await gw.close();
    }
  });
});

describe('a client that leaves before its answer', () => {
  /** Sends `body` to chat completions, waits until the upstream has it, then the client goes away. */
  async function leaveWhileUpstreamHolds(gw: TestGateway, body: Record<string, unknown>): Promise<() => void> {
    let release!: () => void;
    upstream.always.set('gpt-upstream', { kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const seen = upstream.received.length;
    const controller = new AbortController();
    const answer = fetch(`${gw.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.key}` },
      body: JSON.stringify(body),
      signal: controller.signal,
    }).catch((err: Error) => err);
    await expect.poll(() => upstream.received.length, { timeout: 5000 }).toBeGreaterThan(seen);
    controller.abort();
    expect(await answer).toBeInstanceOf(Error);
    return release;
  }

  /** The gateway's access log lines of requests (parsed). */
  const requestLines = (gw: { logs: string[] }) =>
    gw.logs.join('').split('\n').filter((l) => l.includes('"msg":"request"')).map((l) => JSON.parse(l) as Record<string, unknown>);

  async function metricLines(gw: { url: string }): Promise<string[]> {
    const text = await (await fetch(new URL('/metrics', gw.url))).text();
    return text.split('\n').filter((l) => /^gateway_(requests|upstream_attempts)_total\{/.test(l));
  }

  it.each([
    ['a JSON request', false],
    ['a stream before its first event', true],
  ])('%s: a cancelled row at cost 0 naming the provider, logged and counted as 499 cancelled, not a 504 timeout', async (_name, stream) => {
    const gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
    try {
      const release = await leaveWhileUpstreamHolds(gw, { model: 'fake/gpt', stream, messages: [{ role: 'user', content: 'hi' }] });
      await expect.poll(() => requestLines(gw).length, { timeout: 5000 }).toBe(1);
      const line = requestLines(gw)[0];
      expect(line).toMatchObject({ status: 499, outcome: 'cancelled', error_type: 'cancelled', provider: 'fake-openai', model: 'fake/gpt' });
      const row = (await gw.ledgerRow(String(line.generation_id)))!;
      expect(row).toMatchObject({ status: 'cancelled', provider: 'fake-openai', upstreamModel: 'gpt-upstream', promptTokens: 0, completionTokens: 0, costUsd: 0 });
      expect(await gw.store.listPendingLedger()).toEqual([]);
      const metrics = await metricLines(gw);
      expect(metrics).toContain('gateway_requests_total{endpoint="chat_completions",status="499",error_type="cancelled"} 1');
      expect(metrics).toContain('gateway_upstream_attempts_total{provider="fake-openai",outcome="cancelled"} 1');
      expect(metrics.join('\n')).not.toContain('timeout');
      release();
      // The endpoint's health was left alone: the next request goes to the same provider and is answered.
      upstream.always.clear();
      const next = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
      expect(next.status).toBe(200);
    } finally {
      await gw.close();
    }
  });

  it('a client that leaves before anything was sent upstream gets no row; the log line says 499 cancelled', async () => {
    const gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
    try {
      const url = new URL(`${gw.url}/chat/completions`);
      const seen = upstream.received.length;
      // Headers promise a body that never comes; the client then goes away.
      const sock = net.connect(Number(url.port), url.hostname);
      await new Promise((r) => sock.once('connect', r));
      sock.write(`POST ${url.pathname} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${gw.key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model":`);
      await new Promise((r) => setTimeout(r, 100));
      sock.destroy();
      await expect.poll(() => requestLines(gw).length, { timeout: 5000 }).toBe(1);
      expect(requestLines(gw)[0]).toMatchObject({ status: 499, error_type: 'cancelled' });
      expect(await metricLines(gw)).toContain('gateway_requests_total{endpoint="chat_completions",status="499",error_type="cancelled"} 1');
      expect(upstream.received).toHaveLength(seen);
    } finally {
      await gw.close();
    }
  });
});

const pgSchemas: string[] = [];
afterAll(() => dropSchemas(...pgSchemas));

/** The store a test's processes share, its YAML, and the generation ids of a key's ledger rows, read directly. */
function storeFor(driver: 'sqlite' | 'postgres', db: () => string) {
  const schema = uniqueSchema('kill');
  if (driver === 'postgres') pgSchemas.push(schema);
  return {
    yaml: driver === 'postgres' ? `{ driver: postgres, url: '${PG_URL}', schema: ${schema} }` : undefined,
    open: () => (driver === 'postgres' ? openStore({ driver: 'postgres', url: PG_URL, schema, pool_max: 2 } as never) : openStore({ driver: 'sqlite', path: db() })),
    async ledgerIds(keyId: string): Promise<string[]> {
      if (driver === 'postgres') {
        const pg = new Client({ connectionString: PG_URL });
        await pg.connect();
        try {
          return (await pg.query(`SELECT generation_id FROM ${schema}.ledger WHERE key_id = $1`, [keyId])).rows.map((r) => r.generation_id as string);
        } finally {
          await pg.end();
        }
      }
      const sqlite = (await import('better-sqlite3')).default(db(), { readonly: true });
      try {
        return (sqlite.prepare('SELECT generation_id FROM ledger WHERE key_id = ?').all(keyId) as { generation_id: string }[]).map((r) => r.generation_id);
      } finally {
        sqlite.close();
      }
    },
  };
}

describe.each(['sqlite', 'postgres'] as const)('kill -9 with requests in flight (%s store)', (driver) => {
  it('after a restart on the same store, every request has exactly one ledger row: completed ones as written, in-flight ones interrupted', async () => {
    let dbFile = '';
    const target = storeFor(driver, () => dbFile);
    const gw = processGateway(upstream.url, { extra: 'spend: { hold_ttl_ms: 1000 }\n', storage: target.yaml });
    dbFile = gw.db;
    dirs.push(gw.dir);
    const key = await cliKey(gw.dir, gw.file);
    const first = await startServe(['--config', gw.file], { cwd: gw.dir });

    const done: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await post(`${first.url}/chat/completions`, key, { model: 'fake/gpt', messages: [{ role: 'user', content: `done ${i}` }] });
      expect(r.status).toBe(200);
      done.push(r.json.id);
    }
    await new Promise((r) => setTimeout(r, 200)); // ledger.flush_ms is 10: the completed rows are written

    const N = 6;
    let release!: () => void;
    upstream.always.set('gpt-slow', { kind: 'pause', until: new Promise<void>((r) => (release = r)) });
    const streams = await Promise.all(Array.from({ length: N }, () => openStream(first.url, key, SLOW)));
    const inFlight = streams.map((s) => s.id);
    first.proc.child.kill('SIGKILL');
    expect(await within(first.proc.exited, 10_000, 'kill -9')).toBeNull();
    release();

    const store = await target.open();
    try {
      // What the dead process left: the pending rows of the requests in flight, no ledger rows for them.
      expect((await store.listPendingLedger()).map((p) => p.generationId).sort()).toEqual([...inFlight].sort());
      for (const id of inFlight) expect(await store.getLedger(id)).toBeNull();
      // A database file keeps the journal in files next to it (README "Ledger durability"), not in its table.
      if (driver === 'sqlite') expect(readdirSync(`${dbFile}-pending`).length).toBeGreaterThan(0);

      const second = await startServe(['--config', gw.file], { cwd: gw.dir });
      // Finalised once older than the hold TTL (1 s), by the restarted process's sweep.
      await expect.poll(async () => (await store.listPendingLedger()).length, { timeout: 10_000, interval: 200 }).toBe(0);
      for (const id of inFlight) expect(await store.getLedger(id)).toMatchObject({ status: 'interrupted', costUsd: 0, model: 'fake/slow' });
      // The dead process's segments are deleted: in the sweep that finalises their rows, or (when a segment
      // was last written after its rows were made, so it is not yet past the cut-off) in a sweep ~1 s later.
      if (driver === 'sqlite') await expect.poll(() => readdirSync(`${dbFile}-pending`), { timeout: 10_000, interval: 200 }).toEqual([]);
      for (const id of done) expect(await store.getLedger(id)).toMatchObject({ status: 'completed' });
      const keyId = (await store.getLedger(done[0]))!.keyId;
      const totals = await store.usageForKey(keyId);
      expect(totals.usage).toBeCloseTo(3 * ((10 * 1 + 5 * 2) / 1e6), 12); // interrupted rows add nothing
      // Exactly one row per generation id, and no other rows for the key.
      expect((await target.ledgerIds(keyId)).sort()).toEqual([...done, ...inFlight].sort());
      expect(await second.proc.stop()).toBe(0);
    } finally {
      await store.close();
    }
  }, 60_000);
});
