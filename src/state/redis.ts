import type Redis from 'ioredis';
import { heldLua, hitLua, initCounterLua, initRateLua, reserveLua, restoreLua, settleLua, unhitLua } from './redis-scripts';
import type { RateLine, RateResult, ReserveInput, ReserveResult, RestoredHold, SettleInput, SharedState } from './types';

export interface RedisStateOptions {
  url: string;
  /** Starts every key, so several gateways (or tests) can share one Redis. */
  prefix: string;
  commandTimeoutMs: number;
}

const scripts = {
  budgetReserve: reserveLua,
  budgetSettle: settleLua,
  counterInit: initCounterLua,
  holdsSum: heldLua,
  holdsRestore: restoreLua,
  rateHit: hitLua,
  rateInit: initRateLua,
  rateUnhit: unhitLua,
};
type ScriptName = keyof typeof scripts;
type ScriptedRedis = Redis & Record<ScriptName, (numKeys: number, ...args: (string | number)[]) => Promise<unknown>>;

/** Redis drops a key this long after its logical expiry: the TTL only collects garbage, it never decides. */
const GC_MARGIN_MS = 3_600_000;
const GC_MIN_MS = 60_000;

/**
 * `state.driver: redis`: the shared state of every gateway process using the same Redis and prefix. Each
 * check-and-reserve is one Lua script (redis-scripts.ts), so it is atomic across processes; expiry decisions
 * use the caller's `now` (or the injected clock), like MemoryState, so both drivers keep the same contract.
 *
 * While Redis is unreachable every call rejects at once (no offline queue) or after `commandTimeoutMs`; the
 * connection keeps retrying in the background.
 *
 * @example const state = new RedisState({ url: 'redis://127.0.0.1:6379', prefix: 'gw:', commandTimeoutMs: 500 });
 */
export class RedisState implements SharedState {
  readonly driver = 'redis' as const;
  /** The last connection error, kept for diagnostics instead of crashing on an unhandled 'error' event. */
  lastError: Error | undefined;
  private readonly redis: ScriptedRedis;
  /** Pending until the first connection is ready (or `commandTimeoutMs` passed); null afterwards. */
  private firstConnect: Promise<void> | null;
  private firstConnectTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly options: RedisStateOptions,
    private readonly clock: () => number = Date.now,
  ) {
    // ioredis (~5 MiB of resident code) is loaded only when a Redis state is configured.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { default: Client } = require('ioredis') as typeof import('ioredis');
    this.redis = new Client(options.url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: options.commandTimeoutMs,
      retryStrategy: (times) => Math.min(times * 200, 2000),
    }) as ScriptedRedis;
    this.redis.on('error', (err: Error) => {
      this.lastError = err;
    });
    for (const [name, lua] of Object.entries(scripts)) this.redis.defineCommand(name, { lua });
    // Without the offline queue a command sent while still connecting fails, so the first calls wait for it.
    const first = new Promise<void>((resolve, reject) => {
      this.firstConnectTimer = setTimeout(() => {
        const cause = this.lastError ? `: ${this.lastError.message}` : '';
        reject(new Error(`redis not ready after ${options.commandTimeoutMs} ms${cause}`));
      }, options.commandTimeoutMs);
      this.firstConnectTimer.unref();
      this.redis.once('ready', () => {
        clearTimeout(this.firstConnectTimer);
        resolve();
      });
      // close() before the first connection: waiting callers fail now instead of at the timeout.
      this.redis.once('end', () => {
        clearTimeout(this.firstConnectTimer);
        reject(new Error('redis connection closed'));
      });
    });
    const done = () => {
      this.firstConnect = null;
    };
    first.then(done, done);
    this.firstConnect = first;
  }

  async reserve(input: ReserveInput): Promise<ReserveResult> {
    const { lines, inFlight } = input;
    const keys = [...lines.map((l) => this.key('counter', l.counter)), ...lines.map((l) => this.key('holds', l.group))];
    if (inFlight) keys.push(this.key('holds', inFlight.group));
    const args = [
      input.holdId,
      input.now,
      input.estimateNano,
      input.holdUntil,
      this.gcTtl(input.holdUntil),
      input.balanceBlocked ? 1 : 0,
      inFlight?.capNano ?? '',
      inFlight ? (inFlight.estimateNano ?? input.estimateNano) : 0,
      ...lines.flatMap((l) => [l.limitNano, l.includeByok ? 1 : 0]),
    ];
    const [reason, ...r] = (await this.run('budgetReserve', keys, args)) as [string, ...(number | null)[]];
    switch (reason) {
      case 'ok':
        return { ok: true };
      case 'missing':
        return { ok: false, reason, counters: [...new Set(r.map((i) => lines[i!].counter))] };
      case 'budget':
        return { ok: false, reason, line: r[0]!, spentNano: r[1]!, heldNano: r[2]! };
      case 'balance':
        return { ok: false, reason };
      case 'in_flight':
        return { ok: false, reason, heldNano: r[0]!, capNano: inFlight!.capNano, nextExpiry: r[1] ?? null };
      default:
        throw new Error(`unexpected reserve reply: ${reason}`);
    }
  }

  async settle(input: SettleInput): Promise<void> {
    const { inFlight } = input;
    const keys = [...input.groups.map((g) => this.key('holds', g)), ...input.counters.map((c) => this.key('counter', c))];
    if (inFlight) keys.push(this.key('holds', inFlight.group));
    const until = inFlight?.until ?? 0;
    const args = [input.holdId, this.clock(), input.byok ? 1 : 0, input.costNano, input.groups.length, input.counters.length, until, this.gcTtl(until), input.retry ? 1 : 0];
    await this.run('budgetSettle', keys, args);
  }

  async restoreHolds(holds: readonly RestoredHold[]): Promise<void> {
    const now = this.clock();
    await Promise.all(
      holds.map((h) => this.run('holdsRestore', [...new Set(h.groups)].map((g) => this.key('holds', g)), [h.id, h.amountNano, h.until, now, this.gcTtl(h.until)])),
    );
  }

  async holdsLost(): Promise<boolean> {
    return (await (await this.client()).exists(this.markerKey())) === 0;
  }

  async markHolds(): Promise<void> {
    await (await this.client()).set(this.markerKey(), '1');
  }

  async initCounter(counter: string, paidNano: number, byokNano: number, expiresAt: number | null): Promise<void> {
    const args = [this.clock(), paidNano, byokNano, expiresAt ?? '', expiresAt === null ? '' : this.gcTtl(expiresAt)];
    await this.run('counterInit', [this.key('counter', counter)], args);
  }

  async dropCounters(counters: string[]): Promise<void> {
    if (counters.length > 0) await (await this.client()).del(...counters.map((c) => this.key('counter', c)));
  }

  async held(group: string, now: number): Promise<number> {
    return (await this.run('holdsSum', [this.key('holds', group)], [now])) as number;
  }

  async hit(lines: RateLine[], now: number): Promise<RateResult> {
    const keys = lines.map((l) => this.key('rate', l.key));
    const args = [now, ...lines.flatMap((l) => [l.limit, l.resetAt, l.rebuild ? 1 : 0, this.gcTtl(l.resetAt)])];
    const [reason, ...r] = (await this.run('rateHit', keys, args)) as [string, ...number[]];
    switch (reason) {
      case 'ok':
        return { ok: true, counts: r };
      case 'limited':
        return { ok: false, reason, line: r[0], count: r[1] };
      case 'missing':
        return { ok: false, reason, keys: r.map((i) => lines[i].key) };
      default:
        throw new Error(`unexpected hit reply: ${reason}`);
    }
  }

  async initRate(key: string, count: number, resetAt: number): Promise<void> {
    await this.run('rateInit', [this.key('rate', key)], [this.clock(), count, resetAt, this.gcTtl(resetAt)]);
  }

  async unhit(key: string, now: number): Promise<void> {
    await this.run('rateUnhit', [this.key('rate', key)], [now]);
  }

  async rateCount(key: string, now: number): Promise<number> {
    const [count, resetAt] = await (await this.client()).hmget(this.key('rate', key), 'count', 'resetAt');
    return count !== null && Number(resetAt) > now ? Number(count) : 0;
  }

  async stickyGet(session: string, ttlMs: number): Promise<string | undefined> {
    return (await (await this.client()).getex(this.key('sticky', session), 'PX', Math.ceil(ttlMs))) ?? undefined;
  }

  async stickySet(session: string, endpointKey: string, ttlMs: number): Promise<void> {
    await (await this.client()).set(this.key('sticky', session), endpointKey, 'PX', Math.ceil(ttlMs));
  }

  async stickyDelete(session: string): Promise<void> {
    await (await this.client()).del(this.key('sticky', session));
  }

  async close(): Promise<void> {
    if (this.redis.status === 'end') return;
    // QUIT needs a writable connection (no offline queue); otherwise just stop reconnecting.
    if (this.redis.status === 'ready') await this.redis.quit().catch(() => this.redis.disconnect());
    else this.redis.disconnect();
  }

  private async client(): Promise<ScriptedRedis> {
    if (this.firstConnect) await this.firstConnect;
    return this.redis;
  }

  private async run(script: ScriptName, keys: string[], args: (string | number)[]): Promise<unknown> {
    return (await this.client())[script](keys.length, ...keys, ...args);
  }

  private key(kind: 'counter' | 'holds' | 'rate' | 'sticky', id: string): string {
    return `${this.options.prefix}${kind}:${id}`;
  }

  /** Set (without a TTL) once the holds are known to be all there: gone, Redis lost its data. */
  private markerKey(): string {
    return `${this.options.prefix}holds-kept`;
  }

  /** TTL (ms) that lets Redis collect a key once its logical expiry `until` is well past. */
  private gcTtl(until: number): number {
    return Math.max(GC_MIN_MS, Math.ceil(until - this.clock()) + GC_MARGIN_MS);
  }
}
