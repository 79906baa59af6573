import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { webFetchDefinition } from '../../plugins/web-fetch/stage';
import { post, testConfigYaml } from '../fixtures/gateway';
import { minimalPdf } from '../fixtures/minimal-pdf';
import { pageServer } from '../fixtures/pages';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();
const pages = pageServer((req, res) => {
  if (req.url === '/article') {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<html><head><script>track()</script></head><body><h1>Otters</h1><p>Otters hold hands &amp; sleep.</p></body></html>');
  } else if (req.url === '/long') {
    res.writeHead(200, { 'content-type': 'text/plain' }).end('a'.repeat(500));
  } else if (req.url === '/emoji') {
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`a${'😀'.repeat(100)}`);
  } else if (req.url === '/to-metadata') {
    res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/' }).end();
  } else {
    res.writeHead(404).end();
  }
});

/** The real registry, with web-fetch allowed to reach the local page server (and nothing else on loopback). */
function testRegistry() {
  return new Map(registry).set('web-fetch', webFetchDefinition({ testOnlyLoopbackPorts: [pages.port] }));
}

function yaml(pluginConfig = '{}') {
  return `${testConfigYaml(t.upstream.url, '[auth, validate, web-fetch, upstream]')}plugins:\n  web-fetch: ${pluginConfig}\n`;
}

const META = { 'x-gateway-metadata': 'enabled' };

describe('web-fetch stage through the server', () => {
  it('chat completions: the page text reaches the upstream in the last user message', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pages.url}/article`;
    const r = await post(`${g.url}/chat/completions`, g.key, {
      model: 'fake/gpt',
      plugins: [{ id: 'web-fetch', urls: [url] }],
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Summarise it.' }],
    }, META);
    expect(r.status).toBe(200);
    const sent = t.upstream.received[0].body;
    expect(sent.messages[0]).toEqual({ role: 'system', content: 'Be brief.' });
    expect(sent.messages[1]).toEqual({ role: 'user', content: `Content of ${url}:\nOtters\nOtters hold hands & sleep.\n\nSummarise it.` });
    expect(r.json.gateway_metadata.pipeline).toEqual([
      {
        type: 'web-fetch',
        name: 'web-fetch',
        summary: `Fetched ${url}`,
        data: { url, outcome: 'fetched', final_url: url, redirects: 0, content_type: 'text/html', bytes: expect.any(Number), chars: 33, truncated: false },
      },
    ]);
  });

  it('messages: the page text is a text block before the user text, truncated to max_chars', async () => {
    const g = await t.start({ yaml: yaml('{ max_chars: 100 }'), registry: testRegistry() });
    const article = `${pages.url}/article`;
    const long = `${pages.url}/long`;
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude',
      max_tokens: 20,
      plugins: [{ id: 'web-fetch', urls: [article, long] }],
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Compare them.' }] }],
    });
    expect(r.status).toBe(200);
    const sent = t.upstream.received[0].body;
    expect(sent.messages).toHaveLength(1);
    expect(sent.messages[0].content).toEqual([
      { type: 'text', text: `Content of ${article}:\nOtters\nOtters hold hands & sleep.` },
      { type: 'text', text: `Content of ${long}:\n${'a'.repeat(100)}\n[truncated]` },
      { type: 'text', text: 'Compare them.' },
    ]);
  });

  it('messages: in a user turn of tool results the page goes after the tool_result blocks (it went first: a 400 from Anthropic)', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pages.url}/article`;
    const result = { type: 'tool_result', tool_use_id: 'toolu_1', content: '42' };
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude',
      max_tokens: 20,
      plugins: [{ id: 'web-fetch', urls: [url] }],
      messages: [
        { role: 'user', content: 'Look it up.' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'lookup', input: {} }] },
        { role: 'user', content: [result, { type: 'text', text: 'And the page?' }] },
      ],
    });
    expect(r.status).toBe(200);
    const sent = t.upstream.received[0].body.messages;
    expect(sent[0]).toEqual({ role: 'user', content: 'Look it up.' });
    expect(sent[2].content).toEqual([result, { type: 'text', text: `Content of ${url}:\nOtters\nOtters hold hands & sleep.` }, { type: 'text', text: 'And the page?' }]);
  });

  it('chat: a conversation ending with tool messages gets the page as a user message after them, also through the messages translation', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pages.url}/article`;
    const page = `Content of ${url}:\nOtters\nOtters hold hands & sleep.`;
    const messages = [
      { role: 'user', content: 'Look it up.' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '42' },
    ];
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: [{ id: 'web-fetch', urls: [url] }], messages });
    expect(r.status).toBe(200);
    // The first user message was given the page before: the tool call and its result stayed as they were.
    expect(t.upstream.received[0].body.messages).toEqual([...messages, { role: 'user', content: [{ type: 'text', text: page }] }]);

    const viaMessages = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/claude', plugins: [{ id: 'web-fetch', urls: [url] }], messages });
    expect(viaMessages.status).toBe(200);
    expect(t.upstream.received[1].body.messages.at(-1)).toEqual({
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '42' }, { type: 'text', text: page }],
    });
  });

  it('max_chars cuts the page on whole characters: no half emoji goes upstream', async () => {
    const g = await t.start({ yaml: yaml('{ max_chars: 100 }'), registry: testRegistry() });
    const url = `${pages.url}/emoji`;
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude',
      max_tokens: 20,
      plugins: [{ id: 'web-fetch', urls: [url] }],
      messages: [{ role: 'user', content: 'Read it.' }],
    }, META);
    expect(r.status).toBe(200);
    // 'a' and 49½ emoji fit in 100 UTF-16 units: the half (a lone \ud83d) is left out.
    expect(t.upstream.received[0].body.messages[0].content[0]).toEqual({ type: 'text', text: `Content of ${url}:\na${'😀'.repeat(49)}\n[truncated]` });
    expect(r.json.gateway_metadata.pipeline[0].data).toMatchObject({ chars: 99, truncated: true });
  });

  it('private, metadata and loopback URLs are refused and recorded; the request still succeeds', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const upstreamLoopback = `${t.upstream.url}/models`; // loopback, but not the allowed port
    const urls = ['http://10.1.2.3/', `${pages.url}/to-metadata`, upstreamLoopback, 'http://2130706433/'];
    const r = await post(`${g.url}/chat/completions`, g.key, {
      model: 'fake/gpt',
      plugins: [{ id: 'web-fetch', urls }],
      messages: [{ role: 'user', content: 'What do they say?' }],
    }, META);
    expect(r.status).toBe(200);
    // max_urls (3) applies: the fourth is skipped, not fetched (it would be loopback too).
    expect(r.json.gateway_metadata.pipeline).toEqual([
      { type: 'web-fetch', name: 'web-fetch', summary: 'Refused http://10.1.2.3/: Address 10.1.2.3 is private', data: { url: 'http://10.1.2.3/', outcome: 'refused', reason: 'blocked_address' } },
      {
        type: 'web-fetch',
        name: 'web-fetch',
        summary: `Refused ${pages.url}/to-metadata: Address 169.254.169.254 is metadata`,
        data: { url: `${pages.url}/to-metadata`, outcome: 'refused', reason: 'blocked_address' },
      },
      {
        type: 'web-fetch',
        name: 'web-fetch',
        summary: `Refused ${upstreamLoopback}: Address 127.0.0.1 is loopback`,
        data: { url: upstreamLoopback, outcome: 'refused', reason: 'blocked_address' },
      },
      { type: 'web-fetch', name: 'web-fetch', summary: expect.stringMatching(/^Skipped http:\/\/2130706433\//), data: { url: 'http://2130706433/', outcome: 'skipped' } },
    ]);
    // Nothing was added, and the fake upstream saw only the chat call (never a fetch of /models).
    expect(t.upstream.received.map((x) => x.path)).toEqual(['/v1/chat/completions']);
    expect(t.upstream.received[0].body.messages).toEqual([{ role: 'user', content: 'What do they say?' }]);
  });

  it('on_error: deny fails the request with the refusal', async () => {
    const g = await t.start({ yaml: yaml('{ on_error: deny }'), registry: testRegistry() });
    const r = await post(`${g.url}/chat/completions`, g.key, {
      model: 'fake/gpt',
      plugins: [{ id: 'web-fetch', urls: ['http://[::ffff:127.0.0.1]/'] }],
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(r.status).toBe(400);
    expect(r.json.error.metadata).toEqual({ error_type: 'invalid_request', plugin: 'web-fetch', url: 'http://[::ffff:127.0.0.1]/', reason: 'blocked_address' });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('from_messages fetches URLs written in the last user message; off by default', async () => {
    const text = `What is on ${pages.url}/article?`;
    const off = await t.start({ yaml: yaml(), registry: testRegistry() });
    await post(`${off.url}/chat/completions`, off.key, { model: 'fake/gpt', messages: [{ role: 'user', content: text }] });
    expect(t.upstream.received[0].body.messages[0].content).toBe(text);
    await off.close();
    t.release();
    t.upstream.received.length = 0;
    const on = await t.start({ yaml: yaml('{ from_messages: true }'), registry: testRegistry() });
    await post(`${on.url}/chat/completions`, on.key, { model: 'fake/gpt', messages: [{ role: 'user', content: text }] });
    expect(t.upstream.received[0].body.messages[0].content).toBe(`Content of ${pages.url}/article:\nOtters\nOtters hold hands & sleep.\n\n${text}`);
  });

  it('from_messages reads only what the client wrote: URLs in a document file-parser put into the message are not fetched', async () => {
    // A third party's PDF (the one the user asks about) names a URL: it must not choose what the gateway fetches.
    const pdf = minimalPdf([`Read ${pages.url}/long for more`]).toString('base64');
    const pipeline = '[auth, validate, file-parser, web-fetch, upstream]';
    const g = await t.start({ yaml: `${testConfigYaml(t.upstream.url, pipeline)}plugins:\n  file-parser: { mode: always }\n  web-fetch: { from_messages: true }\n`, registry: testRegistry() });
    const before = pages.hits();
    const text = `Summarise it, and ${pages.url}/article too`;
    const r = await post(`${g.url}/chat/completions`, g.key, {
      model: 'fake/gpt',
      messages: [{ role: 'user', content: [{ type: 'file', file: { filename: 'their.pdf', file_data: `data:application/pdf;base64,${pdf}` } }, { type: 'text', text }] }],
    }, META);
    expect(r.status).toBe(200);
    expect(pages.hits()).toBe(before + 1);
    expect(r.json.gateway_metadata.pipeline.filter((p: any) => p.type === 'web-fetch').map((p: any) => p.data.url)).toEqual([`${pages.url}/article`]);
    const sent = JSON.stringify(t.upstream.received[0].body.messages);
    expect(sent).toContain(`Read ${pages.url}/long for more`);
    expect(sent).not.toContain('aaaa');
  });

  it('the shipped stage (no test allowance) refuses the local page server, and gateway.yaml cannot open it', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, {
      model: 'fake/gpt',
      plugins: [{ id: 'web-fetch', urls: [`${pages.url}/article`] }],
      messages: [{ role: 'user', content: 'hi' }],
    }, META);
    expect(r.json.gateway_metadata.pipeline[0].data).toMatchObject({ outcome: 'refused', reason: 'blocked_address' });
    await expect(t.start({ yaml: yaml('{ testOnlyLoopbackPorts: [80] }') })).rejects.toThrow(/plugins\.web-fetch/);
  });

  it('a malformed urls field is a 400', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', plugins: [{ id: 'web-fetch', urls: 'http://x' }], messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(400);
    expect(r.json.error.metadata).toMatchObject({ error_type: 'invalid_request', field: 'plugins.web-fetch.urls' });
  });
});
