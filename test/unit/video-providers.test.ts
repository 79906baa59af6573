import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins/index';
import { ConfigError, parseConfigText } from '../../src/config/load';
import type { SimulatedVideoProviderConfig } from '../../src/config/types';
import { GatewayError } from '../../src/errors/gateway-error';
import { buildProviders } from '../../src/providers';
import { createSimulatedVideoProvider, promptFails } from '../../src/providers/simulated-video';
import { buildVideoProviders } from '../../src/providers/video-providers';
import type { VideoJob } from '../../src/store/types';
import { jobObject } from '../../src/videos/job';

function simulated(over: Partial<SimulatedVideoProviderConfig> = {}): SimulatedVideoProviderConfig {
  return { id: 'sv', kind: 'simulated-video', queued_ms: 100, running_ms: 200, failure_rate: 0, seed: 's', output_url: 'https://o.test/{job_id}.mp4', region: 'global', data_collection: 'deny', ...over };
}

const signal = new AbortController().signal;

describe('the simulated video provider', () => {
  it('is queued, then running, then succeeded with its URL and the requested seconds, by the clock', async () => {
    let now = 1_000;
    const p = createSimulatedVideoProvider(simulated(), () => now);
    const { upstreamJobId: id } = await p.submit({ model: 'v', prompt: 'a cat', params: { duration_seconds: 7 } }, signal);
    expect((await p.poll(id)).status).toBe('queued');
    now += 100;
    expect((await p.poll(id)).status).toBe('running');
    now += 199;
    expect((await p.poll(id)).status).toBe('running');
    now += 1;
    expect(await p.poll(id)).toEqual({ status: 'succeeded', urls: [`https://o.test/${id}.mp4`], usage: { seconds: 7 } });
  });

  it('keeps no state a restart would lose: a new instance polls an old job id', async () => {
    let now = 0;
    const before = createSimulatedVideoProvider(simulated(), () => now);
    const { upstreamJobId: id } = await before.submit({ model: 'v', prompt: 'x', params: {} }, signal);
    now = 1_000;
    const after = createSimulatedVideoProvider(simulated(), () => now);
    expect((await after.poll(id)).status).toBe('succeeded');
  });

  it('fails prompts by failure_rate, deterministically per prompt and seed', async () => {
    const prompts = Array.from({ length: 2000 }, (_, i) => `prompt number ${i}`);
    const failing = prompts.filter((p) => promptFails(p, 0.3, 'seed-a'));
    expect(failing.length).toBeGreaterThan(500);
    expect(failing.length).toBeLessThan(700);
    expect(prompts.filter((p) => promptFails(p, 0.3, 'seed-a'))).toEqual(failing);
    expect(prompts.filter((p) => promptFails(p, 0.3, 'seed-b'))).not.toEqual(failing);
    expect(prompts.some((p) => promptFails(p, 0, 'x'))).toBe(false);
    expect(prompts.every((p) => promptFails(p, 1, 'x'))).toBe(true);

    let now = 0;
    const p = createSimulatedVideoProvider(simulated({ failure_rate: 0.3, seed: 'seed-a' }), () => now);
    const bad = await p.submit({ model: 'v', prompt: failing[0], params: {} }, signal);
    const good = await p.submit({ model: 'v', prompt: prompts.find((x) => !failing.includes(x))!, params: {} }, signal);
    now = 10_000;
    expect(await p.poll(bad.upstreamJobId)).toMatchObject({ status: 'failed', error: expect.any(String) });
    expect((await p.poll(good.upstreamJobId)).status).toBe('succeeded');
  });

  it('cancel makes its polls answer cancelled; an id it never made is not_found', async () => {
    const p = createSimulatedVideoProvider(simulated(), () => 0);
    const { upstreamJobId: id } = await p.submit({ model: 'v', prompt: 'x', params: {} }, signal);
    await p.cancel(id);
    expect((await p.poll(id)).status).toBe('cancelled');
    await expect(p.poll('up-1')).rejects.toMatchObject({ errorType: 'not_found' });
    await expect(p.poll('up-1')).rejects.toBeInstanceOf(GatewayError);
  });
});

const VIDEO_CONFIG = `
providers:
  - { id: local, kind: simulated }
  - { id: sv, kind: simulated-video }
  - { id: hv, kind: http-video, base_url: 'https://video.test/v1' }
models:
  - id: chat
    endpoints: [{ provider: local, upstream_model: sim-1 }]
video_models:
  - id: video
    endpoints: [{ provider: sv, upstream_model: sv-1, pricing: { per_second: 0.1 } }, { provider: hv, upstream_model: hv-1 }]
pipelines:
  default: [auth, upstream]
`;

const parse = (text: string) => parseConfigText(text, { registry, env: {} });

function configError(text: string): string {
  try {
    parse(text);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('video configuration', () => {
  it('fills the defaults of the video provider kinds, video models and the videos section', () => {
    const config = parse(VIDEO_CONFIG);
    expect(config.providers[1]).toEqual({ id: 'sv', kind: 'simulated-video', region: 'global', data_collection: 'deny', queued_ms: 1000, running_ms: 3000, failure_rate: 0, seed: 'simulated-video', output_url: 'https://simulated-video.invalid/{job_id}.mp4' });
    expect(config.providers[2]).toMatchObject({ kind: 'http-video', timeout_ms: 30000, connect_timeout_ms: 10000 });
    expect(config.video_models[0].endpoints.map((e) => e.pricing)).toEqual([{ per_second: 0.1, per_job: 0 }, { per_second: 0, per_job: 0 }]);
    expect(config.videos).toEqual({ poll_interval_ms: 1000, output_ttl_s: 86400, job_timeout_s: 3600, default_duration_seconds: 5, max_duration_seconds: 60, max_jobs_per_round: 1000 });
    expect(parse(VIDEO_CONFIG.replace(/video_models:[\s\S]*?pipelines:/, 'pipelines:')).video_models).toEqual([]);
  });

  it('chat routing never sees video providers, and video models never chat providers', () => {
    const config = parse(VIDEO_CONFIG);
    expect([...buildProviders(config.providers).keys()]).toEqual(['local']);
    expect([...buildVideoProviders(config.providers).keys()]).toEqual(['sv', 'hv']);
    expect(configError(VIDEO_CONFIG.replace('{ provider: local, upstream_model: sim-1 }', '{ provider: sv, upstream_model: sim-1 }'))).toMatch(
      /^models\[0\]\.endpoints\[0\]\.provider: "sv" is a video provider/,
    );
    expect(configError(VIDEO_CONFIG.replace('{ provider: hv, upstream_model: hv-1 }', '{ provider: local, upstream_model: hv-1 }'))).toMatch(
      /^video_models\[0\]\.endpoints\[1\]\.provider: "local" is not a video provider/,
    );
    expect(configError(VIDEO_CONFIG.replace('{ provider: hv, upstream_model: hv-1 }', '{ provider: nope, upstream_model: hv-1 }'))).toMatch(/^video_models\[0\]\.endpoints\[1\]\.provider: unknown provider/);
  });

  it('refuses a video model with the id of a chat model (rate-limit model lines and the ledger could not tell them apart)', () => {
    expect(configError(VIDEO_CONFIG.replace('  - id: video\n', '  - id: chat\n'))).toBe('video_models[0].id: "chat" is also the id of a chat model (models[]); give each its own id');
  });

  it('rejects bad video fields with their path', () => {
    expect(configError(VIDEO_CONFIG.replace('kind: simulated-video }', 'kind: simulated-video, failure_rate: 2 }'))).toMatch(/^providers\[1\]\.failure_rate:/);
    expect(configError(VIDEO_CONFIG.replace("base_url: 'https://video.test/v1'", 'timeout_ms: 5'))).toMatch(/^providers\[2\]\.base_url: is required/);
    expect(configError(VIDEO_CONFIG.replace('kind: simulated-video', 'kind: video-sim'))).toMatch(/^providers\[1\]\.kind: must be one of .*simulated-video, http-video/);
    expect(configError(`${VIDEO_CONFIG}videos: { poll_interval_ms: 0 }\n`)).toMatch(/^videos\.poll_interval_ms:/);
    expect(configError(`${VIDEO_CONFIG}videos: { default_duration_seconds: 90 }\n`)).toMatch(/^videos\.default_duration_seconds:/);
    expect(configError(VIDEO_CONFIG.replace('pricing: { per_second: 0.1 }', 'pricing: { per_token: 1 }'))).toMatch(/^video_models\[0\]\.endpoints\[0\]\.pricing\.per_token: unknown field/);
  });
});

describe('the job object on the wire (spec 2.3)', () => {
  const base: VideoJob = {
    id: 'gen-vid-1-aaaaaaaaaaaaaaaaaaaa', workspaceId: 'w', keyId: 'k', accountId: 'a', userId: 'u', model: 'm', provider: 'p', upstreamModel: 'um', upstreamJobId: 'up',
    status: 'pending', previousJobId: null, request: { prompt: 'x', params: {} }, generationId: null, urls: ['https://o.test/1.mp4'], costUsd: 0.5, isByok: false,
    error: null, expiresAt: 1_900_000_000_999, completedAt: 1, billed: false, createdAt: 1, updatedAt: 1,
  };
  const wire = (over: Partial<VideoJob>) => jobObject({ ...base, ...over }, '/api/v1');
  const head = { id: base.id, polling_url: `/api/v1/videos/${base.id}` };

  it('shows each field only in the statuses where it exists', () => {
    expect(wire({})).toEqual({ ...head, status: 'pending' });
    expect(wire({ status: 'in_progress', generationId: 'gen-1-g' })).toEqual({ ...head, status: 'in_progress', generation_id: 'gen-1-g' });
    expect(wire({ status: 'completed', generationId: 'gen-1-g' })).toEqual({
      ...head, status: 'completed', generation_id: 'gen-1-g', unsigned_urls: ['https://o.test/1.mp4'], usage: { cost: 0.5, is_byok: false }, expires_at: 1_900_000_000,
    });
    expect(wire({ status: 'expired', generationId: 'gen-1-g' })).toEqual({ ...head, status: 'expired', generation_id: 'gen-1-g', usage: { cost: 0.5, is_byok: false } });
    expect(wire({ status: 'failed', error: 'boom' })).toEqual({ ...head, status: 'failed', error: { message: 'boom' } });
    expect(wire({ status: 'cancelled' })).toEqual({ ...head, status: 'cancelled' });
  });
});

describe('the http-video provider against a hostile upstream', () => {
  it('reads an answer up to 2 MB: a larger one, declared or streamed, fails the call without being held whole', async () => {
    const { createServer } = await import('node:http');
    const { createHttpVideoProvider } = await import('../../src/providers/http-video');
    let streamedBytes = 0;
    const server = createServer((req, res) => {
      if (req.url?.includes('declared')) {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(1e9) });
        res.write(' '.repeat(1000)); // a body that would be 1 GB: refused by its length, never read
        return;
      }
      // An endless body: the gateway must stop reading it, not hold it until it ends.
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = ' '.repeat(64 * 1024);
      const more = () => {
        while (!res.destroyed && streamedBytes < 100e6) {
          streamedBytes += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end('{"id":"job-1","status":"queued"}');
      };
      more();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as import('node:net').AddressInfo).port;
      const p = createHttpVideoProvider({ id: 'vid', kind: 'http-video', base_url: `http://127.0.0.1:${port}/v1`, timeout_ms: 5000, connect_timeout_ms: 1000, region: 'global', data_collection: 'deny' } as never);
      const err = await p.submit({ model: 'v', prompt: 'x', params: {} }, signal).then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(GatewayError);
      expect((err as GatewayError).errorType).toBe('provider_unavailable');
      expect((err as GatewayError).message).toBe('Provider vid sent an answer over 2 MB');
      expect(streamedBytes).toBeLessThan(20e6);
      const declared = await p.poll('declared').then(() => null, (e: unknown) => e);
      expect((declared as GatewayError).message).toBe('Provider vid sent an answer over 2 MB');
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('the http-video provider and a key written back with JSON escapes', () => {
  it('an error, a job error and an output URL quoting the key as \\u escapes lose it once parsed', async () => {
    const { createServer } = await import('node:http');
    const { createHttpVideoProvider } = await import('../../src/providers/http-video');
    const KEY = 'sk-video-operator-0123456789abcdef';
    // `s` written as \u0073: valid JSON for the same text, which the scrub of the raw answer does not see.
    const escaped = `\\u0073${KEY.slice(1)}`;
    const server = createServer((req, res) => {
      req.resume();
      if (req.method === 'POST') return void res.writeHead(400, { 'content-type': 'application/json' }).end(`{"error":{"message":"Incorrect API key provided: ${escaped}","type":"invalid_request_error"}}`);
      res.writeHead(200, { 'content-type': 'application/json' }).end(`{"status":"failed","error":{"message":"job refused for ${escaped}"},"output_urls":["https://cdn.example/v.mp4?k=${escaped}"]}`);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as import('node:net').AddressInfo).port;
      const p = createHttpVideoProvider({ id: 'vid', kind: 'http-video', base_url: `http://127.0.0.1:${port}/v1`, api_key: KEY, timeout_ms: 5000, connect_timeout_ms: 1000, region: 'global', data_collection: 'deny' } as never);
      const err = (await p.submit({ model: 'v', prompt: 'x', params: {} }, signal).then(() => null, (e: unknown) => e)) as GatewayError;
      expect(err).toBeInstanceOf(GatewayError);
      expect(err.message).toBe('Incorrect API key provided: [redacted]');
      expect(JSON.stringify(err.metadata)).not.toContain(KEY.slice(4));
      const polled = await p.poll('up-1');
      expect(polled).toMatchObject({ status: 'failed', error: 'job refused for [redacted]', urls: ['https://cdn.example/v.mp4?k=[redacted]'] });
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
