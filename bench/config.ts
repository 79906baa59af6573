import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { NODE_FLAGS } from '../src/node-flags';
import type { ProbeTarget } from './probe';

/** The prompt every benchmark request sends. */
export const BENCH_PROMPT = 'Write one short sentence about foxes.';

/**
 * The node arguments that start the gateway build `main` on `config` as `npm start` does (with the shipped
 * node flags, src/node-flags.ts), `nodeFlags` (a benchmark's own: a profiler, a variant's) after them, so
 * that one of them can override a shipped one.
 */
export function serveArgs(main: string, config: string, nodeFlags: string[] = []): string[] {
  return [...NODE_FLAGS, ...nodeFlags, main, 'serve', '--config', config];
}

/** Creates a gateway key with the CLI of the build `main` for the store of `config`; returns the secret. */
export function createKey(main: string, config: string, name: string): string {
  return execFileSync(process.execPath, [main, 'keys', 'create', '--name', name, '--config', config], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
}

/** The pipeline with the spend stages, and the sections that make every spend check do its work (`bench:spend`). */
export const SPEND_STAGES = '[auth, validate, rate-limit, budget-check, upstream]';
export const SPEND_SECTIONS = `
guardrails: [{ id: team, budget: { limit_usd: 100000, reset_interval: monthly } }]
workspaces:
  - { name: default, default_guardrail: team, budgets: [{ id: ws, limit_usd: 100000, reset_interval: monthly }] }
rate_limits: { key: { requests: 100000000, window_s: 60 } }
spend: { in_flight: { applies_below_balance_usd: 1000000, ceiling_usd: 100000 } }
`;

/** A key with a monthly limit on a prepaid account with credit: the spend variants' key (checked against four budget lines). */
export function createSpendKey(main: string, config: string, name: string): string {
  const cli = (...args: string[]) => execFileSync(process.execPath, [main, ...args, '--config', config], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  const key = cli('keys', 'create', '--name', name, '--limit', '100000', '--limit-reset', 'monthly');
  cli('credits', 'add', '--account', 'default', '--usd', '500000');
  return key;
}

const README = (() => {
  let text: string | undefined;
  return () => (text ??= readFileSync(path.resolve(__dirname, '..', '..', 'README.md'), 'utf8'));
})();

/**
 * An agent-sized chat request (`--agent` of the bench scripts, through scenarioBody, and bench:estimate): a 20 KB system prompt,
 * `turns` earlier turns (800 + 2000 characters), a new question and 12 tools of ~800 characters, all cut from
 * this README (prose and code with non-ASCII text, as real conversations have). Every text starts with
 * `variant`, so different variants share no text. `turns` 10: ~61 KB.
 */
export function agentChatBody(turns: number, variant: number): { model: string; max_tokens: number; messages: { role: string; content: string }[]; tools: unknown[] } {
  const text = README();
  const at = (from: number, chars: number) => text.slice(from % (text.length - chars), (from % (text.length - chars)) + chars);
  const messages: { role: string; content: string }[] = [{ role: 'system', content: `${variant} ${at(0, 20_000)}` }];
  for (let i = 0; i < turns; i++) {
    messages.push({ role: 'user', content: `${variant} ${at(20_000 + i * 3_000, 800)}` });
    messages.push({ role: 'assistant', content: `${variant} ${at(21_000 + i * 3_000, 2_000)}` });
  }
  messages.push({ role: 'user', content: `${variant} ${at(50_000 + turns * 997, 400)}` });
  const tools = Array.from({ length: 12 }, (_, i) => ({
    type: 'function',
    function: { name: `tool_${i}`, description: `${variant} ${at(60_000 + i * 900, 800)}`, parameters: { type: 'object', properties: { q: { type: 'string' } } } },
  }));
  return { model: 'bench/chat', max_tokens: 64, messages, tools };
}

/**
 * The JSON body of a scenario's request (`chat`, `chat-stream`, `messages`, `messages-stream`) naming `model`:
 * the one-sentence prompt, or with `agent` the agent-sized conversation (`agentChatBody(10, 0)`, ~61 KB) in the
 * scenario's API style.
 */
export function scenarioBody(scenario: string, model: string, agent = false): string {
  const messagesStyle = scenario.startsWith('messages');
  let body: Record<string, unknown> = { model, max_tokens: 64, messages: [{ role: 'user', content: BENCH_PROMPT }] };
  if (agent) {
    const chat = agentChatBody(10, 0);
    body = { ...chat, model };
    if (messagesStyle) {
      const [system, ...messages] = chat.messages;
      const tools = chat.tools.map((t) => {
        const f = (t as { function: { name: string; description: string; parameters: unknown } }).function;
        return { name: f.name, description: f.description, input_schema: f.parameters };
      });
      body = { model, max_tokens: chat.max_tokens, system: system.content, messages, tools };
    }
  }
  if (scenario.endsWith('-stream')) body.stream = true;
  return JSON.stringify(body);
}

/** The request of a scenario to the gateway at `origin` with `key`, on the bench models (see scenarioBody). */
export function scenarioRequest(scenario: string, origin: string, key: string, agent = false): ProbeTarget {
  const messages = scenario.startsWith('messages');
  return {
    origin,
    path: messages ? '/api/v1/messages' : '/api/v1/chat/completions',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: scenarioBody(scenario, messages ? 'bench/messages' : 'bench/chat', agent),
  };
}

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
