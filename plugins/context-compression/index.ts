import type { ModelConfig } from '../../src/config/types';
import { upstreamMaxTokens } from '../../src/dialects/translate';
import { inferenceBody, requestPlugin } from '../../src/pipeline/request-plugins';
import type { StageDefinition } from '../../src/pipeline/types';
import { providerDialects, type Dialect } from '../../src/providers';
import { callStyle, requestedModels } from '../../src/routing/candidates';
import type { Services } from '../../src/services';
import { middleOut } from './middle-out';
import schema from './schema.json';

export interface ContextCompressionConfig {
  default_up_to_context_length: number;
  keep_latest: number;
}

/**
 * `context-compression` (`middle-out`): when the prompt plus the output limit a model's provider will be sent
 * exceeds that model's `context_length`, for any of the request's models (`model`, `models`, `fallbacks`,
 * after any router), removes messages from the middle (see `middleOut`) until it fits the tightest. On by
 * default when the smallest `context_length` is at or below `default_up_to_context_length`, and for any
 * model when the request names the plugin; a request's `{id: 'context-compression', enabled: false}` turns
 * it off. Put it after the routers in the pipeline.
 */
export const contextCompression: StageDefinition<ContextCompressionConfig, Services> = {
  id: 'context-compression',
  configSchema: schema,
  beforeUpstream: true,
  create(config, services) {
    const dialects = new Map(services.config.providers.map((p) => [p.id, providerDialects(p.kind)]));
    /**
     * The output limit `model`'s provider will be sent, as dispatch builds it (upstreamMaxTokens): the client's,
     * lowered to `max_output_tokens`, or the one the gateway adds for a messages provider (`max_output_tokens`,
     * default 4096) when the client set none. The largest over its endpoints (any of them may serve).
     */
    const reservedFor = (model: ModelConfig, body: Record<string, unknown>, from: Dialect) =>
      Math.max(
        0,
        ...model.endpoints.map((e) => upstreamMaxTokens({ body, from, to: callStyle(dialects.get(e.provider) ?? new Set(), from), maxOutputTokens: model.max_output_tokens })),
      );
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
      if (sized.length === 0) return next();
      if (!entry && sized[0]!.context_length! > config.default_up_to_context_length) return next();

      // The tightest model: a messages provider is sent max_tokens also when the client set none (it was
      // budgeted as 0, and the prompt filled the context the answer needed).
      const from = state.endpoint === 'messages' ? 'messages' : 'chat_completions';
      const { model, maxTokens, budget } = sized
        .map((m) => ({ model: m!, maxTokens: reservedFor(m!, body, from) }))
        .map((l) => ({ ...l, budget: l.model.context_length! - l.maxTokens }))
        .reduce((a, b) => (b.budget < a.budget ? b : a));
      const contextLength = model.context_length!;
      const result = middleOut({ body, budget, keepLatest: config.keep_latest });
      if (!result) return next();
      body.messages = result.messages;
      const summary =
        `middle-out for ${model.id} (context ${contextLength}, max tokens ${maxTokens}): removed ${result.removed.length} message(s), ` +
        `truncated ${result.truncated.length}; ${result.tokensBefore} → ${result.tokensAfter} input tokens${result.fits ? '' : ' (cannot fit: sent uncut)'}`;
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
