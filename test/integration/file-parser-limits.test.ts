import { describe, expect, it, vi } from 'vitest';
import { registry } from '../../plugins';
import { parseConfigText } from '../../src/config/load';
import { fileParserDefinition } from '../../plugins/file-parser/stage';
import { post, startTestGateway, testConfigYaml } from '../fixtures/gateway';
import { bombPdf, minimalPdf, zeroBombPdf } from '../fixtures/minimal-pdf';
import { perTestGateways } from '../fixtures/per-test';

// Every PDF parser thread the gateway starts, counted from its start to its exit, independently of the
// gateway's own bookkeeping: node:worker_threads' Worker is replaced by a subclass that counts.
const threads = vi.hoisted(() => ({ started: 0, live: 0, most: 0, results: 0 }));
vi.mock('node:worker_threads', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:worker_threads')>();
  class CountedWorker extends real.Worker {
    constructor(file: string | URL, options?: import('node:worker_threads').WorkerOptions) {
      super(file, options);
      if (!String(file).endsWith('pdf-text.cjs')) return;
      threads.started++;
      threads.most = Math.max(threads.most, ++threads.live);
      this.once('message', () => threads.results++);
      this.once('exit', () => threads.live--);
    }
  }
  return { ...real, default: { ...real, Worker: CountedWorker }, Worker: CountedWorker };
});

const t = perTestGateways();

function yaml(pluginConfig = '{}') {
  // Room for the 20-stream bomb (320 KB of PDF, base64 in JSON); the shared test config allows 64 KB.
  const config = testConfigYaml(t.upstream.url, '[auth, validate, file-parser, upstream]').replace('max_body_bytes: 65536', 'max_body_bytes: 1000000');
  return `${config}plugins:\n  file-parser: ${pluginConfig}\n`;
}

function chatBody(pdf: Buffer) {
  return {
    model: 'fake/gpt',
    messages: [{ role: 'user', content: [{ type: 'file', file: { filename: 'doc.pdf', file_data: `data:application/pdf;base64,${pdf.toString('base64')}` } }] }],
  };
}

/** A chat request the test can cancel (the client goes away); resolves with the status, or 'aborted'. */
function cancellable(url: string, key: string, pdf: Buffer) {
  const controller = new AbortController();
  const done = fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(chatBody(pdf)),
    signal: controller.signal,
  }).then(
    (r) => r.status,
    () => 'aborted' as const,
  );
  return { cancel: () => controller.abort(), done };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 5));
}

function resetThreads() {
  Object.assign(threads, { started: 0, most: threads.live, results: 0 });
}

describe('file-parser: memory and parser-thread limits', () => {
  it('a PDF whose streams inflate past the default parse_memory_mb (256) fails too_large; the thread is gone', { timeout: 60_000 }, async () => {
    const g = await t.start({ yaml: yaml() });
    // 20 FlateDecode streams of 16 MB of zeros: 320 KB of PDF, 320 MB decoded (pdf.js holds them all at once).
    const bomb = zeroBombPdf({ inflatedBytes: 16_000_000, streams: 20 });
    expect(bomb.length).toBeLessThan(400_000);
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody(bomb));
    expect(r.status).toBe(400);
    expect(r.json.error.metadata).toEqual({ error_type: 'invalid_request', plugin: 'file-parser', file: 'doc.pdf', reason: 'too_large' });
    expect(r.json.error.message).toMatch(/more than 256 MB/);
    expect(t.upstream.received).toHaveLength(0);
    expect(threads.live).toBe(0);
  });

  it('the cap holds for streams pdf.js decodes in JavaScript (RunLengthDecode), and a plain PDF still parses under it', async () => {
    const g = await t.start({ yaml: yaml('{ parse_memory_mb: 64 }') });
    // A 16 KB stream that decodes, synchronously, to 1 GB of zeros.
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody(zeroBombPdf({ inflatedBytes: 1_000_000_000, runLength: true })));
    expect(r.status).toBe(400);
    expect(r.json.error.metadata).toMatchObject({ plugin: 'file-parser', file: 'doc.pdf', reason: 'too_large' });

    const ok = await post(`${g.url}/chat/completions`, g.key, chatBody(minimalPdf(['Sea otters use rocks as tools.'])));
    expect(ok.status).toBe(200);
    expect(t.upstream.received[0].body.messages[0].content[0].text).toBe('doc.pdf (PDF, 1 page):\nSea otters use rocks as tools.');
  });

  it('at most parse_workers parser threads run at once; the other requests wait their turn and are answered', async () => {
    const g = await t.start({ yaml: yaml('{ parse_workers: 2 }') });
    resetThreads();
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => post(`${g.url}/chat/completions`, g.key, chatBody(minimalPdf([`Request ${i}`])))),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(threads.started).toBe(6);
    expect(threads.most).toBe(2);
    const texts = t.upstream.received.map((u) => u.body.messages[0].content[0].text).sort();
    expect(texts).toEqual([0, 1, 2, 3, 4, 5].map((i) => `doc.pdf (PDF, 1 page):\nRequest ${i}`));
  });

  it('a reload refused by a later stage leaves parse_workers as the serving config has it', async () => {
    const config = (workers: number, capModel: string) =>
      testConfigYaml(t.upstream.url, '[auth, validate, file-parser, max-tokens-cap, upstream]') +
      `plugins:\n  file-parser: { parse_workers: ${workers} }\n  max-tokens-cap: { per_model: { '${capModel}': 100 } }\n`;
    const g = await t.start({ yaml: config(1, 'fake/gpt') });
    expect(() => g.gateway.reload(parseConfigText(config(4, 'no/such-model'), { registry }))).toThrow(/no\/such-model/);
    resetThreads();
    const answers = await Promise.all(
      Array.from({ length: 3 }, (_, i) => post(`${g.url}/chat/completions`, g.key, chatBody(minimalPdf([`Request ${i}`])))),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(threads.most).toBe(1);
  });

  it('a client that goes away stops its parse, and a PDF waiting for a parser leaves the queue without starting one', async () => {
    const g = await t.start({ yaml: yaml('{ parse_workers: 1, parse_timeout_ms: 60000 }') });
    resetThreads();
    // Seconds of pdf.js work (10 MB of text operators), holding the only parser.
    const slow = cancellable(g.url, g.key, bombPdf(10_000_000));
    await until(() => threads.live === 1);
    const waiting = cancellable(g.url, g.key, minimalPdf(['never parsed']));
    // Time for the second request to reach the parser queue (were it not there yet, it could not start a thread either).
    await new Promise((r) => setTimeout(r, 300));
    waiting.cancel();
    slow.cancel();
    expect(await waiting.done).toBe('aborted');
    expect(await slow.done).toBe('aborted');
    await until(() => threads.live === 0);
    // The slow parse was stopped (it never sent a result), and freeing its slot did not start the cancelled one.
    expect(threads.results).toBe(0);
    expect(threads.started).toBe(1);
    expect(t.upstream.received).toHaveLength(0);
    // Both end as cancelled requests (499 in the log), not as unexpected errors.
    await until(() => g.logs.filter((l) => l.includes('"status":499')).length === 2);
    expect(g.logs.join('')).not.toContain('unexpected error');
  });

  it('a PDF still waiting for a parser at parse_timeout_ms is a retryable 503 (busy); the limit is shared by gateways using one definition', async () => {
    const shared = new Map(registry).set('file-parser', fileParserDefinition());
    const g = await t.start({ yaml: yaml('{ parse_workers: 1, parse_timeout_ms: 60000 }'), registry: shared });
    const g2 = await startTestGateway({ yaml: yaml('{ parse_workers: 1, parse_timeout_ms: 300 }'), registry: shared });
    try {
      resetThreads();
      const slow = cancellable(g.url, g.key, bombPdf(10_000_000));
      await until(() => threads.live === 1);
      const r = await post(`${g2.url}/chat/completions`, g2.key, chatBody(minimalPdf(['waited'])));
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBe('1');
      expect(r.json.error.metadata).toMatchObject({ plugin: 'file-parser', file: 'doc.pdf', reason: 'busy' });
      expect(threads.started).toBe(1);
      slow.cancel();
      await slow.done;
      await until(() => threads.live === 0);
    } finally {
      await g2.close();
    }
  });
});
