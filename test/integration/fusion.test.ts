import { describe, expect, it } from 'vitest';
import { post, sseEvents, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';
import { estimate } from '../../src/spend/estimate';
import { toNano } from '../../src/state/types';
import type { TestGateway } from '../fixtures/gateway';
import { DEFAULT_JUDGE_PROMPT, judgeBody } from '../../plugins/fusion/judge';
import { startFakeSearch, type FakeSearch } from '../fixtures/fake-search';

const t = perTestGateways();

/** Three fusion models (two OpenAI-style, one Anthropic-style) and a judge, all priced the same. */
const FUSION_MODELS = `
  - id: f/a
    endpoints: [{ provider: fake-openai, upstream_model: up-a, pricing: { prompt: 1, completion: 2 } }]
  - id: f/b
    endpoints: [{ provider: fake-openai, upstream_model: up-b, pricing: { prompt: 1, completion: 2 } }]
  - id: f/c
    endpoints: [{ provider: fake-anthropic, upstream_model: up-c, pricing: { prompt: 1, completion: 2 } }]
  - id: f/judge
    endpoints: [{ provider: fake-openai, upstream_model: up-judge, pricing: { prompt: 1, completion: 2 } }]
`;

function yaml(extra = '', timeoutMs = 2000): string {
  return (
    testConfigYaml(t.upstream.url, '[auth, validate, fusion, upstream, response-healing]').replace('pipelines:', `${FUSION_MODELS}pipelines:`) +
    `plugins:
  fusion: { models: [f/a, f/b, f/c], judge: f/judge, timeout_ms: ${timeoutMs}${extra} }
`
  );
}

const META = { 'x-gateway-metadata': 'enabled' };
const ASK = [{ role: 'user', content: 'What is the capital of France?' }];
const sent = (model: string) => t.upstream.received.filter((r) => r.body.model === model);

/** The judge's last user turn as the fake upstream got it (OpenAI style: a string). */
function judgeTurn(): string {
  const [judge] = sent('up-judge');
  return judge.body.messages.at(-1).content;
}

describe('fusion', () => {
  it('the candidates get the client\'s digits of an integer past 2^53 (src/routes/exact-integers.ts)', async () => {
    const g = await t.start({ yaml: yaml() });
    const text = JSON.stringify({ model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK, seed: 0 }).replace('"seed":0', '"seed":9223372036854775807');
    expect((await post(`${g.url}/chat/completions`, g.key, text)).status).toBe(200);
    for (const m of ['up-a', 'up-b']) expect(t.upstream.received.find((r) => r.body.model === m)!.raw).toContain('"seed":9223372036854775807');
  });

  it('chat: one of three models failing, the judge gets the two answers; usage and cost are the sums', async () => {
    const g = await t.start({ yaml: yaml() });
    // The cost of one call at these prices, from a plain request (fusion is off unless named).
    const plain = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', messages: ASK });
    expect(plain.status).toBe(200);
    const one = (await g.ledgerRow(plain.json.id))!;
    t.upstream.received.length = 0;

    t.upstream.always.set('up-c', { kind: 'status', status: 500 });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK }, META);
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.content).toBe('Hello from the fake upstream.');
    expect(r.json.model).toBe('f/judge');
    expect(sent('up-a')).toHaveLength(1);
    expect(sent('up-b')).toHaveLength(1);
    expect(sent('up-judge')).toHaveLength(1);
    expect(sent('up-a')[0].body.stream).toBe(false);
    const turn = judgeTurn();
    expect(turn).toContain('What is the capital of France?');
    expect(turn).toContain('Answer 1:\nHello from the fake upstream.');
    expect(turn).toContain('Answer 2:\nHello from the fake upstream.');
    expect(turn).not.toContain('Answer 3');
    // the question is not asked twice: the judge's conversation ends with the one judge turn
    expect(sent('up-judge')[0].body.messages).toHaveLength(1);

    // two candidates + the judge, 10 prompt and 5 completion tokens each
    expect(r.json.usage).toMatchObject({ prompt_tokens: 30, completion_tokens: 15, total_tokens: 45 });
    expect(r.json.usage.cost).toBeCloseTo(3 * one.costUsd, 12);
    const row = (await g.ledgerRow(r.json.id))!;
    expect(row).toMatchObject({ model: 'f/judge', upstreamModel: 'up-judge', promptTokens: 30, completionTokens: 15, status: 'completed' });
    expect(row.costUsd).toBeCloseTo(3 * one.costUsd, 12);

    const record = r.json.gateway_metadata.pipeline.find((p: any) => p.type === 'fusion');
    expect(record.data.models).toEqual(['f/a', 'f/b', 'f/c']);
    expect(record.data.answered.map((a: any) => a.model)).toEqual(['f/a', 'f/b']);
    expect(record.data.failed).toEqual([expect.objectContaining({ model: 'f/c', error_type: expect.any(String) })]);
    expect(record.data.judge).toMatchObject({ model: 'f/judge', provider: 'fake-openai', ms: expect.any(Number) });
  });

  it('messages dialect: the fused answer and its summed usage are in the messages shape', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.always.set('up-b', { kind: 'status', status: 500 });
    const r = await post(`${g.url}/messages`, g.key, { model: 'f/a', max_tokens: 50, plugins: [{ id: 'fusion' }], messages: ASK });
    expect(r.status).toBe(200);
    expect(r.json.type).toBe('message');
    expect(r.json.content[0]).toEqual({ type: 'text', text: 'Hello from the fake upstream.' });
    expect(sent('up-c')[0].path).toBe('/v1/messages');
    expect(judgeTurn()).toContain('Answer 2:');
    expect(judgeTurn()).not.toContain('Answer 3');
    // 10 input tokens each (4 of them cached) for a, c and the judge
    expect(r.json.usage).toMatchObject({ input_tokens: 18, cache_read_input_tokens: 12, output_tokens: 15 });
    const row = (await g.ledgerRow(r.json.id))!;
    expect(row).toMatchObject({ model: 'f/judge', promptTokens: 30, completionTokens: 15 });
    expect(row.costUsd).toBeGreaterThan(0);
  });

  it('stream: true streams the judge answer and bills all calls when the stream ends', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.always.set('up-c', { kind: 'status', status: 500 });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', stream: true, plugins: [{ id: 'fusion' }], messages: ASK });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('text/event-stream');
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello from the fake upstream.');
    expect(sent('up-judge')[0].body.stream).toBe(true);
    expect(sent('up-a')[0].body.stream).toBe(false);
    const row = (await g.ledgerRow(chunks[0].id))!;
    expect(row).toMatchObject({ model: 'f/judge', promptTokens: 30, completionTokens: 15, status: 'completed' });
  });

  it('a stream\'s fusion record names the judge\'s provider and time, as a JSON answer\'s does, in both dialects (a chat stream\'s had the model alone)', async () => {
    const g = await t.start({ yaml: yaml() });
    const chat = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', stream: true, plugins: [{ id: 'fusion' }], messages: ASK }, META);
    const chunks = sseEvents(chat.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    const chatMeta = chunks.find((c) => c.gateway_metadata)!.gateway_metadata;
    expect(chatMeta.pipeline.find((p: any) => p.type === 'fusion').data.judge).toEqual({ model: 'f/judge', provider: 'fake-openai', ms: expect.any(Number) });
    const msg = await post(`${g.url}/messages`, g.key, { model: 'f/a', max_tokens: 50, stream: true, plugins: [{ id: 'fusion' }], messages: ASK }, META);
    const start = sseEvents(msg.text).map((e) => (e.data === '[DONE]' ? {} : JSON.parse(e.data))).find((d) => d.type === 'message_start');
    const msgMeta = start.message.gateway_metadata;
    expect(msgMeta.pipeline.find((p: any) => p.type === 'fusion').data.judge).toEqual({ model: 'f/judge', provider: 'fake-openai', ms: expect.any(Number) });
  });

  it('messages stream: the judge answer arrives as messages events', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/messages`, g.key, { model: 'f/a', max_tokens: 50, stream: true, plugins: [{ id: 'fusion' }], messages: ASK });
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(events[0].event).toBe('message_start');
    expect(events.at(-2)!.event).toBe('message_stop'); // then the `[DONE]` sentinel of messages streams
    expect(events.at(-1)!.data).toBe('[DONE]');
    const text = events.filter((e) => e.event === 'content_block_delta').map((e) => JSON.parse(e.data).delta.text).join('');
    expect(text).toBe('Hello from the fake upstream.');
    const id = JSON.parse(events[0].data).message.id;
    expect(await g.ledgerRow(id)).toMatchObject({ promptTokens: 40, completionTokens: 20 }); // three candidates + judge
  });

  it('a stream\'s usage shows the totals it is billed, every call summed once (chat usage chunk, messages message_start/message_delta)', async () => {
    const g = await t.start({ yaml: yaml() });
    const chat = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', stream: true, stream_options: { include_usage: true }, plugins: [{ id: 'fusion' }], messages: ASK });
    const chunks = sseEvents(chat.text).slice(0, -1).map((e) => JSON.parse(e.data));
    const usage = chunks.filter((c) => c.usage).map((c) => c.usage);
    expect(usage).toHaveLength(1);
    const row = (await g.ledgerRow(chunks[0].id))!;
    expect(row).toMatchObject({ promptTokens: 40, completionTokens: 20 }); // three candidates + judge
    expect(usage[0]).toMatchObject({ prompt_tokens: 40, completion_tokens: 20, total_tokens: 60, prompt_tokens_details: { cached_tokens: row.cachedTokens } });
    expect(usage[0].cost).toBeCloseTo(row.costUsd, 12);

    const m = await post(`${g.url}/messages`, g.key, { model: 'f/a', max_tokens: 50, stream: true, plugins: [{ id: 'fusion' }], messages: ASK });
    const events = sseEvents(m.text);
    const start = JSON.parse(events.find((e) => e.event === 'message_start')!.data).message;
    const delta = JSON.parse(events.find((e) => e.event === 'message_delta')!.data);
    const mRow = (await g.ledgerRow(start.id))!;
    // As the Anthropic SDK reads them: message_delta's counts replace message_start's (a translated judge
    // stream reports its input only there).
    const final = { ...start.usage, ...delta.usage };
    expect(final.input_tokens + final.cache_read_input_tokens + final.cache_creation_input_tokens).toBe(40);
    expect(final).toMatchObject({ cache_read_input_tokens: mRow.cachedTokens, output_tokens: 20 });
    expect(delta.usage.cost).toBeCloseTo(mRow.costUsd, 12);
  });

  it('all models failing: a clear 502 naming the failures, and no judge call', async () => {
    const g = await t.start({ yaml: yaml() });
    for (const m of ['up-a', 'up-b', 'up-c']) t.upstream.always.set(m, { kind: 'status', status: 500 });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK });
    expect(r.status).toBe(502);
    expect(r.json.error.message).toBe('Fusion: 0 of 3 model(s) answered, at least 1 needed');
    expect(r.json.error.metadata.error_type).toBe('provider_unavailable');
    expect(r.json.error.metadata.failed.map((f: any) => f.model)).toEqual(['f/a', 'f/b', 'f/c']);
    expect(sent('up-judge')).toHaveLength(0);
    // Routing happened: the error carries the request's generation id (spec 7.3), as a request whose own
    // providers all failed does (it had none: request_id null, no request-id header).
    const m = await post(`${g.url}/messages`, g.key, { model: 'f/a', max_tokens: 50, plugins: [{ id: 'fusion' }], messages: ASK });
    expect(m.status).toBe(502);
    expect(m.json.request_id).toMatch(/^gen-/);
    expect(m.headers.get('request-id')).toBe(m.json.request_id);
  });

  it('the judge failing: a 502 whose metadata says no endpoint answered, the candidates billed', async () => {
    const g = await t.start({ yaml: yaml() });
    t.upstream.always.set('up-judge', { kind: 'status', status: 500 });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK }, META);
    expect(r.status).toBe(502);
    const meta = r.json.error.metadata.gateway_metadata ?? r.json.gateway_metadata;
    expect(meta.pipeline.find((p: any) => p.type === 'fusion').summary).toBe('3 of 3 model(s) answered; the judge f/judge failed (provider_unavailable)');
    // The judge's attempts are the ones shown: none succeeded, so nothing "served" the request (the row's
    // route is a candidate's, for billing only).
    expect(meta.summary).toMatch(/^no endpoint answered after \d+ attempt\(s\)$/);
    expect(meta.attempts.every((a: any) => a.outcome !== 'success')).toBe(true);
    expect(meta.endpoints.available.every((e: any) => e.selected === false)).toBe(true);
    expect(await g.ledgerRow(r.headers.get('x-request-id')!)).toMatchObject({ model: 'f/a', promptTokens: 30, completionTokens: 15, status: 'failed' });
  });

  it('a client that leaves mid-fusion: the calls that answered are billed in a cancelled row (it said failed), the judge not asked once candidates are cut', async () => {
    const g = await t.start({ yaml: yaml() });
    /** Sends a fusion request, leaves after `ms`, and returns the request's access line once it is logged. */
    const leaveAfter = async (ms: number) => {
      const before = g.logs.length;
      const ac = new AbortController();
      const timer = setTimeout(() => ac.abort(), ms);
      await fetch(`${g.url}/chat/completions`, {
        method: 'POST',
        signal: ac.signal,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${g.key}` },
        body: JSON.stringify({ model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK }),
      }).catch(() => undefined);
      clearTimeout(timer);
      const line = () => g.logs.slice(before).map((l) => JSON.parse(l)).find((l) => l.msg === 'request');
      await expect.poll(line, { timeout: 5000 }).toBeDefined();
      return line();
    };
    // A candidate still in flight: the two that answered are billed, and no judge is asked.
    t.upstream.always.set('up-b', { kind: 'hang' });
    const early = await leaveAfter(300);
    expect(early).toMatchObject({ status: 499, error_type: 'cancelled', outcome: 'cancelled' });
    expect(await g.ledgerRow(early.generation_id)).toMatchObject({ model: 'f/a', promptTokens: 20, completionTokens: 10, status: 'cancelled' });
    expect(sent('up-judge')).toHaveLength(0);
    // The judge in flight: the three candidates are billed, the judge's cut call delivered nothing.
    t.upstream.always.delete('up-b');
    t.upstream.always.set('up-judge', { kind: 'hang' });
    const late = await leaveAfter(300);
    expect(late).toMatchObject({ status: 499, error_type: 'cancelled', outcome: 'cancelled' });
    expect(await g.ledgerRow(late.generation_id)).toMatchObject({ model: 'f/a', promptTokens: 30, completionTokens: 15, status: 'cancelled' });
  });

  it('a model slower than timeout_ms is aborted and counted as failed (timeout); all too slow is a 504', async () => {
    const g = await t.start({ yaml: yaml('', 300) });
    t.upstream.always.set('up-b', { kind: 'hang' });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK }, META);
    expect(r.status).toBe(200);
    const record = r.json.gateway_metadata.pipeline.find((p: any) => p.type === 'fusion');
    expect(record.data.failed).toEqual([expect.objectContaining({ model: 'f/b', error_type: 'timeout' })]);
    expect(judgeTurn()).toContain('Answer 2:');
    // Fusion's own timeout cut the call: a timeout of that provider, not a call the client cancelled.
    const attempts = (await (await fetch(new URL('/metrics', g.url))).text()).split('\n').filter((l) => l.startsWith('gateway_upstream_attempts_total{'));
    expect(attempts).toContain('gateway_upstream_attempts_total{provider="fake-openai",outcome="timeout"} 1');
    expect(attempts.join('\n')).not.toContain('cancelled');

    for (const m of ['up-a', 'up-c']) t.upstream.always.set(m, { kind: 'hang' });
    const all = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK });
    expect(all.status).toBe(504);
    expect(all.json.error.metadata.error_type).toBe('timeout');
  });

  it('min_answers: fewer answers than required fails, and the answers that were made are billed', async () => {
    const g = await t.start({ yaml: yaml(', min_answers: 3') });
    t.upstream.always.set('up-c', { kind: 'status', status: 500 });
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: ASK });
    expect(r.status).toBe(502);
    expect(r.json.error.message).toBe('Fusion: 2 of 3 model(s) answered, at least 3 needed');
    expect(sent('up-judge')).toHaveLength(0);
    // the messages envelope carries the generation id: the row bills the two calls that answered
    const m = await post(`${g.url}/messages`, g.key, { model: 'f/a', max_tokens: 50, plugins: [{ id: 'fusion' }], messages: ASK });
    expect(m.status).toBe(502);
    expect(m.json.request_id).toMatch(/^gen-/);
    expect(await g.ledgerRow(m.json.request_id)).toMatchObject({ model: 'f/a', promptTokens: 20, completionTokens: 10, status: 'failed' });
  });

  it('request options narrow the operator lists; outside them is a 400 naming the field', async () => {
    const g = await t.start({ yaml: yaml() });
    const ok = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion', models: ['f/a', 'f/c'], judge: 'f/b' }], messages: ASK });
    expect(ok.status).toBe(200);
    expect(sent('up-b')).toHaveLength(1); // as the judge only
    expect(sent('up-b')[0].body.messages.at(-1).content).toContain('Answer 2:');
    expect((await g.ledgerRow(ok.json.id))!.model).toBe('f/b');

    const bad = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion', models: ['f/a', 'fake/gpt'] }], messages: ASK });
    expect(bad.status).toBe(400);
    expect(bad.json.error.metadata).toMatchObject({ error_type: 'invalid_request', field: 'plugins[0].models' });
    const badJudge = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion', judge: 'fake/gpt' }], messages: ASK });
    expect(badJudge.json.error.metadata).toMatchObject({ field: 'plugins[0].judge' });
  });

  it('stages listed after fusion act before its calls: a guardrail blocks with nothing asked, web results reach every model', async () => {
    const search: FakeSearch = await startFakeSearch();
    try {
      const pipeline = '[auth, validate, fusion, guardrail, web, upstream]';
      const config =
        testConfigYaml(t.upstream.url, pipeline).replace('pipelines:', `${FUSION_MODELS}pipelines:`) +
        `plugins:\n  fusion: { models: [f/a, f/b], judge: f/judge }\n  web: { backend: { kind: searxng, base_url: '${search.url}', timeout_ms: 10000 } }\n` +
        'guardrails:\n  - { id: g, action: block, patterns: [{ name: secret_plan, regex: "secret plan" }] }\nworkspaces:\n  - name: default\n    default_guardrail: g\n';
      const g = await t.start({ yaml: config });
      const blocked = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }], messages: [{ role: 'user', content: 'the secret plan' }] });
      expect(blocked.status).toBe(403);
      expect(t.upstream.received).toHaveLength(0); // no candidate was asked (they had been, and billed, before the block)

      const r = await post(`${g.url}/chat/completions`, g.key, { model: 'f/a', plugins: [{ id: 'fusion' }, { id: 'web' }], messages: ASK });
      expect(r.status).toBe(200);
      expect(search.calls).toHaveLength(1);
      for (const m of ['up-a', 'up-b', 'up-judge']) {
        const [call] = sent(m);
        expect(call.body.messages[0].role).toBe('system');
        expect(call.body.messages[0].content).toContain('[1] Result 1\nURL: https://site1.example/page1');
      }
      expect(r.json.choices[0].message.annotations).toHaveLength(5);
    } finally {
      await search.close();
    }
  });

  it('a config naming an unknown model, or none, fails the start with its path', async () => {
    await expect(t.start({ yaml: yaml().replace('judge: f/judge', 'judge: f/nope') })).rejects.toThrow('plugins.fusion.judge: unknown model "f/nope"');
    const none = testConfigYaml(t.upstream.url, '[auth, validate, fusion, upstream]');
    await expect(t.start({ yaml: none })).rejects.toThrow('plugins.fusion: `models` (2 or more) and `judge` are required');
  });
});

describe('fusion and the spend checks', () => {
  /** The fusion config with `budget-check` before `fusion`, then top-level `sections`. */
  const spendYaml = (sections = '') => yaml().replace('[auth, validate, fusion', '[auth, validate, budget-check, fusion') + sections;
  const body = { model: 'f/a', max_tokens: 50, messages: ASK };
  async function credit(g: TestGateway, usd: number): Promise<void> {
    await g.store.addCredits(g.keyRecord.accountId, usd);
    g.gateway.spend.forgetAccount(g.keyRecord.accountId);
  }

  it('the hold covers every call fusion makes (each candidate, and the judge reading their answers), not one call', async () => {
    const g = await t.start({ yaml: spendYaml() });
    await credit(g, 100);
    const { secret, record } = await g.createKey({ limitUsd: 10, limitReset: 'monthly', name: 'limited' });
    const one = toNano(estimate(body, g.gateway.runtime().services.models, 4096).usd);
    let release!: () => void;
    const until = new Promise<void>((r) => (release = r));
    for (const m of ['up-a', 'up-b', 'up-c']) t.upstream.always.set(m, { kind: 'hold', until });
    const pending = post(`${g.url}/chat/completions`, secret, { ...body, plugins: [{ id: 'fusion' }] });
    await expect.poll(() => t.upstream.received.length).toBe(3);
    // Three candidates at the request's own estimate each, and the judge: its prompt, plus the three
    // answers of up to 50 tokens as input (1 USD per million prompt tokens).
    const judge = estimate(judgeBody({ body, judge: 'f/judge', answers: [], template: DEFAULT_JUDGE_PROMPT, stream: false }), g.gateway.runtime().services.models, 4096);
    const held = await g.gateway.state.held(`key:${record.id}`, g.gateway.spend.clock());
    expect(Math.abs(held - (3 * one + toNano(judge.usd + 150 / 1e6)))).toBeLessThanOrEqual(2);
    expect(held).toBeGreaterThan(4 * one);
    expect(g.gateway.spend.inFlightHolds()).toBe(1);
    release();
    const r = await pending;
    expect(r.status).toBe(200);
    await expect.poll(() => g.gateway.state.held(`key:${record.id}`, g.gateway.spend.clock())).toBe(0);
    expect(g.gateway.spend.inFlightHolds()).toBe(0);
    await g.gateway.ledger.flush();
    expect((await g.store.spendTotals({ kind: 'key', keyId: record.id }, 0)).paid).toBeCloseTo(r.json.usage.cost, 12);
  });

  it('calls that together exceed the in-flight budget are refused before any is made; a plain request still fits', async () => {
    const g = await t.start({ yaml: spendYaml('spend: { in_flight: { fraction: 0.5, ceiling_usd: 1 } }\n') });
    const one = estimate(body, g.gateway.runtime().services.models, 4096).usd;
    await credit(g, 4 * one); // half of it: room for two calls' estimates
    expect((await post(`${g.url}/chat/completions`, g.key, body)).status).toBe(200);
    t.upstream.received.length = 0;
    const r = await post(`${g.url}/chat/completions`, g.key, { ...body, plugins: [{ id: 'fusion' }] });
    expect(r.status).toBe(402);
    expect(r.json.error.metadata).toMatchObject({ limit_source: 'gateway_credits', reason: 'weight_exceeds_budget' });
    expect(t.upstream.received).toHaveLength(0);
    expect(g.gateway.spend.inFlightHolds()).toBe(0);
  });
});
