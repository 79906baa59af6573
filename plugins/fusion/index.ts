import { ConfigError } from '../../src/config/load';
import { cutOutcome } from '../../src/drain';
import { GatewayError, toGatewayError } from '../../src/errors/gateway-error';
import { answerText } from '../../src/healing/answer';
import { forwardedHeaders } from '../../src/pipeline/forward-headers';
import { requestPlugin, type RequestPlugin } from '../../src/pipeline/request-plugins';
import type { GatewayResponse, GatewayState, NormalizedUsage, PipelineRecord, SseEvent, StageDefinition } from '../../src/pipeline/types';
import { childState } from '../../src/routing/child-state';
import { generationId } from '../../src/routing/generation-id';
import type { Services } from '../../src/services';
import { addCost, addUsage, setTotalUsage, withUsageAdded } from '../../src/spend/usage-sum';
import { candidateBody, DEFAULT_JUDGE_PROMPT, judgeBody } from './judge';
import schema from './schema.json';

export interface FusionConfig {
  models: string[];
  judge: string;
  timeout_ms: number;
  min_answers: number;
  judge_prompt?: string;
  enabled_by_default: boolean;
  forward_headers: string[];
}

type Dialect = 'chat_completions' | 'messages';

/** One candidate call's result. */
type Candidate =
  | { ok: true; model: string; provider: string; upstreamModel: string; isByok: boolean; text: string; usage: NormalizedUsage | null; cost: number | null; ms: number }
  | { ok: false; model: string; errorType: string; status?: number; ms: number; usage: NormalizedUsage | null; cost: number | null; route: GatewayState['route'] };

/**
 * `fusion`: asks several models the same question in parallel (non-streaming, each within `timeout_ms`),
 * then has a judge model write one answer from theirs, in the client's dialect (streamed when the client
 * asked `stream: true`). It does `upstream`'s work: it sets `state.answerer`, which `upstream` calls in place
 * of its own provider call, so the stages between the two act first. Usage and cost are the sums of every
 * candidate call and the judge's; the ledger row carries the judge's route and the request's generation id
 * (every call is made under it).
 * Pipeline order: `[…, budget-check, fusion, upstream, response-healing]`.
 */
export const fusion: StageDefinition<FusionConfig, Services> = {
  id: 'fusion',
  configSchema: schema,
  beforeUpstream: true,
  create(config, services) {
    checkConfig(config, services);
    const template = config.judge_prompt ?? DEFAULT_JUDGE_PROMPT;
    const judges = new Set([config.judge, ...config.models]);
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const asked = requestPlugin(state.body, 'fusion');
      const dialect = state.endpoint;
      if (asked?.enabled === false || (!asked && !config.enabled_by_default) || (dialect !== 'chat_completions' && dialect !== 'messages')) return next();
      const field = `plugins[${pluginIndex(state.body)}]`;
      // A gateway server tool (`gateway:web_fetch`) runs its own loop of model calls in upstream's place: fusing
      // would send the tool to every candidate raw and throw the loop's answer and cost away. Asked for
      // explicitly, the combination is refused; on by default, fusion steps aside.
      if (state.answerer || hasServerTool(state.body)) {
        if (!asked) return next();
        throw new GatewayError('invalid_request', 'The fusion plugin cannot be combined with a gateway server tool (gateway:web_fetch)', { metadata: { field } });
      }
      const models = requestModels(asked, config, field);
      const judge = requestJudge(asked, judges, config.judge, field);
      const forward = forwardedHeaders(ctx, config.forward_headers);
      // Why an answerer, not the response now: the calls are made where `upstream` stands, after every stage
      // listed between (a guardrail that blocks, web results put in the prompt, the spend checks), wherever
      // the operator put fusion.
      state.answerer = () => fuse({ state, dialect, models, judge, forward, config, template, services });
      await next();
    };
  },
};

interface Fuse {
  state: GatewayState;
  dialect: Dialect;
  models: string[];
  judge: string;
  forward: Record<string, string>;
  config: FusionConfig;
  template: string;
  services: Services;
}

async function fuse({ state, dialect, models, judge, forward, config, template, services }: Fuse): Promise<GatewayResponse> {
  const body = state.body!;
  const candidates = models.map((model) => candidateBody(body, model));
  // The spend hold covers the calls made here (the request's own model is not asked): each candidate, and
  // the judge, whose input holds their answers.
  await services.spend.cover(services.config, services.models, state, [
    ...candidates.map((b) => ({ body: b })),
    { body: judgeBody({ body, judge, answers: [], template, stream: false }), readsEarlier: true },
  ]);
  // The request's generation id, chosen before any call: every call (candidates, judge) is made under it, so
  // the journal's pending row (written by the first call) has the id the ledger row and the answer carry.
  state.requestId ??= generationId();
  // A stream is committed once `min_answers` candidates answered: those providers accepted the request, and
  // the judge will be asked. From then on its status is 200 (spec 7.5.2), so the endpoint's keep-alive may send
  // the headers and comments while the other candidates and the judge are slow, as for a provider's accepted
  // stream; a judge that then fails ends the stream in-band. Before that, too few answers is a real 502/504.
  // Those headers carry the generation id chosen above; the judge's call is made under it.
  let answers = 0;
  const committed = (r: Candidate) => {
    if (r.ok && ++answers === config.min_answers && body.stream === true && state.streamAccepted) state.streamAccepted();
    return r;
  };
  const results = await Promise.all(
    models.map((model, i) => askCandidate({ state, dialect, model, body: candidates[i], forward, timeoutMs: config.timeout_ms, services }).then(committed)),
  );
  const answered = results.filter((r): r is Extract<Candidate, { ok: true }> => r.ok);
  const failed = results.filter((r): r is Extract<Candidate, { ok: false }> => !r.ok);
  const candidateUsage = addUsage(results.map((r) => r.usage));
  const candidateCost = addCost(results.map((r) => r.cost));
  // What the candidates' calls cost on the workspace's own keys: the ledger bills those apart (never debited).
  const candidateOwn = addCost(results.map((r) => ((r.ok ? r.isByok : r.route?.isByok) ? r.cost : 0))) ?? 0;
  const record: PipelineRecord = {
    type: 'fusion',
    name: 'fusion',
    summary: `${answered.length} of ${models.length} model(s) answered; ${judge} wrote the answer from them`,
    data: {
      models,
      answered: answered.map((r) => ({ model: r.model, provider: r.provider, ms: r.ms })),
      failed: failed.map((r) => ({ model: r.model, error_type: r.errorType, ...(r.status !== undefined ? { status: r.status } : {}), ms: r.ms })),
      timeout_ms: config.timeout_ms,
      judge: { model: judge },
    },
  };
  state.span.setAttribute('gateway.fusion.models', models.join(','));
  state.span.setAttribute('gateway.fusion.answered', answered.map((r) => r.model).join(','));
  state.span.setAttribute('gateway.fusion.failed', failed.map((r) => r.model).join(','));
  state.span.setAttribute('gateway.fusion.judge', judge);

  if (answered.length < config.min_answers) {
    record.summary = `${answered.length} of ${models.length} model(s) answered; at least ${config.min_answers} needed`;
    state.pipeline.push(record);
    billCandidates(state, results, candidateUsage, candidateCost);
    state.byokCostUsd = candidateOwn;
    const allTimedOut = failed.length > 0 && failed.every((f) => f.errorType === 'timeout');
    throw new GatewayError(allTimedOut ? 'timeout' : 'provider_unavailable', `Fusion: ${answered.length} of ${models.length} model(s) answered, at least ${config.min_answers} needed`, {
      metadata: { models, failed: (record.data as { failed: unknown }).failed },
    });
  }
  state.pipeline.push(record);

  const stream = body.stream === true;
  const judgeStarted = performance.now();
  const judgeState = childState(state, {
    body: judgeBody({ body, judge, answers: answered.map((r) => r.text), template, stream }),
    requestId: state.requestId, // the request's (a stream's headers may have carried it already)
    metadataOptIn: state.metadataOptIn,
    pipeline: state.pipeline, // the judge's routing metadata is the client's: it shows this record
    // Why here, not after dispatch returns: a stream's metadata is written as its first event arrives (before
    // the answer), and had shown the judge's model alone. A stream's `ms` is thus the time until it began.
    routeChosen: (route) => {
      (record.data as Record<string, unknown>).judge = { model: judge, provider: route.provider, ms: elapsed(judgeStarted) };
    },
  });
  let response: GatewayResponse;
  try {
    response = await services.dispatch(judgeState, forward);
  } catch (err) {
    const e = toGatewayError(err);
    (record.data as Record<string, unknown>).judge = { model: judge, error_type: e.errorType, ms: elapsed(judgeStarted) };
    record.summary = `${answered.length} of ${models.length} model(s) answered; the judge ${judge} failed (${e.errorType})`;
    state.candidates = judgeState.candidates;
    state.attempts = judgeState.attempts;
    state.requestId = judgeState.requestId;
    billCandidates(state, results, candidateUsage, candidateCost);
    state.byokCostUsd = candidateOwn;
    throw e;
  }
  state.requestId = judgeState.requestId;
  state.route = judgeState.route;
  state.candidates = judgeState.candidates;
  state.attempts = judgeState.attempts;

  const asked = { usage: candidateUsage, cost: candidateCost, own: candidateOwn };
  if (response.kind === 'json') {
    billTotals(state, asked, judgeState);
    state.outcome = judgeState.outcome;
    const answer = response.body as Record<string, unknown>;
    if (state.usage && answer && typeof answer === 'object' && !('error' in answer)) setTotalUsage(dialect, answer, state.usage, state.costUsd);
    return response;
  }
  // A stream's judge usage is known only when it ends; until then the candidates' calls are what is owed.
  state.usage = candidateUsage;
  state.costUsd = candidateCost;
  state.byokCostUsd = candidateOwn;
  return {
    ...response,
    events: withTotals({ events: response.events, dialect, state, judgeState, candidates: asked }),
    // Never read (the client left, or a later stage refused the answer): the judge's stream is billed for what
    // its provider had sent, and the request for that plus the candidates (it had been the candidates alone).
    unread: () => {
      response.unread?.();
      billTotals(state, asked, judgeState);
    },
  };
}

/**
 * Relays the judge's stream with the candidates' usage and cost added to the usage it shows (the client sees
 * what it is billed), then bills the candidates' calls plus the judge's (the stream sets its usage at the end).
 */
async function* withTotals(input: {
  events: AsyncIterable<SseEvent>;
  dialect: Dialect;
  state: GatewayState;
  judgeState: GatewayState;
  candidates: Asked;
}): AsyncGenerator<SseEvent> {
  const { state, judgeState, candidates } = input;
  try {
    for await (const ev of input.events) yield withUsageAdded(input.dialect, ev, candidates.usage, candidates.cost);
  } finally {
    billTotals(state, candidates, judgeState);
    state.outcome = judgeState.outcome;
  }
}

type Asked = { usage: NormalizedUsage | null; cost: number | null; own: number };

/** The request's bill: the candidates' calls plus the judge's (its usage, cost and own-key part). */
function billTotals(state: GatewayState, candidates: Asked, judgeState: GatewayState): void {
  state.usage = addUsage([candidates.usage, judgeState.usage]);
  state.costUsd = addCost([candidates.cost, judgeState.costUsd]);
  state.byokCostUsd = ownCost(candidates.own, judgeState);
}

/** The candidates' cost on the workspace's own keys plus the judge's, when its call was made with one. */
function ownCost(candidatesOwn: number, judgeState: GatewayState): number {
  return addCost([candidatesOwn, judgeState.route?.isByok ? judgeState.costUsd : 0]) ?? 0;
}

/**
 * When the request fails after candidates were called (too few answers, or the judge failed), their calls
 * were still made and are billed: the ledger row takes the first answering candidate's route, else the first
 * failed one's that reached a provider, as `failed` (`cancelled` when the client went away). The error carries the request's generation id either
 * way (spec 7.3: routing has happened); with every candidate failing it had none, and no ledger row.
 */
function billCandidates(state: GatewayState, results: Candidate[], usage: NormalizedUsage | null, cost: number | null): void {
  state.requestId ??= generationId();
  const answered = results.find((r): r is Extract<Candidate, { ok: true }> => r.ok);
  const route = answered
    ? { model: answered.model, provider: answered.provider, upstreamModel: answered.upstreamModel, isByok: answered.isByok }
    : results.find((r): r is Extract<Candidate, { ok: false }> => !r.ok && r.route !== null && r.route !== undefined)?.route;
  if (!route) return;
  state.route = route;
  state.usage = usage;
  state.costUsd = cost;
  // A client that left is billed `cancelled` (a shutdown's cut `failed`), as for any request it leaves.
  state.outcome = state.signal.aborted ? cutOutcome(state.abort) : 'failed';
}

interface Ask {
  state: GatewayState;
  dialect: Dialect;
  model: string;
  body: Record<string, unknown>;
  forward: Record<string, string>;
  timeoutMs: number;
  services: Services;
}

/** One candidate call, within the timeout; never throws (a failure is a result). */
async function askCandidate({ state, dialect, model, body, forward, timeoutMs, services }: Ask): Promise<Candidate> {
  const started = performance.now();
  const abort = new AbortController();
  // The parent's reason goes with it (the client went away, or a shutdown): the candidate's call is counted as such.
  const onParentAbort = () => abort.abort(state.signal.reason);
  state.signal.addEventListener('abort', onParentAbort, { once: true });
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  // Why a race as well as the abort: a provider call that ignores its signal must not hold the answer up.
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      abort.abort();
      reject(new GatewayError('timeout', `No answer within ${timeoutMs} ms`));
    }, timeoutMs);
  });
  const child = childState(state, { body, signal: abort.signal, requestId: state.requestId ?? undefined });
  try {
    const response = await Promise.race([services.dispatch(child, forward), deadline]);
    if (response.kind !== 'json') throw new GatewayError('provider_unavailable', 'The candidate answered with a stream');
    const answer = response.body as Record<string, unknown> | null;
    const error = answer && typeof answer === 'object' ? (answer.error as { metadata?: { error_type?: string }; code?: number } | undefined) : undefined;
    if (error) return { ok: false, model, errorType: error.metadata?.error_type ?? 'provider_unavailable', status: error.code, ms: elapsed(started), usage: child.usage, cost: child.costUsd, route: child.route };
    const text = answerText(dialect, answer);
    const route = child.route!;
    if (text === null || text.trim() === '') return { ok: false, model, errorType: 'no_text_answer', ms: elapsed(started), usage: child.usage, cost: child.costUsd, route: child.route };
    return { ok: true, model, provider: route.provider, upstreamModel: route.upstreamModel, isByok: route.isByok, text, usage: child.usage, cost: child.costUsd, ms: elapsed(started) };
  } catch (err) {
    const e = toGatewayError(err);
    return { ok: false, model, errorType: timedOut ? 'timeout' : e.errorType, status: timedOut ? undefined : e.status, ms: elapsed(started), usage: null, cost: null, route: child.route };
  } finally {
    clearTimeout(timer);
    state.signal.removeEventListener('abort', onParentAbort);
  }
}

const elapsed = (since: number) => Math.round(performance.now() - since);

function pluginIndex(body: Record<string, unknown> | null): number {
  const list = body?.plugins;
  return Array.isArray(list) ? list.findIndex((p) => (p as { id?: unknown })?.id === 'fusion') : -1;
}

/** The request's `models` narrow the operator's list (never widen it). */
function requestModels(asked: RequestPlugin | undefined, config: FusionConfig, field: string): string[] {
  const given = asked?.models;
  if (given === undefined) return config.models;
  const allowed = new Set(config.models);
  if (!Array.isArray(given) || given.length === 0 || given.some((m) => typeof m !== 'string' || !allowed.has(m))) {
    throw new GatewayError('invalid_request', `\`models\` must be a non-empty list of the fusion models the gateway allows (${config.models.join(', ')})`, { metadata: { field: `${field}.models` } });
  }
  const models = [...new Set(given as string[])];
  if (models.length < config.min_answers) {
    throw new GatewayError('invalid_request', `\`models\` must name at least ${config.min_answers} model(s) (the gateway's min_answers)`, { metadata: { field: `${field}.models` } });
  }
  return models;
}

/** The request's `judge` may be the operator's judge or one of its fusion models. */
function requestJudge(asked: RequestPlugin | undefined, judges: Set<string>, fallback: string, field: string): string {
  const given = asked?.judge;
  if (given === undefined) return fallback;
  if (typeof given !== 'string' || !judges.has(given)) {
    throw new GatewayError('invalid_request', `\`judge\` must be one of ${[...judges].join(', ')}`, { metadata: { field: `${field}.judge` } });
  }
  return given;
}

/** What the schema cannot say: the models exist, `min_answers` is reachable, the template shows the answers. */
function checkConfig(config: FusionConfig, services: Services): void {
  if (!Array.isArray(config.models) || config.models.length < 2 || typeof config.judge !== 'string') {
    throw new ConfigError('plugins.fusion: `models` (2 or more) and `judge` are required');
  }
  config.models.forEach((m, i) => {
    if (!services.models.has(m)) throw new ConfigError(`plugins.fusion.models[${i}]: unknown model "${m}"`);
  });
  if (!services.models.has(config.judge)) throw new ConfigError(`plugins.fusion.judge: unknown model "${config.judge}"`);
  if (config.min_answers > config.models.length) throw new ConfigError(`plugins.fusion.min_answers: more than the ${config.models.length} models`);
  if (config.judge_prompt !== undefined && !config.judge_prompt.includes('{answers}')) throw new ConfigError('plugins.fusion.judge_prompt: must contain {answers}');
}

/** Whether the request's tools include a gateway server tool (a `type` starting `gateway:`). */
function hasServerTool(body: Record<string, unknown> | null): boolean {
  const tools = body?.tools;
  return Array.isArray(tools) && tools.some((t) => !!t && typeof t === 'object' && String((t as { type?: unknown }).type ?? '').startsWith('gateway:'));
}
