import { Counter, Histogram, Registry, type OpenMetricsContentType } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { SeriesCounter, SeriesHistogram } from '../../src/telemetry/prom-series';

const BOUNDS = [0.001, 0.01, 0.1, 1];
/** Values on, between, below and above the bounds, and a zero. */
const VALUES = [0, 0.0005, 0.001, 0.002, 0.01, 0.05, 0.1, 0.5, 1, 3, 42];

/** The same observations recorded by prom-client's classes and by ours, each on a registry of its own. */
async function bothTexts(record: (counter: { labels(...v: string[]): { inc(): void } }, histogram: { labels(...v: string[]): { observe(v: number): void } }) => void) {
  const theirs = new Registry();
  record(
    new Counter({ name: 't_requests_total', help: 'Requests "quoted" \\ and more.', labelNames: ['endpoint', 'status'], registers: [theirs] }),
    new Histogram({ name: 't_duration_seconds', help: 'Duration.', labelNames: ['endpoint'], buckets: BOUNDS, registers: [theirs] }),
  );
  const ours = new Registry();
  record(new SeriesCounter(ours, 't_requests_total', 'Requests "quoted" \\ and more.', ['endpoint', 'status']), new SeriesHistogram(ours, 't_duration_seconds', 'Duration.', ['endpoint'], BOUNDS));
  return { theirs, ours };
}

describe('prom-series', () => {
  it('scrapes to the same text as prom-client Counter and Histogram for the same observations', async () => {
    const { theirs, ours } = await bothTexts((counter, histogram) => {
      const chat = histogram.labels('chat_completions');
      for (const v of VALUES) chat.observe(v);
      histogram.labels('messages').observe(0.02);
      counter.labels('chat_completions', '200').inc();
      counter.labels('messages', '429').inc();
      counter.labels('chat_completions', '200').inc();
    });
    const text = await ours.metrics();
    expect(text).toBe(await theirs.metrics());
    expect(text).toContain('t_duration_seconds_bucket{le="0.01",endpoint="chat_completions"} 5');
    expect(text).toContain('t_duration_seconds_bucket{le="+Inf",endpoint="chat_completions"} 11');
    expect(text).toContain('t_requests_total{endpoint="chat_completions",status="200"} 2');
  });

  it('gives the same JSON as prom-client (get) and in the OpenMetrics format', async () => {
    const { theirs, ours } = await bothTexts((counter, histogram) => {
      histogram.labels('chat_completions').observe(0.003);
      counter.labels('chat_completions', '200').inc();
    });
    expect(await ours.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON());
    const theirsOpen = new Registry<OpenMetricsContentType>();
    const oursOpen = new Registry<OpenMetricsContentType>();
    theirsOpen.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
    oursOpen.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
    new Counter({ name: 'o_total', help: 'O.', labelNames: ['a'], registers: [theirsOpen] }).labels('x').inc();
    new Histogram({ name: 'o_seconds', help: 'O.', labelNames: ['a'], buckets: BOUNDS, registers: [theirsOpen] }).labels('x').observe(0.05);
    new SeriesCounter(oursOpen as unknown as Registry, 'o_total', 'O.', ['a']).labels('x').inc();
    new SeriesHistogram(oursOpen as unknown as Registry, 'o_seconds', 'O.', ['a'], BOUNDS).labels('x').observe(0.05);
    const open = await oursOpen.metrics();
    expect(open).toBe(await theirsOpen.metrics());
    expect(open).toContain('o_total{a="x"} 1');
  });

  it('shows a series once something was recorded in it, not when its child was bound', async () => {
    const { theirs, ours } = await bothTexts((counter, histogram) => {
      counter.labels('chat_completions', '200');
      histogram.labels('messages');
      histogram.labels('chat_completions').observe(0.2);
    });
    const text = await ours.metrics();
    expect(text).toBe(await theirs.metrics());
    expect(text).not.toContain('messages');
    expect(text).not.toContain('t_requests_total{');
  });

  it('binds a child once per label values, and reset empties every series', async () => {
    const registry = new Registry();
    const counter = new SeriesCounter(registry, 'c_total', 'C.', ['a']);
    expect(counter.labels('x')).toBe(counter.labels('x'));
    expect(counter.labels('x')).not.toBe(counter.labels('y'));
    counter.labels('x').inc();
    registry.resetMetrics();
    expect(await registry.metrics()).toBe('# HELP c_total C.\n# TYPE c_total counter\n');
  });

  it('leaves out a value that is not a finite number', async () => {
    const registry = new Registry();
    const h = new SeriesHistogram(registry, 'h', 'H.', ['a'], BOUNDS).labels('x');
    h.observe(Number.NaN);
    h.observe(Number.POSITIVE_INFINITY);
    h.observe(0.5);
    expect(h.count).toBe(1);
    expect(h.sum).toBe(0.5);
  });
});
