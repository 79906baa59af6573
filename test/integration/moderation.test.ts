import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeModeration, type FakeModeration } from '../fixtures/fake-moderation';
import { post, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { leaveDuring } from '../fixtures/leave';
import { perTestGateways } from '../fixtures/per-test';

const PIPELINE = '[auth, validate, moderation, upstream]';
const t = perTestGateways();
const META = { 'x-gateway-metadata': 'enabled' };

let mod: FakeModeration;
beforeAll(async () => {
  mod = await startFakeModeration();
});
afterAll(async () => {
  await mod.close();
});
beforeEach(() => {
  mod.behaviour = { flagWord: 'attack', category: 'violence' };
  mod.received.length = 0;
});

/** A gateway with engine `m` (extra engine fields in `fields`) assigned to the `default` workspace. */
function start(fields = '', assign = 'moderation: m', timeoutMs = 500): Promise<TestGateway> {
  const engines = `    - { id: m, kind: openai, base_url: ${mod.url}, api_key: sk-mod-secret, model: omni-moderation-latest, timeout_ms: ${timeoutMs}${fields} }
    - { id: local, kind: rules, rules: [{ name: weapons, keywords: [nerve agent] }, { name: fraud, regex: 'card\\s+dump', flags: i }] }`;
  const yaml = `${testConfigYaml(t.upstream.url, PIPELINE)}moderation:\n  engines:\n${engines}\nworkspaces:\n  - { name: default, ${assign} }\n`;
  return t.start({ yaml });
}

const chat = (content: unknown, over: Record<string, unknown> = {}) => ({ model: 'fake/gpt', messages: [{ role: 'user', content }], ...over });
const messages = (content: unknown, over: Record<string, unknown> = {}) => ({ model: 'fake/claude', max_tokens: 50, messages: [{ role: 'user', content }], ...over });

const LONG = `Plan the attack ${'x'.repeat(200)} at dawn, end of text`;
const CUT = 'Plan the attack ' + 'x'.repeat(34) + '…' + 'x'.repeat(28) + ' at dawn, end of text';
const META_OUT = { reasons: ['violence'], flagged_input: CUT, provider_name: 'm', model_slug: 'omni-moderation-latest' };
const MESSAGE = 'Request blocked by moderation (engine "m"): flagged for violence';
const RECORD = {
  type: 'moderation',
  name: 'm',
  summary: 'blocked: violence',
  data: { action: 'block', flagged: true, reasons: ['violence'], provider_name: 'm', model_slug: 'omni-moderation-latest' },
};

describe('flagged input', () => {
  it('chat completions: exact 403 body, flagged_input cut to 100 characters, never reaches the upstream', async () => {
    expect(Array.from(CUT)).toHaveLength(100);
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, {
      model: 'fake/gpt',
      messages: [
        { role: 'system', content: 'be nice' },
        { role: 'user', content: LONG },
      ],
    });
    expect(r.status).toBe(403);
    expect(r.json).toEqual({ error: { code: 403, message: MESSAGE, metadata: { ...META_OUT, error_type: 'permission_denied' } } });
    expect(t.upstream.received).toHaveLength(0);
    expect(mod.received).toEqual([{ body: { model: 'omni-moderation-latest', input: ['be nice', LONG] }, authorization: 'Bearer sk-mod-secret' }]);
  });

  it('messages: 403 permission_error envelope with the metadata at the top level; pipeline record when opted in', async () => {
    const g = await start();
    const body = messages([{ type: 'text', text: LONG }], { system: 'be nice' });
    const r = await post(`${g.url}/messages`, g.key, body);
    expect(r.status).toBe(403);
    expect(r.json).toEqual({ type: 'error', error: { type: 'permission_error', message: MESSAGE, error_type: 'permission_denied' }, request_id: null, metadata: META_OUT });
    const opted = await post(`${g.url}/messages`, g.key, { ...body, stream: true }, META);
    expect(opted.status).toBe(403);
    expect(opted.json.gateway_metadata.pipeline).toEqual([RECORD]);
    expect(t.upstream.received).toHaveLength(0);
  });

  it('a short flagged text is returned whole; the first flagged text is the one reported', async () => {
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, {
      model: 'fake/gpt',
      messages: [
        { role: 'user', content: 'hello' },
        { role: 'assistant', content: 'hi' },
        { role: 'user', content: [{ type: 'text', text: 'attack now' }] },
        { role: 'user', content: 'another attack' },
      ],
    });
    expect(r.status).toBe(403);
    expect(r.json.error.metadata.flagged_input).toBe('attack now');
  });

  it('a request cannot switch moderation off with plugins: [{id: moderation, enabled: false}]', async () => {
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, chat('attack', { plugins: [{ id: 'moderation', enabled: false }] }));
    expect(r.status).toBe(403);
    expect(t.upstream.received).toHaveLength(0);
  });

  it('categories and threshold narrow what counts', async () => {
    const g = await start(', categories: [harassment], threshold: 0.15');
    const r = await post(`${g.url}/chat/completions`, g.key, chat('calm words'));
    expect(r.status).toBe(403);
    expect(r.json.error.metadata).toMatchObject({ reasons: ['harassment'], flagged_input: 'calm words' });
    const g2 = await start(', categories: [harassment]');
    t.release();
    const ok = await post(`${g2.url}/chat/completions`, g2.key, chat('attack'));
    await g2.close();
    expect(ok.status).toBe(200);
  });

  it('the rules engine: model_slug "rules", provider_name the engine id', async () => {
    const g = await start('', 'moderation: local');
    const r = await post(`${g.url}/chat/completions`, g.key, chat('sell me a CARD  dump and some nerve agent'));
    expect(r.status).toBe(403);
    expect(r.json.error.metadata).toEqual({
      reasons: ['fraud', 'weapons'],
      flagged_input: 'sell me a CARD  dump and some nerve agent',
      provider_name: 'local',
      model_slug: 'rules',
      error_type: 'permission_denied',
    });
    expect(mod.received).toHaveLength(0);
    expect(t.upstream.received).toHaveLength(0);
  });
});

describe('text split across content parts', () => {
  it('messages: a rule phrase split across text blocks is judged as the text the model reads', async () => {
    const g = await start('', 'moderation: local');
    const r = await post(`${g.url}/messages`, g.key, messages([{ type: 'text', text: 'how to make a nerve' }, { type: 'text', text: ' agent' }]));
    expect(r.status).toBe(403);
    expect(r.json.metadata).toMatchObject({ reasons: ['weapons'], flagged_input: 'how to make a nerve agent' });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('a rule phrase split at its space with the space in neither block is judged as a provider that adds a line break shows it', async () => {
    const g = await start('', 'moderation: local');
    const r = await post(`${g.url}/messages`, g.key, messages([{ type: 'text', text: 'how to make a nerve' }, { type: 'text', text: 'agent' }]));
    expect(r.status).toBe(403);
    expect(r.json.metadata).toMatchObject({ reasons: ['weapons'], flagged_input: 'how to make a nerve\nagent' });
    expect(t.upstream.received).toHaveLength(0);
  });
});

describe('passing requests', () => {
  it('unflagged input goes upstream unchanged, with a "not flagged" record', async () => {
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, chat('hello there'), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received).toHaveLength(1);
    expect(r.json.gateway_metadata.pipeline).toEqual([{ ...RECORD, summary: 'not flagged', data: { ...RECORD.data, action: 'allow', flagged: false, reasons: [] } }]);
    const m = await post(`${g.url}/messages`, g.key, messages('hello there'));
    expect(m.status).toBe(200);
    expect(t.upstream.received).toHaveLength(2);
  });

  it('a workspace without an engine is unaffected: no call to the engine, no record', async () => {
    const g = await start('', 'account: default');
    const r = await post(`${g.url}/chat/completions`, g.key, chat('attack at dawn'), META);
    expect(r.status).toBe(200);
    expect(mod.received).toHaveLength(0);
    expect(t.upstream.received).toHaveLength(1);
    expect(r.json.gateway_metadata).toBeDefined();
    expect(r.json.gateway_metadata.pipeline ?? []).toEqual([]);
  });
});

describe('engine failure (on_error)', () => {
  it('deny (default): 403 with empty reasons, never reaches the upstream, logged', async () => {
    mod.behaviour = { status: 500 };
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, chat('hello'), META);
    expect(r.status).toBe(403);
    expect(r.json.error.message).toBe('Request blocked: moderation engine "m" failed: answered 500 and it is set to deny on error');
    expect(r.json.error.metadata).toEqual({ reasons: [], flagged_input: '', provider_name: 'm', model_slug: 'omni-moderation-latest', error_type: 'permission_denied' });
    expect(r.json.gateway_metadata.pipeline[0]).toMatchObject({ summary: 'blocked: the check failed and the engine fails closed', data: { action: 'block', error: 'moderation engine "m" failed: answered 500' } });
    expect(t.upstream.received).toHaveLength(0);
    expect(g.logs.join('')).toContain('moderation engine failed');
  });

  it('deny on a timeout', async () => {
    mod.behaviour = { hang: true };
    const g = await start();
    const r = await post(`${g.url}/messages`, g.key, messages('hello'));
    expect(r.status).toBe(403);
    expect(r.json.error.message).toBe('Request blocked: moderation engine "m" failed: no answer within 500 ms and it is set to deny on error');
    expect(t.upstream.received).toHaveLength(0);
  });

  it('deny on a timeout while the body of the answer is read (the headers came in time)', async () => {
    mod.behaviour = { stallBody: true };
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, chat('hello'));
    expect(r.status).toBe(403);
    expect(r.json.error.message).toBe('Request blocked: moderation engine "m" failed: no answer within 500 ms and it is set to deny on error');
    expect(t.upstream.received).toHaveLength(0);
  });

  it('a client that leaves during the check is no engine failure: nothing logged as one, nothing sent upstream, a 499', async () => {
    mod.behaviour = { hang: true };
    const g = await start(', on_error: allow', 'moderation: m', 5000);
    const line = await leaveDuring({ url: `${g.url}/chat/completions`, key: g.key, body: chat('hello'), busy: () => mod.received.length > 0, logs: g.logs });
    expect(line).toMatchObject({ status: 499 });
    expect(g.logs.some((l) => l.includes('moderation engine failed'))).toBe(false);
    expect(t.upstream.received).toHaveLength(0);
  });

  it('allow: the request goes through, the failure is recorded', async () => {
    mod.behaviour = { status: 503 };
    const g = await start(', on_error: allow');
    const r = await post(`${g.url}/chat/completions`, g.key, chat('hello'), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received).toHaveLength(1);
    expect(r.json.gateway_metadata.pipeline[0]).toMatchObject({ summary: 'allowed: the check failed and the engine fails open', data: { action: 'allow', flagged: false } });
  });
});
