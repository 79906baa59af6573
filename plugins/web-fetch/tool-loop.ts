import { answerEvents } from '../../src/dialects/answer-stream';
import { cutOutcome } from '../../src/drain';
import { inputOf } from '../../src/dialects/translate/response';
import { GatewayError, toGatewayError } from '../../src/errors/gateway-error';
import type { GatewayResponse, GatewayState, NormalizedUsage, PipelineRecord } from '../../src/pipeline/types';
import { childState } from '../../src/routing/child-state';
import { generationId } from '../../src/routing/generation-id';
import type { Services } from '../../src/services';
import { addCost, addUsage, setTotalUsage } from '../../src/spend/usage-sum';
import { blockText, fetchOne, record, type Fetched } from './fetch-page';
import { domainAllowed, type ServerToolOptions, type StopCondition, TOOL_NAME, toolsForModel } from './server-tool';
import type { WebFetchConfig, WebFetchFetcherOverrides } from './stage';

type Obj = Record<string, any>;
type Dialect = 'chat_completions' | 'messages';
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** One tool call the model made in a turn. */
interface Call {
  id: string;
  name: string;
  /** The `url` argument, or null when the arguments do not hold a string `url`. */
  url: string | null;
}

export interface ToolLoopInput {
  state: GatewayState;
  services: Services;
  config: WebFetchConfig;
  overrides: WebFetchFetcherOverrides;
  tool: { index: number; options: ServerToolOptions };
  stopWhen: StopCondition[] | null;
  forward: Record<string, string>;
}

/**
 * The server-tool loop of `gateway:web_fetch`: the model gets a `web_fetch` function in place of the tool
 * entry; while its answer calls only that function, the gateway fetches each URL (SSRF-safe), appends the call
 * and the page text to the conversation and asks again. The loop ends when an answer calls no `web_fetch`
 * (or also calls a client tool), or a stop rule fires: then pending calls are executed and one final turn runs
 * with tool calls disabled. Every turn is a non-streaming upstream call; the client gets the last answer (as a
 * stream when it asked for one), with usage and cost summed over all turns. README "Web fetch".
 *
 * A stream gets the endpoint's keep-alive (`server.stream_keepalive_ms`) from the first turn a provider
 * accepted (its 2xx) to the last turn's answer: the 200, the headers and comments may go out while the model
 * thinks, pages are read and later turns run, and a failure after them ends the stream in-band.
 */
export async function runToolLoop(input: ToolLoopInput): Promise<GatewayResponse> {
  const { state, services, config, tool, stopWhen, forward } = input;
  const dialect = state.endpoint as Dialect;
  const original = state.body!;
  // Stop conditions in the request replace the operator's default call limit (spec 4.2); max_steps always holds.
  const limit = Math.min(tool.options.maxUses ?? Infinity, stopWhen ? Infinity : config.max_tool_calls);
  const body: Obj = { ...original, tools: toolsForModel(dialect, original.tools as unknown[], tool.index), messages: [...(original.messages as unknown[])], stream: false };
  delete body.stream_options;
  // Every turn is made under one generation id, the one the answer and the ledger row then have: a stream's
  // headers may go out (the keep-alive) before the last turn is asked, and the journal's pending row, written
  // by the first turn, must carry the id of the row that releases it (each turn had drawn its own without
  // `stream`, and a sweep's `interrupted` row was then never replaced by the request's own).
  const stream = original.stream === true;
  state.requestId ??= generationId();
  const loop = { turns: 0, requested: 0, executed: 0, usage: [] as (NormalizedUsage | null)[], cost: [] as (number | null)[], own: [] as (number | null)[], stoppedBy: 'answer' as string };
  let finalTurn = false;
  let answer: Obj;
  let last!: GatewayState;
  // The last turn a provider answered: a later turn that fails before any answer has no route of its own,
  // and the request's row (billing the turns done) is written on this one's.
  let served: GatewayState | undefined;
  const billedOn = (): GatewayState => (last.route || !served ? last : served);
  // A loop the request's abort cut (the client left, a shutdown) ends as a cut provider call does (dispatch):
  // `cancelled`, or `failed` for a shutdown; else a failed turn or check fails the request.
  const ended = (): GatewayState['outcome'] => (state.abort.aborted ? cutOutcome(state.abort) : 'failed');
  for (;;) {
    if (finalTurn) body.tool_choice = dialect === 'chat_completions' ? 'none' : { type: 'none' };
    const turn = { ...body, messages: [...body.messages] };
    if (loop.turns > 0) {
      // The client left while pages were read: no further turn, nothing more held; the turns done are billed.
      if (state.abort.aborted) {
        adopt(state, billedOn(), loop, ended());
        throw new GatewayError('timeout', 'The client closed the request');
      }
      // The spend hold covers what the turns so far cost plus this turn's estimate (its conversation holds the pages read).
      try {
        await services.spend.cover(services.config, services.models, state, [{ body: turn }], addCost(loop.cost) ?? 0);
      } catch (err) {
        adopt(state, billedOn(), loop, ended());
        throw toGatewayError(err);
      }
    }
    last = childState(state, {
      body: turn,
      metadataOptIn: state.metadataOptIn,
      pipeline: state.pipeline,
      requestId: state.requestId,
      ...(stream ? { streamAccepted: state.streamAccepted } : {}),
    });
    loop.turns++;
    let response: GatewayResponse;
    try {
      response = await services.dispatch(last, forward);
    } catch (err) {
      adopt(state, billedOn(), loop, ended());
      throw toGatewayError(err);
    }
    served = last;
    // Accepted (its provider answered): for a provider that did not say so at its 2xx (the simulated one).
    if (stream) state.streamAccepted?.();
    loop.usage.push(last.usage);
    loop.cost.push(last.costUsd);
    // A turn's failover may land on an endpoint with (or without) the workspace's own key: billed apart.
    loop.own.push(last.route?.isByok ? last.costUsd : 0);
    if (response.kind !== 'json') throw new GatewayError('provider_unavailable', 'The provider answered a tool turn with a stream');
    answer = response.body as Obj;
    if (!isObj(answer) || isObj(answer.error) || finalTurn) break;
    const calls = toolCalls(dialect, answer);
    const fetches = calls.filter((c) => c.name === TOOL_NAME);
    if (fetches.length === 0) break;
    if (fetches.length < calls.length) {
      // The client must answer its own tool calls: the answer goes to it, without the calls it cannot run.
      dropCalls(dialect, answer, TOOL_NAME);
      loop.stoppedBy = 'client_tool_call';
      break;
    }
    loop.requested += fetches.length;
    const results = await Promise.all(fetches.map((call, i) => runCall(call, loop.executed + i < limit, input)));
    loop.executed += results.filter((r) => r.executed).length;
    appendTurn(dialect, body, answer, fetches, results);
    const stop = stopReason(stopWhen, loop, limit, config, fetches);
    if (stop) {
      loop.stoppedBy = stop;
      finalTurn = true;
    }
  }
  adopt(state, last, loop, last.outcome);
  const summary: PipelineRecord = {
    type: 'web-fetch',
    name: 'web-fetch',
    summary: `${loop.turns} model turn(s), ${loop.executed} of ${loop.requested} web_fetch call(s) run; ended by ${loop.stoppedBy}`,
    data: { tool_loop: { turns: loop.turns, tool_calls_requested: loop.requested, tool_calls_executed: loop.executed, stopped_by: loop.stoppedBy } },
  };
  state.pipeline.push(summary);
  state.span.setAttribute('gateway.web_fetch.tool_turns', loop.turns);
  state.span.setAttribute('gateway.web_fetch.tool_calls', loop.executed);
  if (!isObj(answer.error)) {
    if (state.usage) setTotalUsage(dialect, answer, state.usage, state.costUsd);
    if (isObj(answer.usage)) {
      if (dialect === 'chat_completions') answer.usage.server_tool_use_details = { tool_calls_requested: loop.requested, tool_calls_executed: loop.executed };
      else answer.usage.server_tool_use = { web_fetch_requests: loop.executed };
    }
  }
  if (isObj(answer.gateway_metadata)) answer.gateway_metadata = { ...answer.gateway_metadata, pipeline: state.pipeline };
  if (!stream) return { kind: 'json', status: 200, body: answer };
  const includeUsage = (original.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
  return { kind: 'sse', status: 200, events: replay(answerEvents(dialect, answer, { includeUsage })) };
}

async function* replay(events: ReturnType<typeof answerEvents>) {
  yield* events;
}

/** The request is billed once, for every turn: the last turn's route, the sums of usage and cost. */
function adopt(state: GatewayState, last: GatewayState, loop: { usage: (NormalizedUsage | null)[]; cost: (number | null)[]; own: (number | null)[] }, outcome: GatewayState['outcome']): void {
  state.requestId = last.requestId ?? state.requestId;
  state.route = last.route ?? state.route;
  state.candidates = last.candidates;
  state.attempts = last.attempts;
  state.usage = addUsage(loop.usage);
  state.costUsd = addCost(loop.cost);
  state.byokCostUsd = addCost(loop.own) ?? 0;
  state.outcome = state.route ? outcome : state.outcome;
}

/** Why the loop stops after this turn's calls, or null to go on. */
function stopReason(stopWhen: StopCondition[] | null, loop: { turns: number; executed: number; cost: (number | null)[] }, limit: number, config: WebFetchConfig, calls: Call[]): string | null {
  if (loop.executed >= limit) return 'tool_call_limit';
  // The final turn (tools off) is the max_steps-th.
  if (loop.turns >= config.max_steps - 1) return 'max_steps';
  for (const c of stopWhen ?? []) {
    if (c.type === 'step_count_is' && loop.turns >= c.step_count) return 'step_count_is';
    if (c.type === 'max_cost' && (addCost(loop.cost) ?? 0) >= c.max_cost_in_dollars) return 'max_cost';
    if (c.type === 'has_tool_call' && calls.some((call) => call.name === c.tool_name)) return 'has_tool_call';
  }
  return null;
}

interface CallResult {
  executed: boolean;
  text: string;
  isError: boolean;
}

/** Runs one `web_fetch` call (or refuses it with a reason the model reads). */
async function runCall(call: Call, allowed: boolean, input: ToolLoopInput): Promise<CallResult> {
  const { state, config, overrides, tool } = input;
  const refuse = (text: string, outcome: string): CallResult => {
    state.pipeline.push(record(call.url ?? '', outcome, text, { via: 'tool_call' }));
    return { executed: false, text, isError: true };
  };
  if (call.url === null) return refuse('web_fetch needs a `url` string argument', 'bad_arguments');
  if (!allowed) return refuse(`Not fetched ${call.url}: the web_fetch limit for this request is reached`, 'skipped');
  if (!domainAllowed(call.url, tool.options)) return refuse(`Not fetched ${call.url}: the domain is not allowed for this request`, 'refused');
  // Every hop is checked before it is requested: a check of the final URL alone had let an allowed site's open
  // redirect send the request (and whatever the model wrote into its URL) to a domain the request refuses.
  const r = await fetchOne(call.url, config, overrides, state.signal, (hop) => domainAllowed(hop.href, tool.options));
  (r.record.data as Obj).via = 'tool_call';
  if (!('text' in r) && r.error.code === 'blocked_domain') {
    return refuse(`Not fetched ${call.url}: it redirected to a domain that is not allowed for this request`, 'refused');
  }
  state.pipeline.push(r.record);
  if ('text' in r) return { executed: true, text: blockText(r as Fetched), isError: false };
  return { executed: true, text: `Could not fetch ${call.url}: ${r.error.message}`, isError: true };
}

/** The tool calls of an answer (chat `message.tool_calls`, messages `tool_use` blocks). */
function toolCalls(dialect: Dialect, answer: Obj): Call[] {
  if (dialect === 'chat_completions') {
    const message = answer.choices?.[0]?.message;
    const calls: unknown[] = Array.isArray(message?.tool_calls) ? message.tool_calls : [];
    return calls.filter(isObj).map((c) => ({ id: String(c.id), name: String(c.function?.name), url: urlArg(inputOf(c.function?.arguments)) }));
  }
  const blocks: unknown[] = Array.isArray(answer.content) ? answer.content : [];
  return blocks.filter((b): b is Obj => isObj(b) && b.type === 'tool_use').map((b) => ({ id: String(b.id), name: String(b.name), url: urlArg(b.input) }));
}

const urlArg = (args: unknown): string | null => (isObj(args) && typeof args.url === 'string' ? args.url : null);

/** Removes the calls to `name` from an answer that goes to the client. */
function dropCalls(dialect: Dialect, answer: Obj, name: string): void {
  if (dialect === 'chat_completions') {
    const message = answer.choices[0].message;
    message.tool_calls = message.tool_calls.filter((c: Obj) => c?.function?.name !== name);
  } else {
    answer.content = answer.content.filter((b: Obj) => !(b?.type === 'tool_use' && b.name === name));
  }
}

/** Appends the model's turn and the results of its calls to the conversation of the next turn. */
function appendTurn(dialect: Dialect, body: Obj, answer: Obj, calls: Call[], results: CallResult[]): void {
  if (dialect === 'chat_completions') {
    const message = answer.choices[0].message;
    body.messages.push({ role: 'assistant', content: message.content ?? null, tool_calls: message.tool_calls });
    calls.forEach((call, i) => body.messages.push({ role: 'tool', tool_call_id: call.id, content: results[i].text }));
    return;
  }
  body.messages.push({ role: 'assistant', content: answer.content });
  body.messages.push({
    role: 'user',
    content: calls.map((call, i) => ({ type: 'tool_result', tool_use_id: call.id, content: results[i].text, ...(results[i].isError ? { is_error: true } : {}) })),
  });
}
