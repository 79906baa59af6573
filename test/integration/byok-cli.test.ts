import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { byokContext, openProviderKey } from '../../src/auth/byok-seal';
import { openStore } from '../../src/store';
import { ensureBuilt, KEY, killAll, perTest, runCli, startServe } from '../fixtures/cli';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post } from '../fixtures/gateway';

/**
 * `gateway byok set|list|delete` as an operator runs them: real child processes on a temp gateway.yaml and
 * SQLite file, the provider key on stdin, the encryption key from the environment.
 */

const ENCRYPTION_KEY = randomBytes(32);
const ENV = { GATEWAY_BYOK_KEY: ENCRYPTION_KEY.toString('base64') };
const OPENAI_KEY = `sk-cli-openai-${randomBytes(12).toString('hex')}`;
const ANTHROPIC_KEY = `sk-ant-cli-${randomBytes(12).toString('hex')}`;
const dirs: string[] = [];
let upstream: FakeUpstream;

beforeAll(async () => {
  ensureBuilt();
  upstream = await startFakeUpstream();
}, 120_000);
afterEach(() => killAll(perTest));
afterAll(async () => {
  await upstream.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

/** A temp folder with a gateway.yaml: a simulated, an OpenAI-kind, an Anthropic-kind and a simulated video provider, workspace `team`. */
function setup(o: { encryption?: boolean } = {}): { dir: string; file: string; db: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'gw-byok-cli-'));
  dirs.push(dir);
  const db = path.join(dir, 'gw.db');
  const yaml = [
    'server: { port: 0 }',
    `storage: { driver: sqlite, path: ${JSON.stringify(db)} }`,
    'logging: { level: silent }',
    'providers:',
    '  - { id: local, kind: simulated }',
    `  - { id: up-openai, kind: openai, base_url: ${upstream.url}, api_key: sk-operator-openai }`,
    `  - { id: up-anthropic, kind: anthropic, base_url: ${upstream.url}, api_key: sk-operator-anthropic }`,
    '  - { id: sim-video, kind: simulated-video }',
    'models:',
    '  - { id: up/gpt, endpoints: [{ provider: up-openai, upstream_model: gpt-upstream, pricing: { prompt: 1, completion: 2 } }] }',
    'pipelines:',
    '  default: [auth, validate, upstream]',
    'workspaces:',
    '  - { name: team, account: default }',
    ...(o.encryption === false ? [] : ['byok: { encryption_key: "${GATEWAY_BYOK_KEY}" }']),
    '',
  ].join('\n');
  const file = path.join(dir, 'gw.yaml');
  writeFileSync(file, yaml);
  return { dir, file, db };
}

const byok = (s: { dir: string; file: string }, args: string[], input?: string) =>
  runCli(['byok', ...args, '--config', s.file], { cwd: s.dir, env: ENV, input });

describe('gateway byok', () => {
  it('set reads the key from stdin and stores only its sealed form; list shows masked labels; delete removes it', async () => {
    const s = setup();
    const set = await byok(s, ['set', '--workspace', 'default', '--provider', 'up-openai'], `${OPENAI_KEY}\n`);
    expect(set).toMatchObject({ code: 0, stderr: '' });
    expect(set.stdout).toContain(`stored sk-...${OPENAI_KEY.slice(-4)} for provider up-openai in workspace default`);
    expect((await byok(s, ['set', '--workspace', 'team', '--provider', 'up-anthropic'], ANTHROPIC_KEY)).code).toBe(0);

    const all = await byok(s, ['list']);
    expect(all.code).toBe(0);
    const rows = all.stdout.trim().split('\n').map((l) => l.split('\t'));
    expect(rows[0]).toEqual(['workspace', 'provider', 'label', 'created_at']);
    expect(rows.slice(1).map((r) => r.slice(0, 3)).sort()).toEqual([
      ['default', 'up-openai', `sk-...${OPENAI_KEY.slice(-4)}`],
      ['team', 'up-anthropic', `sk-...${ANTHROPIC_KEY.slice(-4)}`],
    ]);
    const team = await byok(s, ['list', '--workspace', 'team']);
    expect(team.stdout.trim().split('\n')).toHaveLength(2);
    expect(team.stdout).toContain('up-anthropic');
    for (const out of [set.stdout, all.stdout, team.stdout]) {
      expect(out).not.toContain(OPENAI_KEY);
      expect(out).not.toContain(ANTHROPIC_KEY);
    }

    const store = await openStore({ driver: 'sqlite', path: s.db });
    try {
      const ws = (await store.findWorkspace('default'))!;
      const [row] = await store.listByokKeys(ws.id);
      expect(row.secret).toMatch(/^v1:/);
      expect(row.secret).not.toContain(OPENAI_KEY);
      expect(openProviderKey(row.secret, ENCRYPTION_KEY, byokContext(ws.id, 'up-openai'))).toBe(OPENAI_KEY);
    } finally {
      await store.close();
    }

    const del = await byok(s, ['delete', '--workspace', 'default', '--provider', 'up-openai']);
    expect(del.code).toBe(0);
    expect((await byok(s, ['list'])).stdout).not.toContain('up-openai');
    const again = await byok(s, ['delete', '--workspace', 'default', '--provider', 'up-openai']);
    // A missing key is exit 1 without the usage text, as `keys revoke` of a missing key (it was exit 2 with usage).
    expect(again.code).toBe(1);
    expect(again.stderr).toBe('error: workspace default has no key for provider up-openai (see byok list)\n');
  }, 60_000); // eight CLI processes one after another: past the default 20 s on a loaded machine

  it('a key set with the CLI is what a running gateway sends upstream', async () => {
    const s = setup();
    expect((await byok(s, ['set', '--workspace', 'default', '--provider', 'up-openai'], OPENAI_KEY)).code).toBe(0);
    const { proc, url } = await startServe(['--config', s.file], { cwd: s.dir, env: ENV });
    const key = KEY.exec(proc.stdout)![0];
    const before = upstream.received.length;
    const r = await post(`${url}/chat/completions`, key, { model: 'up/gpt', messages: [{ role: 'user', content: 'hi' }] }, { 'x-gateway-metadata': 'enabled' });
    expect(r.status).toBe(200);
    expect(r.json.gateway_metadata.is_byok).toBe(true);
    expect(upstream.received[before].headers.authorization).toBe(`Bearer ${OPENAI_KEY}`);
    expect(await proc.stop()).toBe(0);
  });

  it.each([
    ['no encryption key configured', { encryption: false }, ['set', '--workspace', 'default', '--provider', 'up-openai'], /byok\.encryption_key/],
    ['an unknown provider', {}, ['set', '--workspace', 'default', '--provider', 'nope'], /no provider nope in the config \(known: local, up-openai, up-anthropic, sim-video\)/],
    ['a simulated provider', {}, ['set', '--workspace', 'default', '--provider', 'local'], /simulated and takes no API key/],
    ['a simulated video provider', {}, ['set', '--workspace', 'default', '--provider', 'sim-video'], /simulated and takes no API key/],
    ['an unknown workspace', {}, ['set', '--workspace', 'ghost', '--provider', 'up-openai'], /no workspace ghost/],
    ['no --workspace', {}, ['set', '--provider', 'up-openai'], /byok set needs --workspace/],
    ['an unknown workspace to list', {}, ['list', '--workspace', 'ghost'], /no workspace ghost/],
  ] as const)('exits 2 on %s, and stores nothing', async (_what, o, args, message) => {
    const s = setup(o);
    const r = await byok(s, [...args], OPENAI_KEY);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr + r.stdout).not.toContain(OPENAI_KEY);
    const list = await byok(s, ['list']);
    expect(list.stdout.trim().split('\n')).toHaveLength(1);
  });

  it('exits 2 when stdin holds no key, or more than one line', async () => {
    const s = setup();
    const args = ['set', '--workspace', 'default', '--provider', 'up-openai'];
    const empty = await byok(s, args);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain('stdin was empty');
    const two = await byok(s, args, `${OPENAI_KEY}\nsecond line\n`);
    expect(two.code).toBe(2);
    expect(two.stderr).toContain('one line without spaces');
    expect(two.stderr).not.toContain(OPENAI_KEY);
  });

  it.each([
    ['a zero-width space', `${OPENAI_KEY.slice(0, 8)}\u200b${OPENAI_KEY.slice(8)}`],
    ['curly quotes', `\u201c${OPENAI_KEY}\u201d`],
  ])('exits 2 on a key with %s pasted in it, which no HTTP header can carry (it was stored, and every call with it failed as "could not be reached")', async (_what, pasted) => {
    const s = setup();
    const r = await byok(s, ['set', '--workspace', 'default', '--provider', 'up-openai'], pasted);
    expect(r.code).toBe(2);
    expect(r.stderr.split('\n')[0]).toBe('the provider key on stdin must be one line without spaces or control characters, of characters an HTTP header can carry (no curly quotes or zero-width spaces)');
    expect((await byok(s, ['list'])).stdout.trim().split('\n')).toHaveLength(1);
  });

  it('the usage text lists the byok commands', async () => {
    const s = setup();
    const r = await runCli(['--help'], { cwd: s.dir });
    expect(r.stdout).toMatch(/byok set --workspace W --provider P/);
    expect(r.stdout).toMatch(/byok list \[--workspace W\]/);
    expect(r.stdout).toMatch(/byok delete --workspace W --provider P/);
  });
});
