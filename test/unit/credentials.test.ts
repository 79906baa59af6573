import { describe, expect, it } from 'vitest';
import { credentialsIn, withoutCredentials } from '../../src/providers/credentials';
import { parseSse } from '../../src/providers/sse';
import { classifyUpstreamError } from '../../src/providers/upstream-errors';

/** Upstream answers that echo the credentials they were sent are scrubbed where they enter the gateway. */

describe('credentials of an upstream call', () => {
  it('takes every header but the protocol ones (and the key of a Bearer value), skips short values', () => {
    const found = credentialsIn({
      authorization: 'Bearer sk-live-0123456789',
      'x-api-key': 'sk-ant-abcdefghij',
      'api-key': 'azure-key-123456',
      // An operator's header under a name no pattern would know (an audit found one echoed to a client).
      'X-Custom-Auth': 'sk-live-HDRSECRET5',
      'Ocp-Apim-Subscription-Key': '0123456789abcdef',
      'anthropic-version': '2023-06-01',
      'content-type': 'application/json',
      'Accept-Encoding': 'identity',
      accept: 'text/event-stream',
      'x-token': 'short',
    });
    expect(found).toEqual([
      'Bearer sk-live-0123456789',
      'sk-live-0123456789',
      'sk-ant-abcdefghij',
      'azure-key-123456',
      'sk-live-HDRSECRET5',
      '0123456789abcdef',
    ]);
  });

  it('replaces every occurrence, leaving the rest of the text', () => {
    const creds = credentialsIn({ authorization: 'Bearer sk-live-0123456789' });
    const text = JSON.stringify({ error: { message: 'Incorrect API key provided: Bearer sk-live-0123456789', param: 'sk-live-0123456789' } });
    expect(withoutCredentials(text, creds)).toBe(JSON.stringify({ error: { message: 'Incorrect API key provided: [redacted]', param: '[redacted]' } }));
    expect(withoutCredentials('nothing to hide', creds)).toBe('nothing to hide');
  });

  it('parseSse scrubs whole events, so a key split across chunks is caught', async () => {
    async function* chunks() {
      yield 'data: {"error":{"message":"bad key sk-live-01';
      yield '23456789"}}\n\ndata: {"ok":true}\n\n';
    }
    const events = [];
    for await (const ev of parseSse(chunks(), ['sk-live-0123456789'])) events.push(ev);
    expect(events).toEqual([{ data: '{"error":{"message":"bad key [redacted]"}}' }, { data: '{"ok":true}' }]);
  });
});

describe('keys a provider writes back with JSON escapes (found by a telemetry audit)', () => {
  const key = 'sk-SLASHKEY/Ab+cd/EFgh1234';
  const creds = credentialsIn({ authorization: `Bearer ${key}` });

  it('`/` written `\\/` is scrubbed from the raw text', () => {
    const text = JSON.stringify({ error: { message: `Incorrect API key provided: ${key}` } }).replaceAll('/', '\\/');
    expect(text).toContain('sk-SLASHKEY\\/Ab');
    expect(withoutCredentials(text, creds)).not.toContain('SLASHKEY');
  });

  it('a key written in \\u escapes is scrubbed once the error body is parsed (message and raw)', () => {
    const escaped = [...key].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    const text = `{"error":{"message":"Incorrect API key provided: ${escaped}","code":"invalid_request_error"}}`;
    const err = classifyUpstreamError(400, withoutCredentials(text, creds), 'p', undefined, creds);
    expect(JSON.stringify({ message: err.message, metadata: err.metadata })).not.toContain('SLASHKEY');
    expect(err.message).toBe('Incorrect API key provided: [redacted]');
  });
});

describe('a key quoted cut short (found by a security audit)', () => {
  const key = 'sk-provider-OPENAISECRET1234567890abcd';
  const credentials = credentialsIn({ authorization: `Bearer ${key}` });

  it('is scrubbed like the whole key: the key less its last characters, or its first dozen and more', () => {
    expect(withoutCredentials(`Incorrect API key provided: ${key.slice(0, -2)}.`, credentials)).toBe('Incorrect API key provided: [redacted].');
    expect(withoutCredentials(`key ${key.slice(0, 20)}*** is invalid`, credentials)).toBe('key [redacted]*** is invalid');
    expect(withoutCredentials(`two: ${key} and ${key.slice(0, 30)}`, credentials)).toBe('two: [redacted] and [redacted]');
    // Fewer characters than the prefix say too little to be the key.
    expect(withoutCredentials(`${key.slice(0, 10)}`, credentials)).toBe(key.slice(0, 10));
  });

  it("a provider's 401 has no metadata.raw (it could carry the refused key in a form no scrubbing knows)", () => {
    const e = classifyUpstreamError(401, JSON.stringify({ error: { message: `bad key ${key.toUpperCase()}`, code: 'invalid_api_key' } }), 'p', undefined, credentials);
    expect(e.errorType).toBe('provider_unavailable');
    expect(e.metadata).not.toHaveProperty('raw');
    expect(JSON.stringify(e)).not.toContain(key.toUpperCase());
  });
});
