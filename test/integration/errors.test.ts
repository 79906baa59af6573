import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

let upstream: FakeUpstream;
let gw: TestGateway;
const chatBody = { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }] };
const msgBody = { model: 'sim/chat', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] };

beforeAll(async () => {
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});

const chat = (key: string | null, body: unknown, headers?: Record<string, string>) => post(`${gw.url}/chat/completions`, key, body, headers);
const messages = (key: string | null, body: unknown, headers?: Record<string, string>) => post(`${gw.url}/messages`, key, body, headers);

function expectStandard(res: Awaited<ReturnType<typeof post>>, status: number, errorType: string) {
  expect(res.status).toBe(status);
  expect(res.json.error.code).toBe(status);
  expect(typeof res.json.error.message).toBe('string');
  expect(res.json.error.metadata.error_type).toBe(errorType);
}

function expectMessages(res: Awaited<ReturnType<typeof post>>, status: number, type: string, errorType: string, requestId: 'null' | 'gen') {
  expect(res.status).toBe(status);
  expect(res.json.type).toBe('error');
  expect(res.json.error).toMatchObject({ type, error_type: errorType });
  expect(typeof res.json.error.message).toBe('string');
  if (requestId === 'null') expect(res.json.request_id).toBeNull();
  else expect(res.json.request_id).toMatch(/^gen-\d+-[A-Za-z0-9]{20}$/);
}

describe('authentication (401)', () => {
  it('missing header: the spec message, in both envelopes', async () => {
    const a = await chat(null, chatBody);
    expectStandard(a, 401, 'authentication');
    expect(a.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(a.json.error.message).toBe('Missing Authentication header');
    const b = await messages(null, msgBody);
    expectMessages(b, 401, 'authentication_error', 'authentication', 'null');
    expect(b.json.error.message).toBe('Missing Authentication header');
    const c = await fetch(`${gw.url}/key`);
    expect(c.status).toBe(401);
    expect(((await c.json()) as any).error.message).toBe('Missing Authentication header');
  });

  it('unknown, revoked, disabled-by-expiry and malformed keys get one identical body', async () => {
    const revoked = await gw.createKey();
    await gw.store.revokeKey(revoked.record.id);
    gw.gateway.keys.forget(revoked.record.id);
    const expired = await gw.createKey({ expiresAt: new Date(Date.now() - 1000).toISOString() });
    const bodies = [];
    for (const key of ['sk-gw-v1-unknown', revoked.secret, expired.secret]) {
      const res = await chat(key, chatBody);
      expectStandard(res, 401, 'authentication');
      bodies.push(res.text);
    }
    const malformed = await chat(null, chatBody, { authorization: 'Basic abc' });
    expectStandard(malformed, 401, 'authentication');
    bodies.push(malformed.text);
    expect(new Set(bodies).size).toBe(1);
  });

  it('a revoked key stops working at once in the process that revoked it', async () => {
    const k = await gw.createKey();
    const ok = await chat(k.secret, chatBody);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toBe('application/json; charset=utf-8');
    await gw.store.revokeKey(k.record.id);
    gw.gateway.keys.forget(k.record.id);
    expect((await chat(k.secret, chatBody)).status).toBe(401);
  });
});

describe('request validation (400)', () => {
  it('names the field on chat completions', async () => {
    const res = await chat(gw.key, { ...chatBody, temperature: 3 });
    expectStandard(res, 400, 'invalid_request');
    expect(res.json.error.message).toContain('temperature');
  });

  it('names the field on messages, with request_id null', async () => {
    const res = await messages(gw.key, { ...msgBody, models: ['a'], fallbacks: [{ model: 'b' }] });
    expectMessages(res, 400, 'invalid_request_error', 'invalid_request', 'null');
    expect(res.json.error.message).toMatch(/models.*fallbacks/);
  });

  it('rejects malformed JSON, non-object JSON, empty bodies and the wrong content type', async () => {
    expectStandard(await chat(gw.key, '{"model": '), 400, 'invalid_request');
    expectStandard(await chat(gw.key, '[1,2]'), 400, 'invalid_request');
    expectStandard(await chat(gw.key, ''), 400, 'invalid_request');
    expectMessages(await messages(gw.key, '{oops'), 400, 'invalid_request_error', 'invalid_request', 'null');
    const res = await chat(gw.key, JSON.stringify(chatBody), { 'content-type': 'text/plain' });
    expectStandard(res, 400, 'invalid_request');
    expect(res.json.error.message).toMatch(/Content-Type/);
  });

  it('answers 413 for a body over the configured limit (64 KiB in tests)', async () => {
    const big = { ...chatBody, messages: [{ role: 'user', content: 'x'.repeat(70_000) }] };
    expectStandard(await chat(gw.key, big), 413, 'payload_too_large');
    expectMessages(await messages(gw.key, { ...msgBody, messages: big.messages }), 413, 'invalid_request_error', 'payload_too_large', 'null');
  });
});

describe('request validation: fields, bounds and headers (400 naming the field)', () => {
  function expectStandardField(res: Awaited<ReturnType<typeof post>>, field: string) {
    expectStandard(res, 400, 'invalid_request');
    expect(res.json.error.metadata.field).toBe(field);
  }
  function expectMessagesField(res: Awaited<ReturnType<typeof post>>, field: string) {
    expectMessages(res, 400, 'invalid_request_error', 'invalid_request', 'null');
    expect(res.json.metadata.field).toBe(field);
  }

  it('messages: max_tokens below 1, an empty messages list and a non-boolean provider.allow_fallbacks', async () => {
    const before = upstream.received.length;
    expectMessagesField(await messages(gw.key, { ...msgBody, model: 'fake/claude', max_tokens: 0 }), 'max_tokens');
    expectMessagesField(await messages(gw.key, { ...msgBody, model: 'fake/claude', max_tokens: -1 }), 'max_tokens');
    expectMessagesField(await messages(gw.key, { ...msgBody, model: 'fake/claude', messages: [] }), 'messages');
    const provider = { allow_fallbacks: 'no' };
    expectMessagesField(await messages(gw.key, { ...msgBody, model: 'fake/claude', provider }), 'provider.allow_fallbacks');
    expectStandardField(await chat(gw.key, { ...chatBody, model: 'fake/gpt', provider }), 'provider.allow_fallbacks');
    expect(upstream.received.length).toBe(before);
  });

  it('chat: n is at most 128 (OpenAI\'s bound): a larger n had the simulated provider build answers until the heap ran out', async () => {
    expectStandardField(await chat(gw.key, { ...chatBody, n: 129 }), 'n');
    expectStandardField(await chat(gw.key, { ...chatBody, n: 4294967297 }), 'n');
    const ok = await chat(gw.key, { ...chatBody, n: 128 });
    expect(ok.status).toBe(200);
    expect(ok.json.choices).toHaveLength(128);
  });

  it('a request naming no model is a 400 before routing, not a 404 for the model ""', async () => {
    const before = upstream.received.length;
    expectStandardField(await chat(gw.key, { ...chatBody, model: '' }), 'model');
    expectStandardField(await chat(gw.key, { messages: chatBody.messages, models: [] }), 'models');
    expectMessagesField(await messages(gw.key, { ...msgBody, model: '' }), 'model');
    expect(upstream.received.length).toBe(before);
  });

  it('x-session-id is at most 256 characters, like session_id, on both endpoints', async () => {
    const long = { 'x-session-id': 's'.repeat(257) };
    expectStandardField(await chat(gw.key, chatBody, long), 'x-session-id');
    expectMessagesField(await messages(gw.key, msgBody, long), 'x-session-id');
    const fits = { 'x-session-id': 's'.repeat(256) };
    expect((await chat(gw.key, chatBody, fits)).status).toBe(200);
    expect((await messages(gw.key, msgBody, fits)).status).toBe(200);
  });
});

/** Every nullable OpenAI chat parameter the gateway knows, set to null. */
const CHAT_NULLS = {
  max_tokens: null, max_completion_tokens: null, temperature: null, top_p: null, stop: null, seed: null, n: null,
  stream: null, stream_options: null, metadata: null, prediction: null, modalities: null, logit_bias: null,
  logprobs: null, top_logprobs: null, frequency_penalty: null, presence_penalty: null, reasoning_effort: null,
  service_tier: null,
};

describe('null optional fields are treated as not given', () => {
  it('chat, passed through: a JSON answer (stream: null is no stream), and the provider gets none of the nulls', async () => {
    const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt', ...CHAT_NULLS });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.json.object).toBe('chat.completion');
    const sent = upstream.received.at(-1)!.body;
    for (const field of Object.keys(CHAT_NULLS)) expect(sent).not.toHaveProperty(field);
  });

  it('chat, translated to a messages provider: no null reaches it and max_tokens gets the default', async () => {
    const res = await chat(gw.key, { ...chatBody, model: 'fake/claude', ...CHAT_NULLS });
    expect(res.status).toBe(200);
    const sent = upstream.received.at(-1)!.body;
    expect(Object.entries(sent).filter(([, v]) => v === null)).toEqual([]);
    expect(sent.max_tokens).toBeGreaterThan(0);
  });

  it('chat: a null leaves the value of the preset in place', async () => {
    const saved = await post(`${gw.url}/presets/null-means-unset/messages`, gw.managementKey, { model: 'fake/gpt', temperature: 0.3, messages: [{ role: 'user', content: 'x' }] });
    expect(saved.status).toBe(200);
    const res = await chat(gw.key, { ...chatBody, model: '@preset/null-means-unset', temperature: null });
    expect(res.status).toBe(200);
    expect(upstream.received.at(-1)!.body.temperature).toBe(0.3);
  });

  it('messages: fallbacks, context_management and speed accept null (spec 4.1); other fields do not', async () => {
    const res = await messages(gw.key, { ...msgBody, model: 'fake/claude', fallbacks: null, context_management: null, speed: null });
    expect(res.status).toBe(200);
    const sent = upstream.received.at(-1)!.body;
    for (const field of ['fallbacks', 'context_management', 'speed']) expect(sent).not.toHaveProperty(field);
    const refused = await messages(gw.key, { ...msgBody, temperature: null });
    expectMessages(refused, 400, 'invalid_request_error', 'invalid_request', 'null');
    expect(refused.json.metadata.field).toBe('temperature');
  });
});

describe('routing errors', () => {
  it('404 not_found for a model the gateway does not serve', async () => {
    expectStandard(await chat(gw.key, { ...chatBody, model: 'nope/nope' }), 404, 'not_found');
    expectMessages(await messages(gw.key, { ...msgBody, model: 'nope/nope' }), 404, 'not_found_error', 'not_found', 'null');
    // A very long name is quoted cut short (it was echoed whole, in the message and the metadata).
    const long = await chat(gw.key, { ...chatBody, model: 'y'.repeat(5000) });
    expect(long.status).toBe(404);
    expect(long.json.error.message).toBe(`Model \`${'y'.repeat(200)}…\` is not available on this gateway (see GET /models)`);
    expect(long.json.error.metadata.model).toBe(`${'y'.repeat(200)}…`);
  });

  it('400 before any provider call when a request cannot be expressed in the provider\'s style', async () => {
    const before = upstream.received.length;
    const res = await chat(gw.key, { ...chatBody, model: 'fake/claude', n: 2 });
    expectStandard(res, 400, 'invalid_request');
    expect(res.json.error.message).toMatch(/`n`/);
    expect(res.json.error.metadata).not.toHaveProperty('untranslatable');
    expect(upstream.received.length).toBe(before);
    // No upstream attempt was made: none is counted (it had been counted as an invalid_request attempt).
    const metrics = await (await fetch(new URL('/metrics', gw.url))).text();
    expect(metrics).not.toMatch(/^gateway_upstream_attempts_total\{provider="fake-anthropic",outcome="invalid_request"\}/m);
  });

  it('a request one endpoint\'s style cannot express goes to the next endpoint, which speaks the client\'s', async () => {
    const before = upstream.received.length;
    const res = await chat(gw.key, { ...chatBody, model: 'fake/claude', models: ['fake/gpt'], n: 2 });
    expect(res.status).toBe(200);
    expect(res.json.model).toBe('fake/gpt');
    expect(upstream.received.slice(before).map((r) => r.body.n)).toEqual([2]);
  });

  it('an endpoint that cannot express the request does not hide the failure of one that could (a 429 became a 400)', async () => {
    upstream.scripts.set('gpt-upstream', [{ kind: 'status', status: 429, headers: { 'retry-after': '7' } }]);
    const limited = await chat(gw.key, { ...chatBody, model: 'fake/gpt', models: ['fake/claude'], n: 2 });
    expectStandard(limited, 429, 'rate_limit_exceeded');
    expect(limited.headers.get('retry-after')).toBe('7');
    upstream.scripts.set('gpt-upstream', [{ kind: 'status', status: 503 }]);
    const streamed = await chat(gw.key, { ...chatBody, model: 'fake/gpt', models: ['fake/claude'], n: 2, stream: true });
    expectStandard(streamed, 503, 'provider_overloaded');
    upstream.scripts.clear();
  });

  it('a gateway key pasted into model, models or provider.only is masked in the error body and the routing metadata (sk-gw-v1-...abcd), in both envelopes', async () => {
    const label = `sk-gw-v1-...${gw.key.slice(-4)}`;
    const a = await chat(gw.key, { ...chatBody, model: gw.key });
    expectStandard(a, 404, 'not_found');
    expect(a.json.error.message).toContain(label);
    const b = await messages(gw.key, { ...msgBody, model: gw.key });
    expectMessages(b, 404, 'not_found_error', 'not_found', 'null');
    expect(b.json.error.message).toContain(label);
    const c = await chat(gw.key, { ...chatBody, models: [gw.key] });
    const d = await chat(gw.key, { ...chatBody, model: 'fake/gpt', provider: { only: [gw.key] } });
    expect(d.status).toBeGreaterThanOrEqual(400);
    // Served by the fallback, with routing metadata: what was asked for is shown as the label too.
    const e = await chat(gw.key, { ...chatBody, model: gw.key, models: ['sim/chat'] }, { 'X-Gateway-Metadata': 'enabled' });
    expect(e.status).toBe(200);
    expect(e.json.gateway_metadata.requested).toBe(label);
    for (const res of [a, b, c, d, e]) expect(res.text).not.toContain(gw.key);
  });

  it('404 for an unknown route', async () => {
    const res = await fetch(`${gw.url}/nothing-here`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as any).error.metadata.error_type).toBe('not_found');
  });

  it('404 under /messages/ (count_tokens, batches: not served) in the messages envelope, so the Anthropic SDK reads its type', async () => {
    const res = await post(`${gw.url}/messages/count_tokens`, gw.key, msgBody);
    expectMessages(res, 404, 'not_found_error', 'not_found', 'null');
    expect(res.json.error.message).toBe('No route for POST /api/v1/messages/count_tokens');
    const other = await post(`${gw.url}/messagesx`, gw.key, msgBody);
    expectStandard(other, 404, 'not_found');
  });
});

describe('upstream errors are classified once (spec 7.4)', () => {
  const cases: [number, string, number, string][] = [
    [400, 'invalid_request', 400, 'invalid_request_error'],
    [401, 'provider_unavailable', 502, 'api_error'],
    [429, 'rate_limit_exceeded', 429, 'rate_limit_error'],
    [500, 'provider_unavailable', 502, 'api_error'],
    [503, 'provider_overloaded', 503, 'overloaded_error'],
    [504, 'timeout', 504, 'timeout_error'],
  ];
  for (const [upstreamStatus, errorType, status, messagesType] of cases) {
    it(`upstream ${upstreamStatus} → ${status} ${errorType}`, async () => {
      // A transient 500 is retried once on the same endpoint, so it has to happen twice to reach the caller.
      const fail = () => {
        for (let i = 0; i < (upstreamStatus === 500 ? 2 : 1); i++) upstream.faults.push({ kind: 'status', status: upstreamStatus, body: { error: { message: 'upstream says no' } } });
      };
      fail();
      const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt' });
      expectStandard(res, status, errorType);
      expect(res.json.error.metadata.provider_code).toBe(upstreamStatus);
      fail();
      const m = await messages(gw.key, { ...msgBody, model: 'fake/claude' });
      // Messages style answers an overloaded provider with 529 (spec 7.2).
      expectMessages(m, upstreamStatus === 503 ? 529 : status, messagesType, errorType, 'gen');
      if (upstreamStatus === 503) {
        // The status line has a reason phrase ("529 unknown" before).
        fail();
        const raw = await fetch(`${gw.url}/messages`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.key}` }, body: JSON.stringify({ ...msgBody, model: 'fake/claude' }) });
        expect([raw.status, raw.statusText]).toEqual([529, 'Overloaded']);
      }
    });
  }

  it('a 2xx answer that is no answer of its style is a 502 "invalid response" (spec 7.2), never passed on as a 200', async () => {
    const chatBodies: unknown[] = [{ choices: 'nope' }, { choices: [1] }, [], { id: 'chatcmpl-x', object: 'chat.completion' }];
    for (const body of chatBodies) {
      upstream.always.set('gpt-upstream', { kind: 'status', status: 200, body });
      try {
        const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt' });
        expectStandard(res, 502, 'provider_unavailable');
        expect(res.json.error.message).toMatch(/^Provider fake-openai returned an invalid response/);
      } finally {
        upstream.always.delete('gpt-upstream');
      }
    }
    for (const body of [{ type: 'message', content: 'nope' }, { type: 'message', content: [{ text: 'no type' }] }]) {
      upstream.always.set('claude-upstream', { kind: 'status', status: 200, body });
      try {
        expectMessages(await messages(gw.key, { ...msgBody, model: 'fake/claude' }), 502, 'api_error', 'provider_unavailable', 'gen');
      } finally {
        upstream.always.delete('claude-upstream');
      }
    }
    // A model with another endpoint gets its answer from there.
    upstream.scripts.set('gpt-upstream', [{ kind: 'status', status: 200, body: { choices: 'nope' } }, { kind: 'status', status: 200, body: { choices: 'nope' } }]);
    try {
      const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt', models: ['fake/claude'] });
      expect(res.status).toBe(200);
      expect(res.json.choices[0].message.content).toEqual(expect.any(String));
    } finally {
      upstream.scripts.delete('gpt-upstream');
    }
  });

  it('negative token counts from a provider count as none: the answer is billed from its text, never at a negative cost', async () => {
    const answer = { id: 'chatcmpl-neg', object: 'chat.completion', created: 1, model: 'gpt-upstream', choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there' }, finish_reason: 'stop' }], usage: { prompt_tokens: -10, completion_tokens: -1000000, total_tokens: -1000010 } };
    upstream.always.set('gpt-upstream', { kind: 'status', status: 200, body: answer });
    try {
      const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt' });
      expect(res.status).toBe(200);
      expect(res.json.usage.cost).toBeGreaterThan(0);
      expect(res.json.usage.completion_tokens).toBeGreaterThan(0);
    } finally {
      upstream.always.delete('gpt-upstream');
    }
  });

  it('keeps the upstream message for a caller mistake and detects context length', async () => {
    upstream.faults.push({ kind: 'status', status: 400, body: { error: { message: "This model's maximum context length is 8192 tokens" } } });
    const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt' });
    expectStandard(res, 400, 'context_length_exceeded');
    expect(res.json.error.message).toMatch(/maximum context length/);
  });

  it('a provider content filter is 403 content_policy_violation whatever its status, with who declined (7.4 rule 1)', async () => {
    upstream.faults.push({ kind: 'status', status: 400, body: { error: { message: 'Your request was rejected by our safety system', code: 'content_filter' } } });
    const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt' });
    expectStandard(res, 403, 'content_policy_violation');
    expect(res.json.error.metadata).toMatchObject({ provider_name: 'fake-openai', provider_code: 400, raw: { error: { code: 'content_filter' } } });
    upstream.faults.push({ kind: 'status', status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: 'Output blocked by content filtering policy' } } });
    const m = await messages(gw.key, { ...msgBody, model: 'fake/claude' });
    // 7.3: content_policy_violation maps to invalid_request_error; the status is 403.
    expectMessages(m, 403, 'invalid_request_error', 'content_policy_violation', 'gen');
  });

  it('passes Retry-After of a rate-limited provider on', async () => {
    upstream.faults.push({ kind: 'status', status: 429, headers: { 'retry-after': '7' } });
    const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt' });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('7');
  });

  it('fails over to the next endpoint of the same model before answering', async () => {
    const res = await chat(gw.key, { ...chatBody, model: 'fake/failover' });
    expect(res.status).toBe(200);
    expect(res.json.provider).toBe('fake-openai');
  });

  it('retries a transient 500 once on the same endpoint', async () => {
    const before = upstream.received.length;
    upstream.faults.push({ kind: 'status', status: 500 });
    const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt' });
    expect(res.status).toBe(200);
    expect(upstream.received.length - before).toBe(2);
  });

  it('a stream whose provider fails before any output is answered with a real error status', async () => {
    upstream.faults.push({ kind: 'status', status: 500 }, { kind: 'status', status: 500 });
    const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt', stream: true });
    expectStandard(res, 502, 'provider_unavailable');
  });

  it('a provider dying mid-stream ends the chat stream with an error chunk (7.5)', async () => {
    upstream.faults.push({ kind: 'midstream' });
    const res = await chat(gw.key, { ...chatBody, model: 'fake/gpt', stream: true });
    expect(res.status).toBe(200);
    const datas = res.text.split('\n\n').filter(Boolean).map((b) => b.replace(/^data: /, ''));
    expect(datas.at(-1)).toBe('[DONE]');
    const last = JSON.parse(datas.at(-2)!);
    expect(last).toMatchObject({ object: 'chat.completion.chunk', error: { code: 502, metadata: { error_type: 'provider_unavailable' } } });
    expect(last.choices[0].finish_reason).toBe('error');
  });
});

describe('500 is generic', () => {
  it('an unexpected exception becomes a typed 500 without details', async () => {
    const original = gw.store.usageForKey.bind(gw.store);
    gw.store.usageForKey = async () => {
      throw new Error('secret internal detail at /var/lib/db');
    };
    try {
      const res = await fetch(`${gw.url}/key`, { headers: { authorization: `Bearer ${gw.key}` } });
      const body = (await res.json()) as any;
      expect(res.status).toBe(500);
      expect(body.error).toEqual({ code: 500, message: 'Internal server error', metadata: { error_type: 'server' } });
      expect(JSON.stringify(body)).not.toContain('secret internal detail');
    } finally {
      gw.store.usageForKey = original;
    }
  });
});
