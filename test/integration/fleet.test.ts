import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { parseConfigText } from '../../src/config/load';
import { estimate } from '../../src/spend/estimate';
import { RedisState } from '../../src/state/redis';
import { toNano } from '../../src/state/types';
import { openStore } from '../../src/store';
import type { Store } from '../../src/store/types';
import { deleteRedisKeys, dropSchemas, PG_URL, REDIS_URL, uniquePrefix, uniqueSchema } from '../fixtures/backing';
import { ensureBuilt, KEY, killAll, runCli, startServe, within, type Proc } from '../fixtures/cli';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post } from '../fixtures/gateway';

/**
 * What an operator of a fleet expects of gateway processes sharing PostgreSQL and Redis (README "Shared state:
 * one process or many"), beyond the key limit of spend-processes.test.ts: a revoke reaches every process within
 * the key cache's TTL, rate limits are counted together, what one process stores the other serves, and a
 * process killed with requests in flight leaves neither a lost ledger row nor a hold past the hold TTL.
 */

const schema = uniqueSchema('fleet');
const prefix = uniquePrefix('fleet');
const HOLD_TTL_MS = 3000;
const CHAT = { model: 'fake/gpt', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] };

let upstream: FakeUpstream;
let dir: string;
let file: string;
let store: Store;
let mgmt: string;
const procs = new Set<Proc>();
let urls: string[] = [];

function yaml(upstreamUrl: string): string {
  return `
server: { port: 0, watch_config: false }
storage: { driver: postgres, url: '${PG_URL}', schema: ${schema} }
state: { driver: redis, url: '${REDIS_URL}', prefix: '${prefix}' }
logging: { level: warn }
ledger: { flush_ms: 10 }
spend: { hold_ttl_ms: ${HOLD_TTL_MS} }
accounts: [{ name: default, billing: invoice }]
providers:
  - { id: fake-openai, kind: openai, base_url: ${upstreamUrl}, api_key: sk-upstream }
  - { id: sim-video, kind: simulated-video, queued_ms: 600000, running_ms: 1000 }
models:
  - id: fake/gpt
    endpoints: [{ provider: fake-openai, upstream_model: gpt-upstream, pricing: { prompt: 1, completion: 2 } }]
  - id: fake/limited
    endpoints: [{ provider: fake-openai, upstream_model: gpt-limited, pricing: { prompt: 1, completion: 2 } }]
video_models:
  - id: sim/video
    endpoints: [{ provider: sim-video, upstream_model: sim-video-1, pricing: { per_second: 0.1, per_job: 0.05 } }]
videos: { poll_interval_ms: 100 }
rate_limits:
  models: [{ model: fake/limited, requests: 10, window_s: 600, per: key }]
pipelines:
  default: [auth, validate, rate-limit, budget-check, upstream]
`;
}

async function createKey(...args: string[]): Promise<{ secret: string; id: string }> {
  const r = await runCli(['keys', 'create', '--name', `k${Math.random()}`, ...args, '--config', file], { cwd: dir });
  expect(r.code, r.stderr).toBe(0);
  return { secret: KEY.exec(r.stdout)![0], id: /^key (\S+) /.exec(r.stderr)![1] };
}

async function get(url: string, key: string): Promise<{ status: number; json: any }> {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, json: await res.json() };
}

beforeAll(async () => {
  ensureBuilt();
  upstream = await startFakeUpstream();
  dir = mkdtempSync(path.join(tmpdir(), 'gw-fleet-'));
  file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, yaml(upstream.url));
  urls = await Promise.all([0, 1].map(async () => (await startServe(['--config', file], { cwd: dir, scope: procs })).url));
  store = await openStore({ driver: 'postgres', url: PG_URL, schema, pool_max: 2 } as never);
  mgmt = (await createKey('--management')).secret;
}, 120_000);

afterAll(async () => {
  await killAll(procs);
  await store?.close();
  await upstream?.close();
  await dropSchemas(schema);
  await deleteRedisKeys(prefix);
  rmSync(dir, { recursive: true, force: true });
});

describe('a fleet of gateway processes sharing PostgreSQL and Redis', () => {
  it('a key revoked with the CLI stops working on every process within the key cache TTL (5 s)', async () => {
    const key = await createKey();
    // Both processes have the key in their cache.
    for (const url of urls) expect((await post(`${url}/chat/completions`, key.secret, CHAT)).status).toBe(200);
    const revoked = await runCli(['keys', 'revoke', key.id, '--config', file], { cwd: dir });
    expect(revoked.code, revoked.stderr).toBe(0);
    const at = Date.now();
    for (const url of urls) {
      await expect.poll(async () => (await post(`${url}/chat/completions`, key.secret, CHAT)).status, { timeout: 8000, interval: 100 }).toBe(401);
    }
    // Both caches took the key before the revoke: both drop it within the TTL (plus the polls, on a loaded machine).
    expect(Date.now() - at).toBeLessThan(8000);
  }, 30_000);

  it('rate limits count the requests of every process together', async () => {
    const key = await createKey();
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => post(`${urls[i % 2]}/chat/completions`, key.secret, { ...CHAT, model: 'fake/limited' })));
    expect(answers.filter((a) => a.status === 200)).toHaveLength(10);
    expect(answers.filter((a) => a.status === 429)).toHaveLength(30);
    expect(answers.find((a) => a.status === 429)!.json.error.metadata).toMatchObject({ scope: 'model', limit: 10 });
  });

  it('a preset saved on one process serves on the other; GET /key shows the same usage on both', async () => {
    const saved = await post(`${urls[0]}/presets/fleet-terse/messages`, mgmt, { model: 'fake/gpt', max_tokens: 7, system: 'Be terse.', messages: [] });
    expect(saved.status).toBe(200);
    const before = upstream.received.length;
    const used = await post(`${urls[1]}/chat/completions`, mgmt, { model: '@preset/fleet-terse', messages: [{ role: 'user', content: 'hi' }] });
    expect(used.status).toBe(200);
    expect(upstream.received[before].body).toMatchObject({ max_completion_tokens: 7, messages: [{ role: 'system', content: 'Be terse.' }, { role: 'user', content: 'hi' }] });
    await expect.poll(async () => (await get(`${urls[0]}/key`, mgmt)).json.data.usage, { timeout: 5000 }).toBeGreaterThan(0);
    const [a, b] = await Promise.all(urls.map((url) => get(`${url}/key`, mgmt)));
    expect(a.json.data).toEqual(b.json.data);
  });

  it('a process killed with requests in flight: a peer writes their rows as interrupted and their holds lapse after the hold TTL', async () => {
    const models = parseConfigText(yaml(upstream.url), { registry }).models;
    const est = estimate(CHAT, new Map(models.map((m) => [m.id, m])), 4096);
    // Three requests in flight fill the key's limit.
    const limit = (3 * toNano(est.usd)) / 1e9;
    const key = await createKey('--limit', String(limit));
    const doomed = await startServe(['--config', file], { cwd: dir, scope: procs });
    let release!: () => void;
    upstream.always.set('gpt-upstream', { kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const start = upstream.received.length;
    const inFlight = Array.from({ length: 3 }, () => post(`${doomed.url}/chat/completions`, key.secret, CHAT).catch(() => null));
    await expect.poll(() => upstream.received.length - start, { timeout: 5000 }).toBe(3);
    const pending = (await store.listPendingLedger()).filter((p) => p.keyId === key.id);
    expect(pending).toHaveLength(3);
    doomed.proc.child.kill('SIGKILL');
    await within(doomed.proc.exited, 10_000, 'kill -9');
    procs.delete(doomed.proc);
    upstream.always.clear();
    release();
    expect(await Promise.all(inFlight)).toEqual([null, null, null]);
    const killedAt = Date.now();

    // Its holds are still counted on the other processes, until they lapse.
    const state = new RedisState({ url: REDIS_URL, prefix, commandTimeoutMs: 1000 });
    try {
      expect(await state.held(`key:${key.id}`, Date.now())).toBe(3 * toNano(est.usd));
      expect((await post(`${urls[0]}/chat/completions`, key.secret, CHAT)).status).toBe(402);
      await expect.poll(() => state.held(`key:${key.id}`, Date.now()), { timeout: HOLD_TTL_MS + 2000, interval: 100 }).toBe(0);
    } finally {
      await state.close();
    }
    expect((await post(`${urls[1]}/chat/completions`, key.secret, CHAT)).status).toBe(200);
    // A live peer's sweep (every second with this hold TTL) writes the dead process's requests as interrupted.
    await expect.poll(async () => (await store.listPendingLedger()).filter((p) => p.keyId === key.id).length, { timeout: 10_000, interval: 200 }).toBe(0);
    expect(Date.now() - killedAt).toBeLessThan(HOLD_TTL_MS + 5000);
    for (const p of pending) expect(await store.getLedger(p.generationId)).toMatchObject({ status: 'interrupted', costUsd: 0, keyId: key.id });
  }, 40_000);

  // Last: it deletes every Redis key of the fleet.
  it('Redis loses its data: the pollers put the holds of unfinished video jobs back', async () => {
    const key = await createKey('--limit', '1');
    const job = { model: 'sim/video', prompt: 'a lighthouse', duration_seconds: 8 }; // held at 0.85, queued for 10 minutes
    expect((await post(`${urls[0]}/videos`, key.secret, job)).status).toBe(200);
    expect((await post(`${urls[1]}/videos`, key.secret, job)).status).toBe(200); // 0.85 < 1
    expect((await post(`${urls[0]}/videos`, key.secret, job)).status).toBe(402); // 1.70 ≥ 1
    await deleteRedisKeys(prefix); // Redis restarted without persistence
    const state = new RedisState({ url: REDIS_URL, prefix, commandTimeoutMs: 1000 });
    try {
      await expect.poll(() => state.held(`key:${key.id}`, Date.now()), { timeout: 5000, interval: 100 }).toBe(2 * toNano(0.85));
    } finally {
      await state.close();
    }
    // Before, the estimates were free again: this key started two more jobs, four of $0.85 under its $1.
    const refused = await post(`${urls[1]}/videos`, key.secret, job);
    expect(refused.status).toBe(402);
    expect(refused.json.error.metadata).toMatchObject({ limit_source: 'gateway_key_limit', spend_usd: 1.7 });
  }, 30_000);
});
