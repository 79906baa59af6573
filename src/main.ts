#!/usr/bin/env node
// First, before anything else loads: holds the young generation small during start-up (README, Performance).
import './start-heap';
import { takeEarlyHup } from './early-hup';
import { existsSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { trace } from '@opentelemetry/api';
import { registry } from '../plugins';
import { byokContext, maskProviderKey, parseEncryptionKey, sealProviderKey } from './auth/byok-seal';
import { ConfigError, inConfigFile, loadConfig, PRICED_FREE_WARNING, pricedFreeEndpoints, unpricedEndpoints, unusedPluginSections, warnConfigGaps } from './config/load';
import { configReloader } from './config/reload';
import type { GatewayConfig } from './config/types';
import { fileStamp, SETTLE_MS, watchFile } from './config/watch';
import { capYoungGeneration, collectStartupGarbage, tuneHeap } from './heap-tuning';
import { recentBodyBytes } from './routes/body';
import { checkPipelines } from './runtime';
import { routeDiagToLog } from './telemetry/diag-log';
import { closeUpstreamPool, createGateway, type Gateway } from './server';
import { generateKey, hashKey, maskKey } from './store/key-secret';
import { openStore } from './store';
import { ensureDeclared, misplacedMessage, warnMisplaced } from './store/declared';
import type { LimitReset, Store, Workspace } from './store/types';
import { createLogger } from './telemetry/log';
import { withoutGatewayKeys } from './telemetry/span-text';
import { FINAL_FLUSH_MS, startTelemetry } from './telemetry/otel';

const USAGE = `Usage: gateway <command> [options]

Commands:
  help, --help                          print this text
  serve [--config PATH]                 start the gateway (config: --config, $GATEWAY_CONFIG, ./gateway.yaml)
  config check [--config PATH]          validate a config file and exit
  keys create --name N [--management] [--workspace W] [--user U] [--limit USD
              [--limit-reset daily|weekly|monthly] [--include-byok-in-limit]] [--expires-at ISO]
                                        create a key and print it once (U: the member who owns it)
  keys list                             list keys (masked)
  keys revoke ID                        revoke a key
  credits add --account A --usd N       add credits to an account (id or name; "default" exists)
  byok set --workspace W --provider P   store workspace W's own API key for provider P, read from stdin
                                        (e.g. < key.txt; needs byok.encryption_key in the config)
  byok list [--workspace W]             list stored workspace provider keys (masked)
  byok delete --workspace W --provider P
                                        delete a workspace's provider key

Every command reads the config (--config PATH, else $GATEWAY_CONFIG, else ./gateway.yaml) and takes only
the options shown for it.
`;

const OPTIONS = {
  config: { type: 'string' },
  name: { type: 'string' },
  management: { type: 'boolean' },
  workspace: { type: 'string' },
  user: { type: 'string' },
  'include-byok-in-limit': { type: 'boolean' },
  limit: { type: 'string' },
  'limit-reset': { type: 'string' },
  'expires-at': { type: 'string' },
  account: { type: 'string' },
  usd: { type: 'string' },
  provider: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

const ISO_8601 = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** A CLI mistake: printed without a stack, exit code 2. */
class UsageError extends Error {}

function configPath(value: string | undefined): string {
  // Empty (an unset shell variable, `Environment=GATEWAY_CONFIG=`) had been read as the current folder:
  // `config error: /srv/gw: cannot read (ENOENT)`, naming neither the option nor the variable.
  if (value === '') throw new UsageError('--config is empty: name the config file (--config PATH)');
  const env = process.env.GATEWAY_CONFIG;
  if (value === undefined && env === '') throw new UsageError('GATEWAY_CONFIG is set but empty: set it to the config file, or unset it to read ./gateway.yaml');
  return value ?? env ?? './gateway.yaml';
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals, tokens } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true, tokens: true });
  const [command, sub, arg] = positionals;
  // `gateway help` had been `unknown command: help`, exit 2.
  if (values.help || !command || command === 'help') {
    process.stdout.write(USAGE);
    return command || values.help ? 0 : 2;
  }
  const extra = positionals.slice(command === 'serve' ? 1 : `${command} ${sub}` === 'keys revoke' ? 3 : 2);
  // An argument no command takes was ignored: `keys revoke a b` revoked a, `serve a.yaml` served ./gateway.yaml.
  if (extra.length > 0 && (command === 'serve' || COMMANDS[`${command} ${sub ?? ''}`] || (command === 'config' && sub === 'check'))) {
    throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])} after "${positionals.slice(0, positionals.length - extra.length).join(' ')}" (options start with --, e.g. --config PATH)`);
  }
  const name = command === 'serve' ? 'serve' : `${command} ${sub ?? ''}`;
  // An option the command does not take had been ignored: `keys create --account acme` made the key in
  // `default`, `keys list --workspace w` listed every key.
  const takes = COMMAND_OPTIONS[name];
  // A mistyped command is told so before any config is read or store opened (or created).
  if (!takes) {
    // `gateway keys` had been told `unknown command: keys`, naming none of the commands it starts.
    const subs = Object.keys(COMMAND_OPTIONS).filter((n) => n.startsWith(`${command} `)).map((n) => n.slice(command.length + 1));
    if (subs.length > 0 && !sub) throw new UsageError(`${command} needs a command after it: ${subs.join(', ')}`);
    throw new UsageError(`unknown command: ${positionals.join(' ')}${subs.length > 0 ? ` (${command} takes ${subs.join(', ')})` : ''}`);
  }
  const stray = (Object.keys(values) as Option[]).find((o) => o !== 'config' && !takes.includes(o));
  if (stray) throw new UsageError(`--${stray} is not an option of "${name}" (${takes.length > 0 ? `it takes ${takes.map((o) => `--${o}`).join(', ')} and --config` : 'it takes only --config'})`);
  // No option repeats: `--name a --name b` had silently made the key `b`, `--workspace` twice used the last one.
  const given = tokens.flatMap((t) => (t.kind === 'option' ? [t.name] : []));
  const twice = given.find((o, i) => given.indexOf(o) !== i);
  if (twice) throw new UsageError(`--${twice} is given more than once: give it once`);
  const file = configPath(values.config);
  if (command === 'serve') return serve(file);
  if (command === 'config' && sub === 'check') {
    // The schema, then every stage's own checks of its config, exactly as `serve` runs them.
    const checked = loadConfig(file, { registry });
    inConfigFile(file, () => checkPipelines(checked, registry, trace.getTracer('config-check'), createLogger('silent')));
    for (const section of unusedPluginSections(checked)) process.stderr.write(`warning: ${section} is set, but no pipeline runs that stage: its settings do nothing\n`);
    for (const endpoint of unpricedEndpoints(checked)) process.stderr.write(`warning: ${endpoint} has no pricing: its requests are billed $0 (set pricing, or name the model …:free)\n`);
    for (const endpoint of pricedFreeEndpoints(checked)) process.stderr.write(`warning: ${endpoint} ${PRICED_FREE_WARNING}\n`);
    process.stdout.write(`${file}: ok\n`);
    return 0;
  }
  const run = COMMANDS[name];
  // So are arguments that need no store to be found wrong (`keys create` without --name had created the
  // store, an empty database, before it said so).
  PRECHECKS[`${command} ${sub ?? ''}`]?.(values, arg);
  const config = loadConfig(file, { registry });
  const fresh = newDatabase(config);
  const store = await openStore(config.storage);
  // A relative storage.path is found from the current folder, not the config's: a command run from another
  // folder than serve's had made a second, empty database without a word, and its key was unknown (401).
  if (fresh) process.stderr.write(`warning: no database at ${fresh.file} (storage.path ${fresh.path}, from the current folder ${process.cwd()}): a new, empty one was made; a gateway serving another database does not see what this command does\n`);
  try {
    // Told here as `serve` tells it: `keys create --workspace team-a` had made, without a word, a key that bills
    // the account the store keeps team-a under, not the one gateway.yaml declares.
    for (const m of (await ensureDeclared(store, config)).elsewhere) process.stderr.write(`warning: ${misplacedMessage(m)}\n`);
    return await run(store, config, values, arg);
  } finally {
    await store.close();
  }
}

/**
 * The SQLite database a relative `storage.path` names from the current folder when no file is there yet (the
 * command would make it), else null. An absolute path names one file wherever the command runs.
 */
function newDatabase(config: GatewayConfig): { file: string; path: string } | null {
  if (config.storage.driver !== 'sqlite' || config.storage.path === ':memory:' || config.storage.path === '' || path.isAbsolute(config.storage.path)) return null;
  const file = path.resolve(config.storage.path);
  return existsSync(file) ? null : { file, path: config.storage.path };
}

/** The commands that work on the store, by `<command> <sub>`: one list for the dispatch and the typo check. */
const COMMANDS: Record<string, (store: Store, config: GatewayConfig, v: Values, arg: string | undefined) => Promise<number>> = {
  'keys create': (store, _c, v) => keysCreate(store, v),
  'keys list': (store) => keysList(store),
  'keys revoke': async (store, _c, _v, arg) => {
    // The id is there (PRECHECKS). Not a usage mistake (the command was right): no usage text after it, exit 1.
    if (!(await store.revokeKey(arg!))) {
      // The key itself in place of its id: the error is shown masked (below), and says what the id is.
      const what = arg!.includes('...') ? "a key's label" : 'a key';
      const key = arg!.startsWith('sk-gw-') ? `: that is ${what}, not a key id (the id is the first column of keys list, the key's last 4 characters in its label)` : ' (see keys list)';
      throw new Error(`no active key with id ${arg}${key}`);
    }
    process.stdout.write(`revoked ${arg} (running gateways stop accepting it within 5 seconds)\n`);
    return 0;
  },
  'credits add': (store, config, v) => creditsAdd(store, config, v),
  'byok set': (store, config, v) => byokSet(store, config, v),
  'byok list': (store, config, v) => byokList(store, config, v),
  'byok delete': (store, _c, v) => byokDelete(store, v),
};

/** The checks of a command's arguments that need no store, run before the config is read and the store opened. */
const PRECHECKS: Record<string, (v: Values, arg: string | undefined) => void> = {
  'keys create': (v) => void keyRequest(v),
  'keys revoke': (_v, arg) => {
    if (!arg) throw new UsageError('keys revoke needs the key id (see `gateway keys list`)');
  },
};

type Option = keyof typeof OPTIONS;

/** The options each command takes, besides --config and --help (every command reads the config). */
const COMMAND_OPTIONS: Record<string, readonly Option[]> = {
  serve: [],
  'config check': [],
  'keys create': ['name', 'management', 'workspace', 'user', 'limit', 'limit-reset', 'include-byok-in-limit', 'expires-at'],
  'keys list': [],
  'keys revoke': [],
  'credits add': ['account', 'usd'],
  'byok set': ['workspace', 'provider'],
  'byok list': ['workspace'],
  'byok delete': ['workspace', 'provider'],
};

type Values = { [K in keyof typeof OPTIONS]?: (typeof OPTIONS)[K]['type'] extends 'boolean' ? boolean : string };

/** The calendar date of an ISO 8601 text exists (Date.parse rolls 2027-02-30 over to March 2). */
function realDate(text: string): boolean {
  const [y, m, d] = text.slice(0, 10).split('-').map(Number);
  const date = new Date(Date.UTC(y, m - 1, d));
  return date.getUTCFullYear() === y && date.getUTCMonth() === m - 1 && date.getUTCDate() === d;
}

/**
 * A USD amount as an operator types it: decimal digits with an optional fraction. `Number()` alone also read
 * `0x10` as 16, `1e3` as 1000 and `''` as 0 (an unset shell variable); those are NaN here, a usage error.
 */
function usdAmount(text: string): number {
  const n = /^\s*(\d+(\.\d*)?|\.\d+)\s*$/.test(text) ? Number(text) : Number.NaN;
  // Past MAX_USD a float has no micro-dollars left (1e23 printed as 1e+23, and an amount added later was lost).
  return n <= MAX_USD ? n : Number.NaN;
}

/** The largest `--usd` or `--limit`: below it a float still holds every micro-dollar (1e9 × 1e6 < 2^53). */
const MAX_USD = 1_000_000_000;

/** The longest key or workspace name, on both engines (as the config's `accounts[].name` and `workspaces[].name`). */
const MAX_NAME = 200;

/** C0 and C1 control characters and DEL: tabs, line breaks, terminal escapes. */
const CONTROL_CHARS = /[\x00-\x1f\x7f-\x9f]/;

/** The checked arguments of `keys create` (no store needed: checked before one is opened, and again when used). */
function keyRequest(v: Values): { name: string; limit: number | null; reset: LimitReset | undefined; expiresAt: string | null } {
  if (!v.name) throw new UsageError('keys create needs --name');
  if (v.workspace !== undefined && v.workspace.trim() === '') throw new UsageError('--workspace must name a workspace');
  // `keys list` and `byok list` print one tab-separated line per row: a tab or line break in a name shifted or
  // split its row (a script reading the id column read the name), and an escape sequence reached the terminal.
  for (const option of ['name', 'workspace'] as const) {
    if (CONTROL_CHARS.test(v[option] ?? '')) throw new UsageError(`--${option} must be one line without tabs or control characters`);
    // PostgreSQL's unique index on workspace names refuses one past ~2.7 KB (an unclear error) where SQLite took it.
    if ((v[option]?.length ?? 0) > MAX_NAME) throw new UsageError(`--${option} must be at most ${MAX_NAME} characters`);
  }
  // Number('') is 0: an unset shell variable must not make a key whose every paid request is refused.
  const limit = v.limit === undefined ? null : usdAmount(v.limit);
  if (limit !== null && !(Number.isFinite(limit) && limit >= 0)) throw new UsageError(`--limit must be a non-negative number (USD, at most ${MAX_USD})`);
  const reset = v['limit-reset'] as LimitReset | undefined;
  if (reset !== undefined && !['daily', 'weekly', 'monthly'].includes(reset)) throw new UsageError('--limit-reset must be daily, weekly or monthly');
  if (reset !== undefined && limit === null) throw new UsageError('--limit-reset needs --limit');
  if (v['include-byok-in-limit'] && limit === null) throw new UsageError('--include-byok-in-limit needs --limit');
  if (v.user !== undefined && !/^[A-Za-z0-9_.@:-]{1,128}$/.test(v.user)) throw new UsageError('--user must be 1-128 characters of letters, digits and _.@:-');
  let expiresAt: string | null = null;
  if (v['expires-at'] !== undefined) {
    // Date.parse alone accepts "5" (as a year-month); require an ISO 8601 date or date-time.
    // A date-time without an offset is UTC, as a date alone is and as `keys list` shows it: Date.parse had read
    // `2027-01-31T00:00` in the machine's local time zone.
    const text = /T[^Z+-]*$/.test(v['expires-at']) ? `${v['expires-at']}Z` : v['expires-at'];
    const t = ISO_8601.test(v['expires-at']) && realDate(v['expires-at']) ? Date.parse(text) : Number.NaN;
    if (Number.isNaN(t)) throw new UsageError('--expires-at must be an ISO 8601 timestamp, e.g. 2027-01-31T00:00:00Z');
    expiresAt = new Date(t).toISOString();
  }
  return { name: v.name, limit, reset, expiresAt };
}

async function keysCreate(store: Store, v: Values): Promise<number> {
  const { name, limit, reset, expiresAt } = keyRequest(v);
  // Workspaces declared in gateway.yaml exist already (in their account); another name is created in `default`.
  const fallback = await store.ensureAccount('default');
  const workspace = (await store.findWorkspace(v.workspace ?? 'default')) ?? (await store.ensureWorkspace(v.workspace!, fallback.id));
  const secret = generateKey();
  const key = await store.createKey({
    hash: hashKey(secret),
    label: maskKey(secret),
    name,
    workspaceId: workspace.id,
    creatorUserId: v.user ?? 'cli',
    isManagement: v.management === true,
    limitUsd: limit,
    limitReset: reset ?? null,
    includeByokInLimit: v['include-byok-in-limit'] === true,
    expiresAt,
  });
  process.stdout.write(`${secret}\n`);
  process.stderr.write(`key ${key.id} (${key.label}) in workspace ${workspace.name}; store it now, it is not shown again\n`);
  return 0;
}

async function keysList(store: Store): Promise<number> {
  const rows = await store.listKeys();
  const lines = rows.map((k) =>
    [k.id, k.name, k.label, k.isManagement ? 'management' : 'regular', k.revokedAt ? 'revoked' : k.disabled ? 'disabled' : k.expiresAt && Date.parse(k.expiresAt) <= Date.now() ? 'expired' : 'active', k.limitUsd === null ? '-' : `${k.limitUsd} ${k.limitReset ?? 'lifetime'}`, k.expiresAt ?? '-'].join('\t'),
  );
  process.stdout.write(['id\tname\tlabel\tkind\tstatus\tlimit\texpires_at', ...lines].join('\n') + '\n');
  return 0;
}

async function creditsAdd(store: Store, config: GatewayConfig, v: Values): Promise<number> {
  const usd = v.usd === undefined ? Number.NaN : usdAmount(v.usd);
  if (!v.account || v.usd === undefined || !Number.isFinite(usd) || usd <= 0) throw new UsageError(`credits add needs --account A and --usd N (0 < N ≤ ${MAX_USD})`);
  const account = await store.findAccount(v.account);
  // The accounts there are: `default` and the declared ones (made in the store above); the bare name told no more.
  if (!account) throw new UsageError(`no account ${v.account} (accounts: ${['default', ...config.accounts.map((a) => a.name).filter((n) => n !== 'default')].join(', ')}; declare one under accounts: in ${configPath(v.config)})`);
  const after = await store.addCredits(account.id, usd);
  // Balances are sums of float amounts: printed to the micro-dollar (194.36, not 194.3600000000001).
  process.stdout.write(`account ${after.name}: balance ${Number(after.balanceUsd.toFixed(6))} USD\n`);
  return 0;
}

/** Longest provider key accepted on stdin (real ones are well under 1 KiB). */
const MAX_PROVIDER_KEY = 4096;

async function existingWorkspace(store: Store, name: string | undefined, command: string): Promise<Workspace> {
  if (!name) throw new UsageError(`${command} needs --workspace W`);
  const workspace = await store.findWorkspace(name);
  if (!workspace) throw new UsageError(`no workspace ${name} (declare it under workspaces: in the config, or create a key in it)`);
  return workspace;
}

async function byokSet(store: Store, config: GatewayConfig, v: Values): Promise<number> {
  if (!v.provider) throw new UsageError('byok set needs --provider P (the key itself is read from stdin)');
  if (!config.byok.encryption_key) {
    throw new UsageError('byok set needs byok.encryption_key in the config: 32 bytes, base64 or hex, e.g. ${GATEWAY_BYOK_KEY} set from `openssl rand -base64 32`');
  }
  const provider = config.providers.find((p) => p.id === v.provider);
  if (!provider) throw new UsageError(`no provider ${v.provider} in the config (known: ${config.providers.map((p) => p.id).join(', ')})`);
  if (provider.kind === 'simulated' || provider.kind === 'simulated-video') throw new UsageError(`provider ${provider.id} is simulated and takes no API key`);
  const workspace = await existingWorkspace(store, v.workspace, 'byok set');
  const plaintext = await readProviderKey();
  const sealed = sealProviderKey(plaintext, parseEncryptionKey(config.byok.encryption_key), byokContext(workspace.id, provider.id));
  const label = maskProviderKey(plaintext);
  await store.putByokKey({ workspaceId: workspace.id, provider: provider.id, secret: sealed, label });
  process.stdout.write(`stored ${label} for provider ${provider.id} in workspace ${workspace.name} (running gateways use it within 5 seconds)\n`);
  return 0;
}

/**
 * The provider key from stdin (a pipe, a file, or one line typed at a terminal), so it never appears in
 * shell history or in the process list.
 */
async function readProviderKey(): Promise<string> {
  const stdin = process.stdin;
  if (stdin.isTTY) process.stderr.write('Provider API key, then Enter (the input is shown; prefer `< key.txt`): ');
  let text = '';
  for await (const chunk of stdin.setEncoding('utf8')) {
    text += chunk as string;
    if (text.length > MAX_PROVIDER_KEY) throw new UsageError(`the provider key on stdin is longer than ${MAX_PROVIDER_KEY} characters`);
    if (stdin.isTTY && text.includes('\n')) break;
  }
  const key = (stdin.isTTY ? text.split('\n')[0] : text).trim();
  if (!key) throw new UsageError('byok set reads the provider key from stdin, and stdin was empty (e.g. `gateway byok set … < key.txt`)');
  // Also refuses what could not go into an HTTP header: a character above U+00FF (a curly quote or a zero-width
  // space pasted with the key) had been stored, and every call with it failed as "could not be reached".
  if (/[\s\x00-\x1f\x7f]|[^\x00-\xff]/.test(key)) throw new UsageError('the provider key on stdin must be one line without spaces or control characters, of characters an HTTP header can carry (no curly quotes or zero-width spaces)');
  return key;
}

async function byokList(store: Store, config: GatewayConfig, v: Values): Promise<number> {
  let workspaces: Workspace[];
  if (v.workspace !== undefined) workspaces = [await existingWorkspace(store, v.workspace, 'byok list')];
  else {
    // The store does not list workspaces; each one is `default`, declared in the config, or was created for a key.
    const refs = new Set(['default', ...config.workspaces.map((w) => w.name), ...(await store.listKeys()).map((k) => k.workspaceId)]);
    const found = await Promise.all([...refs].map((ref) => store.findWorkspace(ref)));
    workspaces = [...new Map(found.filter((w): w is Workspace => w !== null).map((w) => [w.id, w])).values()];
  }
  const lines: string[] = [];
  for (const w of workspaces) for (const k of await store.listByokKeys(w.id)) lines.push([w.name, k.provider, k.label, k.createdAt].join('\t'));
  process.stdout.write(['workspace\tprovider\tlabel\tcreated_at', ...lines].join('\n') + '\n');
  return 0;
}

async function byokDelete(store: Store, v: Values): Promise<number> {
  if (!v.provider) throw new UsageError('byok delete needs --provider P');
  const workspace = await existingWorkspace(store, v.workspace, 'byok delete');
  // Not a usage mistake (the command was right), as `keys revoke` of a key that is not there: exit 1, no usage text.
  if (!(await store.deleteByokKey(workspace.id, v.provider))) throw new Error(`workspace ${workspace.name} has no key for provider ${v.provider} (see byok list)`);
  process.stdout.write(`deleted the ${v.provider} key of workspace ${workspace.name} (running gateways stop using it within 5 seconds)\n`);
  return 0;
}

/** Why `server.host` / `server.port` cannot be listened on, naming the field (Node's message named neither). */
function listenProblem(err: NodeJS.ErrnoException, host: string, port: number): string {
  const why: Record<string, string> = {
    EADDRINUSE: `server.port: ${port} is in use on ${host} (another process listens there)`,
    EACCES: `server.port: ${port} needs privileges this process does not have`,
    EADDRNOTAVAIL: `server.host: ${host} is not an address of this machine`,
    ENOTFOUND: `server.host: ${host} is not a known host name`,
    EAI_AGAIN: `server.host: ${host} could not be resolved`,
  };
  return why[err.code ?? ''] ?? `cannot listen on ${host}:${port}: ${err.message}`;
}

/**
 * `watchFile`, or a warning when the folder cannot be watched (ENOSPC: the host's inotify limits, shared by
 * every process of the user; EACCES): the watcher is a convenience, SIGHUP still reloads, and its throw had
 * ended `serve` after the store was opened, naming no setting.
 */
function watchConfig(file: string, onChange: () => void, logger: ReturnType<typeof createLogger>, readAs: string): () => void {
  try {
    return watchFile(file, onChange, SETTLE_MS, readAs);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    logger.warn({ code }, `server.watch_config: the folder of ${file} cannot be watched (${code}); edits are applied on SIGHUP only (kill -HUP <pid>), or set watch_config: false`);
    return () => undefined;
  }
}

async function serve(file: string): Promise<number> {
  // Taken before the read: an edit from here until the watch is in place is seen then (`watchFile`'s `readAs`).
  const readAs = fileStamp(file);
  const config = loadConfig(file, { registry });
  tuneHeap();
  const logger = createLogger(config.logging.level);
  // Every stage's checks of its config, before anything is opened or created (a refused config leaves no store behind).
  let gateway: Gateway | undefined;
  inConfigFile(file, () => checkPipelines(config, registry, trace.getTracer('config-check'), logger, () => gateway?.resources()));
  warnConfigGaps(config, logger);
  routeDiagToLog(logger);
  const telemetry = startTelemetry(config.telemetry);
  const store = await openStore(config.storage);
  const { workspace, elsewhere } = await ensureDeclared(store, config);
  warnMisplaced(elsewhere, logger);
  // Atomic in the store: processes starting together on one empty database make one key between them.
  const secret = generateKey();
  if (await store.createFirstKey({ hash: hashKey(secret), label: maskKey(secret), name: 'bootstrap', workspaceId: workspace.id, creatorUserId: 'bootstrap', isManagement: true })) {
    process.stdout.write(`\nFirst start: created a management key. It is shown only this once:\n\n  ${secret}\n\n`);
  }
  gateway = await createGateway({ config, registry, store, logger, tracer: telemetry.tracer });
  // Signal handlers go in before the listening line is printed: a supervisor may act on that line at once.
  const reload = configReloader({ file, registry, gateway, store, logger });
  process.on('SIGHUP', () => void reload('SIGHUP'));
  if (takeEarlyHup()) void reload('SIGHUP during start-up');
  // The first SIGTERM/SIGINT turns readiness to 503 at once (before anything else) and starts the drain; a
  // second one cuts what is still in flight without waiting for the drain timeout.
  let exitCode = 0;
  const stopped = new Promise<void>((resolve) => {
    const stop = () => {
      if (gateway!.drain.started) return gateway!.drain.cutNow();
      gateway!.drain.begin();
      resolve();
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    // A stage's stray error (README "Writing a plugin"): a promise rejection nothing awaited is logged and the
    // gateway keeps serving (the throw unwound its own async function, nothing else); an exception thrown
    // outside any request (a timer's, an event handler's) may have left anything half done, so it is logged
    // and the process drains and stops as on SIGTERM, exit code 1, for its supervisor to restart it. Either
    // had ended the process at once, streams cut without their in-band error and nothing drained.
    process.on('unhandledRejection', (reason) => logger.error({ err: reason }, 'unhandled promise rejection (a promise nothing awaited, e.g. in a stage); the gateway keeps serving'));
    process.on('uncaughtException', (err) => {
      logger.fatal({ err }, 'uncaught exception outside any request (e.g. a stage\'s timer): draining and stopping');
      exitCode = 1;
      stop();
    });
  });
  const stopWatching = config.server.watch_config ? watchConfig(file, () => void reload('file changed'), logger, readAs) : () => undefined;
  // Everything is loaded: free what start-up left behind before the first request (README, Performance).
  const gcMs = collectStartupGarbage();
  logger.debug({ ms: gcMs === null ? null : Math.round(gcMs) }, gcMs === null ? 'start-up garbage not collected' : 'start-up garbage collected');
  // Raised while the requests in flight hold big bodies (README, Performance: Memory).
  const youngGeneration = capYoungGeneration(undefined, { bytesInFlight: () => recentBodyBytes() * gateway.inFlight() });
  const { port } = await gateway.listen().catch((err: NodeJS.ErrnoException) => {
    throw new Error(listenProblem(err, config.server.host, config.server.port));
  });
  logger.info({ port, host: config.server.host, base_path: config.server.base_path }, 'gateway listening');
  // An IPv6 address goes in brackets (`http://[::1]:8080`): `http://::1:8080` is no URL to copy or to parse.
  const host = isIPv6(config.server.host) ? `[${config.server.host}]` : config.server.host;
  process.stdout.write(`Gateway listening on http://${host}:${port}${config.server.base_path}\n`);
  await stopped;
  // The drain timeout of the config now serving (a reload may have changed it), as close() uses it.
  logger.info({ in_flight: gateway.drain.inFlight, drain_timeout_ms: gateway.runtime().config.server.drain_timeout_ms }, 'shutting down: draining');
  stopWatching();
  youngGeneration?.stop();
  await gateway.close();
  await store.close();
  await closeUpstreamPool();
  // Last, with nothing left to lose but spans, and bounded: a collector that does not answer must not hold a
  // stopping process up to the exporter's timeout (README "Shutdown and probes").
  if (!(await telemetry.shutdown())) logger.warn({ limit_ms: FINAL_FLUSH_MS }, 'telemetry: the collector did not take the last spans in time; they were dropped');
  return exitCode;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    // A gateway key in an argument (`keys revoke sk-gw-v1-…`, the key for its id) had been echoed whole on
    // stderr, which CI logs and terminals keep: shown as its label, as in the logs and spans.
    const message = withoutGatewayKeys(String((err as Error)?.message));
    if (err instanceof ConfigError) process.stderr.write(`config error: ${message}\n`);
    else if (err instanceof UsageError || (err as { code?: string })?.code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`${message}\n\n${USAGE}`);
      process.exit(2);
    } else process.stderr.write(`error: ${message}\n`);
    process.exit(1);
  },
);
