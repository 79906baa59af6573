import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { byokContext, maskProviderKey, sealProviderKey } from '../../src/auth/byok-seal';
import { createLogger } from '../../src/telemetry/log';
import { startTelemetry, type Telemetry } from '../../src/telemetry/otel';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

/**
 * Issue 8 item 4: no secret reaches a log line, a span, a response body or a response header. One gateway
 * logs at `trace` into memory and exports spans into memory; it holds operator provider keys, a workspace's
 * own (BYOK) provider keys, the BYOK encryption key and several gateway keys. A varied run of requests
 * (successes, streams, bad and revoked keys, upstreams that echo the credentials they were sent in their
 * errors, the debug echo, fallbacks) is made, then everything captured is searched for every secret.
 */

const PIPELINE = '[auth, validate, rate-limit, budget-check, upstream]';
const OPERATOR_OPENAI = `sk-operator-openai-${randomBytes(16).toString('hex')}`;
const OPERATOR_ANTHROPIC = `sk-ant-operator-${randomBytes(16).toString('hex')}`;
const OWN_OPENAI = `sk-own-openai-${randomBytes(16).toString('hex')}`;
const OWN_ANTHROPIC = `sk-ant-own-${randomBytes(16).toString('hex')}`;
const ENCRYPTION_KEY = randomBytes(32);

const exporter = new InMemorySpanExporter();
let telemetry: Telemetry;
let upstream: FakeUpstream;
let gw: TestGateway;
/** Gateway keys: the fixture's regular and management keys, a BYOK workspace's key, a revoked key. */
let byokKey: string;
let revokedKey: string;
/** Every response: status line, headers and body text. */
const responses: string[] = [];

function yaml(upstreamUrl: string): string {
  return (
    testConfigYaml(upstreamUrl, PIPELINE)
      .replace('logging: { level: info }', 'logging: { level: trace }')
      .replace('sk-upstream-openai-secret', OPERATOR_OPENAI)
      .replace('sk-upstream-anthropic-secret', OPERATOR_ANTHROPIC) +
    `byok: { encryption_key: ${ENCRYPTION_KEY.toString('base64')} }\n` +
    // The run fails the fake providers on purpose, many times: no breaker may take an endpoint out of it.
    'routing: { circuit_breaker: { failure_threshold: 1000, cooldown_ms: 1 } }\n'
  );
}

beforeAll(async () => {
  telemetry = startTelemetry({ exporter: 'none', service_name: 't', max_queue: 4096 }, [new SimpleSpanProcessor(exporter)]);
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: yaml(upstream.url), tracer: telemetry.tracer });
  expect(gw.config.providers.find((p) => p.id === 'fake-openai')).toMatchObject({ api_key: OPERATOR_OPENAI });
  await gw.store.addCredits(gw.keyRecord.accountId, 100);
  const ws = await gw.store.ensureWorkspace('byok', gw.keyRecord.accountId);
  for (const [provider, plaintext] of [['fake-openai', OWN_OPENAI], ['fake-anthropic', OWN_ANTHROPIC]]) {
    const secret = sealProviderKey(plaintext, ENCRYPTION_KEY, byokContext(ws.id, provider));
    await gw.store.putByokKey({ workspaceId: ws.id, provider, secret, label: maskProviderKey(plaintext) });
  }
  byokKey = (await gw.createKey({ workspaceId: ws.id, name: 'byok' })).secret;
  const revoked = await gw.createKey({ name: 'revoked' });
  revokedKey = revoked.secret;
  await gw.store.revokeKey(revoked.record.id);
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  await telemetry?.shutdown();
});

async function call(method: 'GET' | 'POST', path: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(`${gw.url}${path}`, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  responses.push(`${res.status}\n${JSON.stringify([...res.headers])}\n${text}`);
  return { status: res.status, text };
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const chat = (over: Record<string, unknown> = {}) => ({ model: 'fake/gpt', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], ...over });
const message = (over: Record<string, unknown> = {}) => ({ model: 'fake/claude', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], ...over });

/** Every string the gateway wrote about the run: span names, attributes, events, status messages. */
function spanText(spans: ReadableSpan[]): string {
  return spans
    .map((s) => JSON.stringify({ name: s.name, attributes: s.attributes, events: s.events, status: s.status, links: s.links, resource: s.resource.attributes }))
    .join('\n');
}

describe('secrets stay out of logs, spans, response bodies and headers', () => {
  it('a varied run leaves no gateway key, provider key, BYOK key or encryption key anywhere', { timeout: 60_000 }, async () => {
    const callers = [gw.key, byokKey];
    for (const key of callers) {
      // Successes, JSON and streamed, both dialects, with the debug echo and routing metadata.
      expect((await call('POST', '/chat/completions', bearer(key), chat())).status).toBe(200);
      expect((await call('POST', '/chat/completions', bearer(key), chat({ stream: true, debug: { echo_upstream_body: true } }))).status).toBe(200);
      expect((await call('POST', '/messages', { ...bearer(key), 'x-gateway-metadata': 'enabled' }, message())).status).toBe(200);
      expect((await call('POST', '/messages', bearer(key), message({ stream: true }))).status).toBe(200);
      expect((await call('GET', '/key', bearer(key))).status).toBe(200);

      // Upstreams that echo the credentials they were sent, at every status class the gateway maps.
      for (const status of [400, 401, 403, 422, 429, 500, 503]) {
        for (const model of ['gpt-upstream', 'claude-upstream']) upstream.always.set(model, { kind: 'reflect-credentials', status });
        const a = await call('POST', '/chat/completions', { ...bearer(key), 'x-gateway-metadata': 'enabled' }, chat());
        const b = await call('POST', '/messages', { ...bearer(key), 'x-gateway-metadata': 'enabled' }, message());
        const c = await call('POST', '/chat/completions', bearer(key), chat({ stream: true }));
        for (const r of [a, b, c]) expect(r.status, r.text).toBeGreaterThanOrEqual(400);
        upstream.always.clear();
      }
      // ... as an in-band error of a stream that already answered 200.
      for (const model of ['gpt-upstream', 'claude-upstream']) upstream.scripts.set(model, [{ kind: 'reflect-credentials', status: 200, inStream: true }]);
      await call('POST', '/chat/completions', bearer(key), chat({ stream: true, debug: { echo_upstream_body: true } }));
      await call('POST', '/messages', bearer(key), message({ stream: true }));

      // Fallbacks: the first model's provider fails echoing its key, the next one answers.
      upstream.scripts.set('claude-upstream', [{ kind: 'reflect-credentials', status: 500 }]);
      expect((await call('POST', '/messages', { ...bearer(key), 'x-gateway-metadata': 'enabled' }, message({ fallbacks: [{ model: 'fake/gpt' }] }))).status).toBe(200);
      upstream.scripts.set('gpt-upstream', [{ kind: 'reflect-credentials', status: 401 }]);
      expect((await call('POST', '/chat/completions', bearer(key), chat({ models: ['fake/gpt', 'fake/claude'], stream: true, debug: { echo_upstream_body: true } }))).status).toBe(200);
      expect((await call('POST', '/chat/completions', bearer(key), chat({ model: 'fake/failover' }))).status).toBe(200);
      upstream.scripts.clear();
    }

    // Keys that are not (or no longer) valid, in every place a key can be presented.
    const wrong = `sk-gw-v1-${randomBytes(24).toString('hex')}`;
    const prefixOfReal = gw.key.slice(0, -6);
    for (const presented of [wrong, prefixOfReal, revokedKey, `${gw.key}x`]) {
      expect((await call('POST', '/chat/completions', bearer(presented), chat())).status).toBe(401);
      expect((await call('POST', '/messages', { 'x-api-key': presented }, message())).status).toBe(401);
      expect((await call('GET', '/key', bearer(presented))).status).toBe(401);
    }
    expect((await call('GET', '/key', { authorization: `Basic ${Buffer.from(`user:${gw.key}`).toString('base64')}` })).status).toBe(401);
    expect((await call('GET', '/presets', bearer(gw.managementKey))).status).toBe(200);
    await gw.gateway.ledger.flush();

    // The secrets were really in play: the upstream got the operator and the workspace keys.
    const sent = upstream.received.map((r) => `${r.headers.authorization ?? ''} ${r.headers['x-api-key'] ?? ''}`).join('\n');
    for (const k of [OPERATOR_OPENAI, OPERATOR_ANTHROPIC, OWN_OPENAI, OWN_ANTHROPIC]) expect(sent).toContain(k);

    const secrets: Record<string, string> = {
      'gateway key': gw.key,
      'management key': gw.managementKey,
      'BYOK workspace gateway key': byokKey,
      'revoked key': revokedKey,
      'wrong key': wrong,
      'prefix of a real key': prefixOfReal,
      'operator OpenAI key': OPERATOR_OPENAI,
      'operator Anthropic key': OPERATOR_ANTHROPIC,
      'BYOK OpenAI key': OWN_OPENAI,
      'BYOK Anthropic key': OWN_ANTHROPIC,
      'BYOK encryption key (base64)': ENCRYPTION_KEY.toString('base64'),
      'BYOK encryption key (hex)': ENCRYPTION_KEY.toString('hex'),
    };
    const spans = exporter.getFinishedSpans();
    const outputs: Record<string, string> = { logs: gw.logs.join(''), spans: spanText(spans), responses: responses.join('\n\n') };
    // The captured output is the real thing: request lines at trace level, spans of every request, answers.
    expect(gw.logs.length).toBeGreaterThan(50);
    expect(outputs.logs).toContain('"key_id"');
    expect(spans.length).toBeGreaterThan(50);
    expect(outputs.responses).toContain('Provider fake-openai returned HTTP 401');

    const leaks: string[] = [];
    for (const [where, text] of Object.entries(outputs)) {
      for (const [what, secret] of Object.entries(secrets)) {
        // The secret itself, and its distinctive tail (a leak may be cut at the start, or JSON-escaped).
        for (const needle of [secret, secret.slice(-16)]) {
          const at = text.indexOf(needle);
          if (at >= 0) leaks.push(`${what} in ${where}: …${text.slice(Math.max(0, at - 120), at + needle.length + 40)}…`);
        }
      }
    }
    expect(leaks).toEqual([]);
  });

  it('a provider that writes its key back with \\u escapes, in a 2xx answer or a stream, has it caught too', async () => {
    // `\u0073k-…` is `sk-…` to every JSON reader (the client's SDK too), and a text search for the key misses it.
    const escaped = [...OPERATOR_OPENAI].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    const chunk = (delta: string, finish: string | null) => `data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"gpt-upstream","choices":[{"index":0,"delta":${delta},"finish_reason":${finish}}]}\n\n`;
    upstream.scripts.set('gpt-upstream', [{ kind: 'raw-stream', text: `${chunk(`{"role":"assistant","content":"Your key is ${escaped}"}`, 'null')}${chunk('{}', '"stop"')}data: [DONE]\n\n` }]);
    const streamed = await call('POST', '/chat/completions', bearer(gw.key), chat({ stream: true }));
    expect(streamed.status).toBe(200);
    expect(streamed.text).toContain('Your key is [redacted]');
    const answer = `{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"gpt-upstream","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Your key is ${escaped}"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`;
    upstream.scripts.set('gpt-upstream', [{ kind: 'raw-stream', text: answer }]);
    const whole = await call('POST', '/chat/completions', bearer(gw.key), chat());
    expect(JSON.parse(whole.text).choices[0].message.content).toBe('Your key is [redacted]');
    for (const r of [streamed, whole]) {
      expect(r.text).not.toContain(escaped.slice(-60));
      expect(JSON.stringify(r.text.split('\n').map((l) => { try { return JSON.parse(l.replace(/^data: /, '')); } catch { return l; } }))).not.toContain(OPERATOR_OPENAI);
    }
    upstream.scripts.clear();
  });

  it('the logger redacts credentials at the paths log calls use for them', () => {
    const lines: string[] = [];
    const logger = createLogger('trace', new Writable({ write: (chunk, _enc, cb) => (lines.push(String(chunk)), cb()) }));
    const secret = `sk-${randomBytes(16).toString('hex')}`;
    logger.trace({ req: { headers: { authorization: `Bearer ${secret}`, 'x-api-key': secret } } }, 'request headers');
    logger.info({ headers: { authorization: `Bearer ${secret}`, 'x-api-key': secret } }, 'upstream headers');
    logger.warn({ api_key: secret, apiKey: secret, key: secret }, 'config values');
    expect(lines).toHaveLength(3);
    expect(lines.join('')).not.toContain(secret);
    expect(lines.join('').match(/\[redacted\]/g)).toHaveLength(7);
  });
});
