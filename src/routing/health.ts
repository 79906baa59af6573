/**
 * Per-endpoint health, in-process: a circuit breaker and EWMA latency/throughput per endpoint.
 *
 * Keys are `${providerId}/${upstreamModel}`. Time is always passed in (default `Date.now()`), and there are no
 * timers: the breaker moves from open to half-open when it is next asked after the cooldown.
 *
 * - closed: the endpoint is fine (fewer than `failureThreshold` failures in a row).
 * - open: it failed `failureThreshold` times in a row and its cooldown is still running; it is not tried.
 * - half_open: the cooldown is over; `tryAcquire` grants one probe. The probe's success closes the breaker, its
 *   failure reopens it for another cooldown; one that tells neither is given back (`release`, with the pass
 *   `tryAcquire` gave: only that probe is given back). A probe that never reports back expires after one
 *   cooldown, so the endpoint cannot be locked out for ever.
 *
 * An attempt reports its outcome with the pass it was let through with, and only an attempt that began under
 * the breaker's present state moves it: the pass carries the breaker's generation (it grows each time the
 * breaker opens, reopens or closes). So a half-open breaker is decided by its probe alone (the first to report,
 * should one have expired and been replaced). An attempt whose pass is of an earlier generation (let through
 * while the breaker was closed, before it opened; a probe of a half-open state that has since ended) or that
 * had none (`null`: the breaker refused it, and the endpoint was tried as a last resort when nothing else was
 * left) is measured but moves no breaker: such a failure, reported late, had reopened a breaker whose probe was
 * out or which a probe had just closed; such a success had closed one under its probe.
 *
 * Apart from the breaker, an endpoint that answered a rate limit or an overload with `Retry-After` rests
 * (`rest`, `resting`) until that time has passed, at most one cooldown: it is tried after the others.
 *
 * `tried` says whether an attempt at the endpoint ended within the last cooldown (a success, a failure, or one
 * that told nothing of the endpoint but was answered: `recordAttempt`): the latency and throughput sorts try
 * an endpoint without a measurement first only while it is not.
 *
 * @example
 *   const h = new EndpointHealth({ failureThreshold: 3, cooldownMs: 30_000 });
 *   const pass = h.tryAcquire('acme/gpt-x', now);
 *   // pass null: the endpoint may still be tried as a last resort; its outcome is then reported with null.
 *   ok ? h.recordSuccess(key, { pass, latencyMs: 120 }) : told nothing ? h.release(key, pass) : h.recordFailure(key, pass, now);
 */

export interface HealthOptions {
  failureThreshold: number;
  cooldownMs: number;
}

export type BreakerState = 'closed' | 'open' | 'half_open';

/**
 * What `tryAcquire` grants: `probe` is the half-open probe taken (0: none, the breaker was closed), `gen` the
 * breaker's generation then (see the header).
 */
export interface Pass {
  readonly probe: number;
  readonly gen: number;
}

/** The pass of a closed breaker that has never opened (no allocation for a request to a healthy endpoint). */
const FIRST_CLOSED: Pass = Object.freeze({ probe: 0, gen: 0 });

/** What an attempt's time to its answer and output were (each left out when not known). */
export interface Sample {
  latencyMs?: number;
  outputTokens?: number;
  durationMs?: number;
}

/** A successful attempt: the pass it was let through with (null: none, a last resort) and what it measured. */
export interface Success extends Sample {
  pass: Pass | null;
}

export const DEFAULT_HEALTH_OPTIONS: HealthOptions = { failureThreshold: 3, cooldownMs: 30_000 };

/** Weight of the newest sample in the moving averages. */
export const EWMA_ALPHA = 0.3;

interface Entry {
  /** Consecutive failures since the last success. */
  failures: number;
  /** While the breaker is open or half-open: the instant the cooldown ends. null = closed. */
  openUntil: number | null;
  /** Instant a half-open probe was granted; null when no probe is out. */
  probeSince: number | null;
  /** The number of the probe out (or last out): `release` gives back only that one. */
  probe: number;
  /** The breaker's generation: one more each time it opens, reopens or closes. */
  gen: number;
  /** The pass `tryAcquire` grants while the breaker is closed in this generation. */
  closed: Pass;
  latencyMs: number | null;
  throughput: number | null;
  /** The instant a Retry-After the endpoint gave ends; null when it gave none (or a success came since). */
  restUntil: number | null;
  /** The instant the last attempt at the endpoint ended (see `tried`); null: none yet. */
  triedAt: number | null;
}

function ewma(prev: number | null, sample: number): number {
  return prev === null ? sample : prev + EWMA_ALPHA * (sample - prev);
}

export class EndpointHealth {
  options!: HealthOptions;
  private readonly entries = new Map<string, Entry>();
  private probes = 0;

  constructor(options: Partial<HealthOptions> = {}) {
    this.configure(options);
  }

  /** Sets the breaker's threshold and cooldown (a config reload); what the endpoints' records hold is kept. */
  configure(options: Partial<HealthOptions>): void {
    const failureThreshold = options.failureThreshold ?? DEFAULT_HEALTH_OPTIONS.failureThreshold;
    const cooldownMs = options.cooldownMs ?? DEFAULT_HEALTH_OPTIONS.cooldownMs;
    if (!Number.isInteger(failureThreshold) || failureThreshold < 1) {
      throw new RangeError(`failureThreshold must be an integer >= 1 (got ${failureThreshold})`);
    }
    if (!Number.isFinite(cooldownMs) || cooldownMs < 0) {
      throw new RangeError(`cooldownMs must be a finite number >= 0 (got ${cooldownMs})`);
    }
    this.options = { failureThreshold, cooldownMs };
  }

  /** closed: fine; open: failed `failureThreshold` times in a row and still cooling down; half_open: cooldown over, one probe allowed. */
  state(key: string, now: number = Date.now()): BreakerState {
    const e = this.entries.get(key);
    if (!e || e.openUntil === null) return 'closed';
    return now < e.openUntil ? 'open' : 'half_open';
  }

  /**
   * A pass when the endpoint may be tried now, else null; in half_open only the first caller gets one until
   * that probe reports back. The pass is what `release` takes.
   */
  tryAcquire(key: string, now: number = Date.now()): Pass | null {
    const e = this.entries.get(key);
    if (!e) return FIRST_CLOSED;
    if (e.openUntil === null) return e.closed;
    if (now < e.openUntil) return null;
    // A probe whose caller vanished without reporting expires after one cooldown.
    if (e.probeSince !== null && now - e.probeSince < Math.max(this.options.cooldownMs, 1)) return null;
    e.probeSince = now;
    e.probe = ++this.probes;
    return { probe: e.probe, gen: e.gen };
  }

  /**
   * Gives back a half-open probe that told nothing about the endpoint: the call was never made (the request
   * cannot be expressed in its API style), the provider blamed the caller, or the client left. The next request
   * probes; without this the endpoint waited out another cooldown though nothing had failed. Only the probe
   * `pass` took is given back: a request let through while the breaker was closed, or whose probe had expired
   * and been replaced, had cleared the probe out now, and a second probe went out beside it.
   */
  release(key: string, pass: Pass | null | undefined): void {
    const e = this.entries.get(key);
    if (e && pass && pass.probe !== 0 && e.probe === pass.probe) e.probeSince = null;
  }

  /**
   * Closes the breaker (when the attempt began under its present state: see the header) and folds the sample
   * into the EWMA latency (time to first byte) and throughput (tokens/s).
   */
  recordSuccess(key: string, success: Success, now: number = Date.now()): void {
    const e = this.entry(key);
    e.triedAt = now;
    e.restUntil = null;
    if (success.pass?.gen === e.gen) {
      e.failures = 0;
      if (e.openUntil !== null) this.turn(e, null);
    }
    this.observe(key, success);
  }

  /**
   * Folds a sample into the moving averages without judging the attempt: a stream's time to its first output
   * (whether it succeeded is known only when it ends, which reports success or failure).
   */
  observe(key: string, sample: Sample): void {
    const e = this.entry(key);
    const { latencyMs, outputTokens, durationMs } = sample;
    if (typeof latencyMs === 'number' && Number.isFinite(latencyMs) && latencyMs >= 0) {
      e.latencyMs = ewma(e.latencyMs, latencyMs);
    }
    if (
      typeof outputTokens === 'number' &&
      typeof durationMs === 'number' &&
      Number.isFinite(outputTokens) &&
      Number.isFinite(durationMs) &&
      outputTokens > 0 &&
      durationMs > 0
    ) {
      e.throughput = ewma(e.throughput, outputTokens / (durationMs / 1000));
    }
  }

  /**
   * Counts a failure. The `failureThreshold`-th failure in a row opens the breaker for `cooldownMs`; a failed
   * half-open probe reopens it for another cooldown. Failures reported while already open (requests that were
   * in flight when it opened), like any that began under an earlier state or without a pass (a last resort),
   * are not counted: they neither extend the cooldown nor reopen a breaker a probe is deciding or has closed.
   */
  recordFailure(key: string, pass: Pass | null, now: number = Date.now()): void {
    const e = this.entry(key);
    e.triedAt = now;
    if (pass?.gen !== e.gen) return;
    e.failures += 1;
    const state = this.state(key, now);
    if (state === 'half_open' || (state === 'closed' && e.failures >= this.options.failureThreshold)) {
      this.turn(e, now + this.options.cooldownMs);
    }
  }

  /**
   * An attempt that was answered but says nothing of the endpoint's health (it failed on the workspace's own
   * key, or the provider blamed the caller): not counted for the breaker, but the endpoint has been tried (see
   * `tried`). An endpoint that failed every time on one tenant's key had stayed "unmeasured", first under
   * `sort: latency` for every request.
   */
  recordAttempt(key: string, now: number = Date.now()): void {
    this.entry(key).triedAt = now;
  }

  /**
   * True when an attempt at the endpoint ended within the last cooldown (success, failure or `recordAttempt`).
   * Under a latency or throughput sort an endpoint without a measurement goes first only while this is false:
   * one that was tried and gave none goes after the measured ones, and is tried first again once a cooldown
   * has passed (as a half-open breaker lets a probe through), so it is not left unmeasured for good either.
   */
  tried(key: string, now: number = Date.now()): boolean {
    const at = this.entries.get(key)?.triedAt;
    return at != null && now - at < this.options.cooldownMs;
  }

  /**
   * The endpoint asked to be left alone for `ms` (a 429 or an overload with `Retry-After`): until then it is
   * `resting` and tried after the others, as an open breaker is (the next request had asked it first again, at
   * once). At most one cooldown: a hint of hours (or a date far off) does not keep an endpoint back that long.
   */
  rest(key: string, ms: number, now: number = Date.now()): void {
    const wait = Math.min(ms, this.options.cooldownMs);
    if (!(wait > 0)) return;
    const e = this.entry(key);
    e.restUntil = Math.max(e.restUntil ?? 0, now + wait);
  }

  /** True while the endpoint is known out of service: its breaker is open, or it rests after a Retry-After. */
  down(key: string, now: number = Date.now()): boolean {
    return this.state(key, now) === 'open' || this.resting(key, now);
  }

  /** True while a Retry-After the endpoint gave has not passed (see `rest`). */
  resting(key: string, now: number = Date.now()): boolean {
    const until = this.entries.get(key)?.restUntil;
    return until != null && now < until;
  }

  /** EWMA time to first byte (ms) and throughput (output tokens/s); null until a sample arrived. */
  stats(key: string): { latencyMs: number | null; throughput: number | null } {
    const e = this.entries.get(key);
    return { latencyMs: e?.latencyMs ?? null, throughput: e?.throughput ?? null };
  }

  /** Every endpoint seen so far, with its breaker state now and its consecutive failures. */
  snapshot(now: number = Date.now()): Record<string, { state: BreakerState; failures: number }> {
    const out: Record<string, { state: BreakerState; failures: number }> = {};
    for (const [key, e] of this.entries) out[key] = { state: this.state(key, now), failures: e.failures };
    return out;
  }

  /** Opens (until `openUntil`) or closes (null) the breaker: a new generation, no probe out. */
  private turn(e: Entry, openUntil: number | null): void {
    e.openUntil = openUntil;
    e.probeSince = null;
    e.gen += 1;
    if (openUntil === null) e.closed = Object.freeze({ probe: 0, gen: e.gen });
  }

  private entry(key: string): Entry {
    let e = this.entries.get(key);
    if (!e) {
      e = { failures: 0, openUntil: null, probeSince: null, probe: 0, gen: 0, closed: FIRST_CLOSED, latencyMs: null, throughput: null, restUntil: null, triedAt: null };
      this.entries.set(key, e);
    }
    return e;
  }
}
