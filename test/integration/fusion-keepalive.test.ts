import { describe, expect, it } from 'vitest';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { TEXT } from '../fixtures/fake-upstream';
import { perTestGateways } from '../fixtures/per-test';
import { gate, openRaw } from '../fixtures/raw-stream';

const t = perTestGateways();

const FUSION_MODELS = `
  - id: f/a
    endpoints: [{ provider: fake-openai, upstream_model: up-a, pricing: { prompt: 1, completion: 2 } }]
  - id: f/b
    endpoints: [{ provider: fake-openai, upstream_model: up-b, pricing: { prompt: 1, completion: 2 } }]
  - id: f/judge
    endpoints: [{ provider: fake-openai, upstream_model: up-judge, pricing: { prompt: 1, completion: 2 } }]
`;

/** Fusion of f/a and f/b judged by f/judge, with keep-alive comments every 20 ms. */
function yaml(minAnswers = 1): string {
  return (
    testConfigYaml(t.upstream.url, '[auth, validate, fusion, upstream, response-healing]')
      .replace('watch_config: false }', 'watch_config: false, stream_keepalive_ms: 20 }')
      .replace('pipelines:', `${FUSION_MODELS}pipelines:`) +
    `plugins:
  fusion: { models: [f/a, f/b], judge: f/judge, timeout_ms: 5000, min_answers: ${minAnswers} }
`
  );
}

const ASK = { model: 'f/a', stream: true, plugins: [{ id: 'fusion' }], messages: [{ role: 'user', content: 'hi' }] };
const KEEPALIVE = ': keepalive\n\n';


/** `p`, or a failure after `ms` (without the keep-alive, the headers wait for the judge's answer). */
function within<T>(ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`nothing within ${ms} ms`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}


describe('a fusion stream slow to answer gets the keep-alive of an ordinary stream (server.stream_keepalive_ms)', () => {
  it('from min_answers answers on: the 200 and ": keepalive" comments while a candidate and then the judge are slow; then the judge\'s answer', async () => {
    const g = await t.start({ yaml: yaml() });
    const candidate = gate();
    const judge = gate();
    t.upstream.scripts.set('up-b', [{ kind: 'hold', until: candidate.until }]);
    t.upstream.scripts.set('up-judge', [{ kind: 'slow-start', until: judge.until }]);
    const opened = openRaw(g, 'chat/completions', ASK);
    let s: Awaited<typeof opened>;
    try {
      s = await within(2000, opened);
      await within(2000, s.seen(KEEPALIVE)); // f/a answered, f/b is still held
    } catch (err) {
      candidate.open(); // no comments came: let the request end
      judge.open();
      throw err;
    }
    expect(s.res.status).toBe(200);
    expect(s.res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(t.upstream.received.some((r) => r.body.model === 'up-judge')).toBe(false);
    candidate.open();
    await expect.poll(() => t.upstream.received.some((r) => r.body.model === 'up-judge')).toBe(true);
    const before = s.soFar().length;
    await expect.poll(() => s.soFar().slice(before).includes(KEEPALIVE)).toBe(true); // the judge thinks
    expect(s.soFar().replaceAll(KEEPALIVE, '')).toBe('');
    judge.open();
    const chunks = sseEvents((await s.done).replaceAll(KEEPALIVE, ''))
      .filter((e) => e.data !== '[DONE]')
      .map((e) => JSON.parse(e.data));
    expect(chunks.filter((c) => c.choices[0]?.delta?.role === 'assistant')).toHaveLength(1);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(TEXT.join(''));
    // The headers went out before the judge was asked: they carry the generation id its answer and row have.
    expect(chunks[0].id).toMatch(/^gen-/);
    expect(s.res.headers.get('x-request-id')).toBe(chunks[0].id);
    expect(await ledgerRowSoon(g, chunks[0].id)).toMatchObject({ model: 'f/judge', status: 'completed' });
  });

  it('the judge failing after the comments: the in-band error and [DONE], the candidates billed failed', async () => {
    const g = await t.start({ yaml: yaml() });
    const candidate = gate();
    t.upstream.scripts.set('up-b', [{ kind: 'hold', until: candidate.until }]);
    t.upstream.always.set('up-judge', { kind: 'status', status: 500 });
    const opened = openRaw(g, 'chat/completions', ASK);
    let s: Awaited<typeof opened>;
    try {
      s = await within(2000, opened);
      await within(2000, s.seen(KEEPALIVE));
    } finally {
      candidate.open();
    }
    expect(s.res.status).toBe(200);
    const events = sseEvents((await s.done).replaceAll(KEEPALIVE, ''));
    expect(events).toHaveLength(2);
    const failure = JSON.parse(events[0].data);
    expect(failure.choices[0].finish_reason).toBe('error');
    expect(failure.error.metadata.error_type).toBe('provider_unavailable');
    expect(events[1].data).toBe('[DONE]');
    expect(s.res.headers.get('x-request-id')).toBe(failure.id);
    expect(await ledgerRowSoon(g, failure.id)).toMatchObject({ model: 'f/a', status: 'failed' });
  });

  it('before min_answers answers nothing is sent: too few answers is still a real 502', async () => {
    const g = await t.start({ yaml: yaml(2) });
    const candidate = gate();
    t.upstream.scripts.set('up-b', [{ kind: 'hold', until: candidate.until }]);
    t.upstream.always.set('up-a', { kind: 'status', status: 500 });
    const pending = post(`${g.url}/chat/completions`, g.key, ASK);
    setTimeout(candidate.open, 100); // with a keep-alive at 20 ms, that would have been comments
    const r = await pending;
    expect(r.status).toBe(502);
    expect(r.json.error.message).toBe('Fusion: 1 of 2 model(s) answered, at least 2 needed');
    expect(r.text).not.toContain('keepalive');
  });
});
