import { inferenceBody, requestPlugin } from '../../src/pipeline/request-plugins';
import type { StageDefinition } from '../../src/pipeline/types';
import { requestedModels } from '../../src/routing/candidates';
import { requestedMaxTokens } from '../../src/routing/model-pool';
import type { Services } from '../../src/services';
import { middleOut } from './middle-out';
import schema from './schema.json';

export interface ContextCompressionConfig {
  default_up_to_context_length: number;
  keep_latest: number;
}

/**
 * `context-compression` (`middle-out`): when the prompt plus the requested max tokens exceeds the smallest
 * `context_length` among the request's models (`model`, `models`, `fallbacks`, after any router), removes
 * messages from the middle (see `middleOut`) until it fits. On by default for models at or below
 * `default_up_to_context_length`, and for any model when the request names the plugin; a request's
 * `{id: 'context-compression', enabled: false}` turns it off. Put it after the routers in the pipeline.
 */
export const contextCompression: StageDefinition<ContextCompressionConfig, Services> = {
  id: 'context-compression',
  configSchema: schema,
  beforeUpstream: true,
  create(config, services) {
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const body = inferenceBody(state);
      if (!body) return next();
      const entry = requestPlugin(body, 'context-compression');
      if (entry?.enabled === false) return next();
      const sized = requestedModels(body)
        .map((id) => services.models.get(id))
        .filter((m) => m?.context_length !== undefined)
        .sort((a, b) => a!.context_length! - b!.context_length!);
      const model = sized[0];
      if (!model) return next();
      const contextLength = model.context_length!;
      if (!entry && contextLength > config.default_up_to_context_length) return next();

      const maxTokens = requestedMaxTokens(body);
      const result = middleOut({ body, budget: contextLength - maxTokens, keepLatest: config.keep_latest });
      if (!result) return next();
      body.messages = result.messages;
      const summary =
        `middle-out for ${model.id} (context ${contextLength}, max tokens ${maxTokens}): removed ${result.removed.length} message(s), ` +
        `truncated ${result.truncated.length}; ${result.tokensBefore} → ${result.tokensAfter} input tokens${result.fits ? '' : ' (still does not fit)'}`;
      state.pipeline.push({
        type: 'context-compression',
        name: 'context-compression',
        summary,
        data: {
          transform: 'middle-out',
          model: model.id,
          context_length: contextLength,
          max_tokens: maxTokens,
          tokens_before: result.tokensBefore,
          tokens_after: result.tokensAfter,
          fits: result.fits,
          removed: result.removed,
          truncated: result.truncated,
        },
      });
      state.span.setAttribute('gateway.context_compression.removed', result.removed.length);
      state.span.setAttribute('gateway.context_compression.tokens_after', result.tokensAfter);
      await next();
    };
  },
};
