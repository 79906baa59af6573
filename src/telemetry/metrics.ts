import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { GatewayConfig } from '../config/types';
import { ERROR_STATUS, type GatewayError } from '../errors/gateway-error';
import type { EndpointId } from '../pipeline/types';
import type { EndpointHealth } from '../routing/health';
import { rejectionReason } from '../spend/rejections';
import { SeriesCounter, SeriesHistogram, type CounterSeries, type HistogramSeries } from './prom-series';

/** What the scrape-time gauges read: objects that outlive config reloads, and the config current now. */
export interface MetricsSources {
  health: EndpointHealth;
  /** Spend holds this process took and has not released yet. */
  inFlightHolds(): number;
  /** Requests the endpoints are serving now (server.max_in_flight counts the same). */
  requestsInFlight(): number;
  config(): GatewayConfig;
}

/** One request at its end, as the endpoint factory saw it. Times are `performance.now()` values. */
export interface FinishedRequest {
  endpoint: EndpointId;
  status: number;
  /** The error answer's error_type; for a stream that answered 200, how it ended (see README "Metrics"). */
  errorType: string;
  error?: GatewayError;
  startedAt: number;
  endedAt: number;
  /** When the first SSE bytes were written; 0 for a JSON answer. */
  firstWriteAt: number;
  /** Time spent waiting on upstream calls (see GatewayState.upstreamMs); -1 when none was made. */
  upstreamMs: number;
}

/** error_type label values besides the spec's vocabulary: a success, and how a 200 stream ended. */
const EXTRA_ERROR_TYPES = ['none', 'stream_failed', 'cancelled'] as const;
const ERROR_TYPES = new Set<string>([...Object.keys(ERROR_STATUS), ...EXTRA_ERROR_TYPES]);

const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
const TTFT_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60];

type CounterChild = { inc(): void };

/** The label children of one endpoint, bound once (`labels()` joins the values into a lookup key). */
interface EndpointChildren {
  duration: HistogramSeries;
  overhead: HistogramSeries;
  ttft: HistogramSeries;
  /** status → error_type → child. */
  requests: Map<number, Map<string, CounterSeries>>;
}

/**
 * The gateway's Prometheus metrics, on a registry of its own (two gateways in one process keep their own
 * numbers). Recording is a few Map lookups and additions per request (prom-series.ts); the gauges (holds,
 * circuit breakers) are read at scrape time, costing the request path nothing.
 *
 * @example const metrics = new GatewayMetrics({ health, inFlightHolds: () => spend.inFlightHolds(), config: () => current.config });
 *          metrics.request({ endpoint: 'chat_completions', status: 200, errorType: 'none', … });
 *          const text = await metrics.scrape();
 */
export class GatewayMetrics {
  readonly registry = new Registry();
  readonly contentType = this.registry.contentType;
  // Recorded on every request: the gateway's own series types (prom-series.ts), same scrape text.
  private readonly requestsTotal: SeriesCounter;
  private readonly attemptsTotal: SeriesCounter;
  private readonly duration: SeriesHistogram;
  private readonly overhead: SeriesHistogram;
  private readonly ttft: SeriesHistogram;
  private readonly rejectionsTotal: Counter<'reason' | 'status'>;
  private readonly endpoints = new Map<string, EndpointChildren>();
  private readonly attempts = new Map<string, Map<string, CounterSeries>>();
  private readonly rejections = new Map<string, CounterChild>();
  private readonly overloadTotal: Counter;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    this.requestsTotal = new SeriesCounter(this.registry, 'gateway_requests_total', 'Requests answered, by endpoint, HTTP status and error_type (none for a success).', [
      'endpoint',
      'status',
      'error_type',
    ]);
    this.attemptsTotal = new SeriesCounter(this.registry, 'gateway_upstream_attempts_total', 'Upstream calls, by provider and outcome (success, or the error_type of the failure).', [
      'provider',
      'outcome',
    ]);
    this.rejectionsTotal = new Counter({
      name: 'gateway_budget_rejections_total',
      help: 'Requests refused by the spend checks (402, 403) and platform rate limits (429), by reason.',
      labelNames: ['reason', 'status'],
      registers,
    });
    this.duration = new SeriesHistogram(
      this.registry,
      'gateway_request_duration_seconds',
      'Time from arrival to the end of the answer (a stream: its last event).',
      ['endpoint'],
      DURATION_BUCKETS,
    );
    this.overhead = new SeriesHistogram(
      this.registry,
      'gateway_overhead_seconds',
      'Time the gateway added: to the end of a JSON answer, or to the first event of a stream, minus the time spent waiting on upstream calls.',
      ['endpoint'],
      OVERHEAD_BUCKETS,
    );
    this.ttft = new SeriesHistogram(this.registry, 'gateway_time_to_first_token_seconds', 'Streams: time from arrival to the first SSE event written to the client.', ['endpoint'], TTFT_BUCKETS);
    this.overloadTotal = new Counter({
      name: 'gateway_overload_refusals_total',
      help: 'Requests refused at once because server.max_in_flight requests were being served (503, 529 on /messages).',
      registers,
    });
    new Gauge({
      name: 'gateway_requests_in_flight',
      help: 'Requests the endpoints are serving now (streams until their last event).',
      registers,
      collect() {
        this.set(sources.requestsInFlight());
      },
    });
    new Gauge({
      name: 'gateway_in_flight_holds',
      help: 'Spend holds taken by this process for requests still running.',
      registers,
      collect() {
        this.set(sources.inFlightHolds());
      },
    });
    new Gauge({
      name: 'gateway_circuit_breaker_state',
      help: 'Circuit breaker of each configured provider endpoint: 0 closed, 0.5 half-open, 1 open.',
      labelNames: ['provider', 'upstream_model'],
      registers,
      collect() {
        this.reset(); // endpoints removed by a reload disappear
        const now = Date.now();
        const seen = new Set<string>();
        for (const model of sources.config().models) {
          for (const e of model.endpoints) {
            const key = `${e.provider}/${e.upstream_model}`;
            if (seen.has(key)) continue;
            seen.add(key);
            const state = sources.health.state(key, now);
            this.labels(e.provider, e.upstream_model).set(state === 'closed' ? 0 : state === 'open' ? 1 : 0.5);
          }
        }
      },
    });
  }

  /** Records a finished request: once per request, where it ends (JSON, error, or the end of a stream). */
  request(r: FinishedRequest): void {
    const c = this.endpointChildren(r.endpoint);
    let byStatus = c.requests.get(r.status);
    if (!byStatus) {
      byStatus = new Map();
      c.requests.set(r.status, byStatus);
    }
    let child = byStatus.get(r.errorType);
    if (!child) {
      const status = Number.isInteger(r.status) && r.status >= 100 && r.status <= 599 ? String(r.status) : 'other';
      child = this.requestsTotal.labels(r.endpoint, status, ERROR_TYPES.has(r.errorType) ? r.errorType : 'other');
      byStatus.set(r.errorType, child);
    }
    child.inc();
    c.duration.observe((r.endedAt - r.startedAt) / 1000);
    if (r.firstWriteAt > 0) c.ttft.observe((r.firstWriteAt - r.startedAt) / 1000);
    if (r.upstreamMs >= 0) {
      const until = r.firstWriteAt > 0 ? r.firstWriteAt : r.endedAt;
      c.overhead.observe(Math.max(0, until - r.startedAt - r.upstreamMs) / 1000);
    }
    if (r.error) {
      const reason = rejectionReason(r.error);
      if (reason) this.rejection(reason, r.status);
    }
  }

  /** Records a request refused by the in-flight ceiling (it never reaches an endpoint, so `request()` misses it). */
  overloadRefused(): void {
    this.overloadTotal.inc();
  }

  /** Records one upstream call's outcome: `success`, or the error_type it failed with. */
  attempt(provider: string, outcome: string): void {
    let byOutcome = this.attempts.get(provider);
    if (!byOutcome) {
      byOutcome = new Map();
      this.attempts.set(provider, byOutcome);
    }
    let child = byOutcome.get(outcome);
    if (!child) {
      child = this.attemptsTotal.labels(provider, outcome === 'success' || ERROR_TYPES.has(outcome) ? outcome : 'other');
      byOutcome.set(outcome, child);
    }
    child.inc();
  }

  /** The text a Prometheus scrape gets: this gateway's metrics, then the process's (see processRegistry). */
  async scrape(): Promise<string> {
    const [own, proc] = await Promise.all([this.registry.metrics(), processRegistry().metrics()]);
    return `${own}\n${proc}`;
  }

  private rejection(reason: string, status: number): void {
    let child = this.rejections.get(reason);
    if (!child) {
      child = this.rejectionsTotal.labels(reason, String(status));
      this.rejections.set(reason, child);
    }
    child.inc();
  }

  private endpointChildren(endpoint: EndpointId): EndpointChildren {
    let c = this.endpoints.get(endpoint);
    if (!c) {
      c = {
        duration: this.duration.labels(endpoint),
        overhead: this.overhead.labels(endpoint),
        ttft: this.ttft.labels(endpoint),
        requests: new Map(),
      };
      this.endpoints.set(endpoint, c);
    }
    return c;
  }
}

let processMetrics: Registry | undefined;

/**
 * Node and process metrics (CPU, memory, event loop lag, GC, handles), registered once per process on a
 * registry of their own: they describe the process, not one gateway, and registering them again per
 * gateway would start another event-loop monitor and GC observer each time, never stopped.
 */
function processRegistry(): Registry {
  if (!processMetrics) {
    processMetrics = new Registry();
    collectDefaultMetrics({ register: processMetrics });
  }
  return processMetrics;
}
