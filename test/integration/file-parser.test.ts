import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { fileParserDefinition } from '../../plugins/file-parser/stage';
import { bombPdf, minimalPdf } from '../fixtures/minimal-pdf';
import { post, testConfigYaml } from '../fixtures/gateway';
import { pageServer } from '../fixtures/pages';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();
const PDF = minimalPdf(['Otters hold hands while they sleep.', 'Page two: sea urchins.']);
const B64 = PDF.toString('base64');
const pdfServer = pageServer((req, res) => {
  if (req.url === '/otters.pdf') res.writeHead(200, { 'content-type': 'application/pdf' }).end(PDF);
  else if (req.url === '/page.html') res.writeHead(200, { 'content-type': 'text/html' }).end('<p>not a pdf</p>');
  else if (req.url === '/to-metadata') res.writeHead(302, { location: 'http://169.254.169.254/latest/' }).end();
  else res.writeHead(404).end();
});

/** The real registry, with file-parser allowed to reach the local PDF server (and nothing else on loopback). */
function testRegistry() {
  return new Map(registry).set('file-parser', fileParserDefinition({ testOnlyLoopbackPorts: [pdfServer.port] }));
}

function yaml(pluginConfig = '{}') {
  const config = testConfigYaml(t.upstream.url, '[auth, validate, file-parser, upstream]').replace(
    'models:\n',
    'models:\n  - id: fake/pdf-gpt\n    capabilities: [pdf]\n    endpoints: [{ provider: fake-openai, upstream_model: gpt-upstream, pricing: { prompt: 1, completion: 2 } }]\n',
  );
  return `${config}plugins:\n  file-parser: ${pluginConfig}\n`;
}

const META = { 'x-gateway-metadata': 'enabled' };
const TEXT = 'Otters hold hands while they sleep.\n\nPage two: sea urchins.';

function chatBody(model = 'fake/gpt', fileData = `data:application/pdf;base64,${B64}`) {
  return {
    model,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Summarise.' }, { type: 'file', file: { filename: 'otters.pdf', file_data: fileData } }] }],
  };
}

describe('file-parser stage through the server', () => {
  it('a decompression bomb is parsed off the event loop and stopped at parse_timeout_ms; other requests are answered meanwhile', async () => {
    const g = await t.start({ yaml: yaml('{ parse_timeout_ms: 500 }') });
    const bomb = bombPdf(10_000_000).toString('base64');
    expect(bomb.length).toBeLessThan(100_000);
    const parsing = post(`${g.url}/chat/completions`, g.key, chatBody('fake/gpt', `data:application/pdf;base64,${bomb}`)).then((r) => ({ r, at: performance.now() }));
    // While the bomb is being parsed (seconds of pdf.js work), the gateway still answers.
    await new Promise((res) => setTimeout(res, 100));
    const health = await fetch(`${g.url.replace(/\/api\/v1$/, '')}/healthz`);
    const healthAt = performance.now();
    expect(health.status).toBe(200);
    const { r, at } = await parsing;
    expect(healthAt).toBeLessThan(at);
    expect(r.status).toBe(400);
    expect(r.json.error.message).toMatch(/longer than 500 ms|more than 256 MB/);
    expect(t.upstream.received).toHaveLength(0);
  });


  it('chat completions: a base64 PDF becomes a text part with its name and page count', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody(), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content).toEqual([
      { type: 'text', text: 'Summarise.' },
      { type: 'text', text: `otters.pdf (PDF, 2 pages):\n${TEXT}` },
    ]);
    expect(r.json.gateway_metadata.pipeline).toEqual([
      {
        type: 'file-parser',
        name: 'file-parser',
        summary: 'Parsed otters.pdf',
        data: { file: 'otters.pdf', source: 'base64', outcome: 'parsed', bytes: PDF.length, pages: 2, pages_read: 2, chars: TEXT.length, truncated: false },
      },
    ]);
  });

  it('messages: a base64 document block becomes a text block, keeping cache_control', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude',
      max_tokens: 20,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'document', title: 'otters.pdf', source: { type: 'base64', media_type: 'application/pdf', data: B64 }, cache_control: { type: 'ephemeral' } },
            { type: 'text', text: 'Summarise.' },
          ],
        },
      ],
    });
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content).toEqual([
      { type: 'text', text: `otters.pdf (PDF, 2 pages):\n${TEXT}`, cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'Summarise.' },
    ]);
  });

  it('messages: a URL document is fetched through the safe fetcher and named by its URL', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pdfServer.url}/otters.pdf`;
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude',
      max_tokens: 20,
      messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url } }, { type: 'text', text: 'Summarise.' }] }],
    }, META);
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content[0]).toEqual({ type: 'text', text: `${url} (PDF, 2 pages):\n${TEXT}` });
    expect(r.json.gateway_metadata.pipeline[0].data).toMatchObject({ file: url, source: 'url', outcome: 'parsed', pages: 2 });
  });

  it('chat: a file_data that is an http(s) URL is fetched through the safe fetcher, as OpenRouter takes it', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pdfServer.url}/otters.pdf`;
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/gpt', url), META);
    expect(r.status, r.text).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content[1]).toEqual({ type: 'text', text: `otters.pdf (PDF, 2 pages):\n${TEXT}` });
    expect(r.json.gateway_metadata.pipeline[0].data).toMatchObject({ file: 'otters.pdf', source: 'url', outcome: 'parsed', pages: 2 });
    // Without a filename it is named by its URL; a URL to something else is refused as messages' is.
    const noName = { model: 'fake/gpt', messages: [{ role: 'user', content: [{ type: 'file', file: { file_data: `${pdfServer.url}/page.html` } }] }] };
    const html = await post(`${g.url}/chat/completions`, g.key, noName);
    expect(html.status).toBe(400);
    expect(html.json.error.metadata).toMatchObject({ plugin: 'file-parser', file: `${pdfServer.url}/page.html`, reason: 'content_type' });
  });

  it('URL documents: a non-PDF content type and a redirect to the metadata address are refused', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const ask = (url: string) =>
      post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url } }] }] });
    const html = await ask(`${pdfServer.url}/page.html`);
    expect(html.status).toBe(400);
    expect(html.json.error.type).toBe('invalid_request_error');
    expect(html.json.metadata).toMatchObject({ plugin: 'file-parser', file: `${pdfServer.url}/page.html`, reason: 'content_type' });
    const redirected = await ask(`${pdfServer.url}/to-metadata`);
    expect(redirected.status).toBe(400);
    expect(redirected.json.metadata).toMatchObject({ plugin: 'file-parser', reason: 'blocked_address' });
    // Without the test-only allowance, loopback itself is refused.
    const g2 = await t.start({ yaml: yaml() });
    const direct = await post(`${g2.url}/messages`, g2.key, { model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url: `${pdfServer.url}/otters.pdf` } }] }] });
    expect(direct.status).toBe(400);
    expect(direct.json.metadata).toMatchObject({ reason: 'blocked_address' });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('a broken PDF is a 400 naming the file; with on_error: allow it passes through unchanged and is recorded', async () => {
    const broken = Buffer.from('%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage').toString('base64');
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/gpt', `data:application/pdf;base64,${broken}`));
    expect(r.status).toBe(400);
    expect(r.json.error.metadata).toEqual({ error_type: 'invalid_request', plugin: 'file-parser', file: 'otters.pdf', reason: 'unreadable' });
    expect(t.upstream.received).toHaveLength(0);

    const g2 = await t.start({ yaml: yaml('{ on_error: allow }') });
    const passed = await post(`${g2.url}/chat/completions`, g2.key, chatBody('fake/gpt', `data:application/pdf;base64,${broken}`), META);
    expect(passed.status).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content[1]).toEqual({ type: 'file', file: { filename: 'otters.pdf', file_data: `data:application/pdf;base64,${broken}` } });
    expect(passed.json.gateway_metadata.pipeline[0]).toMatchObject({ type: 'file-parser', data: { outcome: 'failed', reason: 'unreadable' } });
  });

  it('max_chars cuts the PDF text on whole characters: no half emoji goes upstream', async () => {
    const g = await t.start({ yaml: yaml('{ max_chars: 7 }') });
    const emojiPdf = minimalPdf(['abEEEE'], { emoji: 'E' }).toString('base64'); // text 'ab😀😀😀😀'
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/gpt', `data:application/pdf;base64,${emojiPdf}`), META);
    expect(r.status).toBe(200);
    // 7 UTF-16 units end on the first half of the third emoji (a lone \ud83d before): it is left out.
    expect(t.upstream.received[0].body.messages[0].content[1].text).toBe('otters.pdf (PDF, 1 page):\nab😀😀\n[truncated]');
    expect(r.json.gateway_metadata.pipeline[0].data).toMatchObject({ chars: 6, truncated: true });
  });

  it('caps: max_pages and max_chars cut the text and say so; max_bytes refuses; max_files refuses the extra PDF', async () => {
    const g = await t.start({ yaml: yaml('{ max_pages: 1, max_chars: 6 }') });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody(), META);
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content[1].text).toBe('otters.pdf (PDF, 2 pages):\nOtters\n[truncated]\n[only the first 1 of 2 pages were read]');
    expect(r.json.gateway_metadata.pipeline[0].data).toMatchObject({ pages: 2, pages_read: 1, chars: 6, truncated: true });

    const g2 = await t.start({ yaml: yaml('{ max_bytes: 100 }') });
    const big = await post(`${g2.url}/chat/completions`, g2.key, chatBody());
    expect(big.status).toBe(400);
    expect(big.json.error.metadata).toMatchObject({ plugin: 'file-parser', reason: 'too_large' });

    const g3 = await t.start({ yaml: yaml('{ max_files: 1 }') });
    const body = chatBody();
    (body.messages[0].content as unknown[]).push({ type: 'file', file: { filename: 'second.pdf', file_data: `data:application/pdf;base64,${B64}` } });
    const two = await post(`${g3.url}/chat/completions`, g3.key, body);
    expect(two.status).toBe(400);
    expect(two.json.error.metadata).toMatchObject({ plugin: 'file-parser', file: 'second.pdf', reason: 'too_many_files' });
  });

  it('max_bytes limits the decoded PDF: exactly max_bytes passes, also as base64 with line breaks; one byte over refuses', async () => {
    const mime = B64.replace(/.{1,76}/g, (line) => `${line}\r\n`); // MIME base64: longer, the same bytes
    const g = await t.start({ yaml: yaml(`{ max_bytes: ${PDF.length} }`) });
    for (const data of [B64, mime]) {
      const r = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/gpt', `data:application/pdf;base64,${data}`), META);
      expect(r.status, r.text).toBe(200);
      expect(r.json.gateway_metadata.pipeline[0].data).toMatchObject({ outcome: 'parsed', bytes: PDF.length });
    }
    const g2 = await t.start({ yaml: yaml(`{ max_bytes: ${PDF.length - 1} }`) });
    for (const data of [B64, mime]) {
      const r = await post(`${g2.url}/chat/completions`, g2.key, chatBody('fake/gpt', `data:application/pdf;base64,${data}`));
      expect(r.status).toBe(400);
      expect(r.json.error.metadata).toMatchObject({ plugin: 'file-parser', reason: 'too_large' });
    }
  });

  it('a messages url source holding a data: URL is refused with its name cut to 200 characters, in the error, the record and the logs', async () => {
    const g = await t.start({ yaml: yaml() });
    const dataUrl = `data:application/pdf;base64,${B64.repeat(40)}`; // ~47 KB, as a 20 MB one would be
    const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url: dataUrl } }] }] }, META);
    expect(r.status).toBe(400);
    const shown = `${dataUrl.slice(0, 200)}…`;
    expect(r.json.metadata).toMatchObject({ plugin: 'file-parser', file: shown, reason: 'bad_scheme' });
    expect(r.json.error.message).toBe(`file-parser could not read ${shown}: Only http and https URLs are fetched, not data:`);
    expect(r.json.gateway_metadata.pipeline[0].data.file).toBe(shown);
    expect(r.text.length).toBeLessThan(3000);
    expect(g.logs.join('\n')).not.toContain(dataUrl.slice(0, 400));
  });

  it('a model declaring the pdf capability keeps its PDF, unless mode is always or the request names the plugin', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/pdf-gpt'));
    expect(r.status).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content[1].type).toBe('file');

    const named = await post(`${g.url}/chat/completions`, g.key, { ...chatBody('fake/pdf-gpt'), plugins: [{ id: 'file-parser' }] });
    expect(named.status).toBe(200);
    expect(t.upstream.received[1].body.messages[0].content[1].type).toBe('text');

    const off = await post(`${g.url}/chat/completions`, g.key, { ...chatBody('fake/gpt'), plugins: [{ id: 'file-parser', enabled: false }] });
    expect(off.status).toBe(200);
    expect(t.upstream.received[2].body.messages[0].content[1].type).toBe('file');

    const g2 = await t.start({ yaml: yaml('{ mode: always }') });
    await post(`${g2.url}/chat/completions`, g2.key, chatBody('fake/pdf-gpt'));
    expect(t.upstream.received[3].body.messages[0].content[1].text).toContain('otters.pdf (PDF, 2 pages):');
  });
});

describe('file-parser placed before the stages that resolve the model', () => {
  const broken = Buffer.from('%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage').toString('base64');

  it('`x:online` is judged as x, whose own pdf capability keeps the PDF (web removes the suffix later)', async () => {
    // The search backend is a closed loopback port: the search fails, and on_error: allow goes on without it.
    const stages = yaml().replace('[auth, validate, file-parser, upstream]', '[auth, validate, file-parser, web, upstream]');
    const g = await t.start({ yaml: `${stages}  web: { backend: { kind: searxng, base_url: 'http://127.0.0.1:9' } }\n` });
    // A PDF pdf.js cannot read: had it been parsed for an unknown `fake/pdf-gpt:online`, a 400.
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/pdf-gpt:online', `data:application/pdf;base64,${broken}`), META);
    expect(r.status, r.text).toBe(200);
    expect(t.upstream.received[0].body.messages.at(-1).content[1]).toEqual({ type: 'file', file: { filename: 'otters.pdf', file_data: `data:application/pdf;base64,${broken}` } });
    expect(r.json.gateway_metadata.pipeline.map((p: { type: string }) => p.type)).toEqual(['web']);

    // A model without pdf, asked for with `:online`, still gets its PDF as text.
    const parsed = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/gpt:online'), META);
    expect(parsed.status, parsed.text).toBe(200);
    expect(t.upstream.received[1].body.messages.at(-1).content[1]).toEqual({ type: 'text', text: `otters.pdf (PDF, 2 pages):\n${TEXT}` });
  });

  it('`model: auto` before auto-router counts as a model without pdf: the PDF is parsed, the request goes on', async () => {
    const stages = yaml().replace('[auth, validate, file-parser, upstream]', '[auth, validate, file-parser, auto-router, upstream]');
    const g = await t.start({ yaml: `${stages}  auto-router: { allowed_models: [fake/pdf-gpt] }\n` });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('auto'), META);
    expect(r.status, r.text).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content[1]).toEqual({ type: 'text', text: `otters.pdf (PDF, 2 pages):\n${TEXT}` });
    expect(r.json.gateway_metadata.pipeline.map((p: { type: string }) => p.type)).toEqual(['file-parser', 'router']);
  });
});
