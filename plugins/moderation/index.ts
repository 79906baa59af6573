import { GatewayError } from '../../src/errors/gateway-error';
import { requestTexts } from '../../src/guardrails/texts';
import { compileEngine, type ModerationEngine, type ModerationVerdict } from '../../src/moderation/engines';
import { cutMiddle } from '../../src/moderation/flagged-input';
import { moderateAnswer, moderatedStream } from '../../src/moderation/output';
import type { GatewayState, StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import schema from './schema.json';

/**
 * `moderation`: the moderation engine assigned to the request's workspace (`workspaces[].moderation`, README
 * "Moderation") judges every text the model will read, before routing. Flagged input is a 403
 * `permission_denied` with `error.metadata {reasons, flagged_input, provider_name, model_slug}` (spec 7.6);
 * each check leaves a record in `gateway_metadata.pipeline` and an event on the trace. Workspaces without
 * an engine, and keys outside declared workspaces, pass untouched. With the engine's `moderate_output` the
 * answer is judged too (src/moderation/output.ts): a stream is held back and checked as it flows and ends
 * with an in-band error when flagged; a non-streaming answer that is flagged becomes a 403. Moderation is operator policy: a
 * request's `plugins: [{id: "moderation", enabled: false}]` does not turn it off.
 */
export const moderation: StageDefinition<Record<string, never>, Services> = {
  id: 'moderation',
  configSchema: schema,
  beforeUpstream: true,
  create(_config, services) {
    const engines = new Map<string, ModerationEngine>(services.config.moderation.engines.map((e) => [e.id, compileEngine(e)]));
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const key = state.key;
      let engine: ModerationEngine | undefined;
      if (engines.size > 0 && key && state.body && (state.endpoint === 'messages' || state.endpoint === 'chat_completions')) {
        const id = (await services.spend.workspaceConfig(key, services.config))?.moderation;
        engine = id === undefined ? undefined : engines.get(id);
        if (engine) await moderate(engine, state, services);
      }
      await next();
      const response = state.response;
      if (!engine?.output || !response || response.status !== 200) return;
      if (response.kind === 'sse') response.events = moderatedStream({ engine, state, logger: services.logger, events: response.events });
      else await moderateAnswer({ engine, state, logger: services.logger, body: response.body });
    };
  },
};

async function moderate(engine: ModerationEngine, state: GatewayState, services: Services): Promise<void> {
  // A text of several parts goes in both readings a provider may give it (joined with nothing, and with a
  // line break: `nerve` + `agent`), as the guardrails judge it.
  const texts = requestTexts(state.body!, state.endpoint).flatMap((s) => (s.spaced ? [s.text, s.spaced.text] : [s.text]));
  if (texts.length === 0) return;
  let verdict: ModerationVerdict = { reasons: [], flaggedIndex: -1 };
  let error: string | null = null;
  try {
    verdict = await engine.check(texts, state.signal);
  } catch (err) {
    // Aborted with the request (the client left, a shutdown cut it): the endpoint ends it as such; no engine failed.
    if (state.signal.aborted) throw err;
    error = `moderation engine "${engine.id}" failed: ${(err as Error).message}`;
  }
  const flagged = verdict.flaggedIndex >= 0;
  const failedClosed = error !== null && engine.onError === 'deny';
  const action = flagged || failedClosed ? 'block' : 'allow';
  const summary = flagged
    ? `blocked: ${verdict.reasons.join(', ')}`
    : error
      ? `${failedClosed ? 'blocked' : 'allowed'}: the check failed and the engine fails ${failedClosed ? 'closed' : 'open'}`
      : 'not flagged';
  const names = { provider_name: engine.providerName, model_slug: engine.modelSlug };
  state.pipeline.push({
    type: 'moderation',
    name: engine.id,
    summary,
    data: { action, flagged, reasons: verdict.reasons, ...names, ...(error ? { error } : {}) },
  });
  state.span.addEvent('moderation', {
    'gateway.moderation.engine': engine.id,
    'gateway.moderation.action': action,
    'gateway.moderation.reasons': verdict.reasons,
    ...(error ? { 'gateway.moderation.error': error } : {}),
  });
  if (error) services.logger.warn({ moderation_engine: engine.id, on_error: engine.onError, reason: error }, 'moderation engine failed');
  if (flagged) {
    throw new GatewayError('permission_denied', `Request blocked by moderation (engine "${engine.id}"): flagged for ${verdict.reasons.join(', ')}`, {
      metadata: { reasons: verdict.reasons, flagged_input: cutMiddle(texts[verdict.flaggedIndex]), ...names },
    });
  }
  if (failedClosed) {
    throw new GatewayError('permission_denied', `Request blocked: ${error} and it is set to deny on error`, {
      metadata: { reasons: [], flagged_input: '', ...names },
    });
  }
}
