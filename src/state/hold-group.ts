/**
 * The holds of one group (a key, a member, a workspace, an account) in the memory driver: a running sum,
 * so reading what is held costs O(1) however many requests are in flight or settling, and a min-heap of
 * expiries, so expired holds are dropped in O(log n) each. Heap entries of holds that were replaced or
 * released stay until they surface and are then skipped (lazy deletion); when they outnumber the live
 * holds the heap is rebuilt, so a settled request's long-lived entry does not linger for the hold TTL.
 *
 * @example const g = new HoldGroup(); g.set('h1', 100, Date.now() + 60_000); g.sum(Date.now()); // 100
 */
export class HoldGroup {
  private readonly holds = new Map<string, { amount: number; until: number }>();
  private readonly heap: { until: number; id: string }[] = [];
  private total = 0;

  get size(): number {
    return this.holds.size;
  }

  set(id: string, amount: number, until: number): void {
    this.delete(id);
    this.holds.set(id, { amount, until });
    this.total += amount;
    this.push({ until, id });
  }

  /** Removes a hold; whether it was there. */
  delete(id: string): boolean {
    const h = this.holds.get(id);
    if (!h) return false;
    this.holds.delete(id);
    this.total -= h.amount;
    return true;
  }

  /** What is held at `now` (holds expiring at or before `now` are dropped first). */
  sum(now: number): number {
    this.expire(now);
    return this.total;
  }

  /** The earliest expiry of a live hold, or null. */
  nextExpiry(now: number): number | null {
    this.expire(now);
    while (this.heap.length > 0 && !this.live(this.heap[0])) this.pop();
    return this.heap.length > 0 ? this.heap[0].until : null;
  }

  /** A sorted array is a valid min-heap: rebuild from the live holds only. */
  private compact(): void {
    const live = [...this.holds].map(([id, h]) => ({ until: h.until, id })).sort((a, b) => a.until - b.until);
    this.heap.length = 0;
    this.heap.push(...live);
  }

  private expire(now: number): void {
    while (this.heap.length > 0 && this.heap[0].until <= now) {
      const top = this.pop();
      if (this.live(top)) this.delete(top.id);
    }
    if (this.heap.length > 2 * this.holds.size + 1024) this.compact();
  }

  /** A heap entry still describes the current hold of its id. */
  private live(e: { until: number; id: string }): boolean {
    return this.holds.get(e.id)?.until === e.until;
  }

  private push(e: { until: number; id: string }): void {
    const h = this.heap;
    h.push(e);
    for (let i = h.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (h[parent].until <= h[i].until) break;
      [h[parent], h[i]] = [h[i], h[parent]];
      i = parent;
    }
  }

  private pop(): { until: number; id: string } {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l].until < h[m].until) m = l;
        if (r < h.length && h[r].until < h[m].until) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}
