import { requireManagementKey } from '../auth/key-cache';
import type { VideoModelConfig } from '../config/types';
import { GatewayError, quoted, toGatewayError } from '../errors/gateway-error';
import type { GatewayContext, Stage } from '../pipeline/types';
import type { VideoProvider } from '../providers/video-types';
import { blamesCaller } from '../routing/attempt-policy';
import type { Services } from '../services';
import type { KeyRecord, VideoJob } from '../store/types';
import { advanceJob, expireIfDue } from '../videos/advance';
import { releaseVideoHold, videoEstimate } from '../videos/billing';
import { jobObject, transition, videoJobId } from '../videos/job';
import { jobKey } from '../videos/own-key';
import { parseVideoRequest, type VideoRequest } from '../videos/request';
import { isFinished } from '../videos/states';

/** Spec 5.3: polling (and, our choice, cancelling) video jobs is for management keys only. */
function jobIdParam(ctx: GatewayContext): string {
  return (ctx as unknown as { params: Record<string, string> }).params.jobId ?? '';
}

/** The workspace's job, or 404 alike for an unknown id and another workspace's job (nothing to probe). */
async function workspaceJob(services: Services, id: string, key: KeyRecord, metadata?: Record<string, unknown>): Promise<VideoJob> {
  // No job id holds a NUL (they are `gen-vid-…`), nor can PostgreSQL's text: asked for one, it failed the lookup (a 500).
  const job = id.includes('\u0000') ? null : await services.store.getVideoJob(id, key.workspaceId);
  if (!job) throw new GatewayError('not_found', `Video job ${quoted(id)} not found`, metadata ? { metadata } : undefined);
  return job;
}

/**
 * The workspace's job as GET shows it: a completed job whose outputs passed their expiry is expired first, so
 * the cancel and a continuation judge the status a read of the job gives (the poller may not have got to it).
 */
async function currentJob(services: Services, id: string, key: KeyRecord, metadata?: Record<string, unknown>): Promise<VideoJob> {
  const job = await workspaceJob(services, id, key, metadata);
  return (await expireIfDue({ services, clock: services.spend.clock }, job)) ?? (await workspaceJob(services, id, key, metadata));
}

/**
 * POST /videos (this gateway's addition; the spec shows no creation): any valid key. Validates the body,
 * counts it in the key's and the video model's rate-limit windows (429 when one is full), runs the spend
 * checks and holds the job's estimate (`SpendControl.admitVideoJob`: budgets, the key's limit, a prepaid
 * account's balance and its unfinished jobs; for a job every endpoint would run with the workspace's own key,
 * only budgets that count BYOK spend and a negative balance), submits to the model's first video endpoint that accepts the job (the next one on an upstream
 * failure that is not the caller's fault), with the workspace's own key for that provider when it has one
 * (BYOK), stores the job with its hold and answers 200 with it (`status: pending`). A submission or a store
 * write that fails releases the hold at once; otherwise billing or the job's unbilled end releases it.
 */
export function videoCreateStage(services: Services): Stage {
  return async (ctx) => {
    const state = ctx.state.gateway;
    const key = state.key!;
    const req = parseVideoRequest(state.body, services.config.videos);
    // Before anything else is spent on it, as the chat pipelines' `rate-limit` stage: every job is a store row
    // the poller follows upstream until it ends, so a key's request rate bounds how many it can start.
    await services.rateLimits.checkVideoJob({ config: services.config, gw: state, model: req.model, now: services.spend.clock() });
    const model = services.videos.models.get(req.model);
    if (!model) {
      throw new GatewayError('not_found', `Video model \`${quoted(req.model)}\` is not available on this gateway`, { metadata: { model: quoted(req.model) } });
    }
    const previous = req.previousJobId ? await previousJob(services, req.previousJobId, key) : null;
    const endpoints = previous ? model.endpoints.filter((e) => e.provider === previous.provider) : model.endpoints;
    if (previous && endpoints.length === 0) {
      throw new GatewayError('invalid_request', `The previous job ran on provider ${previous.provider}, which does not serve video model \`${model.id}\``, {
        metadata: { field: 'previous_job_id' },
      });
    }
    // The workspace's own keys (BYOK) are used where it has one for the endpoint's provider; a continuation is
    // made under the same upstream account as the job it continues (its key, or the configured one).
    const previousKey = previous ? await jobKey(services, previous) : undefined;
    const own = previous ? null : await services.ownKeys(key.workspaceId);
    const keyFor = (provider: string) => (own ? own.get(provider) : previousKey);
    // Served with the workspace's own keys whichever endpoint takes it, a job spends no credit: it is checked
    // as such a chat request is (budgets that count BYOK spend, a negative balance), not against the balance.
    const byokOnly = endpoints.every((e) => keyFor(e.provider) !== undefined);
    const hold = await services.spend.admitVideoJob(services.config, state, videoEstimate(endpoints, Number(req.params.duration_seconds)), byokOnly);
    const release = () => (hold ? services.spend.settleVideoJob(services.config, hold, null) : Promise.resolve());
    let submitted: Submitted;
    try {
      submitted = await submit(services, endpoints, req, previous, state.signal, keyFor);
    } catch (err) {
      await release();
      throw err;
    }
    const now = services.spend.clock();
    let job: VideoJob;
    try {
      job = await services.store.createVideoJob({
        id: videoJobId(now),
        workspaceId: key.workspaceId,
        keyId: key.id,
        accountId: key.accountId,
        userId: key.creatorUserId,
        model: model.id,
        provider: submitted.endpoint.provider,
        upstreamModel: submitted.endpoint.upstream_model,
        upstreamJobId: submitted.upstreamJobId,
        status: 'pending',
        previousJobId: previous?.id ?? null,
        request: { prompt: req.prompt, params: req.params, pricing: submitted.endpoint.pricing, ...(hold ? { hold } : {}) },
        createdAt: now,
        isByok: submitted.apiKey !== undefined,
      });
    } catch (err) {
      // Nobody could ever poll or bill it: stop the upstream work rather than leave it running unseen.
      submitted.provider.cancel(submitted.upstreamJobId, submitted.apiKey).catch(() => undefined);
      await release();
      throw err;
    }
    state.span.setAttribute('gateway.video_job_id', job.id);
    state.response = { kind: 'json', status: 200, body: jobObject(job, services.config.server.base_path) };
  };
}

/** A job continued with `previous_job_id`: the workspace's own (404 otherwise), and completed. */
async function previousJob(services: Services, id: string, key: KeyRecord): Promise<VideoJob> {
  const job = await currentJob(services, id, key, { field: 'previous_job_id' });
  if (job.status !== 'completed') {
    throw new GatewayError('invalid_request', `Only a completed job can be continued; video job ${id} is ${job.status}`, { metadata: { field: 'previous_job_id' } });
  }
  return job;
}

interface Submitted {
  endpoint: VideoModelConfig['endpoints'][number];
  provider: VideoProvider;
  upstreamJobId: string;
  /** The workspace's own key it was submitted with (BYOK), if any. */
  apiKey: string | undefined;
}

async function submit(
  services: Services,
  endpoints: VideoModelConfig['endpoints'],
  req: VideoRequest,
  previous: VideoJob | null,
  signal: AbortSignal,
  keyFor: (provider: string) => string | undefined,
): Promise<Submitted> {
  let last: GatewayError | undefined;
  for (const endpoint of endpoints) {
    const provider = services.videos.providers.get(endpoint.provider);
    if (!provider) continue;
    const apiKey = keyFor(endpoint.provider);
    try {
      const { upstreamJobId } = await provider.submit(
        { model: endpoint.upstream_model, prompt: req.prompt, params: req.params, previousUpstreamJobId: previous?.upstreamJobId },
        signal,
        apiKey,
      );
      return { endpoint, provider, upstreamJobId, apiKey };
    } catch (err) {
      last = toGatewayError(err);
      if (blamesCaller(last) || signal.aborted) throw last;
      services.logger.warn({ err, provider: endpoint.provider }, 'video submission failed; trying the next endpoint');
    }
  }
  throw last ?? new GatewayError('provider_unavailable', 'No video provider is available for this model');
}

/**
 * GET /videos/{jobId} (spec 4.4): 401 without a usable key, 403 for keys that are not management keys
 * (before any lookup), 404 for unknown ids and other workspaces' jobs, else the job object (2.3). A completed
 * job past its expiry is expired on this read.
 */
export function videoGetStage(services: Services): Stage {
  return async (ctx) => {
    const state = ctx.state.gateway;
    const key = state.key!;
    requireManagementKey(key);
    const job = await currentJob(services, jobIdParam(ctx), key);
    state.response = { kind: 'json', status: 200, body: jobObject(job, services.config.server.base_path) };
  };
}

/**
 * POST /videos/{jobId}/cancel: same key and workspace rules as GET. A pending or in_progress job is cancelled
 * upstream, then marked cancelled (200 with the job) and its spend hold released; a job that already ended is
 * 409 `conflict`, also when the upstream refused the cancel because the job had ended there before the gateway
 * polled it. Any other refusal leaves the job as it was and answers with that error (e.g. 502).
 */
export function videoCancelStage(services: Services): Stage {
  return async (ctx) => {
    const state = ctx.state.gateway;
    const key = state.key!;
    requireManagementKey(key);
    const id = jobIdParam(ctx);
    let job = await currentJob(services, id, key);
    if (!isFinished(job.status)) {
      const provider = services.videos.providers.get(job.provider);
      // The request's abort ends the upstream calls: a shutdown's cut answers the 503 at once (the call had
      // run on to the provider's timeout_ms, and the client lost its answer to the closing connection).
      if (provider) job = await cancelUpstream(services, provider, job, state.signal);
    }
    // A poller may move the job (pending → in_progress) between the read and the write: read again and retry.
    for (let i = 0; i < 3 && !isFinished(job.status); i++) {
      const cancelled = await transition(services.store, job, 'cancelled', {}, services.spend.clock());
      if (cancelled) {
        job = cancelled;
        await releaseVideoHold(services, job); // this request ended the job: its hold goes (a repeated cancel finds it finished)
      } else job = await workspaceJob(services, id, key);
    }
    if (job.status !== 'cancelled') {
      throw new GatewayError('conflict', `Video job ${id} is ${job.status}; only a pending or in_progress job can be cancelled`, { metadata: { status: job.status } });
    }
    state.response = { kind: 'json', status: 200, body: jobObject(job, services.config.server.base_path) };
  };
}

/**
 * Cancels the job upstream and returns it. An upstream that answers the cancel with an error may have ended
 * the job before the gateway polled it (a 409 "already finished"): the job is then polled once, as the poller
 * would (completed and billed, or failed, or cancelled), and returned if that ended it, for the cancel's usual
 * answer (a 409 `conflict` naming the status, or 200 if the upstream had cancelled it). Otherwise, and when
 * the upstream could not be reached at all, its error stands.
 */
async function cancelUpstream(services: Services, provider: VideoProvider, job: VideoJob, signal: AbortSignal): Promise<VideoJob> {
  const key = await jobKey(services, job);
  try {
    await provider.cancel(job.upstreamJobId, key, signal);
    return job;
  } catch (err) {
    const refusal = toGatewayError(err);
    if (refusal.metadata?.provider_code === undefined) throw refusal;
    const polled = (await advanceJob({ services, clock: services.spend.clock, signal }, job)) ?? (await services.store.getVideoJob(job.id, job.workspaceId));
    if (polled && isFinished(polled.status)) return polled;
    throw refusal;
  }
}
