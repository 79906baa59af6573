import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeModeration, type FakeModeration } from '../fixtures/fake-moderation';
import { ledgerRowSoon, post, sseEvents, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

/**
 * Output moderation (`moderate_output`) through the real server: simulated providers answer with fixed
 * replies, the fake moderation server flags texts containing "attack".
 */
const t = perTestGateways();
const META = { 'x-gateway-metadata': 'enabled' };

let mod: FakeModeration;
beforeAll(async () => {
  mod = await startFakeModeration();
});
afterAll(async () => {
  await mod.close();
});
beforeEach(() => {
  mod.behaviour = { flagWord: 'attack', category: 'violence' };
  mod.received.length = 0;
});

const CLEAN = 'The weather is calm and sunny today, with a light breeze from the west.';
const EARLY = 'one two three four five six seven eight nine ten eleven twelve then plan the attack at dawn and many more words after that';
const LATE = 'a perfectly calm answer until the very last word: attack';
const MESSAGE = 'Answer blocked by moderation (engine "m"): flagged for violence';

function start(fields = ', moderate_output: true, output_check_chars: 20', timeoutMs = 500): Promise<TestGateway> {
  const replies: Record<string, string> = { clean: CLEAN, early: EARLY, late: LATE };
  let y = testConfigYaml(t.upstream.url, '[auth, validate, moderation, upstream]');
  const providers = Object.entries(replies).map(([id, reply]) => `  - { id: sim-${id}, kind: simulated, reply: ${JSON.stringify(reply)} }\n`).join('');
  const models = Object.keys(replies).map((id) => `  - id: out/${id}\n    endpoints: [{ provider: sim-${id}, upstream_model: s, pricing: { prompt: 1, completion: 1 } }]\n`).join('');
  y = y.replace('providers:\n', `providers:\n${providers}`).replace('models:\n', `models:\n${models}`);
  y += `moderation:\n  engines:\n    - { id: m, kind: openai, base_url: ${mod.url}, timeout_ms: ${timeoutMs}${fields} }\nworkspaces:\n  - { name: default, moderation: m }\n`;
  return t.start({ yaml: y });
}

const chat = (model: string, over: Record<string, unknown> = {}) => ({ model, stream: true, messages: [{ role: 'user', content: 'tell me' }], ...over });
const messages = (model: string, over: Record<string, unknown> = {}) => ({ model, stream: true, max_tokens: 200, messages: [{ role: 'user', content: 'tell me' }], ...over });

function chatText(events: { data: string }[]): string {
  return events
    .filter((e) => e.data !== '[DONE]')
    .map((e) => JSON.parse(e.data).choices?.[0]?.delta?.content ?? '')
    .join('');
}

function messagesText(events: { event?: string; data: string }[]): string {
  return events
    .filter((e) => e.event === 'content_block_delta')
    .map((e) => JSON.parse(e.data).delta?.text ?? '')
    .join('');
}

/** Texts the fake was asked about after the input check. */
const outputChecks = () => mod.received.slice(1).map((r) => r.body.input);

describe('streamed output: chat completions', () => {
  it('a flagged answer is cut with the spec 7.5.3 error chunk, then [DONE]; the flagged text never reaches the client; billed as failed', async () => {
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, chat('out/early'));
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    const last = JSON.parse(events.at(-2)!.data);
    expect(last).toMatchObject({
      object: 'chat.completion.chunk',
      model: 'out/early',
      provider: 'sim-early',
      error: { code: 403, message: MESSAGE, metadata: { error_type: 'content_policy_violation' } },
      choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
    });
    expect(typeof last.created).toBe('number');
    const text = chatText(events.slice(0, -2));
    expect(text.startsWith('one two three')).toBe(true);
    expect(text).not.toContain('attack');
    expect(r.text).not.toContain('many more words');
    expect(events.slice(0, -2).some((e) => JSON.parse(e.data).choices?.[0]?.finish_reason)).toBe(false);
    // Checked in steps of ≥ 20 new characters, on the whole answer so far.
    const checks = outputChecks();
    expect(checks.length).toBeGreaterThan(1);
    expect(checks.at(-1)![0]).toContain('attack');
    const row = await g.ledgerRow(last.id);
    expect(row?.status).toBe('failed');
  });

  it('a clean stream passes untouched to its normal end, checked along the way and at the end', async () => {
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, chat('out/clean'), META);
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    expect(chatText(events.slice(0, -1))).toBe(CLEAN);
    expect(r.text).not.toContain('"error"');
    expect(events.some((e) => e.data !== '[DONE]' && JSON.parse(e.data).choices?.[0]?.finish_reason === 'stop')).toBe(true);
    const checks = outputChecks();
    expect(checks.length).toBeGreaterThan(1);
    expect(checks.at(-1)).toEqual([CLEAN]);
    const id = JSON.parse(events[0].data).id;
    expect((await g.ledgerRow(id))?.status).toBe('completed');
  });

  it('the check at the end catches text in the last chunk; nothing of the answer was released before it', async () => {
    const g = await start(', moderate_output: true');
    const r = await post(`${g.url}/chat/completions`, g.key, chat('out/late'));
    const events = sseEvents(r.text);
    expect(JSON.parse(events.at(-2)!.data).error.metadata.error_type).toBe('content_policy_violation');
    expect(chatText(events.slice(0, -2))).toBe('');
    expect(outputChecks()).toEqual([[LATE]]);
  });

  it('without moderate_output only the input is checked', async () => {
    const g = await start('');
    const r = await post(`${g.url}/chat/completions`, g.key, chat('out/early'));
    expect(chatText(sseEvents(r.text).slice(0, -1))).toBe(EARLY);
    expect(mod.received).toHaveLength(1);
  });
});

describe('streamed output: messages', () => {
  it('a flagged answer ends with event: error (invalid_request_error, content_policy_violation), no message_stop', async () => {
    const g = await start();
    const r = await post(`${g.url}/messages`, g.key, messages('out/early'));
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    expect(events.at(-2)!.event).toBe('error');
    expect(JSON.parse(events.at(-2)!.data)).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: MESSAGE, error_type: 'content_policy_violation' } });
    expect(events.some((e) => e.event === 'message_stop' || e.event === 'message_delta')).toBe(false);
    const text = messagesText(events);
    expect(text.startsWith('one two three')).toBe(true);
    expect(text).not.toContain('attack');
    const id = JSON.parse(events.find((e) => e.event === 'message_start')!.data).message.id;
    expect((await g.ledgerRow(id))?.status).toBe('failed');
  });

  it('text a provider puts in content_block_start is judged like a text_delta: a flagged one never reaches the client', async () => {
    const g = await start(', moderate_output: true');
    const ev = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
    const text = [
      ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'c', content: [], stop_reason: null, usage: { input_tokens: 3, output_tokens: 1 } } }),
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: 'plan the attack at dawn' } }),
      ev('content_block_stop', { index: 0 }),
      ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 6 } }),
      ev('message_stop', {}),
    ].join('');
    t.upstream.faults.push({ kind: 'raw-stream', text });
    const r = await post(`${g.url}/messages`, g.key, messages('fake/claude'));
    const events = sseEvents(r.text);
    expect(events.at(-2)!.event).toBe('error');
    expect(JSON.parse(events.at(-2)!.data).error.error_type).toBe('content_policy_violation');
    expect(r.text).not.toContain('attack');
    expect(outputChecks()).toEqual([['plan the attack at dawn']]);
  });

  it('a clean stream keeps every event through message_stop', async () => {
    const g = await start();
    const r = await post(`${g.url}/messages`, g.key, messages('out/clean'));
    const events = sseEvents(r.text);
    expect(messagesText(events)).toBe(CLEAN);
    expect(events.map((e) => e.event).filter(Boolean).slice(-2)).toEqual(['message_delta', 'message_stop']);
    expect(events.some((e) => e.event === 'error')).toBe(false);
  });
});

describe('several choices (n > 1)', () => {
  const chunk = (choices: unknown[]) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt', choices })}\n\n`;
  const delta = (index: number, content: string, finish: string | null = null) => ({ index, delta: { content }, finish_reason: finish });

  it('streams: the text of every choice is judged, also when one chunk carries two choices', async () => {
    const g = await start();
    const text = [
      chunk([delta(0, 'A calm first answer with many words in it'), delta(1, 'The second one: ')]),
      chunk([delta(1, 'plan the attack at dawn')]),
      chunk([delta(0, '', 'stop'), delta(1, '', 'stop')]),
      'data: [DONE]\n\n',
    ].join('');
    t.upstream.faults.push({ kind: 'raw-stream', text });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt', { n: 2 }));
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(JSON.parse(events.at(-2)!.data).error.metadata.error_type).toBe('content_policy_violation');
    expect(r.text).not.toContain('attack');
    expect(outputChecks().at(-1)).toEqual(['A calm first answer with many words in it', 'The second one: plan the attack at dawn']);
  });

  it('non-streaming: a flagged second choice makes the answer a 403', async () => {
    const g = await start();
    const choice = (index: number, content: string) => ({ index, message: { role: 'assistant', content }, finish_reason: 'stop' });
    const body = { id: 'c2', object: 'chat.completion', created: 1, model: 'gpt', choices: [choice(0, CLEAN), choice(1, LATE)], usage: { prompt_tokens: 3, completion_tokens: 20, total_tokens: 23 } };
    t.upstream.faults.push({ kind: 'status', status: 200, body });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt', { stream: false, n: 2 }));
    expect(r.status).toBe(403);
    expect(r.json.error.metadata.error_type).toBe('content_policy_violation');
    expect(outputChecks()).toEqual([[CLEAN, LATE]]);
  });

  it('non-streaming: a refusal is answer text and is judged too (it had passed unjudged)', async () => {
    const g = await start();
    const body = { id: 'c2', object: 'chat.completion', created: 1, model: 'gpt', choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: LATE }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 20, total_tokens: 23 } };
    t.upstream.faults.push({ kind: 'status', status: 200, body });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt', { stream: false }));
    expect(r.status).toBe(403);
    expect(r.json.error.metadata.error_type).toBe('content_policy_violation');
    expect(outputChecks()).toEqual([[LATE]]);
  });
});

describe('checks by size and word ends', () => {
  const chunk = (content: string, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: 'c3', object: 'chat.completion.chunk', created: 1, model: 'gpt', choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
  const stream = (parts: string[]) => [...parts.map((p) => chunk(p)), chunk('', 'stop'), 'data: [DONE]\n\n'].join('');
  function startRules(): Promise<TestGateway> {
    const y = `${testConfigYaml(t.upstream.url, '[auth, validate, moderation, upstream]')}moderation:\n  engines:\n    - { id: r, kind: rules, moderate_output: true, output_check_chars: 20, rules: [{ name: violence, keywords: [attack] }] }\nworkspaces:\n  - { name: default, moderation: r }\n`;
    return t.start({ yaml: y });
  }

  it('a check due inside a word waits for its end: "attack" + "ers" is not taken for the whole word "attack"', async () => {
    const g = await startRules();
    // The second part brings the unjudged text to 20 characters, in the middle of "attackers".
    const parts = ['Reports describe how', ' the many clever attack', 'ers get in', ' through old', ' servers.'];
    t.upstream.faults.push({ kind: 'raw-stream', text: stream(parts) });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt'), META);
    expect(r.text).not.toContain('"error"');
    expect(chatText(sseEvents(r.text).slice(0, -1))).toBe(parts.join(''));
  });

  it('a text without word breaks is judged all the same, at twice the size', async () => {
    const g = await start();
    t.upstream.faults.push({ kind: 'raw-stream', text: stream(Array(6).fill('abcdefghij')) });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt'));
    expect(chatText(sseEvents(r.text).slice(0, -1))).toBe('abcdefghij'.repeat(6));
    expect(outputChecks().map((c) => c[0].length)).toEqual([40, 60]);
  });

  it('the word it waited for is still judged before any of it goes out', async () => {
    const g = await startRules();
    t.upstream.faults.push({ kind: 'raw-stream', text: stream(['Reports describe how', ' we attack', ' at dawn', ' and more']) });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt'));
    const events = sseEvents(r.text);
    expect(JSON.parse(events.at(-2)!.data).error.metadata.error_type).toBe('content_policy_violation');
    expect(chatText(events.slice(0, -2))).toBe('Reports describe how');
    expect(r.text).not.toContain('attack');
  });
});

describe('chat content as an array of text parts (some providers answer so)', () => {
  const parts = [{ type: 'text', text: 'plan the ' }, { type: 'text', text: 'attack at dawn' }];

  it('non-streaming: judged as its joined text, a flagged one is the 403', async () => {
    const g = await start();
    const body = { id: 'c4', object: 'chat.completion', created: 1, model: 'gpt', choices: [{ index: 0, message: { role: 'assistant', content: parts }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 } };
    t.upstream.faults.push({ kind: 'status', status: 200, body });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt', { stream: false }));
    expect(r.status).toBe(403);
    expect(r.json.error.metadata.error_type).toBe('content_policy_violation');
    expect(outputChecks()).toEqual([['plan the attack at dawn']]);
  });

  it('streamed: a delta whose content is an array of parts is judged before it goes out', async () => {
    const g = await start();
    const chunk = (delta: unknown, finish: string | null = null) => `data: ${JSON.stringify({ id: 'c5', object: 'chat.completion.chunk', created: 1, model: 'gpt', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    t.upstream.faults.push({ kind: 'raw-stream', text: [chunk({ role: 'assistant', content: parts }), chunk({}, 'stop'), 'data: [DONE]\n\n'].join('') });
    const r = await post(`${g.url}/chat/completions`, g.key, chat('fake/gpt'));
    const events = sseEvents(r.text);
    expect(JSON.parse(events.at(-2)!.data).error.metadata.error_type).toBe('content_policy_violation');
    expect(r.text).not.toContain('attack');
  });
});

describe('engine failure during output checks', () => {
  it('on_error allow: the stream goes on to its end and the failure is recorded', async () => {
    const g = await start(', moderate_output: true, output_check_chars: 20, on_error: allow');
    mod.behaviour = { status: 500, after: 1 };
    const r = await post(`${g.url}/chat/completions`, g.key, chat('out/early'));
    const events = sseEvents(r.text);
    expect(chatText(events.slice(0, -1))).toBe(EARLY);
    expect(r.text).not.toContain('"error"');
    expect(outputChecks().length).toBeGreaterThan(1);
    expect(g.logs.some((l) => l.includes('moderation engine failed') && l.includes('"target":"output"'))).toBe(true);
  });

  it('on_error deny: the stream is cut at the first failed check with an in-band permission_denied', async () => {
    const g = await start(', moderate_output: true, output_check_chars: 20, on_error: deny');
    mod.behaviour = { status: 500, after: 1 };
    const r = await post(`${g.url}/messages`, g.key, messages('out/clean'));
    const events = sseEvents(r.text);
    expect(events.at(-2)!.event).toBe('error');
    const err = JSON.parse(events.at(-2)!.data).error;
    expect(err).toMatchObject({ type: 'permission_error', error_type: 'permission_denied' });
    expect(err.message).toBe('Answer blocked: moderation engine "m" failed: answered 500 and it is set to deny on error');
    expect(messagesText(events)).toBe('');
    expect(outputChecks()).toHaveLength(1);
  });
});

describe('a client that leaves during an output check', () => {
  it('ends the request cancelled (on_error deny): no in-band block, no engine failure logged or recorded', async () => {
    const g = await start(', moderate_output: true, output_check_chars: 20, on_error: deny', 5000);
    mod.behaviour = { hang: true, after: 1 };
    const client = new AbortController();
    const res = await fetch(`${g.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${g.key}` },
      body: JSON.stringify(chat('out/clean')),
      signal: client.signal,
    });
    const id = res.headers.get('x-request-id')!;
    while (mod.received.length < 2) await new Promise((r) => setTimeout(r, 5));
    client.abort();
    expect(await ledgerRowSoon(g, id)).toMatchObject({ status: 'cancelled' });
    expect(g.logs.some((l) => l.includes('moderation engine failed'))).toBe(false);
    const line = JSON.parse(g.logs.find((l) => l.includes('"msg":"request"'))!);
    expect(line).toMatchObject({ outcome: 'cancelled', error_type: 'cancelled' });
  });
});

describe('non-streaming answers', () => {
  it('a flagged answer becomes a 403 content_policy_violation, billed as failed, with the record when opted in', async () => {
    const g = await start();
    const r = await post(`${g.url}/chat/completions`, g.key, chat('out/late', { stream: false }), META);
    expect(r.status).toBe(403);
    expect(r.json.error).toEqual({ code: 403, message: MESSAGE, metadata: { reasons: ['violence'], provider_name: 'm', model_slug: 'omni-moderation-latest', error_type: 'content_policy_violation' } });
    expect(r.json.gateway_metadata.pipeline.at(-1)).toEqual({
      type: 'moderation',
      name: 'm',
      summary: 'answer blocked: violence',
      data: { target: 'output', action: 'block', flagged: true, reasons: ['violence'], checks: 1, checked_chars: LATE.length, provider_name: 'm', model_slug: 'omni-moderation-latest' },
    });
  });

  it('messages: a flagged answer is a 403 with the messages envelope; a clean one is untouched', async () => {
    const g = await start();
    const bad = await post(`${g.url}/messages`, g.key, messages('out/early', { stream: false }));
    expect(bad.status).toBe(403);
    expect(bad.json.error).toEqual({ type: 'invalid_request_error', message: MESSAGE, error_type: 'content_policy_violation' });
    const row = await g.ledgerRow(bad.json.request_id);
    expect(row).toMatchObject({ status: 'failed' });
    expect(row!.completionTokens).toBeGreaterThan(0);
    const ok = await post(`${g.url}/messages`, g.key, messages('out/clean', { stream: false }));
    expect(ok.status).toBe(200);
    expect(ok.json.content[0].text).toBe(CLEAN);
  });
});
