import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { registry } from '../../plugins';
import { configReloader } from '../../src/config/reload';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { gate } from '../fixtures/raw-stream';
import { openStream } from '../fixtures/streams';

const OLD_KEY = 'sk-upstream-openai-secret';
const NEW_KEY = 'sk-rotated-openai-0000';

let gw: TestGateway | undefined;
let upstream: FakeUpstream | undefined;
let dir: string | undefined;
afterEach(async () => {
  await gw?.close();
  await upstream?.close();
  gw = upstream = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** The gateway, its fake upstream, a reloader of a file and the lines that reloader logged. */
async function start() {
  upstream = await startFakeUpstream();
  const yaml = testConfigYaml(upstream.url);
  gw = await startTestGateway({ yaml });
  dir = mkdtempSync(path.join(tmpdir(), 'gw-reload-inflight-'));
  const file = path.join(dir, 'gateway.yaml');
  const lines: string[] = [];
  const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'info' }, { write: (l: string) => lines.push(l) } as never) });
  const apply = async (text: string) => {
    writeFileSync(file, text);
    return reload('test');
  };
  return { yaml, apply, lines };
}

const ask = (model: string) => post(`${gw!.url}/chat/completions`, gw!.key, { model, messages: [{ role: 'user', content: 'hi' }] });

describe('a refused reload', () => {
  it('(bad YAML, unknown stage, bad reference, unset ${ENV}) leaves the running config whole, logs why without secrets, and the next good edit applies', async () => {
    const { yaml, apply, lines } = await start();
    const before = gw!.gateway.runtime();
    delete process.env.GW_RELOAD_UNSET_KEY;
    const bad = {
      yaml: yaml.replace(`api_key: ${OLD_KEY} }`, `api_key: ${NEW_KEY}`), // the flow mapping never closed
      stage: yaml.replace('default: [auth, validate, upstream]', 'default: [auth, validate, no-such-stage, upstream]'),
      reference: yaml.replace('{ provider: fake-openai, upstream_model: gpt-upstream, pricing: { prompt: 1,', '{ provider: no-such-provider, upstream_model: gpt-upstream, pricing: { prompt: 1,'),
      env: yaml.replace(`api_key: ${OLD_KEY}`, "api_key: '${GW_RELOAD_UNSET_KEY}'").replace('prompt: 1, completion: 2, cached_read: 0.5', 'prompt: 100, completion: 2, cached_read: 0.5'),
    };
    const reasons: Record<string, string> = {};
    for (const [what, text] of Object.entries(bad)) {
      expect(text, what).not.toBe(yaml);
      lines.length = 0;
      expect(await apply(text), what).toBe(false);
      expect(gw!.gateway.runtime(), what).toBe(before);
      const logged = lines.map((l) => JSON.parse(l));
      expect(logged.map((l) => l.msg), what).toEqual(['config reload refused; the previous config keeps serving']);
      reasons[what] = logged[0].reason;
      expect(lines.join(''), what).not.toContain(OLD_KEY);
      expect(lines.join(''), what).not.toContain(NEW_KEY);
    }
    expect(reasons.yaml).toMatch(/\(yaml\)/);
    expect(reasons.stage).toMatch(/pipelines\.default/);
    expect(reasons.reference).toMatch(/models\[1\]\.endpoints\[0\]\.provider: unknown provider "no-such-provider"/);
    expect(reasons.env).toMatch(/providers\[1\]\.api_key: environment variable GW_RELOAD_UNSET_KEY is not set/);
    // Still the old provider, key and price.
    const r = await ask('fake/gpt');
    expect(r.status).toBe(200);
    expect(upstream!.received.at(-1)!.headers.authorization).toBe(`Bearer ${OLD_KEY}`);
    expect((await gw!.ledgerRow(r.json.id))!.costUsd).toBeCloseTo((10 - 4) * 1e-6 + 4 * 0.5e-6 + 5 * 2e-6, 12);
    // The next good edit applies.
    expect(await apply(yaml.replace(`api_key: ${OLD_KEY}`, `api_key: ${NEW_KEY}`))).toBe(true);
    expect((await ask('fake/gpt')).status).toBe(200);
    expect(upstream!.received.at(-1)!.headers.authorization).toBe(`Bearer ${NEW_KEY}`);
  });

  it('of a value that YAML reads as a tag (`api_key: !…`, unquoted) is refused naming where, and its line reaches no stderr warning (it had been printed whole)', async () => {
    const { yaml, apply, lines } = await start();
    const warned = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      expect(await apply(yaml.replace(`api_key: ${OLD_KEY}`, 'api_key: !Tag-secret-0123 sk-x'))).toBe(false);
      expect(warned).not.toHaveBeenCalled();
    } finally {
      warned.mockRestore();
    }
    const refused = JSON.parse(lines.at(-1)!);
    expect(refused.reason).toMatch(/\(yaml\): a tag YAML does not know at line 7, column \d+ \(a value that starts with ! must be quoted\)/);
    expect(lines.join('')).not.toContain('Tag-secret-0123');
  });
});

describe('requests in flight at a reload', () => {
  it('a held JSON call and a held stream finish on the provider, key and pricing they started with, and are billed so', async () => {
    const { yaml, apply } = await start();
    const json = gate();
    const stream = gate();
    upstream!.faults.push({ kind: 'hold', until: json.until }, { kind: 'pause', until: stream.until });
    const held = ask('fake/gpt');
    while (upstream!.received.length < 1) await new Promise((r) => setImmediate(r));
    const open = await openStream(gw!.url, gw!.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }], stream_options: { include_usage: true } });
    expect(upstream!.received).toHaveLength(2);
    // The new config: another key, a hundred times the price, another pipeline.
    const next = yaml
      .replace(`api_key: ${OLD_KEY}`, `api_key: ${NEW_KEY}`)
      .replace('prompt: 1, completion: 2, cached_read: 0.5', 'prompt: 100, completion: 200, cached_read: 50')
      .replace('default: [auth, validate, upstream]', 'default: [auth, validate, max-tokens-cap, upstream]');
    expect(await apply(next)).toBe(true);
    json.open();
    stream.open();
    const [answer, text] = await Promise.all([held, open.rest]);
    expect(answer.status).toBe(200);
    expect(text).toContain('[DONE]');
    const oldCost = (10 - 4) * 1e-6 + 4 * 0.5e-6 + 5 * 2e-6;
    for (const id of [answer.json.id, open.id]) {
      const row = await waitRow(id);
      expect(row.costUsd).toBeCloseTo(oldCost, 12);
      expect(row.provider).toBe('fake-openai');
    }
    expect(upstream!.received.slice(0, 2).map((r) => r.headers.authorization)).toEqual([`Bearer ${OLD_KEY}`, `Bearer ${OLD_KEY}`]);
    // A new request: the new key, price and pipeline (max-tokens-cap gives it a limit).
    const fresh = await ask('fake/gpt');
    expect(fresh.status).toBe(200);
    expect(upstream!.received.at(-1)!.headers.authorization).toBe(`Bearer ${NEW_KEY}`);
    expect(upstream!.received.at(-1)!.body.max_tokens ?? upstream!.received.at(-1)!.body.max_completion_tokens).toBe(4096);
    expect((await waitRow(fresh.json.id)).costUsd).toBeCloseTo(oldCost * 100, 10);
    // The old key is nowhere in the gateway's log.
    expect(gw!.logs.join('')).not.toContain(OLD_KEY);
    expect(gw!.logs.join('')).not.toContain(NEW_KEY);
  });

  it('a request whose model and provider a reload removes finishes, billed, on the old config; a new one is 404', async () => {
    const { apply } = await start();
    const held = gate();
    upstream!.faults.push({ kind: 'hold', until: held.until });
    const inFlight = ask('fake/claude');
    while (upstream!.received.length < 1) await new Promise((r) => setImmediate(r));
    const next = testConfigYaml(upstream!.url)
      .replace(/ {2}- \{ id: fake-anthropic,[^\n]*\n/, '')
      .replace(/ {2}- id: fake\/claude\n[^\n]*\n/, '');
    expect(next).not.toContain('fake-anthropic');
    expect(await apply(next)).toBe(true);
    held.open();
    const r = await inFlight;
    expect(r.status).toBe(200);
    const row = await waitRow(r.json.id);
    expect(row).toMatchObject({ model: 'fake/claude', provider: 'fake-anthropic', status: 'completed' });
    expect(row.costUsd).toBeGreaterThan(0);
    expect((await ask('fake/claude')).status).toBe(404);
  });
});

describe('state a reload keeps', () => {
  it('rate-limit windows, open breakers and sticky sessions are neither reset nor doubled', async () => {
    const { yaml, apply } = await start();
    const limited = `${yaml.replace('[auth, validate, upstream]', '[auth, validate, rate-limit, upstream]')}rate_limits:\n  key: { requests: 4, window_s: 3600 }\n`;
    expect(await apply(limited)).toBe(true);
    expect((await ask('sim/chat')).status).toBe(200);
    expect((await ask('sim/chat')).status).toBe(200);
    // The breaker of the dead endpoint opens (threshold 3).
    const { health, sticky } = gw!.gateway;
    for (let i = 0; i < 3; i++) health.recordFailure('dead-openai/gpt-dead', health.tryAcquire('dead-openai/gpt-dead'));
    expect(health.state('dead-openai/gpt-dead')).toBe('open');
    sticky.remember('session-1', 'fake-openai/gpt-upstream');
    // A reload of another field: the same gateway-wide state goes on (keys are looked up through the same cache too).
    expect(await apply(limited.replace('logging: { level: info }', 'logging: { level: debug }'))).toBe(true);
    expect(health.state('dead-openai/gpt-dead')).toBe('open');
    expect(await sticky.lookup('session-1')).toBe('fake-openai/gpt-upstream');
    // Two more fit the window (two were counted before the reload), the fifth is refused.
    expect((await ask('sim/chat')).status).toBe(200);
    expect((await ask('sim/chat')).status).toBe(200);
    const refused = await ask('sim/chat');
    expect(refused.status).toBe(429);
  });
});

async function waitRow(id: string) {
  for (let i = 0; i < 200; i++) {
    const row = await gw!.ledgerRow(id);
    if (row) return row;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`no ledger row for ${id}`);
}
