import { describe, expect, it } from 'vitest';
import { testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();
const APP = 'https://app.example.com';
const yaml = (cors = '') => testConfigYaml(t.upstream.url).replace('server: { port: 0,', `server: { port: 0, ${cors}`);
const chat = { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }] };

const preflight = (url: string, origin: string) =>
  fetch(url, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, x-gateway-metadata' } });
const call = (url: string, key: string, origin: string | null, body: unknown = chat) =>
  fetch(url, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(origin ? { origin } : {}) }, body: JSON.stringify(body) });

describe('CORS (spec 7.2: a CORS failure is a 400)', () => {
  it('off by default: no CORS headers, requests with an Origin still served; a preflight is a 400 saying CORS is off', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await call(`${g.url}/chat/completions`, g.key, APP);
    expect(r.status).toBe(200);
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
    const p = await preflight(`${g.url}/chat/completions`, APP);
    expect(p.status).toBe(400);
    expect(await p.json()).toEqual({ error: { code: 400, message: 'CORS is not enabled on this gateway (server.cors.allowed_origins)', metadata: { error_type: 'invalid_request' } } });
  });

  it('a listed origin: preflight 204, answers (errors and streams too) readable with the exposed headers', async () => {
    const g = await t.start({ yaml: yaml(`cors: { allowed_origins: ['${APP}'], max_age_s: 120 },`) });
    const p = await preflight(`${g.url}/chat/completions`, APP);
    expect(p.status).toBe(204);
    expect(Object.fromEntries([...p.headers].filter(([k]) => k.startsWith('access-control') || k === 'vary'))).toEqual({
      'access-control-allow-origin': APP,
      'access-control-allow-methods': 'GET, POST, OPTIONS',
      'access-control-allow-headers': 'authorization, content-type, x-gateway-metadata',
      'access-control-max-age': '120',
      vary: 'Origin',
    });
    const r = await call(`${g.url}/chat/completions`, g.key, APP);
    expect(r.status).toBe(200);
    expect(r.headers.get('access-control-allow-origin')).toBe(APP);
    expect(r.headers.get('access-control-expose-headers')).toContain('x-request-id');
    expect(r.headers.get('x-request-id')).toBe(((await r.json()) as { id: string }).id);
    const stream = await call(`${g.url}/chat/completions`, g.key, APP, { ...chat, stream: true });
    expect(stream.headers.get('access-control-allow-origin')).toBe(APP);
    await stream.text();
    const unauthorised = await call(`${g.url}/chat/completions`, 'sk-wrong', APP);
    expect(unauthorised.status).toBe(401);
    expect(unauthorised.headers.get('access-control-allow-origin')).toBe(APP);
    // Server-side clients (no Origin) are not affected.
    expect((await call(`${g.url}/chat/completions`, g.key, null)).status).toBe(200);
  });

  it('another origin is refused with 400 before any work, in the endpoint\'s envelope', async () => {
    const g = await t.start({ yaml: yaml(`cors: { allowed_origins: ['${APP}'] },`) });
    expect((await preflight(`${g.url}/chat/completions`, 'https://evil.example')).status).toBe(400);
    const r = await call(`${g.url}/chat/completions`, g.key, 'https://evil.example', { ...chat, model: 'fake/gpt' });
    expect(r.status).toBe(400);
    expect(((await r.json()) as any).error).toMatchObject({ code: 400, message: 'CORS: origin "https://evil.example" is not allowed', metadata: { error_type: 'invalid_request', field: 'origin' } });
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
    const m = await call(`${g.url}/messages`, g.key, 'https://evil.example', { ...chat, max_tokens: 5 });
    expect(m.status).toBe(400);
    expect(await m.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(t.upstream.received).toHaveLength(0);
    // Probes and metrics answer whatever page they are viewed from.
    const origin = new URL(g.url).origin;
    for (const path of ['/healthz', '/readyz', '/metrics']) expect((await fetch(`${origin}${path}`, { headers: { origin: 'https://evil.example' } })).status).toBe(200);
    // A preflight without an Origin is told what is missing.
    const bare = await fetch(`${g.url}/chat/completions`, { method: 'OPTIONS', headers: { 'access-control-request-method': 'POST' } });
    expect(((await bare.json()) as any).error.message).toBe('A CORS preflight needs an Origin header');
  });

  it('origins match without regard to letter case (browsers send lower case)', async () => {
    const g = await t.start({ yaml: yaml("cors: { allowed_origins: ['https://App.Example.com'] },") });
    const r = await call(`${g.url}/chat/completions`, g.key, APP);
    expect(r.status).toBe(200);
    expect(r.headers.get('access-control-allow-origin')).toBe(APP);
    expect((await call(`${g.url}/chat/completions`, g.key, 'HTTPS://APP.EXAMPLE.COM')).status).toBe(200);
  });

  it('`*` allows any origin', async () => {
    const g = await t.start({ yaml: yaml("cors: { allowed_origins: ['*'] },") });
    const r = await call(`${g.url}/chat/completions`, g.key, 'https://anywhere.example');
    expect(r.status).toBe(200);
    expect(r.headers.get('access-control-allow-origin')).toBe('*');
    expect((await preflight(`${g.url}/messages`, 'https://anywhere.example')).status).toBe(204);
  });

  it('origins are checked in the config', async () => {
    await expect(t.start({ yaml: yaml("cors: { allowed_origins: ['app.example.com'] },") })).rejects.toThrow(/server\.cors\.allowed_origins\[0\]/);
  });
});
