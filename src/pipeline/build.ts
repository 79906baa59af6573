import compose from 'koa-compose';
import { SpanStatusCode, type Tracer } from '@opentelemetry/api';
import type { GatewayContext, Pipeline, Stage, StageCheck, StageRegistry } from './types';
import { withSpan } from '../telemetry/linked-context';
import { clientClosed } from './request-abort';
import { ConfigError } from '../config/load';

export interface BuildPipelineInput<S> {
  stageIds: readonly string[];
  registry: StageRegistry;
  /** Operator config per stage id (`plugins.<id>`), already validated against the stage's schema. */
  stageConfigs: Readonly<Record<string, unknown>>;
  services: S;
  tracer: Tracer;
  /** Core handlers appended after the configured stages (e.g. the GET /key answer). */
  tail?: Stage[];
}

/**
 * Builds one endpoint's pipeline once, at load: each stage is created with its config and wrapped in a
 * `gateway.stage <id>` span, then the list is composed with koa-compose.
 */
export function buildPipeline<S>(input: BuildPipelineInput<S>): Pipeline {
  const beforeBody: StageCheck[] = [];
  let keepsBody = true;
  const stages = input.stageIds.map((id) => {
    const def = input.registry.get(id);
    if (!def) throw new Error(`unknown stage "${id}"`);
    if (def.keepsBody !== true) keepsBody = false;
    let stage: Stage;
    try {
      stage = def.create(input.stageConfigs[id] ?? {}, input.services);
    } catch (err) {
      // A stage's own refusal names its field already; anything else it threw is named after the stage.
      if ((err as Error)?.name === 'ConfigError') throw err;
      const message = typeof err === 'string' ? err : (err as Error)?.message;
      throw new ConfigError(`plugins.${id}: ${typeof message === 'string' && message !== '' ? message : `the stage's create() threw ${String(err)} (not an Error with a message)`}`);
    }
    if (stage.beforeBody) beforeBody.push({ stage: id, check: stage.beforeBody });
    return traced(id, stage, input.tracer);
  });
  // A core handler's header check runs after the stages' (preset writes: management keys only, before the body).
  for (const t of input.tail ?? []) if (t.beforeBody) beforeBody.push({ stage: 'endpoint', check: t.beforeBody });
  const run = compose<GatewayContext>([...stages, ...(input.tail ?? [])]);
  return Object.assign((ctx: GatewayContext) => run(ctx), { beforeBody: Object.freeze(beforeBody), keepsBody });
}

/** The name of a stage's span. */
export function stageSpanName(id: string): string {
  return `gateway.stage ${id}`;
}

function traced(id: string, stage: Stage, tracer: Tracer): Stage {
  const name = stageSpanName(id);
  // The same for every request (the tracer copies the attributes into the span): made once.
  const options = Object.freeze({ attributes: Object.freeze({ 'gateway.stage': id }) });
  return async (ctx, next) => {
    const state = ctx.state.gateway;
    const parent = state.traceContext;
    const span = tracer.startSpan(name, options, parent);
    // Stages nest strictly (koa-compose), so the stage that runs next sees this span as its parent and
    // the context goes back to this stage's parent once this stage is done.
    state.traceContext = withSpan(parent, span);
    let endsWithRequest = false;
    try {
      await stage(ctx, next);
      // A stream is relayed after the stages have returned. The stage's span covers it, as it covers a JSON
      // answer's upstream call: it ends when the request does (its finish hooks, after the relay ended the
      // provider attempt's span), so every span of the trace ends inside its parent.
      if (state.response?.kind === 'sse') {
        endsWithRequest = true;
        state.onFinish.push(() => span.end());
      }
    } catch (err) {
      // A client that left is not the stage's failure (its abort surfaces as a timeout error otherwise).
      if (state.abort?.aborted && clientClosed(state.abort)) span.setAttribute('gateway.outcome', 'cancelled');
      else {
        span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
        span.setAttribute('gateway.error_type', String((err as { errorType?: string })?.errorType ?? 'server'));
      }
      throw err;
    } finally {
      state.traceContext = parent;
      if (!endsWithRequest) span.end();
    }
  };
}
