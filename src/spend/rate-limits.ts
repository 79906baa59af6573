import type { Logger } from 'pino';
import type { GatewayConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import type { GatewayState } from '../pipeline/types';
import { requestedModels } from '../routing/candidates';
import type { RateLine, RateResult, SharedState } from '../state/types';
import type { Account, Store } from '../store/types';
import { checksUnavailable } from './admission';
import type { LedgerWriter } from './ledger';
import { asRejection } from './rejections';
import { windowEnd, windowStart } from './windows';

const modelIds = new WeakMap<GatewayConfig, Set<string>>();

/** The first of `names` that is a configured model (chat or video), else the first of them (routing answers it 404). */
function firstKnownModel(config: GatewayConfig, names: string[]): string | undefined {
  let ids = modelIds.get(config);
  if (!ids) modelIds.set(config, (ids = new Set([...config.models, ...config.video_models].map((m) => m.id))));
  return names.find((n) => ids.has(n)) ?? names[0];
}

/** A free model variant (spec 8.3.2): the id ends with `:free`. */
export const isFreeModel = (id: string): boolean => id.endsWith(':free');

/** The daily free-model ceiling of an account: the higher tier from one credit below the purchase threshold. */
export function freeDailyLimit(config: GatewayConfig, account: Account | null): number {
  const f = config.free_models;
  return (account?.purchasedUsd ?? 0) >= f.purchase_threshold_usd - 1 ? f.daily_requests_purchased : f.daily_requests;
}

/** The shared-state key of an account's free-model counter for the UTC day of `now`. */
export function freeDailyKey(accountId: string, now: Date): string {
  return `rl:free-day:${accountId}:${windowStart('daily', now).getTime()}`;
}

interface Described extends RateLine {
  scope: 'key' | 'model' | 'free_model_per_minute' | 'free_model_daily';
  what: string;
}

interface LinesInput {
  config: GatewayConfig;
  gw: GatewayState;
  model: string | undefined;
  free: boolean;
  account: Account | null;
  now: number;
  /** Whether the key's window counts the request (not on a `recheck`: it counted it once already). */
  keyLine: boolean;
}

/**
 * Platform rate limits (spec 8.3, 7.10): requests per key, per model (global or per key) and, for `:free`
 * models, per account per minute and per UTC day. Fixed windows aligned to the epoch (to UTC midnight for
 * the daily one), counted atomically in the shared state: a rejected request counts nowhere. A 429 carries
 * `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (epoch ms) and `Retry-After` (seconds).
 */
export class RateLimiter {
  constructor(
    private readonly state: SharedState,
    private readonly store: Store,
    private readonly ledger: LedgerWriter,
    /** The account of a key (cached), read only for free models, whose daily tier depends on it. */
    private readonly accountOf: (accountId: string, config: GatewayConfig) => Promise<Account | null>,
    /** Whether every endpoint of the model would be called with the workspace's own keys (BYOK). */
    private readonly ownKeysOnly: (config: GatewayConfig, model: string, gw: GatewayState) => Promise<boolean> = async () => false,
  ) {}

  /**
   * Counts the request in its windows, or throws the 429 of the first full one. Returns the free-model daily
   * window it was counted in (null if none): `unlessServedFree` takes it back when the request ends without
   * being served by a free model, so the counter stays what it is rebuilt from (today's ledger rows of free
   * models) and `GET /key`'s `used` does not count requests refused later (balance, budgets, 404).
   */
  async check(config: GatewayConfig, gw: GatewayState, now: number): Promise<string | null> {
    try {
      return await this.tryCheck(config, gw, now);
    } catch (err) {
      throw checksUnavailable(err);
    }
  }

  /**
   * Counts a video job creation (POST /videos) in its windows, or throws the 429 of the first full one: the
   * key's window (shared with chat requests: a key has one request rate) and the `rate_limits.models` lines
   * naming the video model. No free-model windows: those are for chat models' `:free` variants.
   *
   * @example await services.rateLimits.checkVideoJob({ config, gw: ctx.state.gateway, model: 'acme/video', now: clock() });
   */
  async checkVideoJob({ config, gw, model, now }: { config: GatewayConfig; gw: GatewayState; model: string; now: number }): Promise<void> {
    try {
      await this.admit(gw, this.linesFor({ config, gw, model, free: false, account: null, now, keyLine: true }), now);
    } catch (err) {
      throw checksUnavailable(err);
    }
  }

  /**
   * Counts the request again when a stage after `rate-limit` changed its model (a router choosing for
   * `model: "auto"`, the `web` stage removing `:online`): the model served is counted in its `rate_limits.models`
   * lines and, if it is a free model and the first pass did not count a free one, in the free-model windows. The
   * key's window is not counted again. Throws the 429 of `check`. Returns the free-model daily window it counted
   * in (null if none), to be taken back as `check`'s is. Called by `upstream` before any call; does nothing when
   * `rate-limit` did not run or the model is unchanged.
   *
   * @example const daily = await services.rateLimits.recheck(services.config, state, services.spend.clock());
   */
  async recheck(config: GatewayConfig, gw: GatewayState, now: number): Promise<string | null> {
    const counted = gw.rateCounted;
    if (!counted || !gw.body) return null;
    try {
      const model = firstKnownModel(config, requestedModels(gw.body));
      if (model === counted.model) return null;
      const free = !counted.free && (await this.isFreeServed(config, model, gw));
      const account = free ? await this.accountOf(gw.key!.accountId, config) : null;
      const daily = await this.admit(gw, this.linesFor({ config, gw, model, free, account, now, keyLine: false }), now);
      gw.rateCounted = { model, free: counted.free || free, dailyAt: counted.dailyAt ?? (daily ? now : null) };
      return daily;
    } catch (err) {
      throw checksUnavailable(err);
    }
  }

  /**
   * When the request ends, takes it back from the free-model daily window `dailyKey` (from `check` or `recheck`)
   * unless a free model served it (`unlessServedFree`); a failure is logged with `logger`.
   *
   * @example if (daily) services.rateLimits.takeBackAtEnd({ dailyKey: daily, gw: state, clock: services.spend.clock, logger: services.logger });
   */
  takeBackAtEnd({ dailyKey, gw, clock, logger }: { dailyKey: string; gw: GatewayState; clock: () => number; logger: Logger }): void {
    gw.onFinish.push(() => {
      this.unlessServedFree(dailyKey, gw, clock()).catch((err) => logger.warn({ err, generation_id: gw.requestId }, 'taking back a free-model request count failed'));
    });
  }

  /** Takes the request back from the free-model daily window `check` counted it in, unless a free model served it with the gateway's keys. Never throws (a failure is logged by the caller's logger). */
  unlessServedFree(dailyKey: string, gw: GatewayState, now: number): Promise<void> {
    const r = gw.route;
    if (r && gw.requestId && isFreeModel(r.model) && !r.isByok) return Promise.resolve();
    return this.state.unhit(dailyKey, now);
  }

  private async tryCheck(config: GatewayConfig, gw: GatewayState, now: number): Promise<string | null> {
    // The first model the request names that this gateway has: a name routing skips (unknown) must not stand
    // in front of the one that serves (`{"model": "no/such", "models": ["m/limited"]}` passed every limit).
    const model = gw.body ? firstKnownModel(config, requestedModels(gw.body)) : undefined;
    const free = await this.isFreeServed(config, model, gw);
    const account = free ? await this.accountOf(gw.key!.accountId, config) : null;
    const daily = await this.admit(gw, this.linesFor({ config, gw, model, free, account, now, keyLine: true }), now);
    gw.rateCounted = { model, free, dailyAt: daily ? now : null };
    return daily;
  }

  /** Whether the free-model limits gate `model`: a free model this gateway has, not served only with the workspace's own keys. */
  private async isFreeServed(config: GatewayConfig, model: string | undefined, gw: GatewayState): Promise<boolean> {
    // Spec 8.3.2: requests served with the caller's own provider keys are not gated by the free-model limits;
    // nor is a model this gateway does not have (routing answers 404).
    return model !== undefined && isFreeModel(model) && config.models.some((m) => m.id === model) && !(await this.ownKeysOnly(config, model, gw));
  }

  /** Counts the request in `lines`, or throws the 429 of the first full one; returns the free-model daily window it counted in. */
  private async admit(gw: GatewayState, lines: Described[], now: number): Promise<string | null> {
    if (lines.length === 0) return null;
    let result: RateResult = await this.state.hit(lines, now);
    if (!result.ok && result.reason === 'missing') {
      // The free-model daily counter is rebuilt from the ledger (a new day, or Redis lost it).
      await this.ledger.flush();
      const date = new Date(now);
      const used = await this.store.countFreeModelRequests(gw.key!.accountId, windowStart('daily', date).getTime());
      for (const key of result.keys) await this.state.initRate(key, used, windowEnd('daily', date).getTime());
      result = await this.state.hit(lines, now);
    }
    if (result.ok) return lines.find((l) => l.scope === 'free_model_daily')?.key ?? null;
    if (result.reason === 'missing') throw new GatewayError('server', 'rate-limit counters could not be initialized');
    const line = lines[result.line];
    const retryAfter = Math.max(1, Math.ceil((line.resetAt - now) / 1000));
    const err = new GatewayError('rate_limit_exceeded', `Rate limit exceeded: ${line.what}; ${line.limit} requests allowed, try again in ${retryAfter} s`, {
      metadata: { scope: line.scope, limit: line.limit, resets_at: new Date(line.resetAt).toISOString() },
      headers: {
        'X-RateLimit-Limit': String(line.limit),
        'X-RateLimit-Remaining': '0',
        'X-RateLimit-Reset': String(line.resetAt),
        'Retry-After': String(retryAfter),
      },
    });
    throw asRejection(err, `rate_limit_${line.scope}`);
  }

  private linesFor({ config, gw, model, free, account, now, keyLine }: LinesInput): Described[] {
    const key = gw.key!;
    const lines: Described[] = [];
    const fixed = (windowS: number) => {
      const ms = windowS * 1000;
      const start = Math.floor(now / ms) * ms;
      return { start, resetAt: start + ms };
    };
    const rl = config.rate_limits;
    if (rl.key && keyLine) {
      const w = fixed(rl.key.window_s);
      // The window's length is in the key, as for model lines: a reload from 60 s to 3600 s at 10:00:10 had
      // kept counting in the 60 s counter (same start), which expired at 10:01 while the 429 said 11:00.
      lines.push({ key: `rl:key:${key.id}:${rl.key.window_s}s:${w.start}`, limit: rl.key.requests, resetAt: w.resetAt, scope: 'key', what: `this key's limit per ${rl.key.window_s} s` });
    }
    // Only the model the request asks for first counts (fallbacks are not counted against their own limits).
    if (model === undefined) return lines;
    for (const r of rl.models) {
      if (r.model !== model) continue;
      const w = fixed(r.window_s);
      const who = r.per === 'key' ? `key:${key.id}` : 'all';
      // The window's length is part of the key: two limits on one model whose windows start together (1 s and
      // 10 s at a multiple of 10 s) would otherwise count in, and expire with, one counter.
      lines.push({ key: `rl:model:${model}:${who}:${r.window_s}s:${w.start}`, limit: r.requests, resetAt: w.resetAt, scope: 'model', what: `model ${model} per ${r.window_s} s${r.per === 'key' ? ' for this key' : ''}` });
    }
    if (free) {
      const f = config.free_models;
      const w = fixed(60);
      lines.push({ key: `rl:free-min:${key.accountId}:${w.start}`, limit: f.per_minute, resetAt: w.resetAt, scope: 'free_model_per_minute', what: 'free models per minute' });
      const date = new Date(now);
      lines.push({
        key: freeDailyKey(key.accountId, date),
        limit: freeDailyLimit(config, account),
        resetAt: windowEnd('daily', date).getTime(),
        rebuild: true,
        scope: 'free_model_daily',
        what: 'free models per day',
      });
    }
    return lines;
  }
}
