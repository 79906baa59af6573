import type { ProviderConfig } from '../config/types';
import { createHttpVideoProvider } from './http-video';
import { createSimulatedVideoProvider } from './simulated-video';
import type { VideoProvider } from './video-types';

export type { VideoProvider, VideoPollResult, VideoSubmitInput, VideoUpstreamStatus } from './video-types';
export { VIDEO_PROVIDER_KINDS } from './video-types';

/**
 * Builds the video provider adapters declared in gateway.yaml, by id; chat providers are skipped (see
 * index.ts for those). `clock` drives the simulated provider's phases (tests inject one).
 */
export function buildVideoProviders(configs: ProviderConfig[], clock: () => number = Date.now): Map<string, VideoProvider> {
  const out = new Map<string, VideoProvider>();
  for (const c of configs) {
    if (c.kind === 'simulated-video') out.set(c.id, createSimulatedVideoProvider(c, clock));
    else if (c.kind === 'http-video') out.set(c.id, createHttpVideoProvider(c));
  }
  return out;
}
