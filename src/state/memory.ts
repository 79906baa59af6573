import { LRUCache } from 'lru-cache';
import { HoldGroup } from './hold-group';
import type { RateLine, RateResult, ReserveInput, ReserveResult, RestoredHold, SettleInput, SharedState } from './types';

interface Counter {
  paid: number;
  byok: number;
  expiresAt: number | null;
}


/**
 * `state.driver: memory`: the shared state of one gateway process. Every method runs to completion without
 * awaiting, so each check-and-reserve is atomic, as the Redis driver's Lua scripts are.
 *
 * @example const state = new MemoryState(); await state.reserve({ holdId: 'gen-1', now: Date.now(), lines: [], … });
 */
export class MemoryState implements SharedState {
  readonly driver = 'memory' as const;
  private readonly counters = new Map<string, Counter>();
  private readonly holds = new Map<string, HoldGroup>();
  private readonly rates = new Map<string, { count: number; resetAt: number }>();
  /** Made on first use: lru-cache allocates its arrays for all 100,000 entries up front (~2.7 MiB). */
  private stickyCache: LRUCache<string, string> | undefined;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly clock: () => number = Date.now) {
    // Expired counters, windows and holds are dropped once a minute so memory stays flat.
    this.sweeper = setInterval(() => this.sweep(this.clock()), 60_000);
    this.sweeper.unref();
  }

  async reserve(input: ReserveInput): Promise<ReserveResult> {
    const { now } = input;
    const missing = input.lines.map((l) => l.counter).filter((c) => !this.counter(c, now));
    if (missing.length > 0) return { ok: false, reason: 'missing', counters: [...new Set(missing)] };
    for (let i = 0; i < input.lines.length; i++) {
      const line = input.lines[i];
      const c = this.counter(line.counter, now)!;
      const spent = c.paid + (line.includeByok ? c.byok : 0);
      const held = this.heldNow(line.group, now);
      if (spent + held >= line.limitNano) return { ok: false, reason: 'budget', line: i, spentNano: spent, heldNano: held };
    }
    if (input.balanceBlocked) return { ok: false, reason: 'balance' };
    const inFlightNano = input.inFlight ? (input.inFlight.estimateNano ?? input.estimateNano) : 0;
    if (input.inFlight) {
      const held = this.heldNow(input.inFlight.group, now);
      if (held + inFlightNano > input.inFlight.capNano) {
        return { ok: false, reason: 'in_flight', heldNano: held, capNano: input.inFlight.capNano, nextExpiry: this.nextExpiry(input.inFlight.group, now) };
      }
    }
    if (input.estimateNano > 0) for (const g of new Set(input.lines.map((l) => l.group))) this.group(g).set(input.holdId, input.estimateNano, input.holdUntil);
    if (input.inFlight && inFlightNano > 0) this.group(input.inFlight.group).set(input.holdId, inFlightNano, input.holdUntil);
    return { ok: true };
  }

  async restoreHolds(holds: readonly RestoredHold[]): Promise<void> {
    const now = this.clock();
    for (const h of holds) {
      if (h.until <= now || !(h.amountNano > 0)) continue;
      for (const g of new Set(h.groups)) this.group(g).set(h.id, h.amountNano, h.until);
    }
  }

  async settle(input: SettleInput): Promise<void> {
    let held = false;
    for (const g of input.groups) if (this.holds.get(g)?.delete(input.holdId)) held = true;
    const now = this.clock();
    // A retried settlement whose hold is gone was settled already (see SettleInput.retry).
    for (const id of input.retry && !held ? [] : input.counters) {
      const c = this.counter(id, now);
      if (!c) continue;
      if (input.byok) c.byok += input.costNano;
      else c.paid += input.costNano;
    }
    if (input.inFlight) {
      const group = this.group(input.inFlight.group);
      if (input.costNano > 0 && input.inFlight.until > now) group.set(input.holdId, input.costNano, input.inFlight.until);
      else group.delete(input.holdId);
    }
  }

  async initCounter(counter: string, paidNano: number, byokNano: number, expiresAt: number | null): Promise<void> {
    if (this.counter(counter, this.clock())) return;
    this.counters.set(counter, { paid: paidNano, byok: byokNano, expiresAt });
  }

  async dropCounters(counters: string[]): Promise<void> {
    for (const c of counters) this.counters.delete(c);
  }

  async held(group: string, now: number): Promise<number> {
    return this.heldNow(group, now);
  }

  async hit(lines: RateLine[], now: number): Promise<RateResult> {
    const missing = lines.filter((l) => l.rebuild && !this.rate(l.key, now)).map((l) => l.key);
    if (missing.length > 0) return { ok: false, reason: 'missing', keys: missing };
    for (let i = 0; i < lines.length; i++) {
      const count = this.rate(lines[i].key, now)?.count ?? 0;
      if (count >= lines[i].limit) return { ok: false, reason: 'limited', line: i, count };
    }
    const counts = lines.map((l) => {
      const r = this.rate(l.key, now) ?? { count: 0, resetAt: l.resetAt };
      r.count++;
      this.rates.set(l.key, r);
      return r.count;
    });
    return { ok: true, counts };
  }

  async initRate(key: string, count: number, resetAt: number): Promise<void> {
    if (!this.rate(key, this.clock())) this.rates.set(key, { count, resetAt });
  }

  async unhit(key: string, now: number): Promise<void> {
    const r = this.rate(key, now);
    if (r && r.count > 0) r.count--;
  }

  async rateCount(key: string, now: number): Promise<number> {
    return this.rate(key, now)?.count ?? 0;
  }

  private get sticky(): LRUCache<string, string> {
    return (this.stickyCache ??= new LRUCache<string, string>({ max: 100_000, ttlAutopurge: false }));
  }

  async stickyGet(session: string, ttlMs: number): Promise<string | undefined> {
    const v = this.sticky.get(session);
    if (v !== undefined) this.sticky.set(session, v, { ttl: ttlMs });
    return v;
  }

  async stickySet(session: string, endpointKey: string, ttlMs: number): Promise<void> {
    this.sticky.set(session, endpointKey, { ttl: ttlMs });
  }

  async stickyDelete(session: string): Promise<void> {
    this.sticky.delete(session);
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
  }

  private counter(id: string, now: number): Counter | undefined {
    const c = this.counters.get(id);
    if (c && c.expiresAt !== null && c.expiresAt <= now) {
      this.counters.delete(id);
      return undefined;
    }
    return c;
  }

  private rate(key: string, now: number) {
    const r = this.rates.get(key);
    if (r && r.resetAt <= now) {
      this.rates.delete(key);
      return undefined;
    }
    return r;
  }

  private group(id: string): HoldGroup {
    let g = this.holds.get(id);
    if (!g) this.holds.set(id, (g = new HoldGroup()));
    return g;
  }

  private heldNow(group: string, now: number): number {
    return this.holds.get(group)?.sum(now) ?? 0;
  }

  private nextExpiry(group: string, now: number): number | null {
    return this.holds.get(group)?.nextExpiry(now) ?? null;
  }

  private sweep(now: number): void {
    for (const id of this.counters.keys()) this.counter(id, now);
    for (const key of this.rates.keys()) this.rate(key, now);
    for (const [id, g] of this.holds) {
      this.heldNow(id, now);
      if (g.size === 0) this.holds.delete(id);
    }
  }
}
