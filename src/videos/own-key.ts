import { GatewayError } from '../errors/gateway-error';
import type { Services } from '../services';
import type { VideoJob } from '../store/types';

/**
 * The key to poll or cancel a job with: the workspace's own key for the job's provider when the job was
 * submitted with one (BYOK: the upstream knows the job under that account only), else none (the provider's
 * configured key). A BYOK job whose key has since been deleted cannot be reached: a 502 `provider_unavailable`
 * naming the provider, never a fallback to the operator's key.
 *
 * @example await provider.poll(job.upstreamJobId, await jobKey(services, job));
 */
export async function jobKey(services: Services, job: VideoJob): Promise<string | undefined> {
  if (!job.isByok) return undefined;
  const key = (await services.ownKeys(job.workspaceId)).get(job.provider);
  if (key !== undefined) return key;
  throw new GatewayError('provider_unavailable', `The workspace's own key for provider ${job.provider}, which this job was submitted with, is no longer stored`, {
    metadata: { provider_name: job.provider },
  });
}
