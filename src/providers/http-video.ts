import { errors as undiciErrors } from '../net/undici-parts';
import type { HttpVideoProviderConfig } from '../config/types';
import { GatewayError } from '../errors/gateway-error';
import { discard, readCappedBody, type DroppableBody } from '../net/capped-response';
import { agentFor } from './http';
import { credentialsIn, scrubbed, withoutCredentials } from './credentials';
import { classifyUpstreamError } from './upstream-errors';
import { expiryMs, MAX_UPSTREAM_JOB_ID_CHARS, outputUrls, upstreamJobIdProblem } from './video-answer';
import type { VideoPollResult, VideoProvider, VideoSubmitInput, VideoUpstreamStatus } from './video-types';

/** Upstream status words, the contract's own first, then common synonyms. */
const STATUS: Record<string, VideoUpstreamStatus> = {
  queued: 'queued',
  pending: 'queued',
  running: 'running',
  in_progress: 'running',
  processing: 'running',
  succeeded: 'succeeded',
  completed: 'succeeded',
  failed: 'failed',
  error: 'failed',
  cancelled: 'cancelled',
  canceled: 'cancelled',
};

interface Call {
  method: 'GET' | 'POST';
  path: string;
  body?: unknown;
  signal?: AbortSignal;
  /** A workspace's own key (BYOK), sent instead of `api_key`. */
  apiKey?: string;
}

/**
 * A generic job-style video upstream (`kind: http-video`):
 * - `POST {base_url}/videos` with `{model, prompt, ...params, previous_job_id?}` answers `{id}`;
 * - `GET {base_url}/videos/{id}` answers `{status: queued|running|succeeded|failed|cancelled, output_urls?,
 *   error?, cost?, seconds?, expires_at? (unix seconds)}`;
 * - `POST {base_url}/videos/{id}/cancel` answers any 2xx.
 * `api_key` is sent as `Authorization: Bearer` (a workspace's own key instead, when the call has one). Every
 * call has `timeout_ms` for its headers and between body chunks (undici), on the shared keep-alive pools of the
 * chat adapters.
 *
 * @example createHttpVideoProvider({ id: 'vid', kind: 'http-video', base_url: 'https://video.example/v1', timeout_ms: 30000, connect_timeout_ms: 10000, region: 'global', data_collection: 'deny' })
 */
export function createHttpVideoProvider(config: HttpVideoProviderConfig): VideoProvider {
  const base = new URL(`${config.base_url.replace(/\/+$/, '')}/videos`);
  const headers: Record<string, string> = { ...config.headers, accept: 'application/json' };
  if (config.api_key) headers.authorization = `Bearer ${config.api_key}`;

  /** The headers of a call: the configured ones, with a workspace's own key as the bearer token when given. */
  const headersFor = (apiKey: string | undefined) => (apiKey === undefined ? headers : { ...headers, authorization: `Bearer ${apiKey}` });

  async function call({ method, path, body, signal, apiKey }: Call): Promise<{ status: number; json: Record<string, unknown> | null; text: string; credentials: string[] }> {
    const sent = headersFor(apiKey);
    const credentials = credentialsIn(sent);
    let res;
    try {
      res = await agentFor(config.connect_timeout_ms).request({
        origin: base.origin,
        path: `${base.pathname}${path}`,
        method,
        headers: body === undefined ? sent : { ...sent, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        headersTimeout: config.timeout_ms,
        bodyTimeout: config.timeout_ms,
        signal,
      });
    } catch (err) {
      throw networkError(err, config.id);
    }
    let text: string;
    try {
      // Every answer, 2xx ones too (an error message, an output URL with a token), loses the key the call
      // was sent with, whichever key that was: what is read from it may reach a client or a log.
      text = withoutCredentials(await cappedText(res, config.id), credentials);
    } catch (err) {
      throw networkError(err, config.id);
    }
    let json: Record<string, unknown> | null = null;
    try {
      // Scrubbed again once parsed: a key written with JSON escapes (`\u0073k-…`) is only seen then, and a job's
      // error and output URLs are read from the parsed answer.
      const parsed: unknown = scrubbed(JSON.parse(text), credentials);
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) json = parsed as Record<string, unknown>;
    } catch {
      // judged by the caller: a 2xx without a JSON object is a bad answer
    }
    return { status: res.statusCode, json, text, credentials };
  }

  const failIfNot2xx = (r: { status: number; text: string; credentials: string[] }) => {
    if (r.status < 200 || r.status >= 300) throw classifyUpstreamError(r.status, r.text, config.id, undefined, r.credentials);
  };
  const badAnswer = (what: string) =>
    new GatewayError('provider_unavailable', `Provider ${config.id} returned ${what}`, { metadata: { provider_name: config.id } });

  return {
    id: config.id,
    kind: 'http-video',
    async submit(input: VideoSubmitInput, signal: AbortSignal, apiKey?: string) {
      const body: Record<string, unknown> = { ...input.params, model: input.model, prompt: input.prompt };
      if (input.previousUpstreamJobId) body.previous_job_id = input.previousUpstreamJobId;
      const r = await call({ method: 'POST', path: '', body, signal, apiKey });
      failIfNot2xx(r);
      const id = r.json?.id;
      const problem = upstreamJobIdProblem(id);
      if (problem) {
        // The upstream took the job: stop it if it can be named back (a NUL or a control character can,
        // percent-encoded), rather than leave it running and billed unseen. The gateway stores no such id
        // (PostgreSQL's text cannot hold a NUL: the job was refused after the submission, on that engine only).
        if (typeof id === 'string' && id !== '' && id.length <= MAX_UPSTREAM_JOB_ID_CHARS) {
          call({ method: 'POST', path: `/${encodeURIComponent(id)}/cancel`, body: {}, apiKey }).catch(() => undefined);
        }
        throw badAnswer(problem);
      }
      return { upstreamJobId: id as string };
    },
    async poll(upstreamJobId: string, apiKey?: string, signal?: AbortSignal): Promise<VideoPollResult> {
      const r = await call({ method: 'GET', path: `/${encodeURIComponent(upstreamJobId)}`, apiKey, signal });
      // The upstream no longer knows the job: it will never finish.
      if (r.status === 404) return { status: 'failed', error: `Provider ${config.id} no longer knows this job` };
      failIfNot2xx(r);
      const status = STATUS[String(r.json?.status ?? '').toLowerCase()];
      if (!status) throw badAnswer(`an unknown job status ${JSON.stringify(r.json?.status ?? null)}`);
      return pollResult(status, r.json!);
    },
    async cancel(upstreamJobId: string, apiKey?: string, signal?: AbortSignal) {
      failIfNot2xx(await call({ method: 'POST', path: `/${encodeURIComponent(upstreamJobId)}/cancel`, body: {}, apiKey, signal }));
    },
  };
}

function pollResult(status: VideoUpstreamStatus, body: Record<string, unknown>): VideoPollResult {
  const out: VideoPollResult = { status };
  // Only http(s) links reach the client: `javascript:`, `file:`, `data:` and the like are left out.
  if (Array.isArray(body.output_urls)) out.urls = outputUrls(body.output_urls);
  const usage: { cost?: number; seconds?: number } = {};
  if (typeof body.cost === 'number' && Number.isFinite(body.cost) && body.cost >= 0) usage.cost = body.cost;
  if (typeof body.seconds === 'number' && Number.isFinite(body.seconds) && body.seconds >= 0) usage.seconds = body.seconds;
  if (Object.keys(usage).length > 0) out.usage = usage;
  const err = body.error;
  if (typeof err === 'string') out.error = err;
  else if (err && typeof err === 'object' && typeof (err as { message?: unknown }).message === 'string') out.error = (err as { message: string }).message;
  // Whole ms between 1970 and 9999, else none (output_ttl_s applies): a fraction of a ms or a value past
  // BIGINT had failed PostgreSQL's write of the completion (SQLite took it), and the job was polled every round.
  const expiresAt = expiryMs(body.expires_at);
  if (expiresAt !== undefined) out.expiresAt = expiresAt;
  return out;
}

/**
 * The largest video answer read. A job's answer is an id, a status and a few URLs: a few kilobytes. The poller
 * reads 8 at a time in every process, and an unbounded read held whatever an upstream sent (100 MB and more)
 * until it ended.
 */
const MAX_ANSWER_BYTES = 2 * 1024 * 1024;

/** The answer's text, refused (and the connection dropped) past `MAX_ANSWER_BYTES`, declared or streamed. */
async function cappedText(res: { headers: Record<string, string | string[] | undefined>; body: DroppableBody }, providerId: string): Promise<string> {
  const tooLarge = () => new GatewayError('provider_unavailable', `Provider ${providerId} sent an answer over ${MAX_ANSWER_BYTES / 1024 / 1024} MB`, { metadata: { provider_name: providerId } });
  if (Number(res.headers['content-length']) > MAX_ANSWER_BYTES) {
    discard(res.body);
    throw tooLarge();
  }
  return (await readCappedBody(res.body, MAX_ANSWER_BYTES, tooLarge)).toString('utf8');
}

function networkError(err: unknown, providerId: string): GatewayError {
  if (err instanceof GatewayError) return err;
  const metadata = { provider_name: providerId };
  const timeout =
    err instanceof undiciErrors.HeadersTimeoutError ||
    err instanceof undiciErrors.BodyTimeoutError ||
    err instanceof undiciErrors.ConnectTimeoutError ||
    (err as Error)?.name === 'AbortError';
  if (timeout) return new GatewayError('timeout', `Provider ${providerId} timed out`, { metadata, cause: err });
  return new GatewayError('provider_unavailable', `Provider ${providerId} could not be reached`, { metadata, cause: err });
}
