import type { Registry } from 'prom-client';

/** What both kinds share: registration, and a child per label-values combination, made on first use. */
abstract class Labelled<S extends { labels: Record<string, string> }> {
  protected readonly series = new Map<string, S>();

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
  ) {
    registry.registerMetric(this as never);
  }

  /** The child for these label values (in `labelNames` order). */
  labels(...values: string[]): S {
    const id = values.join('\u0000');
    let s = this.series.get(id);
    if (!s) {
      s = this.child(labelsOf(this.labelNames, values));
      this.series.set(id, s);
    }
    return s;
  }

  reset(): void {
    this.series.clear();
  }

  protected abstract child(labels: Record<string, string>): S;
}

/**
 * A labelled counter and a labelled histogram for the request path, registered on a prom-client `Registry`
 * (which writes the exposition text). prom-client's own children validate their labels, hash them into a
 * string and look that up, and a histogram turns the bucket bound into a property name, at every `inc` and
 * `observe`: 1883 ns for a request's five records, against 74 here (`npm run bench:metrics`; README
 * "Metrics"). Here a child is bound to its label values once and recording is an addition. `get()` and `getForPromString()` give what
 * prom-client's `Counter` and `Histogram` give for the same numbers, so the scrape text is the same
 * (test/unit/prom-series.test.ts compares the two).
 *
 * @example const requests = new SeriesCounter(registry, 'x_total', 'Requests.', ['endpoint']);
 *          const child = requests.labels('chat'); child.inc();
 */
export class SeriesCounter extends Labelled<CounterSeries> {
  readonly type = 'counter';
  readonly aggregator = 'sum';

  protected child(labels: Record<string, string>): CounterSeries {
    return new CounterSeries(labels);
  }

  async get(): Promise<object> {
    // As prom-client: a series exists once something was recorded in it, not when its child was bound.
    const values = [...this.series.values()].filter((s) => s.value > 0).map((s) => ({ value: s.value, labels: s.labels }));
    return { help: this.help, name: this.name, type: this.type, values, aggregator: this.aggregator };
  }
}

export class CounterSeries {
  value = 0;
  constructor(readonly labels: Record<string, string>) {}

  inc(): void {
    this.value += 1;
  }
}

/** A labelled histogram; see `SeriesCounter`. */
export class SeriesHistogram extends Labelled<HistogramSeries> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';

  constructor(registry: Registry, name: string, help: string, labelNames: readonly string[], private readonly upperBounds: readonly number[]) {
    super(registry, name, help, labelNames);
  }

  protected child(labels: Record<string, string>): HistogramSeries {
    return new HistogramSeries(labels, this.upperBounds);
  }

  /** As prom-client's histogram: per series its cumulative buckets, `+Inf`, `_sum` and `_count`. */
  async getForPromString(): Promise<object> {
    const bucket = `${this.name}_bucket`;
    const values: object[] = [];
    for (const s of this.series.values()) {
      if (s.count === 0) continue; // bound, never observed: not a series yet (as prom-client)
      let acc = 0;
      for (let i = 0; i < this.upperBounds.length; i++) {
        acc += s.counts[i];
        values.push({ labels: { le: this.upperBounds[i] }, sharedLabels: s.labels, value: acc, metricName: bucket, exemplar: null });
      }
      values.push(
        { labels: { le: '+Inf' }, sharedLabels: s.labels, value: s.count, metricName: bucket, exemplar: null },
        { labels: {}, sharedLabels: s.labels, value: s.sum, metricName: `${this.name}_sum`, exemplar: undefined },
        { labels: {}, sharedLabels: s.labels, value: s.count, metricName: `${this.name}_count`, exemplar: undefined },
      );
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** The same values with each series' labels merged in (prom-client's `get()`). */
  async get(): Promise<object> {
    const data = (await this.getForPromString()) as { values: { labels: Record<string, unknown>; sharedLabels: Record<string, string> }[] };
    return { ...data, values: data.values.map(({ sharedLabels, labels, ...rest }) => ({ ...rest, labels: { ...labels, ...sharedLabels } })) };
  }
}

export class HistogramSeries {
  /** Observations per bucket: `counts[i]` those at most `upperBounds[i]` and above the bound before (not cumulative). */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Record<string, string>,
    private readonly upperBounds: readonly number[],
  ) {
    this.counts = new Float64Array(upperBounds.length);
  }

  /** A value that is not a finite number is left out (prom-client would throw). */
  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    const bounds = this.upperBounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]) {
        this.counts[i]++;
        break;
      }
    }
    this.sum += value;
    this.count += 1;
  }
}

function labelsOf(names: readonly string[], values: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  names.forEach((n, i) => (out[n] = values[i]));
  return out;
}
