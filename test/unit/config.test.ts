import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { trace } from '@opentelemetry/api';
import { describe, it, expect } from 'vitest';
import { ConfigError, inConfigFile, interpolateEnv, loadConfig, parseConfigText, pricedFreeEndpoints, unpricedEndpoints, unusedPluginSections } from '../../src/config/load';
import { checkPipelines, type LateServices } from '../../src/runtime';
import type { Services } from '../../src/services';
import type { Store } from '../../src/store/types';
import { createLogger } from '../../src/telemetry/log';
import type { GatewayConfig } from '../../src/config/types';
import { registry } from '../../plugins/index';
import { configValidators } from '../../src/config/validators';
import { postgresOptions } from '../../src/store';

const ROOT = path.resolve(__dirname, '../..');

const MINIMAL = `
providers:
  - { id: local, kind: simulated }
models:
  - id: m1
    endpoints:
      - { provider: local, upstream_model: sim-1 }
pipelines:
  default: [auth, upstream]
`;

function parse(text: string, env: NodeJS.ProcessEnv = {}): GatewayConfig {
  return parseConfigText(text, { registry, env });
}
const loadConfigText = parse;

/** The ConfigError thrown by `fn`; fails the test if it throws anything else or nothing. */
function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).name).toBe('ConfigError');
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError, nothing was thrown');
}

/** Asserts that parsing fails with a message that starts with `<fieldPath>:`. */
function expectPathError(text: string, fieldPath: string, env: NodeJS.ProcessEnv = {}): void {
  const err = configError(() => parse(text, env));
  expect(err.message.startsWith(`${fieldPath}:`), `"${err.message}" should start with "${fieldPath}:"`).toBe(true);
}

/** A config of the given sections; each section is YAML text without its key. */
function config(parts: { providers?: string; models?: string; pipelines?: string; extra?: string }): string {
  return [
    'providers:',
    parts.providers ?? '  - { id: local, kind: simulated }',
    'models:',
    parts.models ?? '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1 }] }',
    'pipelines:',
    parts.pipelines ?? '  default: [auth, upstream]',
    parts.extra ?? '',
  ].join('\n');
}

describe('parseConfigText: defaults', () => {
  it('fills the defaults of a minimal config', () => {
    const c = parse(MINIMAL);
    expect(c.server).toEqual({
      host: '127.0.0.1',
      port: 8080,
      base_path: '/api/v1',
      max_body_bytes: 10485760,
      max_json_depth: 100,
      max_json_values: 200000,
      headers_timeout_ms: 10000,
      body_timeout_ms: 60000,
      write_timeout_ms: 60000,
      stream_keepalive_ms: 5000,
      max_connections: 4096,
      max_in_flight: 1024,
      watch_config: true,
      cors: { allowed_origins: [], max_age_s: 600 },
      metrics: { enabled: true, auth: 'none' },
      drain_timeout_ms: 30000,
    });
    expect(c.storage).toEqual({ driver: 'sqlite', path: './data/gateway.db', cache_mib: 2 });
    expect(c.state).toEqual({ driver: 'memory', prefix: 'gw:', command_timeout_ms: 1000 });
    expect(c.spend.in_flight).toEqual({ enabled: true, fraction: 0.5, ceiling_usd: 25, applies_below_balance_usd: 100, settlement_ms: 5000, retry_after_s: 2 });
    expect(c.free_models).toEqual({ per_minute: 20, daily_requests: 50, daily_requests_purchased: 1000, purchase_threshold_usd: 10 });
    expect(c.rate_limits).toEqual({ models: [] });
    expect([c.accounts, c.workspaces, c.guardrails]).toEqual([[], [], []]);
    expect(c.telemetry.exporter).toBe('none');
    expect(c.telemetry.service_name).toBe('model-gateway');
    expect(c.logging.level).toBe('info');
    expect(c.free_models.daily_requests).toBe(50);
    expect(c.providers[0].region).toBe('global');
    expect(c.models[0].endpoints[0].pricing).toEqual({ prompt: 0, completion: 0, request: 0 });
  });

  it('gives every stage in use its plugin defaults', () => {
    const c = parse(MINIMAL);
    expect(c.plugins.upstream).toEqual({ forward_headers: ['anthropic-beta'] });
    expect(c.plugins.auth).toEqual({ accept_x_api_key: true, max_body_reads_per_key: 64, max_requests_per_key: 512 });
  });

  it('keeps operator plugin config and fills the missing fields of it', () => {
    const c = parse(config({ pipelines: '  default: [auth, validate, upstream]', extra: 'plugins:\n  auth: { accept_x_api_key: false }\n  upstream: {}' }));
    expect(c.plugins.auth).toEqual({ accept_x_api_key: false, max_body_reads_per_key: 64, max_requests_per_key: 512 });
    expect(c.plugins.upstream).toEqual({ forward_headers: ['anthropic-beta'] });
    expect(c.plugins.validate).toEqual({});
  });

  it('fills defaults for stages used only in an endpoint pipeline', () => {
    const c = parse(config({ pipelines: '  default: [auth, validate, upstream]\n  messages: [auth, upstream]' }));
    expect(c.pipelines.messages).toEqual(['auth', 'upstream']);
    expect(c.plugins.upstream).toEqual({ forward_headers: ['anthropic-beta'] });
  });

  it('keeps explicit values over defaults', () => {
    const c = parse(config({ extra: 'server: { port: 9999, base_path: /gw, max_body_bytes: 2048 }\ntelemetry: { exporter: console }' }));
    expect(c.server.port).toBe(9999);
    expect(c.server.base_path).toBe('/gw');
    expect(c.server.max_body_bytes).toBe(2048);
    expect(c.server.host).toBe('127.0.0.1');
    expect(c.telemetry.exporter).toBe('console');
  });

  // Regression: ajv `useDefaults` ignores `default` inside a plain `oneOf`; without the `discriminator` on
  // `kind`, an anthropic provider kept base_url undefined (createAnthropicProvider threw on
  // `config.base_url.replace`) and timeout_ms / anthropic_version / latency_ms were undefined.
  it('fills the provider defaults of each kind', () => {
    const c = parse(
      config({
        providers: [
          '  - { id: local, kind: simulated }',
          '  - { id: oa, kind: openai, base_url: "http://127.0.0.1:1/v1" }',
          '  - { id: an, kind: anthropic }',
        ].join('\n'),
      }),
    );
    expect(c.providers[0]).toMatchObject({ kind: 'simulated', latency_ms: 0, chunk_delay_ms: 0 });
    expect(c.providers[1]).toMatchObject({ kind: 'openai', timeout_ms: 600000 });
    expect(c.providers[2]).toMatchObject({
      kind: 'anthropic',
      base_url: 'https://api.anthropic.com/v1',
      anthropic_version: '2023-06-01',
      timeout_ms: 600000,
    });
  });

  // Regression, same cause as above: `storage: { driver: sqlite }` kept `path` undefined (SqliteStore then
  // called resolve(undefined)); postgres got no pool_max.
  it('fills storage defaults inside the chosen driver', () => {
    expect(parse(config({ extra: 'storage: { driver: sqlite }' })).storage).toEqual({ driver: 'sqlite', path: './data/gateway.db', cache_mib: 2 });
    expect(parse(config({ extra: 'storage: { driver: postgres, url: "postgres://u@h/db" }' })).storage).toEqual({
      driver: 'postgres',
      url: 'postgres://u@h/db',
      pool_max: 10,
      query_timeout_ms: 30000,
    });
  });

  it('account and workspace names are at most 200 characters (PostgreSQL\'s unique index refused one past ~2.7 KB where SQLite took it)', () => {
    expect(parse(config({ extra: `accounts: [{ name: ${'a'.repeat(200)} }]\nworkspaces: [{ name: ${'w'.repeat(200)}, account: ${'a'.repeat(200)} }]` })).workspaces[0].name).toHaveLength(200);
    expect(configError(() => parse(config({ extra: `workspaces: [{ name: ${'w'.repeat(3000)} }]` }))).message).toBe('workspaces[0].name: must NOT have more than 200 characters');
    expect(configError(() => parse(config({ extra: `accounts: [{ name: ${'a'.repeat(201)} }]` }))).message).toBe('accounts[0].name: must NOT have more than 200 characters');
  });

  it('storage.query_timeout_ms sets the PostgreSQL query timeout (it was fixed at 30 s)', () => {
    const storage = parse(config({ extra: 'storage: { driver: postgres, url: "postgres://u@h/db", query_timeout_ms: 5000 }' })).storage;
    expect(storage.driver === 'postgres' && postgresOptions(storage)).toEqual({ url: 'postgres://u@h/db', schema: undefined, max: 10, queryTimeoutMs: 5000 });
    expect(configError(() => parse(config({ extra: 'storage: { driver: postgres, url: "postgres://u@h/db", query_timeout_ms: 0 }' }))).message).toMatch(/^storage/);
  });
});

describe('environment interpolation', () => {
  it('replaces ${VAR} and ${VAR:-default}', () => {
    const c = parse(
      config({
        providers: '  - { id: oa, kind: openai, base_url: "${BASE:-http://127.0.0.1:9/v1}", api_key: "${KEY}" }',
        models: '  - { id: m1, endpoints: [{ provider: oa, upstream_model: "${UPSTREAM_MODEL:-gpt-x}" }] }',
      }),
      { KEY: 'sk-secret' },
    );
    expect(c.providers[0]).toMatchObject({ base_url: 'http://127.0.0.1:9/v1', api_key: 'sk-secret' });
    expect(c.models[0].endpoints[0].upstream_model).toBe('gpt-x');
  });

  it('prefers the environment value over the default', () => {
    const c = parse(config({ extra: 'server: { host: "${HOST:-127.0.0.1}" }' }), { HOST: '0.0.0.0' });
    expect(c.server.host).toBe('0.0.0.0');
  });

  it('coerces a numeric port from the environment (or its default) to an integer', () => {
    const fromEnv = parse(config({ extra: 'server: { port: "${PORT}" }' }), { PORT: '9090' });
    expect(fromEnv.server.port).toBe(9090);
    expect(typeof fromEnv.server.port).toBe('number');
    const fromDefault = parse(config({ extra: 'server:\n  port: ${PORT:-8181}' }));
    expect(fromDefault.server.port).toBe(8181);
    expect(typeof fromDefault.server.port).toBe('number');
  });

  it('rejects a non-numeric port from the environment with the field path', () => {
    expectPathError(config({ extra: 'server: { port: "${PORT}" }' }), 'server.port', { PORT: 'eighty' });
  });

  it('fails on an unset variable without default, naming the field path', () => {
    expectPathError(
      config({ providers: '  - { id: oa, kind: openai, base_url: "http://127.0.0.1:9/v1", api_key: "${OPENAI_API_KEY}" }', models: '  - { id: m1, endpoints: [{ provider: oa, upstream_model: x }] }' }),
      'providers[0].api_key',
    );
    expectPathError(config({ extra: 'server: { host: "${HOST}" }' }), 'server.host');
  });

  it('interpolateEnv walks nested objects and arrays, leaves non-strings alone', () => {
    const out = interpolateEnv(
      { a: ['x-${A}', { b: '${B:-bee}' }], n: 3, t: true, z: null, two: '${A}/${A}' },
      { A: 'aa' },
    );
    expect(out).toEqual({ a: ['x-aa', { b: 'bee' }], n: 3, t: true, z: null, two: 'aa/aa' });
  });

  it('interpolateEnv: empty default gives an empty string; text without references is unchanged', () => {
    expect(interpolateEnv('${X:-}', {})).toBe('');
    expect(interpolateEnv('$HOME and {braces}', {})).toBe('$HOME and {braces}');
  });

  it('interpolateEnv: a variable set but empty is told apart from one not set (both refused without a default)', () => {
    expect(configError(() => interpolateEnv({ k: '${K}' }, { K: '' })).message).toBe('k: environment variable K is set but empty');
    expect(configError(() => interpolateEnv({ k: '${K}' }, {})).message).toBe('k: environment variable K is not set');
    expect(interpolateEnv('${K:-d}', { K: '' })).toBe('d');
  });

  it('$${ is a literal ${; a ${ that starts no reference (no closing brace, not a name) is refused, naming the field, never echoing the value', () => {
    expect(interpolateEnv('price$${NOT_A_VAR}s and ${A}', { A: 'aa' })).toBe('price${NOT_A_VAR}s and aa');
    // It was kept as written: `${API_KEY` (brace forgotten) went to the provider as the key.
    const open = configError(() => interpolateEnv({ providers: [{ api_key: 'sk-${API_KEY' }] }, { API_KEY: 'sk-live-secret' }));
    expect(open.message).toBe('providers[0].api_key: `${` starts no variable reference (write `${NAME}` or `${NAME:-default}`, or `$${` for a literal `${`)');
    expect(configError(() => interpolateEnv({ v: '${1X}' }, {})).message.startsWith('v: `${` starts no variable reference')).toBe(true);
    expect(configError(() => interpolateEnv({ v: '${A} then ${' }, { A: 'a' })).message.startsWith('v:')).toBe(true);
    expectPathError(config({ providers: "  - { id: local, kind: simulated }\n  - { id: oa, kind: openai, base_url: 'http://127.0.0.1:9', api_key: '${OA_KEY' }" }), 'providers[1].api_key', { OA_KEY: 'k' });
  });

  it('a reference inside a default (${A:-${B}}) is refused naming the field, set or not (the literal ${B} had been sent on as written)', () => {
    const message = 'providers[0].api_key: the default of `${OA_KEY:-…}` holds a reference, which is not read (write the default out, or set OA_KEY)';
    expect(configError(() => interpolateEnv({ providers: [{ api_key: '${OA_KEY:-${FALLBACK_KEY}}' }] }, { FALLBACK_KEY: 'sk-fallback' })).message).toBe(message);
    expect(configError(() => interpolateEnv({ providers: [{ api_key: '${OA_KEY:-x${FALLBACK_KEY}y}' }] }, { OA_KEY: 'sk-set' })).message).toBe(message);
    expect(interpolateEnv('${A:-plain default}', {})).toBe('plain default');
  });

  it('$${ in a default is a literal ${ too (it stayed $${), so ${A:-$${B}} is the text ${B} when A is unset', () => {
    expect(interpolateEnv('${A:-$${B}}', {})).toBe('${B}');
    expect(interpolateEnv({ v: '${A:-x$${B}}' }, {})).toEqual({ v: 'x${B}' });
    expect(interpolateEnv('${A:-$$ and $}', {})).toBe('$$ and $');
  });

  it('interpolateEnv names array and nested paths in its error', () => {
    const err = configError(() => interpolateEnv({ list: [{ deep: { v: '${MISSING}' } }] }, {}));
    expect(err.message.startsWith('list[0].deep.v:')).toBe(true);
    expect(err.message).toContain('MISSING');
  });
});

describe('parseConfigText: errors name the field path', () => {
  it('unknown top-level field', () => {
    expectPathError(config({ extra: 'bogus: 1' }), 'bogus');
  });

  it('unknown field inside a section', () => {
    expectPathError(config({ extra: 'server: { prot: 80 }' }), 'server.prot');
  });

  it('a URL field that passes the pattern but is no URL is refused naming it (the error was "Invalid URL", no field)', () => {
    expectPathError(config({ providers: "  - { id: o, kind: openai, base_url: 'http://h:port/v1' }" , models: '  - { id: m1, endpoints: [{ provider: o, upstream_model: x }] }' }), 'providers[0].base_url');
    expectPathError(config({ extra: "telemetry: { exporter: otlp, endpoint: 'http://a b/v1/traces' }" }), 'telemetry.endpoint');
    expectPathError(config({ pipelines: '  default: [auth, web, upstream]', extra: "plugins:\n  web: { backend: { kind: searxng, base_url: 'http://' } }" }), 'plugins.web.backend.base_url');
    const secret = configError(() => parse(config({ providers: "  - { id: o, kind: openai, base_url: 'https://u:SECRETPW@h:port/v1' }", models: '  - { id: m1, endpoints: [{ provider: o, upstream_model: x }] }' }))).message;
    expect(secret).not.toMatch(/SECRETPW/);
    // A header is the operator's own, whatever its name.
    expect(parse(config({ providers: "  - { id: o, kind: openai, base_url: 'http://127.0.0.1:9/v1', headers: { endpoint: 'not a url' } }", models: '  - { id: m1, endpoints: [{ provider: o, upstream_model: x }] }' })).providers[0]).toMatchObject({ headers: { endpoint: 'not a url' } });
  });

  it('an api_key or header that cannot go into an HTTP header is refused naming it, value not shown (every call had failed as "could not be reached")', () => {
    const openai = (fields: string) => config({ providers: `  - { id: o, kind: openai, base_url: 'http://127.0.0.1:9/v1', ${fields} }`, models: '  - { id: m1, endpoints: [{ provider: o, upstream_model: x }] }' });
    // A key file's trailing newline, carried by the environment variable (a Kubernetes secret made from a file).
    const newline = configError(() => parse(openai("api_key: '${OPENAI_API_KEY}'"), { OPENAI_API_KEY: 'sk-proj-abc123SECRET\n' })).message;
    expect(newline).toBe('providers[0].api_key: holds a character an HTTP header cannot carry (a line break or another control character, or one such as a curly quote or a zero-width space pasted with it; the value is not shown) (the value of environment variable OPENAI_API_KEY)');
    expectPathError(openai('api_key: "\u201csk-proj-abc123\u201d"'), 'providers[0].api_key');
    expectPathError(openai('api_key: "sk-proj-abc\u200b123"'), 'providers[0].api_key');
    expectPathError(openai("headers: { X-Org: \"org-1\\r\\nX-Evil: 1\" }"), 'providers[0].headers.X-Org');
    expect(configError(() => parse(openai("headers: { 'X Org': org-1 }"))).message).toMatch(/^providers\[0\]\.headers\.X Org: is no HTTP header name/);
    expectPathError(config({ pipelines: '  default: [auth, web, upstream]', extra: "plugins:\n  web: { backend: { kind: searxng, base_url: 'http://127.0.0.1:9', api_key: \"k\\tok\\u0000\" } }" }), 'plugins.web.backend.api_key');
    // What a header can carry is taken: a tab, a space, Latin-1.
    expect(parse(openai("api_key: \"sk-proj abc\\t\u00e9\", headers: { X-Org: 'org 1' }")).providers[0]).toMatchObject({ api_key: 'sk-proj abc\t\u00e9', headers: { 'X-Org': 'org 1' } });
  });

  it('a required key missing beside a misspelling of it names the misspelt one (pipelines: {defualt: …} said only that default is required)', () => {
    expect(configError(() => parse(config({ pipelines: '  defualt: [auth, upstream]' }))).message).toBe('pipelines.default: is required (there is `defualt`: misspelt?)');
    expect(configError(() => parse(config({ providers: '  - { id: local, knd: simulated }' }))).message).toBe('providers[0].kind: is required (there is `knd`: misspelt?)');
    // Nothing near it: said as before.
    expect(configError(() => parse(config({ pipelines: '  batch: [auth, upstream]' }))).message).toBe('pipelines.default: is required');
  });

  it('an unknown field is told with the fields accepted there (a misspelt one showed no right spelling)', () => {
    expect(configError(() => parse(config({ extra: 'spend: { in_flight: { enable: true } }' }))).message).toBe(
      'spend.in_flight.enable: unknown field (known: enabled, fraction, ceiling_usd, applies_below_balance_usd, settlement_ms, retry_after_s)',
    );
    // In a provider, the fields of its kind; in a stage's section, those of the stage's own schema.
    expect(configError(() => parse(config({ providers: '  - { id: local, kind: simulated, latncy_ms: 4 }' }))).message).toMatch(/^providers\[0\]\.latncy_ms: unknown field \(known: .*\blatency_ms\b/);
    expect(configError(() => parse(config({ extra: 'plugins: { auth: { accept_xapi_key: true } }' }))).message).toMatch(/^plugins\.auth\.accept_xapi_key: unknown field \(known: accept_x_api_key, /);
  });

  it('missing required section', () => {
    expectPathError('providers:\n  - { id: local, kind: simulated }\npipelines:\n  default: [auth, upstream]\n', 'models');
  });

  it('bad provider kind', () => {
    expectPathError(config({ providers: '  - { id: local, kind: bogus }' }), 'providers[0].kind');
  });

  it('bad provider kind in a later entry', () => {
    expectPathError(config({ providers: '  - { id: local, kind: simulated }\n  - { id: two, kind: nope }' }), 'providers[1].kind');
  });

  // Regression: with a plain `oneOf`, the deepest ajv error was the `const` failure of the *other* branches
  // at /providers/0/kind, so the message named providers[0].kind instead of providers[0].base_url.
  it('openai provider without base_url', () => {
    expectPathError(config({ providers: '  - { id: oa, kind: openai }', models: '  - { id: m1, endpoints: [{ provider: oa, upstream_model: x }] }' }), 'providers[0].base_url');
  });

  it('unknown stage id in a pipeline', () => {
    expectPathError(config({ pipelines: '  default: [auth, nope, upstream]' }), 'pipelines.default[1]');
    expectPathError(config({ pipelines: '  default: [auth, upstream]\n  messages: [auth, upstream, nope]' }), 'pipelines.messages[2]');
  });

  it('model endpoint referencing an unknown provider', () => {
    expectPathError(config({ models: '  - { id: m1, endpoints: [{ provider: ghost, upstream_model: x }] }' }), 'models[0].endpoints[0].provider');
    expectPathError(
      config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: x }] }\n  - { id: m2, endpoints: [{ provider: local, upstream_model: x }, { provider: ghost, upstream_model: y }] }' }),
      'models[1].endpoints[1].provider',
    );
  });

  it('duplicate provider id', () => {
    expectPathError(config({ providers: '  - { id: local, kind: simulated }\n  - { id: local, kind: simulated }' }), 'providers[1].id');
  });

  it('duplicate model id', () => {
    expectPathError(
      config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: x }] }\n  - { id: m1, endpoints: [{ provider: local, upstream_model: y }] }' }),
      'models[1].id',
    );
  });

  it('spending sections: unknown or duplicate guardrails, workspaces, budgets, accounts and rate-limited models', () => {
    const g = 'guardrails:\n  - { id: g1, budget: { limit_usd: 5 } }\n';
    expectPathError(config({ extra: 'workspaces:\n  - { name: w, default_guardrail: nope }' }), 'workspaces[0].default_guardrail');
    expectPathError(config({ extra: `${g}workspaces:\n  - { name: w, members: [{ user_id: u, guardrail: nope }] }` }), 'workspaces[0].members[0].guardrail');
    expectPathError(config({ extra: `${g}workspaces:\n  - { name: w, keys: [{ key: k, guardrail: nope }] }` }), 'workspaces[0].keys[0].guardrail');
    expectPathError(config({ extra: `${g}  - { id: g1 }` }), 'guardrails[1].id');
    expectPathError(config({ extra: 'workspaces:\n  - { name: w }\n  - { name: w }' }), 'workspaces[1].name');
    expectPathError(config({ extra: 'workspaces:\n  - { name: w, budgets: [{ id: b, limit_usd: 1 }, { id: b, limit_usd: 2 }] }' }), 'workspaces[0].budgets[1].id');
    expectPathError(config({ extra: 'accounts:\n  - { name: a }\n  - { name: a }' }), 'accounts[1].name');
    expectPathError(config({ extra: 'accounts:\n  - { name: a, billing: postpaid }' }), 'accounts[0].billing');
    expectPathError(config({ extra: 'rate_limits:\n  models: [{ model: nope, requests: 1 }]' }), 'rate_limits.models[0].model');
    // 0 requests refused every request with a 429 whose retry never succeeded (elsewhere 0 means no limit).
    expectPathError(config({ extra: 'rate_limits:\n  key: { requests: 0 }' }), 'rate_limits.key.requests');
    expectPathError(config({ extra: 'rate_limits:\n  models: [{ model: m1, requests: 0 }]' }), 'rate_limits.models[0].requests');
    expectPathError(config({ extra: `${g}  - { id: g2, budget: { limit_usd: -1 } }` }), 'guardrails[1].budget.limit_usd');
    expectPathError(config({ extra: 'state: { driver: redis }' }), 'state.url');
    // ioredis threw `Invalid URL` at serve (after the store was opened), naming no setting; config check said ok.
    expectPathError(config({ extra: "state: { driver: redis, url: 'not a url' }" }), 'state.url');
    expectPathError(config({ extra: "state: { driver: redis, url: 'redis://h:port' }" }), 'state.url');
    // pg threw the same at serve, on its first connection; an sslrootcert= file that is not there too.
    expectPathError(config({ extra: "storage: { driver: postgres, url: 'postgres://u:SECRETPW@h:port/db' }" }), 'storage.url');
    expect(configError(() => parse(config({ extra: "storage: { driver: postgres, url: 'postgres://u:SECRETPW@h:port/db' }" }))).message).not.toMatch(/SECRETPW/);
    expectPathError(config({ extra: "storage: { driver: postgres, url: 'postgres://h/db?sslrootcert=/no/such/ca.pem' }" }), 'storage.url');
    expect(parse(config({ extra: "storage: { driver: postgres, url: 'postgres://gw:p%40ss@db.internal:5432/gateway?sslmode=require' }" })).storage).toMatchObject({ driver: 'postgres' });
    for (const url of ['redis://:pw@127.0.0.1:6379/0', 'rediss://cache.internal', 'cache.internal:6380', '/run/redis.sock', '6379']) {
      expect(parse(config({ extra: `state: { driver: redis, url: '${url}' }` })).state.url).toBe(url);
    }
    expectPathError(config({ extra: 'spend: { in_flight: { fraction: 0 } }' }), 'spend.in_flight.fraction');
    const ok = parse(config({ extra: `${g}workspaces:\n  - { name: w, default_guardrail: g1, budgets: [{ id: b, limit_usd: 1, reset_interval: lifetime }] }` }));
    expect(ok.workspaces[0]).toEqual({ name: 'w', account: 'default', default_guardrail: 'g1', members: [], keys: [], budgets: [{ id: 'b', limit_usd: 1, reset_interval: 'lifetime', include_byok: false }] });
    expect(ok.guardrails[0].budget).toEqual({ limit_usd: 5, reset_interval: 'monthly', include_byok: false });
  });

  it('pipeline without auth, without upstream, or with auth not first', () => {
    expectPathError(config({ pipelines: '  default: [validate, upstream]' }), 'pipelines.default');
    expectPathError(config({ pipelines: '  default: [auth, validate]' }), 'pipelines.default');
    expectPathError(config({ pipelines: '  default: [validate, auth, upstream]' }), 'pipelines.default');
    expectPathError(config({ pipelines: '  default: [auth, upstream]\n  chat_completions: [upstream, auth]' }), 'pipelines.chat_completions');
  });

  it('unknown pipeline name', () => {
    expectPathError(config({ pipelines: '  default: [auth, upstream]\n  embeddings: [auth, upstream]' }), 'pipelines.embeddings');
  });

  it('plugin config violating its schema', () => {
    expectPathError(config({ extra: 'plugins:\n  upstream: { forward_headers: ["Not A Header"] }' }), 'plugins.upstream.forward_headers[0]');
    expectPathError(config({ extra: 'plugins:\n  upstream: { forward_headers: "anthropic-beta" }' }), 'plugins.upstream.forward_headers');
    expectPathError(config({ extra: 'plugins:\n  upstream: { bogus: true }' }), 'plugins.upstream.bogus');
    expectPathError(config({ extra: 'plugins:\n  auth: { accept_x_api_key: "maybe" }' }), 'plugins.auth.accept_x_api_key');
  });

  // Regression: a plugin config failing at its root was reported as "plugins.upstream.: must be object".
  it('plugin config that is not an object', () => {
    expectPathError(config({ extra: 'plugins:\n  upstream: 5' }), 'plugins.upstream');
  });

  it('config for an unknown plugin id', () => {
    expectPathError(config({ extra: 'plugins:\n  nope: {}' }), 'plugins.nope');
  });

  it('invalid YAML', () => {
    const err = configError(() => parse('providers: [\n  - { id: x\n'));
    expect(err.message.startsWith('(yaml):')).toBe(true);
  });

  it('a document that is not a mapping', () => {
    expect(configError(() => parse('- just\n- a list\n')).message).toBe('(root): must be a mapping');
    expect(configError(() => parse('')).message.startsWith('(root)')).toBe(true);
  });
});

describe('loadConfig', () => {
  it('a file that is UTF-16, or empty, says so (both were "(root): must be a mapping")', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gw-config-'));
    const utf16 = path.join(dir, 'utf16.yaml');
    writeFileSync(utf16, Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(MINIMAL, 'utf16le')]));
    expect(configError(() => loadConfig(utf16, { registry, env: {} })).message).toBe(`${utf16}: (file): is not UTF-8 text (it holds NUL bytes: saved as UTF-16? save it as UTF-8)`);
    const empty = path.join(dir, 'empty.yaml');
    writeFileSync(empty, '# nothing yet\n');
    expect(configError(() => loadConfig(empty, { registry, env: {} })).message).toBe(`${empty}: (root): the file holds no settings (it is empty, or only comments)`);
    writeFileSync(empty, '');
    expect(configError(() => loadConfig(empty, { registry, env: {} })).message).toBe(`${empty}: (root): the file holds no settings (it is empty, or only comments)`);
  });

  it('loads the shipped gateway.yaml', () => {
    const c = loadConfig(path.join(ROOT, 'gateway.yaml'), { registry, env: {} });
    expect(c.server.port).toBe(8080);
    expect(c.server.host).toBe('127.0.0.1');
    expect(c.server.base_path).toBe('/api/v1');
    expect(c.pipelines.default).toEqual(['auth', 'validate', 'rate-limit', 'budget-check', 'upstream']);
    expect(c.accounts).toEqual([{ name: 'default', billing: 'invoice' }]);
    expect(c.providers.map((p) => p.id)).toEqual(['local', 'local-video']);
    expect(c.models.map((m) => m.id)).toEqual(['simulated/chat', 'simulated/free:free']);
    expect(c.video_models.map((m) => m.id)).toEqual(['simulated/video']);
    for (const id of c.pipelines.default) expect(c.plugins[id]).toBeTypeOf('object');
  });

  it('applies environment overrides to the shipped gateway.yaml', () => {
    const c = loadConfig(path.join(ROOT, 'gateway.yaml'), { registry, env: { GATEWAY_PORT: '18080', GATEWAY_HOST: '0.0.0.0' } });
    expect(c.server.port).toBe(18080);
    expect(c.server.host).toBe('0.0.0.0');
  });

  it.each([
    ['abc', 'server.port: must be integer (the value of environment variable GATEWAY_PORT)'],
    ['99999', 'server.port: must be <= 65535 (the value of environment variable GATEWAY_PORT)'],
  ])('an environment value the schema refuses (GATEWAY_PORT=%s) is named with its variable (the error named only the field)', (port, message) => {
    const err = configError(() => loadConfig(path.join(ROOT, 'gateway.yaml'), { registry, env: { GATEWAY_PORT: port } }));
    expect(err.message.endsWith(`: ${message}`)).toBe(true);
  });

  it('a field that took its default names no variable, and the value is never shown', () => {
    const err = configError(() => parse(`${MINIMAL}\nlogging: { level: '\${LOG_LEVEL:-loud}' }\n`, {}));
    expect(err.message).toMatch(/^logging\.level: must be one of/);
    expect(err.message).not.toContain('environment variable');
    const secret = configError(() => parse(`${MINIMAL}\nlogging: { level: '\${LOG_LEVEL}' }\n`, { LOG_LEVEL: 'sk-secret-1234' }));
    expect(secret.message).toContain('(the value of environment variable LOG_LEVEL)');
    expect(secret.message).not.toContain('sk-secret-1234');
  });

  it('fails with a ConfigError for a missing file', () => {
    configError(() => loadConfig(path.join(ROOT, 'test', 'does-not-exist.yaml'), { registry, env: {} }));
  });
});

describe('values the schema coercion would hide, and other operator mistakes', () => {
  it('a key written with no value is an error naming it (was 0, false or "": a free model, a random port)', () => {
    expectPathError(config({ extra: 'server:\n  port:' }), 'server.port');
    expectPathError(config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1, pricing: { prompt: ~, completion: 1 } }] }' }), 'models[0].endpoints[0].pricing.prompt');
    expectPathError(config({ extra: 'rate_limits:\n  key: { requests: }' }), 'rate_limits.key.requests');
    expect(configError(() => parse(config({ extra: 'server:\n  drain_timeout_ms:' }))).message).toBe(
      'server.drain_timeout_ms: has no value (write one, or remove the line for the default)',
    );
  });

  it('a boolean where a number goes, or a number where a boolean goes, is refused (coercion made port 1, a price of 1, no in-flight limit)', () => {
    expect(configError(() => parse(config({ extra: 'server:\n  port: true' }))).message).toBe('server.port: must be a number (true is not one)');
    expect(configError(() => parse(config({ extra: 'server:\n  max_in_flight: false' }))).message).toBe('server.max_in_flight: must be a number (false is not one)');
    expectPathError(config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1, pricing: { prompt: false, completion: true } }] }' }), 'models[0].endpoints[0].pricing.prompt');
    expect(configError(() => parse(config({ extra: 'plugins:\n  auth: { accept_x_api_key: 0 }' }))).message).toBe('plugins.auth.accept_x_api_key: must be true or false (0 is not)');
    // Text that is a number (an interpolated `${PORT:-8080}`) is still read as one.
    expect(parse(config({ extra: "server:\n  port: '18080'" })).server.port).toBe(18080);
  });

  it('a duration longer than a timer can run (a `_ms` field over 2^31-1: Node fires it at once) or a date can be (`_s`) is refused', () => {
    expect(configError(() => parse(config({ providers: '  - { id: local, kind: simulated, latency_ms: 3000000000 }' }))).message).toBe(
      'providers[0].latency_ms: must be at most 2147483647 (about 24.8 days, the longest timer Node.js runs)',
    );
    expectPathError(config({ extra: 'routing:\n  retry_wait_max_ms: 1e10' }), 'routing.retry_wait_max_ms');
    expectPathError(config({ extra: 'videos:\n  output_ttl_s: 1e300' }), 'videos.output_ttl_s');
    // A stage's own durations too, and the longest timer itself is accepted.
    expectPathError(config({ pipelines: '  default: [auth, web, upstream]', extra: 'plugins:\n  web: { backend: { kind: searxng, base_url: "http://127.0.0.1:9", timeout_ms: 2147483648 } }' }), 'plugins.web.backend.timeout_ms');
    expect(parse(config({ providers: '  - { id: local, kind: simulated, latency_ms: 2147483647 }' })).providers[0]).toMatchObject({ latency_ms: 2147483647 });
  });

  it('a secret written as a key (no space after the colon, or pasted where a field name goes) is not echoed in the error', () => {
    const flow = config({ providers: '  - { id: local, kind: simulated }\n  - { id: oa, kind: openai, base_url: "http://127.0.0.1:9", api_key:sk-live-SECRETFLOW1 }' });
    const noSpace = configError(() => parse(flow)).message;
    expect(noSpace).toBe('providers[1].api_key:…: has no value (a key and its value need a space after the colon: `key: value`)');
    const pasted = configError(() => parse(config({ providers: '  - { id: local, kind: simulated, sk-live-SECRETASKEY6: x }' }))).message;
    expect(pasted).toBe('providers[0].sk-…: unknown field (known: id, region, kind, latency_ms, chunk_delay_ms, reply, data_collection)');
    for (const message of [noSpace, pasted]) expect(message).not.toMatch(/SECRET/);
  });

  it('names the plugins sections of stages no pipeline runs (their settings do nothing; serve, reload and config check warn)', () => {
    const c = parse(config({ pipelines: '  default: [auth, validate, upstream]', extra: 'plugins:\n  max-tokens-cap: { max: 100 }\n  validate: {}' }));
    expect(unusedPluginSections(c)).toEqual(['plugins.max-tokens-cap']);
    const used = parse(config({ pipelines: '  default: [auth, validate, upstream]\n  messages: [auth, validate, max-tokens-cap, upstream]', extra: 'plugins:\n  max-tokens-cap: { max: 100 }' }));
    expect(unusedPluginSections(used)).toEqual([]);
  });

  it('names the endpoints without any price of models not named …:free (billed $0; serve, reload and config check warn)', () => {
    const c = parse(
      config({
        models: [
          '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1 }, { provider: local, upstream_model: sim-2, pricing: { completion: 0.5 } }] }',
          '  - { id: m2, endpoints: [{ provider: local, upstream_model: sim-3, pricing: { prompt: 0, completion: 0 } }, { provider: local, upstream_model: sim-4, pricing: { request: 0.01 } }] }',
          '  - { id: m3:free, endpoints: [{ provider: local, upstream_model: sim-5 }] }',
        ].join('\n'),
      }),
    );
    expect(unpricedEndpoints(c)).toEqual(['models[0].endpoints[0] (m1 via local)', 'models[1].endpoints[0] (m2 via local)']);
  });

  it('names the priced endpoints of models named …:free (billed that price and counted as free; serve, reload and config check warn)', () => {
    const c = parse(
      config({
        models: [
          '  - { id: m1:free, endpoints: [{ provider: local, upstream_model: sim-1 }, { provider: local, upstream_model: sim-2, pricing: { completion: 0.5 } }] }',
          '  - { id: m2, endpoints: [{ provider: local, upstream_model: sim-3, pricing: { prompt: 1 } }] }',
        ].join('\n'),
      }),
    );
    expect(pricedFreeEndpoints(c)).toEqual(['models[0].endpoints[1] (m1:free via local)']);
    expect(unpricedEndpoints(c)).toEqual([]);
  });

  it('takes a price for 1-hour cache writes (cache_write_1h), which counts as a price', () => {
    const c = parse(config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1, pricing: { cache_write_1h: 6 } }] }' }));
    expect(c.models[0].endpoints[0].pricing).toEqual({ prompt: 0, completion: 0, request: 0, cache_write_1h: 6 });
    expect(unpricedEndpoints(c)).toEqual([]);
    expectPathError(config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1, pricing: { cache_write_1h: -1 } }] }' }), 'models[0].endpoints[0].pricing.cache_write_1h');
  });

  it("a stage whose schema requires a field is refused without it when its section is left out, as when it is empty (it was created without it)", () => {
    const withRequired = new Map(registry);
    withRequired.set('tagger', { id: 'tagger', configSchema: { type: 'object', required: ['tag'], properties: { tag: { type: 'string' }, n: { type: 'integer', default: 3 } } }, create: () => async (_ctx: unknown, next: () => Promise<void>) => next() });
    const pipelines = '  default: [auth, tagger, upstream]';
    const left = configError(() => parseConfigText(config({ pipelines }), { registry: withRequired, env: {} })).message;
    const empty = configError(() => parseConfigText(config({ pipelines, extra: 'plugins:\n  tagger:' }), { registry: withRequired, env: {} })).message;
    expect(left).toBe(empty);
    expect(left).toMatch(/^plugins\.tagger/);
    expect(left).toMatch(/tag/);
    expect(parseConfigText(config({ pipelines, extra: 'plugins:\n  tagger: { tag: x }' }), { registry: withRequired, env: {} }).plugins.tagger).toEqual({ tag: 'x', n: 3 });
  });

  it("a stage's own section may be empty: that stage with its defaults", () => {
    const c = parse(config({ pipelines: '  default: [auth, validate, upstream]', extra: 'plugins:\n  validate:' }));
    expect(c.plugins.validate).toBeTypeOf('object');
  });

  it('an infinite number is refused (a cost of Infinity cannot be billed)', () => {
    expectPathError(config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1, pricing: { prompt: .inf, completion: 1 } }] }' }), 'models[0].endpoints[0].pricing.prompt');
    expectPathError(config({ models: '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1, pricing: { prompt: 1, completion: 1e400 } }] }' }), 'models[0].endpoints[0].pricing.completion');
  });

  it('a request-side stage after upstream is refused (it ran after the provider was called and billed); answer-side stages may follow', () => {
    for (const late of ['budget-check', 'rate-limit', 'validate', 'guardrail', 'auto-router', 'fusion', 'max-tokens-cap']) {
      const fusion = 'plugins:\n  fusion: { models: [m1, m2], judge: m1 }';
      const models = '  - { id: m1, endpoints: [{ provider: local, upstream_model: sim-1 }] }\n  - { id: m2, endpoints: [{ provider: local, upstream_model: sim-2 }] }';
      const err = configError(() => parse(config({ models, pipelines: `  default: [auth, upstream, ${late}]`, extra: late === 'fusion' ? fusion : '' })));
      expect(err.message).toBe(`pipelines.default: "${late}" must come before "upstream" (its checks would run after the provider was called and billed)`);
    }
    expect(parse(config({ pipelines: '  default: [auth, validate, upstream, response-healing]' })).pipelines.default.at(-1)).toBe('response-healing');
  });

  it('a workspace naming an account nobody declared is refused (a misspelt one was created, empty and prepaid)', () => {
    expect(configError(() => parse(config({ extra: 'workspaces:\n  - { name: research, account: defualt }' }))).message).toBe(
      'workspaces[0].account: unknown account "defualt" (declare it under accounts, or use "default")',
    );
    const ok = parse(config({ extra: 'accounts:\n  - { name: acme }\nworkspaces:\n  - { name: research, account: acme }\n  - { name: other, account: default }' }));
    expect(ok.workspaces.map((w) => w.account)).toEqual(['acme', 'default']);
  });

  it('YAML merge keys share settings between entries', () => {
    const c = parse(config({ models: '  - id: m1\n    endpoints:\n      - &ep { provider: local, upstream_model: sim-1, pricing: { prompt: 2, completion: 3 } }\n  - id: m2\n    endpoints:\n      - { <<: *ep, upstream_model: sim-2 }' }));
    expect(c.models[1].endpoints[0]).toMatchObject({ provider: 'local', upstream_model: 'sim-2', pricing: { prompt: 2, completion: 3 } });
  });

  it('a YAML error reads as a sentence, with a hint for an unquoted ${VAR} in a flow mapping', () => {
    const tabs = configError(() => parse('providers:\n\t- { id: x }\n')).message;
    expect(tabs.startsWith('(yaml): ')).toBe(true);
    expect(tabs.endsWith(':')).toBe(false);
    const flow = configError(() => parse(config({ providers: '  - { id: openai, kind: openai, base_url: https://api.openai.com/v1, api_key: ${OPENAI_API_KEY} }' }), { OPENAI_API_KEY: 'sk-x' })).message;
    expect(flow).toContain("(a ${VAR} inside { … } must be quoted: '${VAR}')");
  });

  it("the shipped gateway.yaml's commented examples parse once uncommented", () => {
    const text = readFileSync(path.join(ROOT, 'gateway.yaml'), 'utf8').replace(/^(\s*)# (- \{ id: (?:openai|anthropic),)/gm, '$1$2');
    const c = loadConfigText(text, { OPENAI_API_KEY: 'sk-o', ANTHROPIC_API_KEY: 'sk-a' });
    expect(c.providers.map((p) => p.id)).toEqual(['local', 'local-video', 'openai', 'anthropic']);
  });

  it('an error from a config file names the file', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gw-config-'));
    const file = path.join(dir, 'gateway.yaml');
    writeFileSync(file, config({ extra: 'server:\n  port: nope' }));
    expect(configError(() => loadConfig(file, { registry, env: {} })).message.startsWith(`${file}: server.port:`)).toBe(true);
  });
});

describe("stages' own checks of their config (run when the pipelines are built: start, reload, config check)", () => {
  const check = (text: string) => checkPipelines(parse(text), registry, trace.getTracer('t'), createLogger('silent'));

  it("a router's allowed or excluded model that matches no configured model", () => {
    const pipelines = '  default: [auth, validate, auto-router, pareto-router, upstream]';
    expect(configError(() => check(config({ pipelines, extra: 'plugins:\n  auto-router: { allowed_models: [nope/x] }' }))).message).toBe(
      'plugins.auto-router.allowed_models[0]: "nope/x" matches no configured model',
    );
    expect(configError(() => check(config({ pipelines, extra: 'plugins:\n  pareto-router: { excluded_models: [m1, m9*] }' }))).message).toBe(
      'plugins.pareto-router.excluded_models[1]: "m9*" matches no configured model',
    );
    check(config({ pipelines, extra: 'plugins:\n  auto-router: { allowed_models: [m*] }' }));
  });

  it("max-tokens-cap's per_model naming an unknown model", () => {
    expect(configError(() => check(config({ pipelines: '  default: [auth, validate, max-tokens-cap, upstream]', extra: 'plugins:\n  max-tokens-cap: { per_model: { m2: 10 } }' }))).message).toBe(
      'plugins.max-tokens-cap.per_model: unknown model "m2"',
    );
  });

  it("a stage's create() that throws is named after the stage", () => {
    const yaml = config({ pipelines: '  default: [auth, guardrail, upstream]', extra: 'guardrails:\n  - { id: g, patterns: [{ name: p, regex: "(" }] }\nworkspaces:\n  - { name: w, default_guardrail: g }' });
    let message = '';
    try {
      check(yaml);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/^(plugins\.guardrail: |guardrails\[0\])/);
  });

  it("a stage's create() that throws something without a message says so (was `plugins.<id>: null`)", () => {
    const withThrower = new Map(registry);
    for (const thrown of [null, 'boom', new Error('')]) {
      withThrower.set('thrower', { id: 'thrower', configSchema: { type: 'object' }, create: () => { throw thrown; } });
      const c = parseConfigText(config({ pipelines: '  default: [auth, thrower, upstream]' }), { registry: withThrower, env: {} });
      const err = configError(() => checkPipelines(c, withThrower, trace.getTracer('t'), createLogger('silent')));
      expect(err.message).toBe(thrown === 'boom' ? 'plugins.thrower: boom' : `plugins.thrower: the stage's create() threw ${String(thrown)} (not an Error with a message)`);
    }
  });

  it("a stage copy made by the check that kept its services reaches the running gateway's resources afterwards (it threw, and a timer's throw took the gateway down)", async () => {
    const keeper = new Map(registry);
    let kept: Services | undefined;
    keeper.set('keeper', {
      id: 'keeper',
      configSchema: { type: 'object' },
      create: (_c: unknown, services: Services) => {
        kept = services;
        return async (_ctx: unknown, next: () => Promise<void>) => next();
      },
    });
    const c = parseConfigText(config({ pipelines: '  default: [auth, keeper, upstream]' }), { registry: keeper, env: {} });
    const store = { listKeys: async function (this: unknown) { return this === store ? ['k1'] : []; } };
    let running: LateServices | undefined;
    checkPipelines(c, keeper, trace.getTracer('t'), createLogger('silent'), () => running);
    // No gateway yet: said so, naming what was used.
    expect(() => kept!.store.listKeys()).toThrow('a stage used services.store.listKeys of a copy made to check the config, with no gateway running');
    running = { store: store as unknown as Store };
    expect(await kept!.store.listKeys()).toEqual(['k1']);
    // Without a running gateway to hand over to (config check), the same message.
    checkPipelines(c, keeper, trace.getTracer('t'), createLogger('silent'));
    expect(() => kept!.store.listKeys()).toThrow(/of a copy made to check the config/);
  });

  it('inConfigFile names the file in a stage check\'s error, as loadConfig does for the schema\'s (serve, config check and a reload use it)', () => {
    const yaml = config({ pipelines: '  default: [auth, max-tokens-cap, upstream]', extra: 'plugins:\n  max-tokens-cap: { per_model: { m2: 10 } }' });
    const err = configError(() => inConfigFile('conf/gw.yaml', () => check(yaml)));
    expect(err.message).toBe(`${path.resolve('conf/gw.yaml')}: plugins.max-tokens-cap.per_model: unknown model "m2"`);
    // Anything else passes through as it is.
    expect(() => inConfigFile('x.yaml', () => { throw new TypeError('t'); })).toThrow(TypeError);
    expect(inConfigFile('x.yaml', () => 7)).toBe(7);
  });
});

describe('the compiled validators are reused between loads', () => {
  it('one compile per stage-id set; each load still gets its own defaults and its own errors', () => {
    const ids = [...registry.keys()];
    expect(configValidators(ids)).toBe(configValidators(ids));
    expect(configValidators([...ids, 'extra-stage'])).not.toBe(configValidators(ids));
    const first = parse(MINIMAL);
    const second = parse(MINIMAL);
    expect(second).not.toBe(first);
    expect(second.server).toEqual(first.server); // defaults filled in again, on the second object too
    first.server.port = 1;
    expect(second.server.port).not.toBe(1);
    // An error after a good load, and a good load after an error: each load's own outcome.
    expectPathError(MINIMAL.replace('kind: simulated', 'kind: simulated, latncy_ms: 5'), 'providers[0].latncy_ms');
    expect(parse(MINIMAL).providers[0].id).toBe('local');
  });
});
