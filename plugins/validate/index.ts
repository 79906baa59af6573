import { GatewayError } from '../../src/errors/gateway-error';
import type { StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import { compileRequestValidators, type RequestKind, type RequestValidator } from './request-validators';
import schema from './schema.json';

/**
 * `validate`: checks the body against the endpoint's JSON Schema (schemas/*.schema.json), compiled once
 * when the pipeline is built. A violation is a 400 `invalid_request` naming the field.
 */
/** The request schemas never change while the process runs: compile once, share across config reloads. */
let compiled: Record<RequestKind, RequestValidator> | undefined;

export const validate: StageDefinition<Record<string, never>, Services> = {
  id: 'validate',
  configSchema: schema,
  create() {
    const validators = (compiled ??= compileRequestValidators());
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      if (state.endpoint === 'messages' || state.endpoint === 'chat_completions') {
        const problem = validators[state.endpoint](state.body);
        if (problem) throw new GatewayError('invalid_request', problem.message, { metadata: { field: problem.field } });
      }
      await next();
    };
  },
};
