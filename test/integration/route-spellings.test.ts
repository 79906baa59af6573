import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

/**
 * The routes without parameters are looked up by exact method and path before the router runs
 * (src/server.ts). Every other spelling must still get what the router gives it.
 */
const CHAT = { model: 'sim/chat', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] };

async function call(method: string, url: string, key: string): Promise<{ status: number; json: any }> {
  const res = await fetch(url, { method, headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

describe('route spellings (exact lookup ahead of the router)', () => {
  let t: TestGateway;
  let origin: string;
  beforeAll(async () => {
    t = await startTestGateway();
    origin = t.url.slice(0, -'/api/v1'.length);
  });
  afterAll(() => t.close());

  it('serves the exact path, a trailing slash, other letter case and a query string alike', async () => {
    for (const path of ['/api/v1/chat/completions', '/api/v1/chat/completions/', '/API/V1/Chat/Completions', '/api/v1/chat/completions?x=1']) {
      const res = await post(`${origin}${path}`, t.key, CHAT);
      expect(res.status, path).toBe(200);
      expect(res.json.object, path).toBe('chat.completion');
    }
  });

  it('decodes percent-encoded unreserved characters before matching (RFC 3986: the same URI), and nothing else', async () => {
    for (const path of ['/api/v1/chat/%63ompletions', '/api/v1/%63%68%61%74/completions', '/%61pi/v1/chat/completions', '/api/v%31/chat/completions']) {
      const res = await post(`${origin}${path}`, t.key, CHAT);
      expect(res.status, path).toBe(200);
      expect(res.json.object, path).toBe('chat.completion');
    }
    expect((await call('GET', `${origin}/api/v1/%6Bey`, t.key)).status).toBe(200);
    // An encoded slash stays inside its segment (a model id `simulated%2Fchat`), and an encoded reserved
    // character is not a separator: `/chat%2Fcompletions` is no route.
    expect((await call('GET', `${origin}/api/v1/models/sim%2Fchat`, t.key)).json.id).toBe('sim/chat');
    const slash = await post(`${origin}/api/v1/chat%2Fcompletions`, t.key, CHAT);
    expect(slash.status).toBe(404);
    expect(slash.json.error.message).toBe('No route for POST /api/v1/chat%2Fcompletions');
  });

  it('answers a route with the wrong method 405 with Allow, in the endpoint envelope (it was a 404 "No route")', async () => {
    for (const [method, path, allow] of [
      ['GET', '/api/v1/chat/completions', 'POST'],
      ['POST', '/api/v1/key', 'HEAD, GET'],
      ['DELETE', '/api/v1/models', 'HEAD, GET'],
    ]) {
      const res = await fetch(`${origin}${path}`, { method, headers: { authorization: `Bearer ${t.key}` } });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get('allow'), `${method} ${path}`).toBe(allow);
      const body = (await res.json()) as { error: { message: string; metadata: { error_type: string } } };
      expect(body.error.message).toBe(`${method} is not allowed on ${path} (allowed: ${allow})`);
      expect(body.error.metadata.error_type).toBe('invalid_request');
    }
    // /messages answers in its own envelope, so the Anthropic SDK reads the error's type.
    const m = await fetch(`${origin}/api/v1/messages`, { method: 'PUT', headers: { authorization: `Bearer ${t.key}` } });
    expect(m.status).toBe(405);
    expect(await m.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message: 'PUT is not allowed on /api/v1/messages (allowed: POST)' } });
  });

  it('answers a path it does not know 404 in the standard envelope', async () => {
    for (const [method, path] of [
      ['POST', '/api/v1//chat/completions'],
      ['POST', '/chat/completions'],
    ]) {
      const res = await fetch(`${origin}${path}`, { method, headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' }, body: method === 'GET' ? undefined : JSON.stringify(CHAT) });
      expect(res.status, `${method} ${path}`).toBe(404);
      const body = (await res.json()) as { error: { message: string } };
      expect(body.error.message, `${method} ${path}`).toBe(`No route for ${method} ${path}`);
    }
  });

  it('answers GET and HEAD of /key, with and without a trailing slash', async () => {
    for (const path of ['/api/v1/key', '/api/v1/key/']) {
      const got = await call('GET', `${origin}${path}`, t.key);
      expect(got.status, path).toBe(200);
      expect(got.json.data.label, path).toBeTypeOf('string');
      const head = await fetch(`${origin}${path}`, { method: 'HEAD', headers: { authorization: `Bearer ${t.key}` } });
      expect(head.status, `HEAD ${path}`).toBe(200);
    }
  });
});

describe('route spellings under another base_path', () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway({ yaml: testConfigYaml().replace('server: { port: 0,', 'server: { port: 0, base_path: /gw,') });
  });
  afterAll(() => t.close());

  it('serves the routes under the base path only', async () => {
    expect(t.url).toMatch(/\/gw$/);
    const origin = t.url.slice(0, -'/gw'.length);
    expect((await post(`${origin}/gw/chat/completions`, t.key, CHAT)).status).toBe(200);
    expect((await call('GET', `${origin}/gw/key`, t.key)).status).toBe(200);
    for (const path of ['/api/v1/chat/completions', '/chat/completions']) {
      const res = await post(`${origin}${path}`, t.key, CHAT);
      expect(res.status, path).toBe(404);
      expect(res.json.error.message).toBe(`No route for POST ${path}`);
    }
  });
});
