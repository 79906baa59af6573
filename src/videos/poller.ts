import type { Services } from '../services';
import type { VideoJob, VideoJobCursor } from '../store/types';
import { advanceJob } from './advance';

/** Jobs read per page (a round reads every page), and how many of them are advanced at once. */
const PAGE = 200;
const PARALLEL = 8;

/**
 * The background poller, one per gateway process: every `videos.poll_interval_ms` (read from the current
 * config each round) it reads every job with work left from the store, a page at a time, and advances each one step
 * (advance.ts). The first round runs at start, so jobs left unfinished by a stopped or crashed process are
 * picked up again. Several processes may poll the same jobs: every change is a compare-and-set in the store,
 * and billing is idempotent, so nothing is applied or billed twice.
 *
 * @example const poller = new VideoPoller(() => runtime().services, clock); poller.start(); … await poller.stop();
 */
export class VideoPoller {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private stopped = true;
  /** Set while stop() waits for the round under way, so the round ends after the job at hand. */
  private halting = false;

  constructor(
    private readonly services: () => Services,
    private readonly clock: () => number = Date.now,
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Stops polling; resolves once a round under way has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.halting = true;
    try {
      await this.round;
    } finally {
      this.halting = false;
    }
  }

  /** One round over every job with work left, page by page (tests call it on a stopped poller to drive it by hand). */
  async poll(): Promise<void> {
    const services = this.services();
    const deps = { services, clock: this.clock };
    const now = this.clock();
    let after: VideoJobCursor | undefined;
    while (!this.halting) {
      let jobs: VideoJob[];
      try {
        jobs = await services.store.listUnfinishedVideoJobs(now, PAGE, after);
      } catch (err) {
        services.logger.error({ err }, 'reading unfinished video jobs failed; retrying at the next poll');
        return;
      }
      let next = 0;
      const worker = async () => {
        while (next < jobs.length && !this.halting) {
          const job = jobs[next++];
          try {
            await advanceJob(deps, job);
          } catch (err) {
            services.logger.error({ err, video_job_id: job.id }, 'advancing a video job failed; retrying at the next poll');
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(PARALLEL, jobs.length) }, worker));
      if (jobs.length < PAGE) return;
      const last = jobs[jobs.length - 1];
      after = { updatedAt: last.updatedAt, id: last.id };
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.round = this.poll().finally(() => {
        this.round = undefined;
        this.schedule(this.services().config.videos.poll_interval_ms);
      });
    }, ms);
    // The poller never keeps a process alive on its own; gateway.close() stops it.
    this.timer.unref();
  }
}
