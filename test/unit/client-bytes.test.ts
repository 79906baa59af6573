import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ClientBytes, REUSED_MIN_BYTES, topLevelMembers } from '../../src/routes/client-bytes';

const long = (n: number) => 'x'.repeat(n);
const bytesOf = (text: string) => Buffer.from(text, 'utf8');
/** The JSON text of each member as `topLevelMembers` found it. */
const slices = (text: string) => {
  const raw = bytesOf(text);
  const members = topLevelMembers(raw);
  return members && Object.fromEntries([...members].map(([k, [s, e]]) => [k, raw.toString('utf8', s, e)]));
};

describe('topLevelMembers', () => {
  it('finds each member value, whatever the whitespace, strings holding brackets, quotes and backslashes', () => {
    const text = ' \n{ "a" : [1, {"b": "]}\\"\\\\"}] ,\t"s":"q\\"}" , "n":-1.5e3,"t":true , "z" : null , "o":{}}\r\n';
    expect(slices(text)).toEqual({ a: '[1, {"b": "]}\\"\\\\"}]', s: '"q\\"}"', n: '-1.5e3', t: 'true', z: 'null', o: '{}' });
    expect(slices('{}')).toEqual({});
  });

  it('reads escaped keys, takes the last of duplicate keys (as JSON.parse does), counts bytes not characters', () => {
    expect(slices('{"m\\u0065ssages": [1], "é": "ü", "k": 1, "k": [2]}')).toEqual({ messages: '[1]', é: '"ü"', k: '[2]' });
    const members = topLevelMembers(bytesOf('{"é":[1]}'))!;
    expect(members.get('é')).toEqual([6, 9]); // the key takes 2 bytes
  });

  it('is null for anything but one JSON object (a byte-order mark, an array, a cut text)', () => {
    expect(topLevelMembers(bytesOf('\uFEFF{"a":1}'))).toBeNull();
    expect(topLevelMembers(bytesOf('[1]'))).toBeNull();
    expect(topLevelMembers(bytesOf('{"a":[1'))).toBeNull();
    expect(topLevelMembers(bytesOf('{"a":"x'))).toBeNull();
  });
});

describe('ClientBytes.encode', () => {
  const text = `{\n  "model" : "gateway/model",\n  "messages": [ {"role":"user", "content": "caf\\u00e9 ${long(REUSED_MIN_BYTES)}"} ],\n  "plugins": [],\n  "temperature": 0.50\n}`;
  const parsed = JSON.parse(text) as Record<string, any>;
  const bytes = new ClientBytes(bytesOf(text), parsed);
  const messagesText = text.slice(text.indexOf('[ {'), text.indexOf('} ]') + 3);

  it('sends a value that is the very object parsed as the client spelled it; replaced and new fields serialized', () => {
    const out = bytes.encode({ model: 'upstream-model', messages: parsed.messages, temperature: parsed.temperature, stream_options: { include_usage: true } });
    expect(Buffer.isBuffer(out)).toBe(true);
    const sent = out.toString();
    expect(sent).toBe(`{"model":"upstream-model","messages":${messagesText},"temperature":0.5,"stream_options":{"include_usage":true}}`);
    expect(JSON.parse(sent)).toEqual({ model: 'upstream-model', messages: parsed.messages, temperature: 0.5, stream_options: { include_usage: true } });
  });

  it('serializes a value that is not the parsed object (a copy, an edit) and leaves out undefined ones', () => {
    const copy = structuredClone(parsed.messages);
    const sent = bytes.encode({ model: 'm', messages: copy, gone: undefined });
    expect(sent).toBe(JSON.stringify({ model: 'm', messages: copy }));
  });

  it('a new value put in a field of the parsed object itself is serialized (compared with the values as parsed)', () => {
    const own = JSON.parse(text) as Record<string, any>;
    const b = new ClientBytes(bytesOf(text), own);
    const original = own.messages;
    own.messages = own.messages.slice(-1).concat([{ role: 'user', content: 'added' }]); // a stage keeping the body may do this
    expect(JSON.parse(b.encode(own).toString()).messages).toEqual([...original, { role: 'user', content: 'added' }]);
    own.plugins = original; // another field now holding the parsed messages: not the bytes of `plugins`
    expect(JSON.parse(b.encode(own).toString()).plugins).toEqual(original);
  });

  it('keeps a number JSON.parse cannot hold as the client wrote it (JSON.stringify would send null)', () => {
    const t = `{"tools":[{"maximum":1e400,"d":"${long(REUSED_MIN_BYTES)}"}]}`;
    const p = JSON.parse(t) as Record<string, unknown>;
    expect(new ClientBytes(bytesOf(t), p).encode({ model: 'm', tools: p.tools }).toString()).toContain('"maximum":1e400');
  });

  it('is plain JSON.stringify when nothing big is reused', () => {
    const small = JSON.parse('{"messages":[{"role":"user","content":"hi"}]}');
    const b = new ClientBytes(bytesOf(JSON.stringify(small)), small);
    expect(b.encode({ ...small, model: 'm' })).toBe(JSON.stringify({ ...small, model: 'm' }));
    expect(bytes.encode({ model: 'm', plugins: parsed.plugins })).toBe('{"model":"m","plugins":[]}');
  });

  it('always yields the JSON value of the body: random objects, spelled with random whitespace, partly replaced', () => {
    const json = fc.jsonValue({ maxDepth: 3 });
    fc.assert(
      fc.property(fc.dictionary(fc.string({ maxLength: 6 }), json, { maxKeys: 6 }), fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }), fc.string(), (obj, keep, ws) => {
        const spaced = ws.replace(/[^ \n\t\r]/g, ' ');
        const body = { ...obj, big: [long(REUSED_MIN_BYTES), obj] };
        const text = JSON.stringify(body, null, spaced.length % 5);
        const parsed = JSON.parse(text) as Record<string, unknown>;
        const upstream: Record<string, unknown> = { model: 'up' };
        Object.keys(parsed).forEach((k, i) => {
          if (keep[i % keep.length]) upstream[k] = parsed[k];
          else upstream[k] = structuredClone(parsed[k]);
        });
        const out = new ClientBytes(bytesOf(text), parsed).encode(upstream);
        expect(JSON.parse(out.toString())).toEqual(JSON.parse(JSON.stringify(upstream)));
      }),
      { numRuns: 300 },
    );
  });
});
