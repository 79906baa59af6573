import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { post, sseEvents, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';
import { startTelemetry } from '../../src/telemetry/otel';

/**
 * response-healing through the real server: simulated providers whose fixed `reply` is broken JSON (the
 * simulated provider joins the reply's words with single spaces, so replies are written on one line).
 */
const t = perTestGateways();

const BROKEN = "Sure! ```json {'name': 'Ada', age: 36, 'tags': ['math',], active: True,} ```";
const WRONG_TYPE = '{"name": 42, "age": 36,}';
const PROSE = 'I am sorry, I cannot produce that.';
const VALID = '{"name": "Ada", "age": 36}';
const CUT = '{"name": "Ada", "age": 3';

const SCHEMA = {
  type: 'object',
  required: ['name', 'age'],
  properties: { name: { type: 'string' }, age: { type: 'integer' }, tags: { type: 'array' }, active: { type: 'boolean' } },
};

function yaml(plugins = ''): string {
  const replies: Record<string, string> = { broken: BROKEN, wrongtype: WRONG_TYPE, prose: PROSE, valid: VALID, cut: CUT };
  let y = testConfigYaml(t.upstream.url, '[auth, validate, upstream, response-healing]');
  const providers = Object.entries(replies).map(([id, reply]) => `  - { id: sim-${id}, kind: simulated, reply: ${JSON.stringify(reply)} }\n`).join('');
  const models = Object.keys(replies).map((id) => `  - id: heal/${id}\n    endpoints: [{ provider: sim-${id}, upstream_model: s, pricing: { prompt: 1, completion: 1 } }]\n`).join('');
  y = y.replace('providers:\n', `providers:\n${providers}`).replace('models:\n', `models:\n${models}`);
  return plugins ? `${y}plugins:\n${plugins}\n` : y;
}

const META = { 'x-gateway-metadata': 'enabled' };

function chatBody(model: string, extra: Record<string, unknown> = {}) {
  return {
    model,
    messages: [{ role: 'user', content: 'Give me Ada as JSON' }],
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMA } },
    ...extra,
  };
}

function messagesBody(model: string, extra: Record<string, unknown> = {}) {
  return {
    model,
    max_tokens: 200,
    messages: [{ role: 'user', content: 'Give me Ada as JSON' }],
    output_config: { format: { type: 'json_schema', schema: SCHEMA } },
    ...extra,
  };
}

const healingRecord = (json: any) => json.gateway_metadata?.pipeline?.find((p: any) => p.type === 'response-healing');

describe('response-healing through the server', () => {
  it('chat: repairs a fenced, single-quoted, trailing-comma answer and records it with the schema verdict', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken'), META);
    expect(r.status).toBe(200);
    const content = r.json.choices[0].message.content;
    expect(JSON.parse(content)).toEqual({ name: 'Ada', age: 36, tags: ['math'], active: true });
    expect(healingRecord(r.json)).toMatchObject({
      type: 'response-healing',
      name: 'response-healing',
      data: { status: 'repaired', format: 'json_schema', schema_valid: true },
    });
    expect(healingRecord(r.json).data.repairs).toEqual(
      expect.arrayContaining(['code_fence', 'single_quotes', 'unquoted_keys', 'trailing_comma', 'python_literals']),
    );
    expect(healingRecord(r.json).summary).toMatch(/^repaired the JSON answer/);
  });

  it('chat n > 1: every choice is repaired and gets its own record naming the choice (only choice 0 had been)', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken', { n: 3 }), META);
    expect(r.status).toBe(200);
    expect(r.json.choices).toHaveLength(3);
    for (const choice of r.json.choices) {
      expect(JSON.parse(choice.message.content)).toEqual({ name: 'Ada', age: 36, tags: ['math'], active: true });
    }
    const records = r.json.gateway_metadata.pipeline.filter((p: any) => p.type === 'response-healing');
    expect(records.map((p: any) => p.data.choice)).toEqual([0, 1, 2]);
    for (const p of records) expect(p.data).toMatchObject({ status: 'repaired', schema_valid: true });
    const one = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken'), META);
    expect(healingRecord(one.json).data.choice).toBeUndefined();
  });

  it('messages: repairs the text block and records it', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/messages`, g.key, messagesBody('heal/broken'), META);
    expect(r.status).toBe(200);
    expect(r.json.content).toHaveLength(1);
    expect(JSON.parse(r.json.content[0].text)).toEqual({ name: 'Ada', age: 36, tags: ['math'], active: true });
    expect(healingRecord(r.json).data).toMatchObject({ status: 'repaired', schema_valid: true });
  });

  it('records a schema failure with its errors, in both dialects (the JSON is still repaired)', async () => {
    const g = await t.start({ yaml: yaml() });
    const chat = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/wrongtype'), META);
    expect(JSON.parse(chat.json.choices[0].message.content)).toEqual({ name: 42, age: 36 });
    expect(healingRecord(chat.json).data).toMatchObject({
      status: 'repaired',
      repairs: ['trailing_comma'],
      schema_valid: false,
      validation_errors: [{ path: '/name', message: 'must be string' }],
    });
    const msg = await post(`${g.url}/messages`, g.key, messagesBody('heal/wrongtype'), META);
    expect(healingRecord(msg.json).data).toMatchObject({ schema_valid: false, validation_errors: [{ path: '/name' }] });
  });

  it('drops a number cut off at the end of the answer, so the schema check sees the member missing (was {age: 3}, schema_valid: true)', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/cut'), META);
    expect(JSON.parse(r.json.choices[0].message.content)).toEqual({ name: 'Ada' });
    expect(healingRecord(r.json).data).toMatchObject({ status: 'repaired', repairs: ['truncated'], schema_valid: false, validation_errors: [{ path: '/' }] });
  });

  it('leaves an unrepairable answer as it was and says so', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/prose'), META);
    expect(r.json.choices[0].message.content).toBe(PROSE);
    expect(healingRecord(r.json).data).toMatchObject({ status: 'unrepairable', schema_valid: null, reason: 'no JSON value found in the text' });
    const m = await post(`${g.url}/messages`, g.key, messagesBody('heal/prose'), META);
    expect(m.json.content[0].text).toBe(PROSE);
    expect(healingRecord(m.json).data.status).toBe('unrepairable');
  });

  it('leaves valid JSON byte for byte and records the verdict; json_object is checked for an object', async () => {
    const g = await t.start({ yaml: yaml() });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/valid'), META);
    expect(r.json.choices[0].message.content).toBe(VALID);
    expect(healingRecord(r.json).data).toMatchObject({ status: 'valid', repairs: [], schema_valid: true });
    const obj = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken', { response_format: { type: 'json_object' } }), META);
    expect(healingRecord(obj.json).data).toMatchObject({ status: 'repaired', format: 'json_object', schema_valid: true });
  });

  it('does nothing when no JSON was asked for, or when the request opts out', async () => {
    const g = await t.start({ yaml: yaml() });
    const plain = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken', { response_format: undefined }), META);
    expect(plain.json.choices[0].message.content).toBe(BROKEN.split(/\s+/).join(' '));
    expect(plain.json.gateway_metadata.pipeline).toBeUndefined();
    const optOut = await post(`${g.url}/messages`, g.key, messagesBody('heal/broken', { plugins: [{ id: 'response-healing', enabled: false }] }), META);
    expect(optOut.json.content[0].text).toBe(BROKEN);
    expect(optOut.json.gateway_metadata.pipeline).toBeUndefined();
  });

  it('the text that goes with a tool call is left as it is, in both dialects (it had been cut down to the JSON in it)', async () => {
    const g = await t.start({ yaml: yaml() });
    const remark = "Checking {'city': 'Paris'} first";
    t.upstream.faults.push({
      kind: 'status',
      status: 200,
      body: {
        id: 'chatcmpl-x', object: 'chat.completion', created: 1, model: 'gpt-upstream',
        choices: [{ index: 0, message: { role: 'assistant', content: remark, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }] }, finish_reason: 'tool_calls' }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      },
    });
    const tools = [{ type: 'function', function: { name: 'weather', parameters: { type: 'object' } } }];
    const chat = await post(`${g.url}/chat/completions`, g.key, chatBody('fake/gpt', { tools }), META);
    expect(chat.status).toBe(200);
    expect(chat.json.choices[0].message.content).toBe(remark);
    expect(chat.json.choices[0].message.tool_calls).toHaveLength(1);
    expect(healingRecord(chat.json)).toBeUndefined();

    t.upstream.faults.push({
      kind: 'status',
      status: 200,
      body: {
        id: 'msg_x', type: 'message', role: 'assistant', model: 'claude-upstream', stop_reason: 'tool_use', stop_sequence: null,
        content: [{ type: 'text', text: remark }, { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } }],
        usage: { input_tokens: 10, output_tokens: 5 },
      },
    });
    const msg = await post(`${g.url}/messages`, g.key, messagesBody('fake/claude', { tools: [{ name: 'weather', input_schema: { type: 'object' } }] }), META);
    expect(msg.status).toBe(200);
    expect(msg.json.content.map((b: any) => b.type)).toEqual(['text', 'tool_use']);
    expect(msg.json.content[0].text).toBe(remark);
    expect(healingRecord(msg.json)).toBeUndefined();
  });

  it('enabled_by_default: false heals only requests that name the plugin', async () => {
    const g = await t.start({ yaml: yaml('  response-healing: { enabled_by_default: false }') });
    const unnamed = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken'));
    expect(unnamed.json.choices[0].message.content).toBe(BROKEN);
    const named = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken', { plugins: [{ id: 'response-healing' }] }));
    expect(JSON.parse(named.json.choices[0].message.content)).toMatchObject({ name: 'Ada' });
  });

  it('max_bytes: a longer answer is skipped and recorded', async () => {
    const g = await t.start({ yaml: yaml('  response-healing: { max_bytes: 10 }') });
    const r = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken'), META);
    expect(r.json.choices[0].message.content).toBe(BROKEN);
    expect(healingRecord(r.json).data).toEqual({ status: 'skipped', format: 'json_schema', repairs: [], schema_valid: null, reason: 'max_bytes' });
  });

  it('an unknown config field fails the start', async () => {
    await expect(t.start({ yaml: yaml('  response-healing: { max_byte: 10 }') })).rejects.toThrow(/response-healing/);
  });

  it('streams pass untouched in both dialects', async () => {
    const g = await t.start({ yaml: yaml() });
    const chat = await post(`${g.url}/chat/completions`, g.key, chatBody('heal/broken', { stream: true }), META);
    expect(chat.status).toBe(200);
    const chatText = sseEvents(chat.text)
      .filter((e) => e.data !== '[DONE]')
      .map((e) => JSON.parse(e.data).choices?.[0]?.delta?.content ?? '')
      .join('');
    expect(chatText).toBe(BROKEN);
    expect(chat.text).not.toContain('response-healing');
    const msg = await post(`${g.url}/messages`, g.key, messagesBody('heal/broken', { stream: true }), META);
    const msgText = sseEvents(msg.text)
      .filter((e) => e.data !== '[DONE]')
      .map((e) => JSON.parse(e.data))
      .filter((d) => d.type === 'content_block_delta')
      .map((d) => d.delta.text)
      .join('');
    expect(msgText).toBe(BROKEN);
    expect(msg.text).not.toContain('response-healing');
  });

  it('puts what it did on the request span', async () => {
    const exporter = new InMemorySpanExporter();
    const telemetry = startTelemetry({ exporter: 'none', service_name: 't', max_queue: 4096 }, [new SimpleSpanProcessor(exporter)]);
    try {
      const g = await t.start({ yaml: yaml(), tracer: telemetry.tracer });
      await post(`${g.url}/chat/completions`, g.key, chatBody('heal/wrongtype'));
      // The request span ends after the answer is written: waited for, not a fixed sleep (50 ms had been too short under load).
      const healed = () => exporter.getFinishedSpans().find((s) => s.attributes['gateway.healing.status'] !== undefined);
      await expect.poll(healed, { timeout: 5000 }).toBeDefined();
      const span = healed();
      expect(span?.attributes).toMatchObject({
        'gateway.healing.status': 'repaired',
        'gateway.healing.repairs': 'trailing_comma',
        'gateway.healing.schema_valid': false,
      });
    } finally {
      await telemetry.shutdown?.();
    }
  });
});
