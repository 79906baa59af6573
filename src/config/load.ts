import type { Logger } from 'pino';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { ErrorObject } from 'ajv';
import { parseDocument } from 'yaml';
import { parseEncryptionKey } from '../auth/byok-seal';
import { guardrailConfigProblem, guardrailStageProblem } from '../guardrails/check';
import { moderationConfigProblem } from '../moderation/config';
import { configValueProblem, durationProblem, headerProblem, pathText, scalarChange, scalarsOf, shownKey, urlProblem } from './values';
import type { StageRegistry } from '../pipeline/types';
import type { GatewayConfig } from './types';
import { videoConfigProblem } from '../videos/config-check';
import { redisUrlProblem } from '../state/redis-url';
import { postgresUrlProblem } from '../store/postgres-url';
import { configValidators } from './validators';
import { envSources, withEnvSources } from './env-sources';

/** A config that cannot be used; `message` starts with the path of the bad field. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** `$${` (a literal `${`), a `${VAR}` or `${VAR:-default}` reference, or any other `${` (not a reference: refused). */
const ENV_REF = /\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}|\$\{/g;

/**
 * Replaces `${VAR}` and `${VAR:-default}` in every string of the parsed YAML tree. An unset variable
 * without a default fails with the path of the field, so a forgotten secret is caught at start. `$${` is a
 * literal `${` (as in Docker Compose), in a default too; any other `${` (no closing brace, or not a variable name) is
 * refused: it was kept as written, so `${API_KEY` sent that text as the key.
 */
export function interpolateEnv(value: unknown, env: NodeJS.ProcessEnv, at = ''): unknown {
  if (typeof value === 'string') {
    if (!value.includes('${')) return value;
    return value.replace(ENV_REF, (m: string, name: string | undefined, hasDefault: string | undefined, def: string | undefined) => {
      if (m === '$${') return '${';
      if (name === undefined) {
        throw new ConfigError(`${at || '(root)'}: \`\${\` starts no variable reference (write \`\${NAME}\` or \`\${NAME:-default}\`, or \`$\${\` for a literal \`\${\`)`);
      }
      // `${A:-${B}}` (nested, as newer Docker Compose reads it) is not read here: its default had been cut at the
      // first `}` and `${B}` sent on as written, to a provider as its key. Refused whether A is set or not, so
      // `config check` finds it in any environment.
      if (def?.replaceAll('$${', '').includes('${')) {
        throw new ConfigError(`${at || '(root)'}: the default of \`\${${name}:-…}\` holds a reference, which is not read (write the default out, or set ${name})`);
      }
      const v = env[name];
      if (v !== undefined && v !== '') return v;
      // A default's `$${` is a literal `${` too, as everywhere else (it had been kept as `$${`).
      if (hasDefault !== undefined) return def?.replaceAll('$${', '${') ?? '';
      throw new ConfigError(`${at || '(root)'}: environment variable ${name} is ${v === '' ? 'set but empty' : 'not set'}`);
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolateEnv(v, env, `${at}[${i}]`));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = interpolateEnv(v, env, at ? `${at}.${shownKey(k)}` : shownKey(k));
    return out;
  }
  return value;
}

/** `/providers/1/kind` → `providers[1].kind`; `prefix` roots the path (e.g. `plugins.upstream`). */
function fieldPath(instancePath: string, extra?: string, prefix = ''): string {
  const parts = instancePath.split('/').slice(1);
  if (extra) parts.push(extra);
  return pathText(parts, prefix);
}

function describe(errors: ErrorObject[], prefix = ''): string {
  // ajv reports every failed oneOf branch; the most specific error is the deepest non-oneOf one.
  const specific = errors.filter((e) => e.keyword !== 'oneOf' && e.keyword !== 'if');
  const pick = (specific.length ? specific : errors).reduce((a, b) =>
    b.instancePath.length > a.instancePath.length ? b : a,
  );
  if (pick.keyword === 'discriminator') {
    const tag = String(pick.params.tag);
    const branches = ((pick.parentSchema as { oneOf?: { properties?: Record<string, { const?: unknown }> }[] })?.oneOf ?? []);
    const allowed = branches.map((b) => b.properties?.[tag]?.const).filter((v) => v !== undefined);
    return `${fieldPath(pick.instancePath, tag, prefix)}: must be one of ${allowed.join(', ')}`;
  }
  if (pick.keyword === 'additionalProperties') {
    // The fields that would be accepted there, so a misspelt one (`latncy_ms`) shows its right spelling.
    const known = Object.keys((pick.parentSchema as { properties?: object } | undefined)?.properties ?? {});
    return `${fieldPath(pick.instancePath, String(pick.params.additionalProperty), prefix)}: unknown field${known.length > 0 ? ` (known: ${known.join(', ')})` : ''}`;
  }
  if (pick.keyword === 'required') {
    // A misspelt key beside it (`pipelines: {defualt: …}`, where any pipeline name is allowed) is named: the
    // message had said only that `default` is required, and the operator saw a `default` in the file.
    const missing = String(pick.params.missingProperty);
    const known = new Set(Object.keys((pick.parentSchema as { properties?: object } | undefined)?.properties ?? {}));
    const data = pick.data && typeof pick.data === 'object' && !Array.isArray(pick.data) ? Object.keys(pick.data) : [];
    // A key the schema does not name, one or two edits away (one for a short name: `id` is not a misspelt `kind`).
    const reach = missing.length <= 4 ? 1 : 2;
    const near = data.find((k) => !known.has(k) && editDistance(k.toLowerCase(), missing.toLowerCase()) <= reach);
    return `${fieldPath(pick.instancePath, missing, prefix)}: is required${near === undefined ? '' : ` (there is \`${near}\`: misspelt?)`}`;
  }
  if (pick.keyword === 'enum' || pick.keyword === 'const') {
    const allowed = (pick.params.allowedValues ?? [pick.params.allowedValue]) as unknown[];
    return `${fieldPath(pick.instancePath, undefined, prefix)}: must be one of ${allowed.join(', ')}`;
  }
  return `${fieldPath(pick.instancePath, undefined, prefix)}: ${pick.message ?? 'is invalid'}`;
}

/** Levenshtein distance, for names of a few characters (a misspelt config key). */
function editDistance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 2 || a.length > 64 || b.length > 64) return 3;
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length];
}

export interface LoadOptions {
  registry: StageRegistry;
  env?: NodeJS.ProcessEnv;
}

/** Validates a parsed config object (after interpolation): schema, stage ids, stage configs, references. */
export function validateConfig(raw: unknown, options: LoadOptions): GatewayConfig {
  const valueProblem = configValueProblem(raw);
  if (valueProblem) throw new ConfigError(valueProblem);
  const scalars = scalarsOf(raw);
  const validators = configValidators([...options.registry.keys()]);
  const validate = validators.config;
  if (!validate(raw)) throw new ConfigError(describe(validate.errors ?? []));
  const config = raw;

  for (const [id, stageConfig] of Object.entries(config.plugins)) {
    const def = options.registry.get(id);
    if (!def) throw new ConfigError(`plugins.${id}: unknown stage id (known: ${[...options.registry.keys()].join(', ')})`);
    const check = validators.stage(def.configSchema);
    const value = stageConfig ?? {};
    if (!check(value)) throw new ConfigError(describe(check.errors ?? [], `plugins.${id}`));
    config.plugins[id] = value;
  }
  // Give every stage in use its defaults even when the operator wrote no config for it.
  for (const list of Object.values(config.pipelines)) {
    for (const id of list ?? []) {
      if (config.plugins[id] !== undefined) continue;
      const value = {};
      // Checked as a written section is: a stage whose schema requires a field must get it (it had been
      // created without it, where `plugins.<id>:` with nothing under it was refused).
      const check = validators.stage(options.registry.get(id)!.configSchema);
      if (!check(value)) throw new ConfigError(describe(check.errors ?? [], `plugins.${id}`));
      config.plugins[id] = value;
    }
  }
  const changed = scalarChange(scalars, config) ?? durationProblem(config) ?? urlProblem(config) ?? headerProblem(config);
  if (changed) throw new ConfigError(changed);
  checkReferences(config, options.registry);
  return config;
}

function checkReferences(config: GatewayConfig, registry: StageRegistry): void {
  const providerIds = new Set<string>();
  config.providers.forEach((p, i) => {
    if (providerIds.has(p.id)) throw new ConfigError(`providers[${i}].id: duplicate provider id "${p.id}"`);
    providerIds.add(p.id);
  });
  const modelIds = new Set<string>();
  config.models.forEach((m, i) => {
    if (modelIds.has(m.id)) throw new ConfigError(`models[${i}].id: duplicate model id "${m.id}"`);
    modelIds.add(m.id);
    m.endpoints.forEach((e, j) => {
      if (!providerIds.has(e.provider)) {
        throw new ConfigError(`models[${i}].endpoints[${j}].provider: unknown provider "${e.provider}"`);
      }
    });
  });
  checkSpendReferences(config);
  const moderationProblem = moderationConfigProblem(config);
  if (moderationProblem) throw new ConfigError(moderationProblem);
  const videoProblem = videoConfigProblem(config);
  if (videoProblem) throw new ConfigError(videoProblem);
  const redisProblem = config.state.driver === 'redis' ? redisUrlProblem(config.state.url ?? '') : null;
  if (redisProblem) throw new ConfigError(redisProblem);
  const storageProblem = config.storage.driver === 'postgres' ? postgresUrlProblem(config.storage.url) : null;
  if (storageProblem) throw new ConfigError(storageProblem);
  // Empty (e.g. `${GATEWAY_BYOK_KEY:-}` with the variable unset) means not configured.
  if (config.byok.encryption_key) {
    try {
      parseEncryptionKey(config.byok.encryption_key);
    } catch (err) {
      throw new ConfigError(`byok.encryption_key: ${(err as Error).message}`);
    }
  }
  for (const [name, list] of Object.entries(config.pipelines)) {
    if (!list) continue;
    for (const required of ['auth', 'upstream']) {
      if (!list.includes(required)) throw new ConfigError(`pipelines.${name}: must include the "${required}" stage`);
    }
    if (list[0] !== 'auth') throw new ConfigError(`pipelines.${name}: "auth" must be the first stage`);
    const upstreamAt = list.indexOf('upstream');
    const late = list.slice(upstreamAt + 1).find((id) => registry.get(id)?.beforeUpstream);
    if (late) throw new ConfigError(`pipelines.${name}: "${late}" must come before "upstream" (its checks would run after the provider was called and billed)`);
  }
}

/** Guardrails, workspaces and rate-limited models named anywhere must exist and be unique. */
function checkSpendReferences(config: GatewayConfig): void {
  const guardrails = new Set<string>();
  config.guardrails.forEach((g, i) => {
    if (guardrails.has(g.id)) throw new ConfigError(`guardrails[${i}].id: duplicate guardrail id "${g.id}"`);
    guardrails.add(g.id);
    const contentProblem = guardrailConfigProblem(g, i);
    if (contentProblem) throw new ConfigError(contentProblem);
  });
  const stageProblem = guardrailStageProblem(config);
  if (stageProblem) throw new ConfigError(stageProblem);
  const known = (id: string | undefined, at: string) => {
    if (id !== undefined && !guardrails.has(id)) throw new ConfigError(`${at}: unknown guardrail "${id}"`);
  };
  const workspaces = new Set<string>();
  config.workspaces.forEach((w, i) => {
    if (workspaces.has(w.name)) throw new ConfigError(`workspaces[${i}].name: duplicate workspace "${w.name}"`);
    workspaces.add(w.name);
    known(w.default_guardrail, `workspaces[${i}].default_guardrail`);
    w.members.forEach((m, j) => known(m.guardrail, `workspaces[${i}].members[${j}].guardrail`));
    w.keys.forEach((k, j) => known(k.guardrail, `workspaces[${i}].keys[${j}].guardrail`));
    const budgetIds = new Set<string>();
    w.budgets.forEach((b, j) => {
      if (budgetIds.has(b.id)) throw new ConfigError(`workspaces[${i}].budgets[${j}].id: duplicate budget id "${b.id}"`);
      budgetIds.add(b.id);
    });
  });
  const accounts = new Set<string>();
  config.accounts.forEach((a, i) => {
    if (accounts.has(a.name)) throw new ConfigError(`accounts[${i}].name: duplicate account "${a.name}"`);
    accounts.add(a.name);
  });
  config.workspaces.forEach((w, i) => {
    // A misspelt account was created, empty and prepaid, and every request of the workspace refused (402).
    if (w.account !== 'default' && !accounts.has(w.account)) {
      throw new ConfigError(`workspaces[${i}].account: unknown account "${w.account}" (declare it under accounts, or use "default")`);
    }
  });
  // A line may name a video model too: it limits job creation (POST /videos).
  const models = new Set([...config.models, ...config.video_models].map((m) => m.id));
  // Two lines with the same model, per and window_s share one counter, and each request counted in it once
  // per line: `requests: 5` and `requests: 10` on one minute admitted 3 a minute.
  const lineOf = new Map<string, number>();
  config.rate_limits.models.forEach((r, i) => {
    if (!models.has(r.model)) throw new ConfigError(`rate_limits.models[${i}].model: unknown model "${r.model}"`);
    const same = `${r.model}\0${r.per}\0${r.window_s}`;
    const first = lineOf.get(same);
    if (first !== undefined) {
      throw new ConfigError(
        `rate_limits.models[${i}]: repeats rate_limits.models[${first}] (model "${r.model}", per ${r.per}, window_s ${r.window_s}); keep one line with the requests you mean`,
      );
    }
    lineOf.set(same, i);
  });
}

/**
 * Reads, interpolates and validates a gateway.yaml.
 *
 * @example const config = loadConfig('./gateway.yaml', { registry });
 */
export function loadConfig(file: string, options: LoadOptions): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`${path.resolve(file)}: cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  return inConfigFile(file, () => parseConfigText(text, options));
}

/**
 * Runs `check` of the config in `file`; a config error it throws is prefixed with the file (an operator with
 * several configs, or a reload's log line, sees which one): the schema's errors and the stages' own checks
 * when the pipelines are built (`checkPipelines`) alike.
 *
 * @example inConfigFile(file, () => checkPipelines(config, registry, tracer, logger));
 */
export function inConfigFile<T>(file: string, check: () => T): T {
  try {
    return check();
  } catch (err) {
    // By name: a stage may throw a ConfigError class of its own (the plugin guide's example does).
    if ((err as Error)?.name === 'ConfigError') throw new ConfigError(`${path.resolve(file)}: ${(err as Error).message}`);
    throw err;
  }
}

export function parseConfigText(text: string, options: LoadOptions): GatewayConfig {
  // YAML allows no NUL character. A file saved as UTF-16 (an editor's "Unicode") has one after every ASCII
  // letter, and read as UTF-8 it had been one long string: `(root): must be a mapping`, which told nothing.
  if (text.includes('\0')) throw new ConfigError('(file): is not UTF-8 text (it holds NUL bytes: saved as UTF-16? save it as UTF-8)');
  let parsed: unknown;
  try {
    // merge: YAML 1.1's `<<: *anchor` merge keys, which operators use to share endpoint settings. logLevel
    // `error`: YAML's warnings went to stderr (process.emitWarning) quoting the source line, secret and all.
    const doc = parseDocument(text, { merge: true, logLevel: 'error' });
    if (doc.errors.length > 0) throw doc.errors[0];
    // An unquoted value starting with `!` is a tag to YAML: `api_key: !abc def` had loaded as `def`. The tag
    // is not shown: it is the operator's value.
    const tag = doc.warnings.find((w) => w.code === 'TAG_RESOLVE_FAILED');
    if (tag) {
      const at = tag.linePos?.[0];
      throw new ConfigError(`(yaml): a tag YAML does not know${at ? ` at line ${at.line}, column ${at.col}` : ''} (a value that starts with ! must be quoted)`);
    }
    parsed = doc.toJS();
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    // An unquoted `${VAR}` inside a flow mapping (`{ api_key: ${KEY} }`) reads as a nested mapping to YAML.
    const hint = /\{[^}\n]*:\s*\$\{/.test(text) ? " (a ${VAR} inside { … } must be quoted: '${VAR}')" : '';
    throw new ConfigError(`(yaml): ${(err as Error).message.split('\n')[0].replace(/:\s*$/, '')}${hint}`);
  }
  // An empty file (a truncated copy, a ConfigMap key with nothing in it) had been told as `must be a mapping` too.
  if (parsed === null || parsed === undefined) throw new ConfigError('(root): the file holds no settings (it is empty, or only comments)');
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError('(root): must be a mapping');
  const env = options.env ?? process.env;
  try {
    return validateConfig(interpolateEnv(parsed, env), options);
  } catch (err) {
    if (err instanceof ConfigError) throw new ConfigError(withEnvSources(err.message, envSources(parsed, env)));
    throw err;
  }
}

/**
 * The `plugins.<id>` sections of stages no pipeline runs: their settings do nothing (`plugins.max-tokens-cap`
 * written, the stage never added to a pipeline, and the cap never applied). Not refused (an operator may
 * keep a section while a stage is out of the pipelines for a while); `serve`, a reload and `config check`
 * warn, naming them. Found by an operator audit.
 */
export function unusedPluginSections(config: GatewayConfig): string[] {
  const running = new Set(Object.values(config.pipelines).flatMap((list) => list ?? []));
  return Object.keys(config.plugins).filter((id) => !running.has(id)).map((id) => `plugins.${id}`);
}

/**
 * The model endpoints with no price at all (every price 0 or left out: `pricing` defaults to zeros) of models
 * not named `…:free`: every request they serve is billed $0, and no credit, budget or spend limit ever sees
 * it. Not refused (a local model may be free on purpose); `serve`, a reload and `config check` warn, naming them.
 */
export function unpricedEndpoints(config: GatewayConfig): string[] {
  return endpointsWhere(config, (free, priced) => !free && !priced);
}

/**
 * The endpoints with a price of models named `…:free`: their requests are billed that price, which the
 * account pays, and are counted against the free-model limits too (`free_models`); a name and a price that
 * disagree are rarely meant. `serve`, a reload and `config check` warn, naming each.
 */
export function pricedFreeEndpoints(config: GatewayConfig): string[] {
  return endpointsWhere(config, (free, priced) => free && priced);
}

function endpointsWhere(config: GatewayConfig, pick: (free: boolean, priced: boolean) => boolean): string[] {
  const out: string[] = [];
  config.models.forEach((m, i) => {
    m.endpoints.forEach((e, j) => {
      const p = e.pricing;
      const priced = !!(p.prompt || p.completion || p.request || p.cached_read || p.cache_write || p.cache_write_1h);
      if (pick(m.id.endsWith(':free'), priced)) out.push(`models[${i}].endpoints[${j}] (${m.id} via ${e.provider})`);
    });
  });
  return out;
}

/** What `serve`, a reload and `config check` say of a priced endpoint of a `…:free` model. */
export const PRICED_FREE_WARNING = 'has pricing, but its model is named …:free: its requests are billed that price and also count against the free-model limits (drop the pricing, or the :free)';

/** Logs `unusedPluginSections` and `unpricedEndpoints` (at start and on a reload). */
export function warnConfigGaps(config: GatewayConfig, logger: Logger): void {
  const sections = unusedPluginSections(config);
  if (sections.length > 0) logger.warn({ sections }, 'plugin settings for stages no pipeline runs: they do nothing');
  const endpoints = unpricedEndpoints(config);
  if (endpoints.length > 0) logger.warn({ endpoints }, 'model endpoints without pricing: their requests are billed $0 (set pricing, or name the model …:free)');
  const priced = pricedFreeEndpoints(config);
  if (priced.length > 0) logger.warn({ endpoints: priced }, `model endpoints that ${PRICED_FREE_WARNING}`);
}
