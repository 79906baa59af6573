import { createHash } from 'node:crypto';
import type { SimulatedVideoProviderConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import { alphanumerics } from '../routing/generation-id';
import type { VideoPollResult, VideoProvider, VideoSubmitInput } from './video-types';

/** `simvid-<submitted ms>-<seconds>-<s|f>-<random>`: the whole job, so a poll after a restart needs no memory. */
const JOB_ID = /^simvid-(\d+)-(\d+(?:\.\d+)?)-([sf])-[A-Za-z0-9]+$/;

/**
 * Whether a prompt fails at this failure rate: a hash of seed and prompt mapped onto [0, 1). The same prompt
 * always gets the same answer for a given seed, so tests and demos are reproducible.
 *
 * @example promptFails('a cat', 0.5, 'seed') // true or false, the same every time
 */
export function promptFails(prompt: string, failureRate: number, seed: string): boolean {
  if (failureRate <= 0) return false;
  if (failureRate >= 1) return true;
  const h = createHash('sha256').update(seed).update('\0').update(prompt).digest();
  return h.readUInt32BE(0) / 2 ** 32 < failureRate;
}

/**
 * The built-in simulated video provider: a job is queued for `queued_ms`, runs for `running_ms`, then
 * succeeds with one URL from `output_url` (and reports the requested `duration_seconds` as its seconds) or
 * fails, per prompt (`failure_rate`, `seed`). Its state lives in the job id and the clock, so jobs survive
 * a gateway restart like those of a real upstream; only cancellations are remembered in memory.
 */
export function createSimulatedVideoProvider(config: SimulatedVideoProviderConfig, clock: () => number = Date.now): VideoProvider {
  const cancelled = new Set<string>();
  return {
    id: config.id,
    kind: 'simulated-video',
    async submit(input: VideoSubmitInput) {
      const seconds = Number(input.params.duration_seconds ?? 5);
      const fails = promptFails(input.prompt, config.failure_rate, config.seed);
      const secondsText = Number.isFinite(seconds) && seconds >= 0 ? String(seconds) : '5';
      return { upstreamJobId: `simvid-${clock()}-${secondsText}-${fails ? 'f' : 's'}-${alphanumerics(10)}` };
    },
    async poll(upstreamJobId: string): Promise<VideoPollResult> {
      const m = JOB_ID.exec(upstreamJobId);
      if (!m) {
        throw new GatewayError('not_found', `Provider ${config.id} has no job ${upstreamJobId}`, { metadata: { provider_name: config.id } });
      }
      if (cancelled.has(upstreamJobId)) return { status: 'cancelled' };
      const elapsed = clock() - Number(m[1]);
      if (elapsed < config.queued_ms) return { status: 'queued' };
      if (elapsed < config.queued_ms + config.running_ms) return { status: 'running' };
      if (m[3] === 'f') return { status: 'failed', error: 'The simulated provider failed this prompt (failure_rate)' };
      return {
        status: 'succeeded',
        urls: [config.output_url.replaceAll('{job_id}', upstreamJobId)],
        usage: { seconds: Number(m[2]) },
      };
    },
    async cancel(upstreamJobId: string) {
      cancelled.add(upstreamJobId);
    },
  };
}
