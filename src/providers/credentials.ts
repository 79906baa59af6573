/** Request headers whose values are credentials; an operator's `headers:` may name its own (Azure's `api-key`). */
const CREDENTIAL_HEADER = /authorization|api[-_]?key|token|secret/i;

/**
 * The credentials among a call's request headers: each value, and for `Bearer <key>` the key alone. Values
 * under 8 characters are left out: too short to be a real key, and replacing them would mangle ordinary text.
 *
 * @example credentialsIn({ authorization: 'Bearer sk-abc123456' }) // ['Bearer sk-abc123456', 'sk-abc123456']
 */
export function credentialsIn(headers: Record<string, string>): string[] {
  const out: string[] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (!value || !CREDENTIAL_HEADER.test(name)) continue;
    out.push(value);
    const scheme = /^[A-Za-z]+\s+(\S.*)$/.exec(value);
    if (scheme) out.push(scheme[1]);
  }
  // As a JSON text may carry it: `/` written `\/` (valid JSON, PHP's default), which the literal would miss.
  for (const c of [...out]) if (c.includes('/')) out.push(c.replaceAll('/', '\\/'));
  return out.filter((c) => c.length >= 8);
}

/**
 * `text` with every credential replaced by `[redacted]`. Some providers echo the key they were sent in
 * their error ("Incorrect API key provided: sk-…"); that text becomes the caller's error message,
 * `metadata.raw`, a span status and a log line, so it is scrubbed once, where it enters the gateway.
 */
export function withoutCredentials(text: string, credentials: readonly string[]): string {
  let out = text;
  for (const c of credentials) if (out.includes(c)) out = out.split(c).join('[redacted]');
  return out;
}
