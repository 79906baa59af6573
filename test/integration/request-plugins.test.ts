import { describe, expect, it } from 'vitest';
import { post, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

describe('plugins named by a request', () => {
  it('a plugin the operator does not run is a 400 naming it, in each envelope', async () => {
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url) });
    const chat = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: [{ id: 'web' }], messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(400);
    expect(chat.json.error).toEqual({
      code: 400,
      message: 'Plugin `web` is not enabled on this gateway (the operator\'s pipeline does not run it)',
      metadata: { error_type: 'invalid_request', field: 'plugins[0].id' },
    });
    const messages = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, plugins: [{ id: 'fusion' }], messages: [{ role: 'user', content: 'hi' }] });
    expect(messages.status).toBe(400);
    expect(messages.json.error).toMatchObject({ type: 'invalid_request_error', error_type: 'invalid_request' });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('an id no plugin has is refused by the request schema', async () => {
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url) });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: [{ id: 'teleport' }], messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(400);
    expect(r.json.error.metadata.field).toBe('plugins[0].id');
  });

  it('an `enabled` that is not a boolean is a 400 naming it, in each envelope, for every plugin id (a "false" had run the stage)', async () => {
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url, '[auth, validate, response-healing, upstream]') });
    const chat = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: [{ id: 'response-healing', enabled: 'false' }], messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(400);
    expect(chat.json.error.metadata).toMatchObject({ error_type: 'invalid_request', field: 'plugins[0].enabled' });
    const messages = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, plugins: [{ id: 'response-healing', enabled: 0 }], messages: [{ role: 'user', content: 'hi' }] });
    expect(messages.status).toBe(400);
    expect(messages.json.error).toMatchObject({ type: 'invalid_request_error', error_type: 'invalid_request' });
    expect(messages.json.error.message).toContain('plugins[0].enabled');
    expect(t.upstream.received).toHaveLength(0);
    const ok = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: [{ id: 'response-healing', enabled: false }], messages: [{ role: 'user', content: 'hi' }] });
    expect(ok.status).toBe(200);
  });

  it('a plugin listed twice is a 400 naming the id and both places, in each envelope (the first entry had won silently)', async () => {
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url, '[auth, validate, response-healing, upstream]') });
    const twice = [{ id: 'response-healing' }, { id: 'response-healing', enabled: false }];
    const chat = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: twice, messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(400);
    expect(chat.json.error.metadata).toEqual({ error_type: 'invalid_request', field: 'plugins[1].id' });
    expect(chat.json.error.message).toBe('Plugin `response-healing` is listed twice in `plugins` (plugins[0] and plugins[1]); name each plugin once');
    const messages = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, plugins: twice, messages: [{ role: 'user', content: 'hi' }] });
    expect(messages.status).toBe(400);
    expect(messages.json.error).toMatchObject({ type: 'invalid_request_error', error_type: 'invalid_request' });
    expect(messages.json.error.message).toContain('`response-healing` is listed twice');
    expect(t.upstream.received).toHaveLength(0);
  });

  it('an option a plugin does not have is a 400 naming it and the ones it has (fusion `model` for `models` had been ignored)', async () => {
    const fusion = 'plugins:\n  fusion: { models: [fake/gpt, fake/claude], judge: fake/gpt, enabled_by_default: false }\n';
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url, '[auth, validate, fusion, upstream, response-healing]') + fusion });
    const chat = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: [{ id: 'fusion', model: ['fake/gpt', 'fake/claude'] }], messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(400);
    expect(chat.json.error.metadata).toEqual({ error_type: 'invalid_request', field: 'plugins[0].model' });
    expect(chat.json.error.message).toBe('`plugins[0]` accepts only `id`, `enabled`, `models`, `judge` (got `model`)');
    const messages = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, plugins: [{ id: 'response-healing', max_bytes: 10 }], messages: [{ role: 'user', content: 'hi' }] });
    expect(messages.status).toBe(400);
    expect(messages.json.error).toMatchObject({ type: 'invalid_request_error', error_type: 'invalid_request' });
    expect(messages.json.error.message).toContain('(got `max_bytes`)');
    expect(t.upstream.received).toHaveLength(0);
  });

  it('without plugins named, nothing is recorded: no pipeline in the metadata', async () => {
    const g = await t.start({ yaml: testConfigYaml(t.upstream.url, '[auth, validate, rate-limit, upstream]') });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(200);
    expect(r.json.gateway_metadata).toBeUndefined();
    const meta = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] }, { 'x-gateway-metadata': 'enabled' });
    expect(meta.json.gateway_metadata.pipeline).toBeUndefined(); // no stage recorded anything
  });
});
