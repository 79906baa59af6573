/**
 * What recording a request's metrics costs (README "Metrics"): the calls the endpoint and the dispatch make
 * per request (one request record with duration, overhead and time to first token, one upstream attempt),
 * in a loop, against the same loop doing nothing. `npm run bench:metrics`.
 */
import { parseConfigText } from '../src/config/load';
import { registry } from '../plugins';
import { EndpointHealth } from '../src/routing/health';
import { GatewayMetrics } from '../src/telemetry/metrics';

const N = 2_000_000;
const config = parseConfigText('providers: [{ id: local, kind: simulated }]\nmodels: [{ id: sim/chat, endpoints: [{ provider: local, upstream_model: sim-1 }] }]\npipelines: { default: [auth, validate, upstream] }\n', { registry });
const metrics = new GatewayMetrics({ health: new EndpointHealth(), inFlightHolds: () => 0, requestsInFlight: () => 0, config: () => config });

function run(record: boolean): number {
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    const startedAt = i * 0.001;
    if (!record) continue;
    metrics.attempt('local', 'success');
    metrics.request({ endpoint: i & 1 ? 'chat_completions' : 'messages', status: 200, errorType: 'none', startedAt, endedAt: startedAt + 12.5, firstWriteAt: i & 1 ? 0 : startedAt + 3, upstreamMs: 11.9 });
  }
  return ((performance.now() - t0) * 1e6) / N; // ns per request
}

run(true); // warm-up
const results = [0, 1, 2].map(() => run(true) - run(false)).sort((a, b) => a - b);
console.log(`metrics recording: ${results[1].toFixed(0)} ns per request (median of 3 × ${N} requests; min ${results[0].toFixed(0)}, max ${results[2].toFixed(0)})`);
void metrics.scrape().then((text) => console.log(`scrape: ${text.length} bytes`));
