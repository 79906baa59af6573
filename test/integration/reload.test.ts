import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { loadConfig } from '../../src/config/load';
import { configReloader } from '../../src/config/reload';
import { fileStamp, watchFile } from '../../src/config/watch';
import { startFakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, type TestGateway } from '../fixtures/gateway';

/** A config with the simulated provider and the given models. */
function yaml(models: string[]): string {
  return `
server: { port: 0, watch_config: false }
storage: { driver: sqlite, path: ':memory:' }
providers:
  - { id: local, kind: simulated }
models:
${models.map((m) => `  - { id: ${m}, endpoints: [{ provider: local, upstream_model: ${m.replace('/', '-')}-up }] }`).join('\n')}
pipelines:
  default: [auth, validate, upstream]
`;
}

let gw: TestGateway | undefined;
let dir: string | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

const ask = (model: string) => post(`${gw!.url}/chat/completions`, gw!.key, { model, messages: [{ role: 'user', content: 'hi' }] });

/** Polls until `check` passes or the deadline passes (then the last failure is thrown). */
async function eventually(check: () => Promise<void>, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > end) throw err;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

describe('config reload', () => {
  it('swaps models for new requests while a request in flight finishes on the old config', async () => {
    const upstream = await startFakeUpstream();
    const withFake = (models: string[]) =>
      yaml(models).replace('providers:\n', `providers:\n  - { id: fake, kind: openai, base_url: '${upstream.url}' }\n`).replace(/provider: local/g, 'provider: fake');
    gw = await startTestGateway({ yaml: withFake(['m/a']) });
    let release!: () => void;
    upstream.faults.push({ kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const inFlight = ask('m/a');
    await eventually(async () => expect(upstream.received).toHaveLength(1)); // the request is at the provider now
    gw.gateway.reload(loadConfig(writeTemp(withFake(['m/b'])), { registry }));
    release();
    const old = await inFlight;
    expect(old.status).toBe(200);
    expect(old.json.model).toBe('m/a');
    expect((await ask('m/b')).status).toBe(200);
    expect((await ask('m/a')).status).toBe(404);
    await upstream.close();
  });

  it('loses no request under traffic across many reloads', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const file = writeTemp(yaml(['m/a', 'm/b']));
    let stop = false;
    const statuses: number[] = [];
    const traffic = Promise.all(
      Array.from({ length: 8 }, async () => {
        while (!stop) statuses.push((await ask('m/a')).status);
      }),
    );
    // At least 20 reloads, and on until more than 20 requests were answered meanwhile (a loaded machine answers fewer per reload).
    for (let i = 0; i < 20 || statuses.length <= 20; i++) {
      writeFileSync(file, yaml(i % 2 ? ['m/a'] : ['m/a', 'm/b']));
      gw.gateway.reload(loadConfig(file, { registry }));
      await new Promise((r) => setTimeout(r, 10));
    }
    stop = true;
    await traffic;
    expect(statuses.length).toBeGreaterThan(20);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  });

  it('refuses a bad file, logs why, and keeps serving the old config', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const file = writeTemp(yaml(['m/a', 'm/b']));
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) } as any);
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger });
    expect(await reload('test')).toBe(true);
    expect((await ask('m/b')).status).toBe(200);
    writeFileSync(file, yaml(['m/c']).replace('pipelines:\n  default: [auth, validate, upstream]', 'pipelines:\n  default: [auth, no-such-stage, upstream]'));
    expect(await reload('test')).toBe(false);
    expect(lines.join('')).toMatch(/config reload refused/);
    expect(lines.join('')).toMatch(/pipelines\.default/);
    expect((await ask('m/b')).status).toBe(200);
    expect((await ask('m/c')).status).toBe(404);
  });

  it('reads a file again that was written while it was read (the part read was applied), and refuses one that keeps changing', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const file = writeTemp(yaml(['m/half']));
    let stamps = 0;
    // The writer's last part lands while the reload reads the file: between its stamps before and after.
    const stamp = () => {
      if (++stamps === 2) writeFileSync(file, yaml(['m/half', 'm/whole']));
      return fileStamp(file);
    };
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'silent' }), stamp });
    expect(await reload('test')).toBe(true);
    expect((await ask('m/whole')).status).toBe(200);
    const lines: string[] = [];
    let n = 0;
    const restless = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'info' }, { write: (l: string) => lines.push(l) } as never), stamp: () => String(n++) });
    writeFileSync(file, yaml(['m/restless']));
    expect(await restless('test')).toBe(false);
    expect(lines.join('')).toMatch(/"reason":"[^"]*changed while it was read, 3 times in a row[^"]*".*config reload refused/);
    expect((await ask('m/restless')).status).toBe(404);
  });

  it('picks up a file written by an editor (replace by rename) through the watcher', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const file = writeTemp(yaml(['m/a']));
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'silent' }) });
    const stop = watchFile(file, () => void reload('file changed'), 20);
    try {
      const tmp = `${file}.tmp`;
      writeFileSync(tmp, yaml(['m/a', 'm/new']));
      const { renameSync } = await import('node:fs');
      renameSync(tmp, file);
      await eventually(async () => expect((await ask('m/new')).status).toBe(200));
    } finally {
      stop();
    }
  });

  it('applies an edit made while the gateway started, between reading the file and watching it (it was missed until the next edit)', async () => {
    const file = writeTemp(yaml(['m/a']));
    const readAs = fileStamp(file); // what serve does: the stamp, then the read
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    // The edit lands while the store opens and the gateway is built: no watch is there to see it.
    writeFileSync(file, yaml(['m/a', 'm/during-start']));
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'silent' }) });
    const stop = watchFile(file, () => void reload('file changed'), 20, readAs);
    try {
      await eventually(async () => expect((await ask('m/during-start')).status).toBe(200));
    } finally {
      stop();
    }
  });

  it('picks up a Kubernetes ConfigMap update: the file is a link through ..data, and a new ..data is renamed into place', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const { mkdirSync, renameSync, symlinkSync } = await import('node:fs');
    dir = mkdtempSync(path.join(tmpdir(), 'gw-reload-cm-'));
    mkdirSync(path.join(dir, '..v1'));
    writeFileSync(path.join(dir, '..v1', 'gateway.yaml'), yaml(['m/a']));
    symlinkSync('..v1', path.join(dir, '..data'));
    symlinkSync('..data/gateway.yaml', path.join(dir, 'gateway.yaml'));
    const file = path.join(dir, 'gateway.yaml');
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'silent' }) });
    const stop = watchFile(file, () => void reload('file changed'), 20);
    try {
      // What kubelet does: the new version in its own folder, a new link to it, renamed over ..data.
      mkdirSync(path.join(dir, '..v2'));
      writeFileSync(path.join(dir, '..v2', 'gateway.yaml'), yaml(['m/a', 'm/new']));
      symlinkSync('..v2', path.join(dir, '..data_tmp'));
      renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
      await eventually(async () => expect((await ask('m/new')).status).toBe(200));
    } finally {
      stop();
    }
  });
});

describe('a config file that is a link into another folder', () => {
  it('is reloaded when its target is edited in place there (only the link folder was watched)', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const { mkdirSync, symlinkSync } = await import('node:fs');
    const root = mkdtempSync(path.join(tmpdir(), 'gw-reload-link-'));
    try {
      mkdirSync(path.join(root, 'etc'));
      mkdirSync(path.join(root, 'srv'));
      writeFileSync(path.join(root, 'srv', 'real.yaml'), yaml(['m/a']));
      symlinkSync(path.join(root, 'srv', 'real.yaml'), path.join(root, 'etc', 'gateway.yaml'));
      const file = path.join(root, 'etc', 'gateway.yaml');
      const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'silent' }) });
      const stop = watchFile(file, () => void reload('file changed'), 20);
      try {
        writeFileSync(path.join(root, 'srv', 'real.yaml'), yaml(['m/a', 'm/edited']));
        await eventually(async () => expect((await ask('m/edited')).status).toBe(200));
      } finally {
        stop();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

function writeTemp(text: string): string {
  dir ??= mkdtempSync(path.join(tmpdir(), 'gw-reload-'));
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, text);
  return file;
}

describe('server fields at reload', () => {
  it('body limits change at once; fields applied at start are named in one warning', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    expect((await ask('m/a')).status).toBe(200);
    const next = yaml(['m/a']).replace('server: { port: 0, watch_config: false }', 'server: { port: 9999, watch_config: false, max_body_bytes: 1024 }');
    dir = mkdtempSync(path.join(tmpdir(), 'gw-reload-server-'));
    const file = path.join(dir, 'gateway.yaml');
    writeFileSync(file, next);
    gw.gateway.reload(loadConfig(file, { registry }));
    const big = await post(`${gw.url}/chat/completions`, gw.key, { model: 'm/a', messages: [{ role: 'user', content: 'x'.repeat(2000) }] });
    expect(big.status).toBe(413);
    const warnings = gw.logs.map((l) => JSON.parse(l)).filter((l) => l.section === 'server');
    expect(warnings).toHaveLength(1);
    expect(warnings[0].fields).toEqual(['port']);
    expect(warnings[0].msg).toBe('config fields server.port changed: they take effect at the next restart');
  });

  it('a logging.level change applies at once (it was kept until a restart, unannounced)', async () => {
    gw = await startTestGateway({ yaml: `${yaml(['m/a'])}logging: { level: info }\n` });
    dir = mkdtempSync(path.join(tmpdir(), 'gw-reload-log-'));
    const file = path.join(dir, 'gateway.yaml');
    writeFileSync(file, `${yaml(['m/a'])}logging: { level: warn }\n`);
    gw.gateway.reload(loadConfig(file, { registry }));
    const before = gw.logs.length;
    expect((await ask('m/a')).status).toBe(200);
    await new Promise((r) => setTimeout(r, 50));
    // The access line is info: no longer written.
    expect(gw.logs.slice(before).map((l) => JSON.parse(l).msg)).not.toContain('request');
    writeFileSync(file, `${yaml(['m/a'])}logging: { level: info }\n`);
    gw.gateway.reload(loadConfig(file, { registry }));
    expect((await ask('m/a')).status).toBe(200);
    await eventually(async () => expect(gw!.logs.slice(before).map((l) => JSON.parse(l).msg)).toContain('request'));
    // The announcement is an info line that names the new level in a key of its own (one `level` key per line).
    const changed = gw.logs.filter((l) => l.includes('log level changed'));
    expect(changed.at(-1)).toBeDefined();
    expect(changed.at(-1)!.match(/"level":/g)).toHaveLength(1);
    expect(JSON.parse(changed.at(-1)!)).toMatchObject({ level: 30, log_level: 'info' });
  });

  it('routing settings that outlive a reload follow it: the breaker threshold and cooldown, the sticky TTL', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const { health } = gw.gateway;
    expect(health.options).toEqual({ failureThreshold: 3, cooldownMs: 30_000 });
    dir = mkdtempSync(path.join(tmpdir(), 'gw-reload-routing-'));
    const file = path.join(dir, 'gateway.yaml');
    writeFileSync(file, `${yaml(['m/a'])}routing: { sticky_ttl_ms: 1234, circuit_breaker: { failure_threshold: 2, cooldown_ms: 500 } }\n`);
    gw.gateway.reload(loadConfig(file, { registry }));
    expect(health.options).toEqual({ failureThreshold: 2, cooldownMs: 500 });
    expect(gw.gateway.sticky.ttlMs).toBe(1234);
    // Two failures in a row now open the breaker.
    health.recordFailure('p/x', health.tryAcquire('p/x', 1000), 1000);
    expect(health.state('p/x', 1001)).toBe('closed');
    health.recordFailure('p/x', health.tryAcquire('p/x', 1002), 1002);
    expect(health.state('p/x', 1003)).toBe('open');
    expect(health.state('p/x', 1002 + 500)).toBe('half_open');
    expect((await ask('m/a')).status).toBe(200);
    expect(gw.logs.map((l) => JSON.parse(l)).filter((l) => l.level >= 40)).toEqual([]); // nothing to warn about
  });
});

describe('accounts and workspaces a reload declares', () => {
  it('are made in the store as at a restart, and a declared workspace kept under another account is named', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    // Made before gateway.yaml declared it (`keys create --workspace team-a`): in the default account.
    const defaultAccount = await gw.store.ensureAccount('default');
    await gw.store.ensureWorkspace('team-a', defaultAccount.id);
    const file = writeTemp(`${yaml(['m/a'])}accounts:\n  - { name: acme, billing: invoice }\nworkspaces:\n  - { name: team-a, account: acme }\n  - { name: team-b, account: acme }\n`);
    const lines: string[] = [];
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'info' }, { write: (l: string) => lines.push(l) } as never) });
    expect(await reload('test')).toBe(true);
    const acme = await gw.store.findAccount('acme');
    expect(acme).not.toBeNull();
    expect((await gw.store.findWorkspace('team-b'))?.accountId).toBe(acme!.id);
    const warned = lines.map((l) => JSON.parse(l)).filter((l) => l.level === 40 && l.workspace);
    expect(warned).toMatchObject([{ workspace: 'team-a', declared: 'acme', accountId: defaultAccount.id }]);
    // A key made in the new workspace bills the account gateway.yaml names.
    const { secret } = await gw.createKey({ workspaceId: (await gw.store.findWorkspace('team-b'))!.id });
    expect((await post(`${gw.url}/chat/completions`, secret, { model: 'm/a', messages: [{ role: 'user', content: 'hi' }] })).status).toBe(200);
  });

  it('a store that cannot take them refuses the reload, naming why; the previous config keeps serving', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const file = writeTemp(`${yaml(['m/a', 'm/b'])}accounts:\n  - { name: acme }\n`);
    const lines: string[] = [];
    const broken = Object.assign(Object.create(gw.store), { ensureAccount: async () => Promise.reject(new Error('database is locked')) });
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: broken, logger: pino({ level: 'info' }, { write: (l: string) => lines.push(l) } as never) });
    expect(await reload('test')).toBe(false);
    const refused = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'config reload refused; the previous config keeps serving');
    expect(refused?.reason).toBe('the declared accounts and workspaces could not be made in the store: database is locked');
    expect((await ask('m/b')).status).toBe(404);
  });

  it('during the shutdown drain are ignored with one info line, also when the store closes under the reload (it was an error)', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const file = writeTemp(`${yaml(['m/a', 'm/b'])}accounts:\n  - { name: acme }\n`);
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) } as never);
    // The drain begins while the reload waits on the store, which is then closed (SQLite's own message).
    const closing = Object.assign(Object.create(gw.store), {
      ensureAccount: async () => {
        gw!.gateway.drain.begin();
        throw new TypeError('The database connection is not open');
      },
    });
    expect(await configReloader({ file, registry, gateway: gw.gateway, store: closing, logger })('SIGHUP')).toBe(false);
    // A SIGHUP after the drain began.
    expect(await configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger })('SIGHUP')).toBe(false);
    expect(lines.map((l) => JSON.parse(l))).toMatchObject([
      { level: 30, why: 'SIGHUP', msg: 'config reload ignored: the gateway is shutting down' },
      { level: 30, why: 'SIGHUP', msg: 'config reload ignored: the gateway is shutting down' },
    ]);
    expect(lines).toHaveLength(2);
    expect(gw.gateway.runtime().config.models.map((m) => m.id)).toEqual(['m/a']);
  });

  it('run one at a time, so the file as last written is the config left serving', async () => {
    gw = await startTestGateway({ yaml: yaml(['m/a']) });
    const file = writeTemp(yaml(['m/a', 'm/b']));
    const reload = configReloader({ file, registry, gateway: gw.gateway, store: gw.store, logger: pino({ level: 'silent' }) });
    const first = reload('one');
    writeFileSync(file, yaml(['m/a', 'm/c']));
    const second = reload('two');
    expect(await Promise.all([first, second])).toEqual([true, true]);
    expect((await ask('m/c')).status).toBe(200);
  });
});
