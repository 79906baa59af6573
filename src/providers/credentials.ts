/**
 * Request headers whose values are not secret: the protocol's own, which the gateway sets (and the Anthropic
 * headers the client may pass on). Every other header of an upstream call is taken for a credential: an
 * operator's `headers:` may carry one under any name (`Ocp-Apim-Subscription-Key`, `Cookie`, `X-Auth`, Azure's
 * `api-key`), and a name pattern missed the ones it did not list (an audit found `X-Custom-Auth` echoed back to
 * a client in `metadata.raw`).
 */
const NOT_SECRET = new Set(['content-type', 'accept', 'accept-encoding', 'content-length', 'user-agent', 'anthropic-version', 'anthropic-beta']);

/**
 * The credentials among a call's request headers: each value of a header not in `NOT_SECRET`, and for
 * `Bearer <key>` the key alone. Values under 8 characters are left out: too short to be a real key, and
 * replacing them would mangle ordinary text.
 *
 * @example credentialsIn({ authorization: 'Bearer sk-abc123456' }) // ['Bearer sk-abc123456', 'sk-abc123456']
 */
export function credentialsIn(headers: Record<string, string>): string[] {
  const out: string[] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (!value || NOT_SECRET.has(name.toLowerCase())) continue;
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
