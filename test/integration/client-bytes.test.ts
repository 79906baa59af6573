import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import type { StageDefinition } from '../../src/pipeline/types';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

/**
 * The client's own bytes for the parts of a request body no stage replaced (src/routes/client-bytes.ts): what
 * reaches the provider, through the default kind of pipeline and through one with a stage that edits the
 * body in place.
 */
let upstream: FakeUpstream;
let plain: TestGateway;
let editing: TestGateway;
let trimming: TestGateway;

/** A stage that keeps the body but puts a shorter message list in the body's own field. */
const trim: StageDefinition = {
  id: 'trim',
  configSchema: { type: 'object' },
  beforeUpstream: true,
  keepsBody: true,
  create: () => async (ctx, next) => {
    const body = ctx.state.gateway.body!;
    body.messages = (body.messages as unknown[]).slice(-1);
    await next();
  },
};

/** A stage that edits the last message where it is (a plugin without `keepsBody`). */
const shout: StageDefinition = {
  id: 'shout',
  configSchema: { type: 'object' },
  beforeUpstream: true,
  create: () => async (ctx, next) => {
    const messages = ctx.state.gateway.body?.messages as { content: unknown }[] | undefined;
    const last = messages?.at(-1);
    if (last && typeof last.content === 'string') last.content = last.content.toUpperCase();
    await next();
  },
};

beforeAll(async () => {
  upstream = await startFakeUpstream();
  plain = await startTestGateway({ yaml: testConfigYaml(upstream.url, '[auth, validate, rate-limit, upstream]') });
  editing = await startTestGateway({ yaml: testConfigYaml(upstream.url, '[auth, validate, shout, upstream]'), registry: new Map([...registry, ['shout', shout]]) });
  trimming = await startTestGateway({ yaml: testConfigYaml(upstream.url, '[auth, validate, trim, upstream]'), registry: new Map([...registry, ['trim', trim]]) });
});
afterAll(async () => {
  await plain.close();
  await editing.close();
  await trimming.close();
  await upstream.close();
});

const filler = 'lorem ipsum '.repeat(100);
/** A chat request as a client may spell it: spaces, `\u` escapes, a number written `0.50`. */
const messagesText = `[\n    { "role": "system", "content": "Caf\\u00e9 rules. ${filler}" },\n    { "role": "user", "content": "hello \\"there\\" ${filler}" }\n  ]`;
const chatText = (extra = '') => `{\n  "model": "fake/gpt",\n  "messages": ${messagesText},\n  "temperature": 0.50,\n  "user": "alice",\n  "provider": { "allow_fallbacks": true }${extra}\n}`;

describe('the client bytes of a request body go upstream as they came', () => {
  it('through stages that keep the body: the messages as spelled, the rest rewritten (model, user, gateway fields)', async () => {
    const res = await post(`${plain.url}/chat/completions`, plain.key, chatText());
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.raw).toContain(`"messages":${messagesText}`);
    expect(got.body.model).toBe('gpt-upstream');
    expect(got.body.user).toMatch(/^[0-9a-f]{64}$/);
    expect(got.body).not.toHaveProperty('provider');
    expect(got.body.temperature).toBe(0.5);
    expect(got.body.messages).toEqual(JSON.parse(messagesText));
  });

  it('a stream adds stream_options beside the reused messages; the last of duplicate keys is the one sent', async () => {
    const text = `{"messages": [{"role":"user","content":"stale"}], ${chatText(', "stream": true').slice(1)}`;
    const res = await post(`${plain.url}/chat/completions`, plain.key, text);
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.raw).toContain(`"messages":${messagesText}`);
    expect(got.raw).not.toContain('stale');
    expect(got.body.stream_options).toEqual({ include_usage: true });
  });

  it('a messages request whose unsigned thinking is dropped sends its new message list, not the bytes', async () => {
    const body = {
      model: 'fake/claude',
      max_tokens: 50,
      messages: [
        { role: 'user', content: `question ${filler}` },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'translated reasoning', signature: '' }, { type: 'text', text: `answer ${filler}` }] },
        { role: 'user', content: 'and then?' },
      ],
    };
    const res = await post(`${plain.url}/messages`, plain.key, JSON.stringify(body, null, 1));
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.raw).not.toContain('translated reasoning');
    expect(got.body.messages[1].content).toEqual([{ type: 'text', text: `answer ${filler}` }]);
  });

  it('a stage that keeps the body and puts a new value in its own field: the new value is what is sent', async () => {
    const res = await post(`${trimming.url}/chat/completions`, trimming.key, chatText());
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.raw).not.toContain(messagesText);
    expect(got.body.messages).toEqual([JSON.parse(messagesText)[1]]);
  });

  it('after a stage without keepsBody that edits a message in place, the edited body is what is sent', async () => {
    const res = await post(`${editing.url}/chat/completions`, editing.key, chatText());
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.raw).not.toContain(messagesText);
    expect(got.body.messages[1].content).toBe(`HELLO "THERE" ${filler.toUpperCase()}`);
    expect(got.body.messages[0].content).toBe(`Café rules. ${filler}`);
  });
});
