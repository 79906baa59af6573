import ajvEqual from 'ajv/dist/runtime/equal';
import { describe, expect, it } from 'vitest';
import { answerText, requestedJson, setAnswerText } from '../../src/healing/answer';
import { healJson, type Repair } from '../../src/healing/repair';
import { ajvPool, createSchemaCheck } from '../../src/healing/schema-check';

/** [broken text, the value it must heal to, repairs that must be named] */
const CORPUS: [string, unknown, Repair[]][] = [
  ['```json\n{"a": 1}\n```', { a: 1 }, ['code_fence']],
  ['```\n[1, 2, 3]\n```', [1, 2, 3], ['code_fence']],
  ['Here is the JSON you asked for:\n{"name": "Ada", "age": 36}\nLet me know if you need more.', { name: 'Ada', age: 36 }, ['surrounding_text']],
  ['{"a": 1, "b": 2,}', { a: 1, b: 2 }, ['trailing_comma']],
  ['[1, 2, 3,]', [1, 2, 3], ['trailing_comma']],
  ['{"items": [{"x": 1,}, {"x": 2},],}', { items: [{ x: 1 }, { x: 2 }] }, ['trailing_comma']],
  ["{'name': 'Ada', 'tags': ['a', 'b']}", { name: 'Ada', tags: ['a', 'b'] }, ['single_quotes']],
  ["{'quote': 'she said \"hi\"', 'it': 'it\\'s'}", { quote: 'she said "hi"', it: "it's" }, ['single_quotes']],
  ['{name: "Ada", age: 36, is_admin: false}', { name: 'Ada', age: 36, is_admin: false }, ['unquoted_keys']],
  ['{"ok": True, "missing": None, "bad": False}', { ok: true, missing: null, bad: false }, ['python_literals']],
  ['{"a": 1, // the first\n "b": 2 /* the second */}', { a: 1, b: 2 }, ['comments']],
  ['{\n  # a hash comment\n  "a": 1\n}', { a: 1 }, ['comments']],
  ['{"name": "Ada", "bio": "Mathematician and wri', { name: 'Ada', bio: 'Mathematician and wri' }, ['truncated']],
  ['{"list": [1, 2, 3', { list: [1, 2] }, ['truncated']], // the 3 may have been 30: dropped
  ['{"list": [1, 2, 3 ', { list: [1, 2, 3] }, ['truncated']],
  ['{"a": {"b": {"c": [true, fal', { a: { b: { c: [true] } } }, ['truncated']],
  ['{"a": 1, "b":', { a: 1 }, ['truncated']],
  ['{"a": 1, "b', { a: 1 }, ['truncated']],
  ['[{"id": 1}, {"id": 2}, {"id"', [{ id: 1 }, { id: 2 }, {}], ['truncated']],
  ['{"a": 1 "b": 2}', { a: 1, b: 2 }, ['missing_comma']],
  ['{"text": "line one\nline two\ttab"}', { text: 'line one\nline two\ttab' }, ['control_characters']],
  ['{"n": .5, "m": +3, "k": 1.}', { n: 0.5, m: 3, k: 1 }, ['number_format']],
  ['{"path": "C:\\qux"}', { path: 'C:\\qux' }, ['invalid_escapes']],
  ['True', true, ['python_literals']],
  [
    "Sure! Here you go:\n```json\n{\n  // user record\n  name: 'Ada',\n  'langs': ['en', 'fr',],\n  active: True,\n  \"notes\": \"first programm",
    { name: 'Ada', langs: ['en', 'fr'], active: true, notes: 'first programm' },
    ['code_fence', 'comments', 'unquoted_keys', 'single_quotes', 'trailing_comma', 'python_literals', 'truncated'],
  ],
  ['{"url": \'http://example.com/a#b\', flag: True,}', { url: 'http://example.com/a#b', flag: true }, ['single_quotes', 'unquoted_keys', 'python_literals', 'trailing_comma']],
  ['{"big": 12345678901234567890123}', undefined, []], // valid already: checked below for verbatim text
];

describe('healJson: the broken-JSON corpus', () => {
  it.each(CORPUS.filter((c) => c[1] !== undefined).map((c, i) => [i, ...c] as const))('#%i heals %j', (_i, text, value, repairs) => {
    const r = healJson(text);
    expect(r.status, JSON.stringify(r)).toBe('repaired');
    if (r.status !== 'repaired') return;
    expect(r.value).toEqual(value);
    expect(JSON.parse(r.text)).toEqual(value);
    expect(r.repairs).toEqual(expect.arrayContaining(repairs));
  });

  it('has at least 20 broken inputs', () => {
    expect(CORPUS.filter((c) => c[1] !== undefined).length).toBeGreaterThanOrEqual(20);
  });

  it('leaves valid JSON exactly as it was (number precision, spacing)', () => {
    for (const text of ['{"big": 12345678901234567890123}', '{ "a" : [1, 2] }', '"just a string"', '42', '{"x": "// not a comment, True, \'q\'"}']) {
      const r = healJson(text);
      expect(r.status).toBe('valid');
      expect(r.status === 'valid' && r.text).toBe(text);
    }
  });

  it('keeps big numbers and key order verbatim while repairing', () => {
    const r = healJson('{"z": 12345678901234567890123, "1": "one", "a": 2,}');
    expect(r.status === 'repaired' && r.text).toBe('{"z":12345678901234567890123,"1":"one","a":2}');
  });

  it('does not rewrite string contents that look like repairs', () => {
    const r = healJson("{'code': 'if x: return None  # True, // not a comment', 'n': 'a,}'}");
    expect(r.status === 'repaired' && r.value).toEqual({ code: 'if x: return None  # True, // not a comment', n: 'a,}' });
  });
});

describe('healJson: a cut-off value is dropped, never completed; numbers keep their digits', () => {
  const healed = (text: string) => {
    const r = healJson(text);
    expect(r.status, JSON.stringify(r)).toBe('repaired');
    return r.status === 'repaired' ? { text: r.text, repairs: r.repairs } : undefined;
  };

  it('drops a number that runs to the end of a cut-off text (12 was presented as the value where 1234 was being written)', () => {
    expect(healed('{"a": 1, "b": 12')).toEqual({ text: '{"a":1}', repairs: ['truncated'] });
    expect(healed('[1, 2, 3')?.text).toBe('[1,2]');
    for (const cut of ['-', '1.', '1e', '1e-', '1e5', '.5', '+3']) expect(healed(`{"a": 1, "b": ${cut}`)?.text, cut).toBe('{"a":1}');
    // A number that ended before the cut is whole; so is one that is the whole text.
    expect(healed('{"a": 1, "b": 12 ')?.text).toBe('{"a":1,"b":12}');
    expect(healed('{"a": [12]')?.text).toBe('{"a":[12]}');
    expect(healJson('12')).toMatchObject({ status: 'valid', value: 12 });
  });

  it('drops a literal cut off at the end instead of completing it', () => {
    expect(healed('{"a": 1, "b": tr')?.text).toBe('{"a":1}');
    expect(healed('{"b": n')?.text).toBe('{}');
    expect(healed('[True, Fal')?.text).toBe('[true]');
    // Whole literals at the end are kept.
    expect(healed('{"a": true')?.text).toBe('{"a":true}');
    expect(healed('{"a": None')?.text).toBe('{"a":null}');
  });

  it('a string cut inside an escape or between the halves of an emoji ends before it (a cut "\\u12" had become the text "\\u12")', () => {
    expect(healed('{"a": "x\\u12')).toEqual({ text: '{"a":"x"}', repairs: ['truncated'] });
    expect(healed('{"a": "x\\u')?.text).toBe('{"a":"x"}');
    // The first half of a pair whose second half was cut off, escaped or raw, is no character: strict parsers refuse it.
    expect(healed('{"a": "x\\ud83d')?.text).toBe('{"a":"x"}');
    expect(healed('{"a": "x\\ud83d\\ude')?.text).toBe('{"a":"x"}');
    expect(healed('{"a": "x\ud83d')?.text).toBe('{"a":"x"}');
    // Whole characters and escaped backslashes stay.
    expect(healed('{"a": "x\\u00e9')?.text).toBe('{"a":"x\\u00e9"}');
    expect(healed('{"a": "x\\ud83d\\ude00')?.text).toBe('{"a":"x\\ud83d\\ude00"}');
    expect(healed('{"a": "x\\\\ud83d')?.text).toBe('{"a":"x\\\\ud83d"}');
    expect(healed('{"a": "x\\uZZ"}')).toEqual({ text: '{"a":"x\\\\uZZ"}', repairs: ['invalid_escapes'] });
  });

  it('a cut-off member no longer passes a schema that requires it', () => {
    const r = healJson('{"name": "Ada", "age": 3');
    expect(r.status === 'repaired' && r.value).toEqual({ name: 'Ada' });
    const schema = { type: 'object', required: ['name', 'age'], properties: { age: { type: 'integer' } } };
    expect(createSchemaCheck(2)(schema, r.status === 'repaired' ? r.value : undefined)).toMatchObject({ valid: false });
  });

  it('copies the digits of a loosely written number as written, never through a double', () => {
    expect(healed('{"n": +12345678901234567890}')).toEqual({ text: '{"n":12345678901234567890}', repairs: ['number_format'] });
    expect(healed('{"a": +0.10, "b": -.5e-3, "c": 007, "d": 1.E+05, "e": -00, "f": 1.}')?.text).toBe('{"a":0.10,"b":-0.5e-3,"c":7,"d":1E+05,"e":-0,"f":1}');
    const long = `1${'0'.repeat(600)}`;
    expect(healed(`{"n": +${long}}`)?.text).toBe(`{"n":${long}}`);
    expect(healJson('{"a": 1e, "b": 2}').status).toBe('unrepairable');
  });
});

describe('healJson: what must not be "healed" into something else', () => {
  const REFUSED: [string, string | undefined][] = [
    ['I am sorry, I cannot help with that.', undefined],
    ['', undefined],
    ['   ', undefined],
    ['{"a": undefined}', undefined],
    ['{"a": NaN}', undefined],
    ['{"a" 1}', undefined],
    ['{"a": 1}}', undefined],
    ['[1, 2}', undefined],
    ['I think {this is fine} overall', undefined],
    ['42 apples', undefined],
    ['The answer is [citation needed].', undefined],
  ];
  it.each(REFUSED)('refuses %j', (text) => {
    const r = healJson(text);
    expect(r.status, JSON.stringify(r)).toBe('unrepairable');
  });

  it('with an object expected, does not take a bracketed aside from prose', () => {
    expect(healJson('See [1] for details.', { expect: 'object' }).status).toBe('unrepairable');
    const r = healJson('See [1] for details: {"a": 1}', { expect: 'object' });
    expect(r.status === 'repaired' && r.value).toEqual({ a: 1 });
  });

  it('names why it refused', () => {
    const r = healJson('{"a" 1}');
    expect(r.status === 'unrepairable' && r.reason).toMatch(/expected ":"/);
  });
});

describe('healJson: finding the value among fences and prose', () => {
  const healed = (text: string, expect: 'object' | 'any' = 'object') => {
    const r = healJson(text, { expect });
    return r.status === 'repaired' ? r.value : r;
  };

  it('reads past a code fence inside a JSON string (the first ``` block was taken and nothing else tried)', () => {
    expect(healed('Result: {"code": "```js\\nfoo()\\n```", "a": 1,}')).toEqual({ code: '```js\nfoo()\n```', a: 1 });
    expect(healed('Result: {"code": "```js\nfoo()\n```", "a": 1,}')).toEqual({ code: '```js\nfoo()\n```', a: 1 });
    // Inside a ```json block too: the block ends at the inner fence, which would cut the string short.
    expect(healed('```json\n{"code": "```js\nfoo()\n```",}\n```')).toEqual({ code: '```js\nfoo()\n```' });
  });

  it('prefers the ```json block to a fenced block of another language before it', () => {
    expect(healed('Run this:\n```python\nprint({"x": 1})\n```\nAnswer:\n```json\n{"a": 1,}\n```')).toEqual({ a: 1 });
    expect(healed('```python\nprint(1)\n```\n```json\n{"a": 1,}\n```', 'any')).toEqual({ a: 1 });
    expect(healed('```sh\nls {dir}\n```\nthen:\n```\n{"a": 1,}\n```')).toEqual({ a: 1 });
  });

  it('tries the next { when prose before the value holds {word}', () => {
    expect(healed('Fill in {name} like this: {"name": "Ada",}')).toEqual({ name: 'Ada' });
    expect(healed('See [citation needed] and {"a": 1,}', 'any')).toEqual({ a: 1 });
  });

  it('never takes a fragment from inside a broken value, nor a value after an unbalanced closer', () => {
    for (const text of ['{"user": {"name": "Ada"}, "age" 36}', '{"a": 1, "x" 5, "z": {"y": 1}', '{"a": 1}} {"b": 2}', '[1, {"a": 2}} {"b": 3}']) {
      expect(healJson(text, { expect: 'object' }).status, text).toBe('unrepairable');
    }
  });

  it('a cut-off answer in an open ```json block is still read from the block', () => {
    expect(healed('Example: {"x": 1}\n```json\n{"a": 1, "b": "tex')).toEqual({ a: 1, b: 'tex' });
  });

  it('answers on a max_bytes text (1 MiB) full of starts that do not parse, giving up after its 64 starts and 32 blocks', () => {
    // (No clock is read: npm test holds no timing assertions. Unbounded work would run into the test's own timeout.)
    const texts = ['{x} '.repeat(262_000) + '{"a": 1,}', 'x {'.repeat(350_000) + '{"a": 1,}', '```'.repeat(350_000), `\`\`\`json\n{"a": "${'x'.repeat(1 << 20)}\n\`\`\``];
    const statuses = texts.map((t) => healJson(t, { expect: 'object' }).status);
    expect(statuses).toEqual(['unrepairable', 'unrepairable', 'unrepairable', 'repaired']);
  });
});

describe('schema check', () => {
  const check = createSchemaCheck(2);
  const schema = { type: 'object', required: ['name'], properties: { name: { type: 'string' }, age: { type: 'integer' } }, additionalProperties: false };

  it('passes a matching value and lists violations with paths', () => {
    expect(check(schema, { name: 'Ada' })).toEqual({ valid: true });
    const v = check(schema, { age: 'x', extra: 1 });
    expect(v.valid).toBe(false);
    if (v.valid !== false) return;
    expect(v.errors.map((e) => e.path)).toEqual(expect.arrayContaining(['/', '/age']));
  });

  it('accepts client keywords ajv does not know, $id reuse, and draft 2020-12', () => {
    const withId = { $id: 'https://example.com/s', type: 'object', strict: true, 'x-vendor': 1 };
    expect(check(withId, {})).toEqual({ valid: true });
    expect(check({ ...withId, required: ['a'] }, {}).valid).toBe(false);
    const s2020 = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array', prefixItems: [{ type: 'string' }] };
    expect(check(s2020, ['a']).valid).toBe(true);
    expect(check(s2020, [1]).valid).toBe(false);
  });

  it('reports a schema that cannot compile instead of throwing', () => {
    const v = check({ type: 'no-such-type' }, {});
    expect(v.valid).toBeNull();
  });

  it('leaves an answer nested too deep for a recursive schema unchecked, instead of throwing (was a 500)', () => {
    const deep = JSON.parse('['.repeat(20000) + ']'.repeat(20000));
    expect(check({ type: 'array', items: { $ref: '#' } }, deep)).toEqual({ valid: 'not_checked', reason: expect.stringMatching(/nested too deeply/) });
    expect(check({ type: 'array', items: { $ref: '#' } }, [[[]]])).toEqual({ valid: true });
  });

  it('compiles with a fresh Ajv instance every max(size, 64) schemas (an instance keeps every schema it compiled)', () => {
    let made = 0;
    const next = ajvPool(() => ({ n: ++made }) as never, 100);
    const used = Array.from({ length: 250 }, () => (next() as unknown as { n: number }).n);
    expect(made).toBe(3);
    expect(used.filter((n) => n === 1)).toHaveLength(100);
    expect(used.filter((n) => n === 2)).toHaveLength(100);
    expect(used.filter((n) => n === 3)).toHaveLength(50);
  });
});

describe('answer text in both dialects', () => {
  it('finds the requested format', () => {
    expect(requestedJson('chat_completions', { response_format: { type: 'json_object' } })).toEqual({ format: 'json_object' });
    expect(requestedJson('chat_completions', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } } })).toEqual({ format: 'json_schema', schema: { type: 'object' } });
    expect(requestedJson('chat_completions', { response_format: { type: 'text' } })).toBeNull();
    expect(requestedJson('messages', { output_config: { format: { type: 'json_schema', schema: { type: 'object' } } } })).toEqual({ format: 'json_schema', schema: { type: 'object' } });
    expect(requestedJson('messages', { output_config: { effort: 'high' } })).toBeNull();
  });

  it('reads and writes messages text blocks, keeping other blocks', () => {
    const body = { content: [{ type: 'thinking', thinking: 'hm' }, { type: 'text', text: '{"a": ' }, { type: 'text', text: '1,}' }] };
    expect(answerText('messages', body)).toBe('{"a": 1,}');
    setAnswerText('messages', body, '{"a":1}');
    expect(body.content).toEqual([{ type: 'thinking', thinking: 'hm' }, { type: 'text', text: '{"a":1}' }]);
  });

  it('reads chat content and skips tool calls', () => {
    expect(answerText('chat_completions', { choices: [{ message: { content: 'x' } }] })).toBe('x');
    expect(answerText('chat_completions', { choices: [{ message: { content: null, tool_calls: [] } }] })).toBeNull();
  });
});

describe('schema checks on a client schema stay bounded', () => {
  it('a pattern that backtracks exponentially is matched in linear time (30 characters took 4.6 s, each one more doubled it)', () => {
    const check = createSchemaCheck(10);
    const schema = { type: 'object', properties: { a: { type: 'string', pattern: '^(a+)+$' } } };
    expect(check(schema, { a: `${'a'.repeat(60)}!` })).toMatchObject({ valid: false, errors: [{ path: '/a' }] });
    expect(check(schema, { a: 'a'.repeat(60) })).toEqual({ valid: true });
  });

  it('a pattern that needs Unicode mode is not enforced; the rest of the schema still is', () => {
    const check = createSchemaCheck(10);
    const schema = { type: 'object', required: ['n'], properties: { a: { type: 'string', pattern: '^\\p{L}+$' }, n: { type: 'number' } } };
    expect(check(schema, { a: '123', n: 1 })).toEqual({ valid: true });
    expect(check(schema, { a: '123' })).toMatchObject({ valid: false });
  });

  it('uniqueItems is linear in the array (pairwise before: 20 000 objects took 7.4 s, 100 000 minutes); duplicates still found', () => {
    const check = createSchemaCheck(10);
    const schema = { type: 'array', uniqueItems: true, items: { type: 'object' } };
    const many = Array.from({ length: 100_000 }, (_, i) => ({ id: i, tags: ['x'] }));
    expect(check(schema, many)).toEqual({ valid: true });
    many.push({ tags: ['x'], id: 99_999 });
    expect(check(schema, many)).toEqual({ valid: false, errors: [{ path: '/', message: 'must NOT have duplicate items (items ## 99999 and 100000 are identical)' }] });
  });

  it('uniqueItems keeps JSON Schema equality: member order ignored, numbers by value, types and item order kept', () => {
    const check = createSchemaCheck(10);
    const unique = (items: string) => check({ uniqueItems: true }, JSON.parse(items)).valid;
    expect(unique('[{"a": 1, "b": [1, {"c": null}]}, {"b": [1, {"c": null}], "a": 1}]')).toBe(false);
    expect(unique('[1, 1.0]')).toBe(false);
    expect(unique('[0, -0]')).toBe(false);
    expect(unique('[1e2, 100]')).toBe(false);
    expect(unique('[[1, 2], [2, 1]]')).toBe(true);
    expect(unique('[1, "1", true, "true", null, "null", [], {}, [[]], [{}], {"a": []}, {"a": {}}, {"a": null}, {"b": null}]')).toBe(true);
    expect(unique('[{"a": 1}, {"a": 1, "b": 2}]')).toBe(true);
    expect(unique('["a", "a"]')).toBe(false);
    expect(check({ uniqueItems: false }, [1, 1])).toEqual({ valid: true });
    // Nested arrays are checked where they stand (the path is theirs), in both dialects.
    const nested = { type: 'object', properties: { tags: { type: 'array', uniqueItems: true } } };
    expect(check(nested, { tags: [{ k: 1 }, { k: 1 }] })).toEqual({ valid: false, errors: [{ path: '/tags', message: 'must NOT have duplicate items (items ## 0 and 1 are identical)' }] });
    expect(check({ ...nested, $schema: 'https://json-schema.org/draft/2020-12/schema' }, { tags: ['a', 'b', 'a'] }).valid).toBe(false);
    expect(check({ type: 'array', items: { type: 'array', uniqueItems: true } }, [[1, 2], [3, 3]])).toMatchObject({ valid: false, errors: [{ path: '/1' }] });
    // Items nested 20 000 deep are compared without recursion (ajv's deep-equal overflowed the stack).
    const deep = () => JSON.parse(`${'['.repeat(20_000)}${']'.repeat(20_000)}`);
    expect(check({ uniqueItems: true }, [deep(), [deep()]])).toEqual({ valid: true });
    expect(check({ uniqueItems: true }, [deep(), deep()]).valid).toBe(false);
  });

  it('uniqueItems agrees with the pairwise deep-equal it replaced on 3 000 random arrays', () => {
    const check = createSchemaCheck(10);
    // ajv's own deep-equal (fast-deep-equal), typed by ajv as a namespace.
    const equal = ajvEqual as unknown as (a: unknown, b: unknown) => boolean;
    let seed = 7;
    const rand = (n: number) => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    const scalars = [0, -0, 1, 1.5, '1', 'a', '', true, false, null];
    const value = (depth: number): unknown => {
      const pick = depth > 1 ? 0 : rand(4);
      if (pick === 1) return Array.from({ length: rand(3) }, () => value(depth + 1));
      if (pick === 2) return Object.fromEntries(['b', 'a', 'c'].filter(() => rand(3)).map((k) => [k, value(depth + 1)]));
      return scalars[rand(scalars.length)];
    };
    // An earlier item again with every object's members in reverse order: equal, though not as text.
    const reversed = (v: unknown): unknown =>
      Array.isArray(v) ? v.map(reversed) : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, reversed(x)])) : v;
    let duplicates = 0;
    let reordered = 0; // arrays with two items equal though not as JSON text
    for (let n = 0; n < 3000; n++) {
      const items = JSON.parse(JSON.stringify(Array.from({ length: 2 + rand(4) }, () => value(0)).map((v, k, all) => (k > 0 && rand(3) === 0 ? reversed(all[rand(k)]) : v)))) as unknown[];
      const pairwise = items.some((a, i) => items.some((b, j) => j > i && equal(a, b)));
      duplicates += pairwise ? 1 : 0;
      reordered += items.some((a, i) => items.some((b, j) => j > i && equal(a, b) && JSON.stringify(a) !== JSON.stringify(b))) ? 1 : 0;
      expect(check({ uniqueItems: true }, items).valid, JSON.stringify(items)).toBe(!pairwise);
    }
    expect(duplicates).toBeGreaterThan(300);
    expect(duplicates).toBeLessThan(2700);
    expect(reordered).toBeGreaterThan(30);
  });

  it('a schema over 32 KB is not compiled: the answer is left unchecked (10 000 properties took 5.4 s to compile)', () => {
    const check = createSchemaCheck(10);
    const properties = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`p${i}`, { type: 'string' }]));
    expect(check({ type: 'object', properties }, {})).toEqual({ valid: 'not_checked', reason: 'the schema is over 32 KB' });
  });
});
