import { GatewayError } from '../../src/errors/gateway-error';
import type { StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import { checkRequestPlugins, checkServerTools } from '../../src/pipeline/request-plugins';
import { presetReference } from '../../src/presets/apply';
import { checkSessionHeader, dropNullFields, requestValidators } from '../../src/validation/request-validators';
import schema from './schema.json';

/**
 * `validate`: applies the preset the request names (if any: `model: "@preset/<slug>"`, `"<model>@preset/<slug>"`
 * or `preset: "<slug>"`), then checks the merged body against the endpoint's JSON Schema
 * (schemas/*.schema.json, compiled once). A violation is a 400 `invalid_request` naming the field; an
 * unknown preset is a 404; a `plugins` entry the operator's pipeline does not run is a 400. Optional fields
 * sent as null where the schema admits null are deleted first, so every later stage sees them absent.
 */
export const validate: StageDefinition<Record<string, never>, Services> = {
  id: 'validate',
  configSchema: schema,
  keepsBody: true,
  beforeUpstream: true,
  create(_config, services) {
    const validators = requestValidators();
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      if (state.endpoint === 'messages' || state.endpoint === 'chat_completions') {
        const validator = validators[state.endpoint];
        // Before the preset: a null is "not given", so the preset's value for that field applies.
        dropNullFields(state.body, validator.nullable);
        const sent = state.body;
        await services.presets.applyTo(state);
        if (state.body !== sent) dropNullFields(state.body, validator.nullable);
        const problem = validator(state.body) ?? checkSessionHeader(ctx.get('x-session-id'));
        if (problem) throw new GatewayError('invalid_request', withItsSource(problem, sent, state.body), { metadata: { field: problem.field } });
        if (state.endpoint === 'messages') checkThread(state.body);
        checkRequestPlugins(state, services.config);
        checkServerTools(state, services.config);
      }
      await next();
    };
  },
};

/**
 * A problem's message, saying so when the field came from the preset the request named, not from the request
 * itself: a preset is messages-style, and one valid there (six `stop_sequences`) can fail a chat request in a
 * field the client never sent (`stop`, at most 4).
 */
function withItsSource(problem: { field: string; message: string }, sent: Record<string, unknown> | null, merged: Record<string, unknown> | null): string {
  if (!sent || !merged || merged === sent) return problem.message;
  const root = problem.field.split(/[.[]/)[0];
  if (sent[root] !== undefined || merged[root] === undefined) return problem.message;
  const ref = presetReference(sent);
  return ref ? `${problem.message} (set by preset \`${ref.slug}\`, not by the request)` : problem.message;
}

/**
 * Message threads (the Anthropic SDK's `thread: {type: create | continue}`, beta `message-threads-2026-08-12`):
 * the server keeps the conversation between turns. This gateway keeps none (a continued turn's history could
 * not be sent to a provider, nor follow a fallback), so it answers what the Messages API answers a request it
 * cannot thread: 400 with `details.error_code: thread_unsupported_request`, on which the SDK's tool runner (and a
 * thread with `unsupportedRequestBehavior: 'continue_unthreaded'`) sends the turn again with the whole history
 * and no thread. Before, the field was dropped going to a chat provider (a continued turn then reached it with
 * its new messages alone) and passed to an Anthropic one under ids it never issued.
 */
function checkThread(body: Record<string, unknown> | null | undefined): void {
  if (!body || body.thread === undefined) return;
  if (body.thread === null) {
    delete body.thread; // not given
    return;
  }
  throw new GatewayError('invalid_request', 'Message threads are not supported by this gateway; send the whole conversation in `messages` without `thread`', {
    metadata: { field: 'thread' },
    details: { error_code: 'thread_unsupported_request', unsupported: ['thread'] },
  });
}
