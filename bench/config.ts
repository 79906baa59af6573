import path from 'node:path';

/**
 * The gateway.yaml every benchmark starts from: SQLite, OTLP telemetry exporting every span to the fake
 * upstream (which accepts /v1/traces), info logging (a section `extra` sets itself replaces the default one), one OpenAI-style and one Anthropic-style provider in
 * front of the fake upstream. `pipeline` and `extra` (top-level YAML sections) vary per variant; `models`
 * (YAML list items over the providers `bench-openai` and `bench-anthropic`), `logLevel` and `telemetry` (a YAML
flow mapping replacing the OTLP export) per benchmark.
 */
const BENCH_MODELS = `  - { id: bench/chat, endpoints: [{ provider: bench-openai, upstream_model: bench-upstream, pricing: { prompt: 1, completion: 2 } }] }
  - { id: bench/messages, endpoints: [{ provider: bench-anthropic, upstream_model: bench-upstream, pricing: { prompt: 3, completion: 15 } }] }`;

export function gatewayYaml(fakeOrigin: string, dir: string, o: { pipeline?: string; extra?: string; models?: string; logLevel?: string; telemetry?: string } = {}): string {
  // A top-level section that `extra` sets itself (e.g. `telemetry: { exporter: none }`) replaces the default one.
  const own = new Set([...(o.extra ?? '').matchAll(/^(\w+):/gm)].map((m) => m[1]));
  const section = (key: string, value: string) => (own.has(key) ? '' : `${key}: ${value}\n`);
  return `
${section('server', '{ host: 127.0.0.1, port: 0, watch_config: false }')}${section('storage', `{ driver: sqlite, path: ${path.join(dir, 'gateway.db')} }`)}${section('telemetry', o.telemetry ?? `{ exporter: otlp, endpoint: ${fakeOrigin}/v1/traces }`)}${section('logging', `{ level: ${o.logLevel ?? 'info'} }`)}providers:
  - { id: bench-openai, kind: openai, base_url: ${fakeOrigin}/v1, api_key: sk-bench-upstream }
  - { id: bench-anthropic, kind: anthropic, base_url: ${fakeOrigin}/v1, api_key: sk-bench-upstream }
models:
${o.models ?? BENCH_MODELS}
pipelines:
  default: ${o.pipeline ?? '[auth, validate, upstream]'}
${o.extra ?? ''}`;
}
