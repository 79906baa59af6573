import type { GatewayConfig, VideoModelConfig } from '../config/types';
import { buildVideoProviders, type VideoProvider } from '../providers/video-providers';

/** The video models and video provider adapters of one loaded gateway.yaml (swapped on reload). */
export interface VideoCatalog {
  models: ReadonlyMap<string, VideoModelConfig>;
  providers: ReadonlyMap<string, VideoProvider>;
}

/** @example const videos = buildVideoCatalog(config, spend.clock); videos.models.get('sim/video') */
export function buildVideoCatalog(config: GatewayConfig, clock: () => number): VideoCatalog {
  return {
    models: new Map(config.video_models.map((m) => [m.id, m])),
    providers: buildVideoProviders(config.providers, clock),
  };
}
