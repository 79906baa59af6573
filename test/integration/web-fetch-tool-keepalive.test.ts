import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { webFetchDefinition } from '../../plugins/web-fetch/stage';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { pageServer } from '../fixtures/pages';
import { perTestGateways } from '../fixtures/per-test';
import { gate, openRaw } from '../fixtures/raw-stream';

const t = perTestGateways();
const KEEPALIVE = ': keepalive\n\n';


/** The page `/slow` answers once `slowPage.open()` is called (a new gate per test). */
let slowPage = gate();
let slowPageAsked = gate();
const pages = pageServer((req, res) => {
  if (req.url === '/slow') {
    slowPageAsked.open();
    void slowPage.until.then(() => !res.destroyed && res.writeHead(200, { 'content-type': 'text/plain' }).end('Slow page.'));
  } else if (req.url === '/second') res.writeHead(200, { 'content-type': 'text/plain' }).end('Second page.');
  else res.writeHead(404).end();
});

const testRegistry = () => new Map(registry).set('web-fetch', webFetchDefinition({ testOnlyLoopbackPorts: [pages.port] }));

/** The tool loop with keep-alive comments every 20 ms. */
function yaml(pipeline = '[auth, validate, web-fetch, upstream]', keepaliveMs = 20): string {
  return `${testConfigYaml(t.upstream.url, pipeline).replace('watch_config: false }', `watch_config: false, stream_keepalive_ms: ${keepaliveMs} }`)}plugins:\n  web-fetch: {}\n`;
}

const SERVER_TOOL = { type: 'gateway:web_fetch' };

function chatCalls(calls: { name: string; args: unknown }[], bodyAfter?: Promise<void>) {
  return {
    kind: 'status' as const,
    status: 200,
    bodyAfter,
    body: {
      id: 'chatcmpl-tool', object: 'chat.completion', created: 1700000000, model: 'gpt-upstream',
      choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: null, tool_calls: calls.map((c, i) => ({ id: `call_${i}`, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.args) } })) } }],
      usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
    },
  };
}

function messagesCalls(calls: { name: string; input: unknown }[]) {
  return {
    kind: 'status' as const,
    status: 200,
    body: {
      id: 'msg_tool', type: 'message', role: 'assistant', model: 'claude-upstream', stop_reason: 'tool_use', stop_sequence: null,
      content: calls.map((c, i) => ({ type: 'tool_use', id: `toolu_${i}`, name: c.name, input: c.input })),
      usage: { input_tokens: 8, output_tokens: 4 },
    },
  };
}

/** `p`, or a failure after `ms`: without the keep-alive the headers wait for the whole loop. */
function within<T>(ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`nothing within ${ms} ms`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}


/** Opens the stream and waits for its first comment; whatever happens, `release` lets the request end. */
async function openUntilComment(g: TestGateway, path: string, body: Record<string, unknown>, release: () => void) {
  try {
    const s = await within(2000, openRaw(g, path, body));
    await within(2000, s.seen(KEEPALIVE));
    return s;
  } catch (err) {
    release();
    throw err;
  }
}

const fresh = () => {
  slowPage = gate();
  slowPageAsked = gate();
};

describe('gateway:web_fetch streams get the keep-alive while the loop works (server.stream_keepalive_ms)', () => {
  it('chat: a slow fetch after the first turn: the 200, the headers and comments; then the answer, its id the header\'s and the row\'s', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/slow` } }])]);
    const ask = { model: 'fake/gpt', tools: [SERVER_TOOL], stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Read it.' }] };
    const s = await openUntilComment(g, 'chat/completions', ask, slowPage.open);
    expect(s.res.status).toBe(200);
    expect(s.res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(t.upstream.received).toHaveLength(1); // the page is still being read
    expect(s.soFar().replaceAll(KEEPALIVE, '')).toBe('');
    slowPage.open();
    const text = await s.done;
    const chunks = sseEvents(text.replaceAll(KEEPALIVE, '')).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello from the fake upstream.');
    expect(chunks.at(-1).usage).toMatchObject({ prompt_tokens: 17, completion_tokens: 8 });
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(t.upstream.received[1].body.messages.at(-1)).toMatchObject({ role: 'tool', content: `Content of ${pages.url}/slow:\nSlow page.` });
    // The headers went out before the last turn was asked: they carry the id its answer and its row have.
    expect(chunks[0].id).toMatch(/^gen-/);
    expect(s.res.headers.get('x-request-id')).toBe(chunks[0].id);
    expect(await ledgerRowSoon(g, chunks[0].id)).toMatchObject({ promptTokens: 17, completionTokens: 8, status: 'completed' });
  });

  it('messages: a slow later model turn gets the comments too; then the message, its id the header\'s', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const second = gate();
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url: `${pages.url}/second` } }]), { kind: 'hold', until: second.until }]);
    const ask = { model: 'fake/claude', max_tokens: 50, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] };
    const s = await openUntilComment(g, 'messages', ask, second.open);
    expect(s.res.status).toBe(200);
    await expect.poll(() => t.upstream.received.length).toBe(2);
    const before = s.soFar().length;
    await expect.poll(() => s.soFar().slice(before).includes(KEEPALIVE)).toBe(true); // the second turn thinks
    second.open();
    const events = sseEvents((await s.done).replaceAll(KEEPALIVE, ''));
    expect(events.map((e) => e.event ?? e.data)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop', '[DONE]']);
    expect(JSON.parse(events[4].data).usage).toMatchObject({ input_tokens: 14, output_tokens: 9, server_tool_use: { web_fetch_requests: 1 } });
    const id = s.res.headers.get('request-id')!;
    expect(id).toMatch(/^gen-/);
    // The ledger counts the 4 cached tokens of the fake's answer as prompt tokens too.
    expect(await ledgerRowSoon(g, id)).toMatchObject({ promptTokens: 18, completionTokens: 9, status: 'completed' });
  });

  it('the first turn is covered once its provider accepted (200 headers) and its answer is slow to come, as a single-turn stream is', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const body = gate();
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/second` } }], body.until)]);
    const s = await openUntilComment(g, 'chat/completions', { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] }, body.open);
    expect(s.res.status).toBe(200);
    expect(t.upstream.received).toHaveLength(1);
    body.open();
    const chunks = sseEvents((await s.done).replaceAll(KEEPALIVE, '')).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello from the fake upstream.');
    expect(s.res.headers.get('x-request-id')).toBe(chunks[0].id);
  });

  it('before any provider accepted the first turn nothing is sent: its failure keeps its real status', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const held = gate();
    t.upstream.scripts.set('gpt-upstream', [{ kind: 'hold', until: held.until }]);
    t.upstream.always.set('claude-upstream', { kind: 'status', status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: 'bad' } } });
    // The headers may only come once the held turn is answered. Comments after that are allowed (the provider
    // accepted): on a loaded machine the answer may take longer than 20 ms to begin, so the body is not checked for them.
    let answered = false;
    let headersEarly: boolean | undefined;
    const opening = openRaw(g, 'chat/completions', { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'hi' }] });
    void opening.then(() => (headersEarly ??= !answered), () => undefined);
    await expect.poll(() => t.upstream.received.length).toBe(1);
    // Five keep-alive intervals with the turn held: a keep-alive started too early would have sent the 200 and comments.
    await new Promise((r) => setTimeout(r, 100));
    answered = true;
    held.open();
    const s = await within(5000, opening);
    expect(headersEarly).toBe(false);
    expect(s.res.status).toBe(200);
    const chunks = sseEvents((await s.done).replaceAll(KEEPALIVE, '')).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello from the fake upstream.');
    const refused = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, stream: true, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'hi' }] });
    expect(refused.status).toBe(400);
    expect(refused.json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
  });

  it('a request without stream: is answered as before, in JSON, nothing before it', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/slow` } }])]);
    const pending = post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] });
    await within(2000, slowPageAsked.until);
    setTimeout(slowPage.open, 100); // with the keep-alive at 20 ms, a stream would have had comments by then
    const r = await pending;
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(r.json.choices[0].message.content).toBe('Hello from the fake upstream.');
    expect(r.text).not.toContain('keepalive');
    expect(t.upstream.received.map((x) => x.body.stream)).toEqual([false, false]);
  });

  it('a later turn failing after the comments: the in-band error and [DONE]; the turn done billed in a failed row under the header\'s id', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const down = { kind: 'status' as const, status: 500 };
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/slow` } }]), down, down]);
    const s = await openUntilComment(g, 'chat/completions', { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] }, slowPage.open);
    expect(s.res.status).toBe(200);
    slowPage.open();
    const events = sseEvents((await s.done).replaceAll(KEEPALIVE, ''));
    expect(events.at(-1)!.data).toBe('[DONE]');
    const failure = JSON.parse(events.at(-2)!.data);
    expect(failure.choices[0].finish_reason).toBe('error');
    expect(failure.error.metadata.error_type).toBe('provider_unavailable');
    expect(failure.id).toBe(s.res.headers.get('x-request-id'));
    expect(await ledgerRowSoon(g, failure.id)).toMatchObject({ promptTokens: 7, completionTokens: 3, status: 'failed' });
  });
});

describe('a first turn whose provider answered 2xx and then failed, after the comments', () => {
  it('messages: the in-band error, and a failed row naming that endpoint under the header\'s id (it had none)', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const body = gate();
    const broken = { kind: 'status' as const, status: 200, bodyAfter: body.until, body: { type: 'error', error: { type: 'api_error', message: 'boom' } } };
    t.upstream.scripts.set('claude-upstream', [broken]);
    const ask = { model: 'fake/claude', max_tokens: 50, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] };
    const s = await openUntilComment(g, 'messages', ask, body.open);
    expect(s.res.status).toBe(200);
    body.open();
    const events = sseEvents((await s.done).replaceAll(KEEPALIVE, ''));
    expect(events.some((e) => e.event === 'error')).toBe(true);
    const id = s.res.headers.get('request-id')!;
    expect(await ledgerRowSoon(g, id)).toMatchObject({ status: 'failed', provider: 'fake-anthropic', costUsd: 0 });
  });
});

describe('a client that leaves mid-loop stops it', () => {
  it('during a fetch: the fetch is dropped, no later turn is asked, the row bills the turn done as cancelled, no hold left', async () => {
    fresh();
    const g = await t.start({ yaml: yaml('[auth, validate, budget-check, web-fetch, upstream]'), registry: testRegistry() });
    await g.store.addCredits(g.keyRecord.accountId, 10);
    g.gateway.spend.forgetAccount(g.keyRecord.accountId);
    const before = pages.hits();
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/slow` } }]), chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/second` } }])]);
    const s = await openUntilComment(g, 'chat/completions', { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] }, slowPage.open);
    await within(2000, slowPageAsked.until);
    const id = s.res.headers.get('x-request-id')!;
    s.abort();
    await s.done;
    await expect.poll(() => g.gateway.inFlight()).toBe(0);
    slowPage.open();
    expect(t.upstream.received).toHaveLength(1);
    expect(pages.hits() - before).toBe(1);
    const row = await ledgerRowSoon(g, id);
    // 7 prompt and 3 completion tokens of fake/gpt at $1 and $2 per million.
    expect(row).toMatchObject({ promptTokens: 7, completionTokens: 3, status: 'cancelled', costUsd: expect.closeTo(13e-6, 12) });
    expect(g.gateway.spend.inFlightHolds()).toBe(0);
  });

  it('during a later turn: its provider call is dropped, no further turn, the row bills the turns that answered as cancelled', async () => {
    fresh();
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const second = gate();
    const dropped = t.upstream.abandoned();
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/second` } }]), chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/second` } }], second.until)]);
    const s = await openUntilComment(g, 'chat/completions', { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] }, second.open);
    await expect.poll(() => t.upstream.received.length).toBe(2);
    const id = s.res.headers.get('x-request-id')!;
    s.abort();
    await s.done;
    await expect.poll(() => g.gateway.inFlight()).toBe(0);
    await expect.poll(() => t.upstream.abandoned()).toBe(dropped + 1);
    second.open();
    expect(t.upstream.received).toHaveLength(2);
    expect(await ledgerRowSoon(g, id)).toMatchObject({ promptTokens: 7, completionTokens: 3, status: 'cancelled' });
  });
});
