import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store';
import type { Store } from '../../src/store/types';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

/** POST /presets/{slug}/messages, the preset reads, and presets used by both inference endpoints. */

const t = perTestGateways();
const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const start = (store?: Store) => t.start({ yaml: testConfigYaml(t.upstream.url), store });

const PRESET_BODY = {
  model: 'fake/gpt',
  max_tokens: 7,
  temperature: 0.3,
  stop_sequences: ['END'],
  system: 'You are terse.',
  messages: [{ role: 'user', content: 'this conversation is not kept' }],
  stream: true,
  metadata: { user_id: 'not kept either' },
};

async function get(url: string, key: string | null) {
  const res = await fetch(url, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  return { status: res.status, json: (await res.json()) as any };
}

const save = (g: TestGateway, slug: string, body: unknown = PRESET_BODY, key = g.managementKey) => post(`${g.url}/presets/${slug}/messages`, key, body);

describe('POST /presets/{slug}/messages', () => {
  it('200: creates version 1 with only the preset fields, system as system_prompt; the next write is version 2', async () => {
    const g = await start();
    const r = await save(g, 'terse-writer');
    expect(r.status).toBe(200);
    const data = r.json.data;
    expect(data).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: 'terse-writer',
      slug: 'terse-writer',
      description: null,
      status: 'active',
      status_updated_at: expect.any(String),
      created_at: expect.any(String),
      updated_at: expect.any(String),
      creator_user_id: 'user_test',
      workspace_id: g.keyRecord.workspaceId,
      designated_version_id: data.designated_version.id,
      designated_version: {
        id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        preset_id: data.id,
        version: 1,
        config: { model: 'fake/gpt', max_tokens: 7, temperature: 0.3, stop_sequences: ['END'] },
        system_prompt: 'You are terse.',
        creator_id: 'user_test',
        created_at: expect.any(String),
        updated_at: expect.any(String),
      },
    });
    const next = await save(g, 'terse-writer', { model: 'fake/claude', messages: [{ role: 'user', content: 'x' }] });
    expect(next.json.data.id).toBe(data.id);
    expect(next.json.data.designated_version).toMatchObject({ version: 2, config: { model: 'fake/claude' }, system_prompt: null });
    expect(next.json.data.designated_version_id).not.toBe(data.designated_version_id);
    // A system of only empty text blocks is no system prompt (as an empty string is).
    const empty = await save(g, 'terse-writer', { model: 'fake/claude', system: [{ type: 'text', text: '' }], messages: [] });
    expect(empty.json.data.designated_version.system_prompt).toBeNull();
  });

  it('401 without a key, 403 for a regular key, in the standard envelope', async () => {
    const g = await start();
    const none = await save(g, 'p', PRESET_BODY, null as unknown as string);
    expect(none.status).toBe(401);
    expect(none.json).toEqual({ error: { code: 401, message: 'Missing Authentication header', metadata: { error_type: 'authentication' } } });
    const regular = await save(g, 'p', PRESET_BODY, g.key);
    expect(regular.status).toBe(403);
    expect(regular.json).toEqual({ error: { code: 403, message: 'Only management keys can perform this operation', metadata: { error_type: 'permission_denied' } } });
    // Refused from the headers: a body that is no JSON at all does not turn the 403 into its 400.
    const res = await fetch(`${g.url}/presets/p/messages`, { method: 'POST', headers: { authorization: `Bearer ${g.key}`, 'content-type': 'application/json' }, body: 'garbage' });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { metadata: { error_type: string } } }).error.metadata.error_type).toBe('permission_denied');
  });

  it('400 for a bad slug, an invalid messages body or a preset naming a preset; 404 for an unknown model', async () => {
    const g = await start();
    const slug = await save(g, 'Not_OK!');
    expect(slug.status).toBe(400);
    expect(slug.json.error.metadata).toEqual({ error_type: 'invalid_request', field: 'slug' });
    const body = await save(g, 'ok', { model: 'fake/gpt', max_tokens: 'lots', messages: [{ role: 'user', content: 'x' }] });
    expect(body.status).toBe(400);
    expect(body.json.error.metadata.field).toBe('max_tokens');
    const nested = await save(g, 'ok', { model: '@preset/other', messages: [{ role: 'user', content: 'x' }] });
    expect(nested.status).toBe(400);
    const unknown = await save(g, 'ok', { model: 'nope/model', messages: [{ role: 'user', content: 'x' }] });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toMatchObject({ code: 404, metadata: { error_type: 'not_found', model: 'nope/model' } });
    // What would refuse every use of the preset refuses the write: an unknown fallback model, a plugin the
    // operator's pipeline does not run.
    const fallback = await save(g, 'ok', { model: 'fake/gpt', fallbacks: [{ model: 'nope/other' }], messages: [{ role: 'user', content: 'x' }] });
    expect(fallback.status).toBe(404);
    expect(fallback.json.error.metadata).toMatchObject({ model: 'nope/other' });
    const plugin = await save(g, 'ok', { model: 'fake/gpt', plugins: [{ id: 'moderation' }], messages: [{ role: 'user', content: 'x' }] });
    expect(plugin.status).toBe(400);
    expect(plugin.json.error.metadata).toMatchObject({ error_type: 'invalid_request', field: 'plugins[0].id' });
    expect((await get(`${g.url}/presets`, g.managementKey)).json.data).toEqual([]); // nothing was saved
    // `messages` is not persisted: the empty list a client sends with a preset is accepted.
    expect((await save(g, 'ok', { model: 'fake/gpt', max_tokens: 10, messages: [] })).status).toBe(200);
    // A body that is JSON but not an object is the 400 the inference endpoints give (was a 500).
    for (const bad of [null, [], 'text', 3]) {
      const r = await save(g, 'ok', bad);
      expect(r.status).toBe(400);
      expect(r.json.error.metadata.error_type).toBe('invalid_request');
    }
  });

  it('500 when the store fails, with the generic message', async () => {
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    const failing = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === 'savePresetVersion') return async () => Promise.reject(new Error('disk on fire'));
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const g = await start(failing);
    try {
      const r = await save(g, 'p');
      expect(r.status).toBe(500);
      expect(r.json).toEqual({ error: { code: 500, message: 'Internal server error', metadata: { error_type: 'server' } } });
      expect(g.logs.join('')).toContain('disk on fire');
    } finally {
      await store.close();
    }
  });
});

describe('preset writes on PostgreSQL', () => {
  const schema = `gw_test_${randomBytes(6).toString('hex')}`;
  let store: Store;
  beforeAll(async () => {
    store = await openStore({ driver: 'postgres', url: PG_URL, schema, pool_max: 10 } as never);
  });
  afterAll(async () => {
    await store.close();
    const c = new Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  });

  it('never two versions with one number; the losers get 409 conflict and nothing is half-written', async () => {
    const g = await start(store);
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => save(g, 'race', { ...PRESET_BODY, temperature: i / 10 })));
    const ok = results.filter((r) => r.status === 200);
    const lost = results.filter((r) => r.status !== 200);
    for (const r of lost) {
      expect(r.status).toBe(409);
      expect(r.json).toEqual({ error: { code: 409, message: expect.stringMatching(/retry later$/), metadata: { error_type: 'conflict' } } });
    }
    const versions = ok.map((r) => r.json.data.designated_version.version);
    expect(new Set(versions).size).toBe(versions.length);
    const listed = (await get(`${g.url}/presets/race/versions`, g.managementKey)).json.data;
    expect(listed.map((v: { version: number }) => v.version).sort()).toEqual([...versions].sort());
    // A retry after a conflict succeeds with the next number.
    const retry = await save(g, 'race');
    expect(retry.json.data.designated_version.version).toBe(Math.max(...versions) + 1);
  });

  it('a `system` holding a NUL character is a 400 naming `system` on both engines, as text or blocks (PostgreSQL refused it: a 500)', async () => {
    const sqlite = await startTestGateway({ yaml: testConfigYaml(t.upstream.url) });
    try {
      for (const g of [await start(store), sqlite]) {
        for (const system of ['terse\u0000', [{ type: 'text', text: 'a' }, { type: 'text', text: '\u0000b', cache_control: { type: 'ephemeral' } }]]) {
          const r = await save(g, 'nul', { ...PRESET_BODY, system });
          expect(r.status).toBe(400);
          expect(r.json.error.metadata).toEqual({ error_type: 'invalid_request', field: 'system' });
        }
        // A NUL elsewhere in the preset is kept (its config is stored as JSON text, where it is escaped).
        const kept = await save(g, 'nul', { ...PRESET_BODY, stop_sequences: ['\u0000'], system: 'ok 😀' });
        expect(kept.status).toBe(200);
        expect(kept.json.data.designated_version).toMatchObject({ version: 1, system_prompt: 'ok 😀', config: { stop_sequences: ['\u0000'] } });
      }
    } finally {
      await sqlite.close();
    }
  });
});

describe('preset writes with a lone surrogate', () => {
  it('are a 400 naming the field on both engines, and nothing is stored (it has no UTF-8 form: it would not come back as sent)', async () => {
    const sqlite = await startTestGateway({ yaml: testConfigYaml(t.upstream.url) });
    const schema = `gw_test_${randomBytes(6).toString('hex')}`;
    const store = await openStore({ driver: 'postgres', url: PG_URL, schema, pool_max: 2 } as never);
    try {
      for (const g of [await start(store), sqlite]) {
        for (const [over, field] of [
          [{ system: 'terse\ud800' }, 'system'],
          [{ system: [{ type: 'text', text: 'a' }, { type: 'text', text: '\udc00b' }] }, 'system[1].text'],
          [{ stop_sequences: ['END', 'x\ud83d'] }, 'stop_sequences[1]'],
        ] as const) {
          const r = await save(g, 'lone', { ...PRESET_BODY, ...over });
          expect(r.status).toBe(400);
          expect(r.json.error.metadata).toEqual({ error_type: 'invalid_request', field });
        }
        expect((await get(`${g.url}/presets/lone`, g.managementKey)).status).toBe(404);
      }
    } finally {
      await sqlite.close();
      await store.close();
      const c = new Client({ connectionString: PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await c.end();
    }
  });
});

describe('preset reads', () => {
  it('GET /presets, /presets/{slug}, /presets/{slug}/versions: management keys, 403 otherwise, 404 for unknown or other workspaces', async () => {
    const g = await start();
    await save(g, 'a');
    await save(g, 'a', { model: 'fake/claude', messages: [{ role: 'user', content: 'x' }] });
    await save(g, 'b');
    expect((await get(`${g.url}/presets`, g.managementKey)).json.data.map((p: { slug: string }) => p.slug)).toEqual(['a', 'b']);
    expect((await get(`${g.url}/presets/a`, g.managementKey)).json.data.designated_version.version).toBe(2);
    expect((await get(`${g.url}/presets/a/versions`, g.managementKey)).json.data.map((v: { version: number }) => v.version)).toEqual([2, 1]);
    expect((await get(`${g.url}/presets/a`, g.key)).status).toBe(403);
    expect((await get(`${g.url}/presets`, g.key)).status).toBe(403);
    expect((await get(`${g.url}/presets/zzz`, g.managementKey)).status).toBe(404);
    const ws = await g.store.ensureWorkspace('elsewhere', g.keyRecord.accountId);
    const outsider = await g.createKey({ workspaceId: ws.id, isManagement: true, name: 'outsider' });
    expect((await get(`${g.url}/presets/a`, outsider.secret)).status).toBe(404);
    expect((await get(`${g.url}/presets`, outsider.secret)).json.data).toEqual([]);
  });
});

describe('using a preset', () => {
  const chat = (over: Record<string, unknown>) => post(`${gw().url}/chat/completions`, gw().key, { messages: [{ role: 'user', content: 'hi' }], ...over });
  const messages = (over: Record<string, unknown>) => post(`${gw().url}/messages`, gw().key, { messages: [{ role: 'user', content: 'hi' }], ...over });
  let current: TestGateway;
  const gw = () => current;
  const sent = () => t.upstream.received.at(-1)!.body;

  it("the debug echo of a preset's request goes to management keys only (a preset is management-only to read)", async () => {
    current = await start();
    await save(current, 'terse');
    const body = { model: '@preset/terse', stream: true, debug: { echo_upstream_body: true }, messages: [{ role: 'user', content: 'hi' }] };
    const regular = await fetch(`${current.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${current.key}` }, body: JSON.stringify(body) });
    const regularText = await regular.text();
    expect(regular.status).toBe(200);
    expect(regularText).not.toContain('echo_upstream_body');
    expect(regularText).not.toContain('You are terse.');
    const management = await fetch(`${current.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${current.managementKey}` }, body: JSON.stringify(body) });
    expect(await management.text()).toContain('You are terse.');
  });

  it('chat: model "@preset/<slug>" applies the designated version translated to chat; request fields win', async () => {
    current = await start();
    await save(current, 'terse');
    const r = await chat({ model: '@preset/terse' });
    expect(r.status).toBe(200);
    expect(r.json.model).toBe('fake/gpt');
    expect(sent()).toMatchObject({ model: 'gpt-upstream', temperature: 0.3, stop: ['END'] });
    expect(sent().messages[0]).toEqual({ role: 'system', content: 'You are terse.' });
    expect(sent().max_completion_tokens ?? sent().max_tokens).toBe(7);
    await chat({ model: '@preset/terse', temperature: 1.5, messages: [{ role: 'system', content: 'Mine.' }, { role: 'user', content: 'hi' }] });
    expect(sent().temperature).toBe(1.5);
    expect(sent().messages.filter((m: { role: string }) => m.role === 'system')).toEqual([{ role: 'system', content: 'Mine.' }]);
    // A field the request sets wins under either of its chat names: the preset's max_tokens arrives as
    // max_completion_tokens, and the request's own max_tokens replaces it (it was sent beside it).
    await chat({ model: '@preset/terse', max_tokens: 3 });
    expect(sent()).toMatchObject({ max_tokens: 3 });
    expect(sent()).not.toHaveProperty('max_completion_tokens');
    await save(current, 'thinker', { model: 'fake/gpt', max_tokens: 5000, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [] });
    const own = await chat({ model: '@preset/thinker', reasoning: { effort: 'high' } });
    expect(own.status).toBe(200);
    expect(sent().reasoning).toEqual({ effort: 'high' });
    expect(sent()).not.toHaveProperty('reasoning_effort');
  });

  it("a request's own models list replaces the preset's model choice (the preset's model had gone first)", async () => {
    current = await start();
    expect((await save(current, 'picker', { model: 'fake/gpt', models: ['fake/gpt'], messages: [] })).status).toBe(200);
    const viaField = await chat({ preset: 'picker', models: ['fake/claude'] });
    expect(viaField.status).toBe(200);
    expect(viaField.json.model).toBe('fake/claude');
    const viaModel = await messages({ model: '@preset/picker', models: ['fake/claude'], max_tokens: 8 });
    expect(viaModel.status).toBe(200);
    expect(viaModel.json.model).toBe('fake/claude');
    // Without a choice of its own, the preset's model serves.
    expect((await chat({ preset: 'picker' })).json.model).toBe('fake/gpt');
  });

  it('a preset valid for messages that a chat request cannot take: the 400 names the field and says the preset set it', async () => {
    current = await start();
    const stops = ['s1', 's2', 's3', 's4', 's5', 's6'];
    expect((await save(current, 'many-stops', { model: 'fake/gpt', stop_sequences: stops, messages: [] })).status).toBe(200);
    expect((await messages({ model: '@preset/many-stops', max_tokens: 8 })).status).toBe(200);
    const r = await chat({ model: '@preset/many-stops' });
    expect(r.status).toBe(400);
    expect(r.json.error.metadata).toMatchObject({ field: 'stop', error_type: 'invalid_request' });
    expect(r.json.error.message).toMatch(/^`stop` must NOT have more than 4 items \(set by preset `many-stops`, not by the request\)$/);
    // The request's own field: the message is the validator's alone.
    const own = await chat({ model: '@preset/many-stops', stop: stops });
    expect(own.json.error.message).toBe('`stop` must NOT have more than 4 items');
  });

  it('messages: `preset` field and "<model>@preset/<slug>"; system_prompt becomes system', async () => {
    current = await start();
    await save(current, 'terse');
    let r = await messages({ preset: 'terse', model: 'fake/claude' });
    expect(r.status).toBe(200);
    expect(sent()).toMatchObject({ model: 'claude-upstream', system: 'You are terse.', max_tokens: 7, temperature: 0.3, stop_sequences: ['END'] });
    r = await messages({ model: 'fake/claude@preset/terse' });
    expect(r.status).toBe(200);
    expect(sent()).toMatchObject({ model: 'claude-upstream', system: 'You are terse.' });
    r = await messages({ model: '@preset/terse', system: 'Own system.' });
    expect(r.json.model).toBe('fake/gpt');
    expect(sent().messages[0]).toEqual({ role: 'system', content: 'Own system.' }); // translated to the chat provider
  });

  it("a system of blocks keeps its cache_control on /messages; a chat request gets the text, as the translation gives it", async () => {
    current = await start();
    const system = [
      { type: 'text', text: 'Long shared context.', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'Be terse.' },
    ];
    const saved = await save(current, 'cached', { model: 'fake/claude', max_tokens: 9, system, messages: [] });
    expect(saved.json.data.designated_version.system_prompt).toBe('Long shared context.\n\nBe terse.');
    expect((await messages({ model: '@preset/cached' })).status).toBe(200);
    expect(sent().system).toEqual(system);
    // The request's own system still wins.
    await messages({ model: '@preset/cached', system: 'Mine.' });
    expect(sent().system).toBe('Mine.');
    // Chat: a leading system message of the text; cache_control is dropped, as messages → chat drops it.
    expect((await chat({ model: 'fake/gpt@preset/cached' })).status).toBe(200);
    expect(sent().messages[0]).toEqual({ role: 'system', content: 'Long shared context.\n\nBe terse.' });
  });

  it("chat: a request's own system message wins wherever it stands; the preset's is not added beside it", async () => {
    current = await start();
    await save(current, 'terse');
    const systems = () => sent().messages.filter((m: { role: string }) => m.role === 'system' || m.role === 'developer');
    const later = [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }, { role: 'system', content: 'Mine.' }, { role: 'user', content: 'go on' }];
    expect((await chat({ model: '@preset/terse', messages: later })).status).toBe(200);
    expect(systems()).toEqual([{ role: 'system', content: 'Mine.' }]);
    expect(sent().messages).toEqual(later);
    await chat({ model: '@preset/terse', messages: [{ role: 'user', content: 'hi' }, { role: 'developer', content: 'Mine.' }] });
    expect(systems()).toEqual([{ role: 'developer', content: 'Mine.' }]);
    // None of its own: the preset's leads.
    await chat({ model: '@preset/terse', messages: [{ role: 'user', content: 'hi' }] });
    expect(systems()).toEqual([{ role: 'system', content: 'You are terse.' }]);
  });

  it('the newest version serves at once after a write; an unknown preset is 404 in each envelope; other workspaces do not see it', async () => {
    current = await start();
    await save(current, 'p');
    await save(current, 'p', { model: 'fake/claude', temperature: 0.9, messages: [{ role: 'user', content: 'x' }] });
    expect((await chat({ model: '@preset/p' })).json.model).toBe('fake/claude');
    const c = await chat({ model: '@preset/nope' });
    expect(c.status).toBe(404);
    expect(c.json.error).toEqual({ code: 404, message: 'Preset `nope` not found', metadata: { error_type: 'not_found', preset: 'nope' } });
    const m = await messages({ preset: 'nope', model: 'fake/claude' });
    expect(m.status).toBe(404);
    expect(m.json).toMatchObject({ type: 'error', error: { type: 'not_found_error', error_type: 'not_found' }, request_id: null });
    const ws = await current.store.ensureWorkspace('elsewhere', current.keyRecord.accountId);
    const outsider = await current.createKey({ workspaceId: ws.id, name: 'outsider' });
    expect((await post(`${current.url}/chat/completions`, outsider.secret, { model: '@preset/p', messages: [{ role: 'user', content: 'hi' }] })).status).toBe(404);
    const both = await chat({ model: '@preset/p', preset: 'other' });
    expect(both.status).toBe(400);
  });
});
