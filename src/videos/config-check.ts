import type { GatewayConfig } from '../config/types';
import { VIDEO_PROVIDER_KINDS } from '../providers/video-types';

/**
 * The video parts of a config that a schema cannot check: chat models use chat providers only, video models
 * video providers only, video model ids are unique (and no chat model's), and the default duration fits the maximum. Returns the
 * first problem, starting with the path of the bad field, or null.
 *
 * @example const problem = videoConfigProblem(config); if (problem) throw new ConfigError(problem);
 */
export function videoConfigProblem(config: GatewayConfig): string | null {
  const kinds = new Map(config.providers.map((p) => [p.id, p.kind]));
  for (const [i, m] of config.models.entries()) {
    for (const [j, e] of m.endpoints.entries()) {
      if (VIDEO_PROVIDER_KINDS.has(kinds.get(e.provider) ?? '')) {
        return `models[${i}].endpoints[${j}].provider: "${e.provider}" is a video provider; use it in video_models`;
      }
    }
  }
  const ids = new Set<string>();
  const chatIds = new Set(config.models.map((m) => m.id));
  for (const [i, m] of config.video_models.entries()) {
    if (ids.has(m.id)) return `video_models[${i}].id: duplicate video model id "${m.id}"`;
    // One id, two models: rate limits' model lines and the ledger could not tell them apart.
    if (chatIds.has(m.id)) return `video_models[${i}].id: "${m.id}" is also the id of a chat model (models[]); give each its own id`;
    ids.add(m.id);
    for (const [j, e] of m.endpoints.entries()) {
      const kind = kinds.get(e.provider);
      if (kind === undefined) return `video_models[${i}].endpoints[${j}].provider: unknown provider "${e.provider}"`;
      if (!VIDEO_PROVIDER_KINDS.has(kind)) {
        return `video_models[${i}].endpoints[${j}].provider: "${e.provider}" is not a video provider (kind ${kind}; use simulated-video or http-video)`;
      }
    }
  }
  if (config.videos.default_duration_seconds > config.videos.max_duration_seconds) {
    return 'videos.default_duration_seconds: must not exceed videos.max_duration_seconds';
  }
  return null;
}
