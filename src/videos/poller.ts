import type { Services } from '../services';
import type { VideoJob, VideoJobCursor } from '../store/types';
import { advanceJob, type AdvanceDeps } from './advance';
import { restoreVideoHolds } from './billing';

/** Jobs read per page, and how many of them are advanced at once. */
const PAGE = 200;
const PARALLEL = 8;

/**
 * The background poller, one per gateway process: every `videos.poll_interval_ms` (read from the current
 * config each round) it marks expired the outputs that expired (a page of them, earliest first) and advances
 * up to `videos.max_jobs_per_round` jobs with work left, a page at a time, least recently updated first; the
 * next round continues after the last job this one reached, and starts over once it reached the end. So a
 * round's work is bounded however many jobs are waiting (60 000 pending jobs used to be read, and polled
 * upstream, every round), and every job is still reached in turn. Each page is one indexed read (the store).
 * The first round runs at start, so jobs left unfinished by a stopped or crashed process are picked up again.
 * Several processes may poll the same jobs: every change is a compare-and-set in the store, and billing is
 * idempotent, so nothing is applied or billed twice.
 *
 * @example const poller = new VideoPoller(() => runtime().services, clock); poller.start(); … await poller.stop();
 */
export class VideoPoller {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private stopped = true;
  /** Set while stop() waits for the round under way, so the round ends after the job at hand. */
  private halting = false;
  /** Aborted by stop(): an upstream poll under way ends at once (its timeout could be minutes away). */
  private halt = new AbortController();
  /** Where the next round continues: after the last job the previous one reached (undefined: from the start). */
  private cursor: VideoJobCursor | undefined;

  constructor(
    private readonly services: () => Services,
    private readonly clock: () => number = Date.now,
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /**
   * Stops polling; resolves once a round under way has finished. Its upstream polls under way are aborted
   * (their jobs are polled again at the next round or start): one waiting on a slow upstream had held a
   * shutdown up to the provider's `timeout_ms`, past the supervisor's grace period.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.halting = true;
    this.halt.abort();
    try {
      await this.round;
    } finally {
      this.halting = false;
      this.halt = new AbortController(); // a round driven by hand (tests) or a restart polls again
    }
  }

  /** One round: expired outputs, then up to `videos.max_jobs_per_round` jobs with work left (tests call it on a stopped poller to drive it by hand). */
  async poll(): Promise<void> {
    const services = this.services();
    const deps = { services, clock: this.clock, signal: this.halt.signal };
    await this.restoreLostHolds(services);
    const now = this.clock();
    const expired = await this.read(services, () => services.store.listExpiredVideoJobs(now, PAGE));
    if (!expired) return;
    await this.advanceAll(deps, expired);
    let left = services.config.videos.max_jobs_per_round;
    while (!this.halting && left > 0) {
      const limit = Math.min(PAGE, left);
      const jobs = await this.read(services, () => services.store.listUnfinishedVideoJobs(limit, this.cursor));
      if (!jobs) return;
      await this.advanceAll(deps, jobs);
      left -= jobs.length;
      if (jobs.length < limit) {
        this.cursor = undefined;
        return;
      }
      const last = jobs[jobs.length - 1];
      this.cursor = { updatedAt: last.updatedAt, id: last.id };
    }
  }

  /**
   * Redis lost its data (restarted without persistence, flushed): the holds of unfinished jobs are put back
   * before any job moves on. Without it their estimates were free again, and a key limited to $1 started
   * job after job while four $0.85 jobs ran. Several processes may do it at once: a hold still there is kept.
   */
  private async restoreLostHolds(services: Services): Promise<void> {
    const state = services.state;
    if (!state.holdsLost || !state.markHolds) return;
    try {
      if (!(await state.holdsLost())) return;
      const restored = await restoreVideoHolds(services.store, state);
      await state.markHolds();
      if (restored > 0) services.logger.warn({ holds: restored }, 'video jobs: the shared state had lost the holds of unfinished jobs; put back');
    } catch (err) {
      services.logger.warn({ err }, 'video jobs: checking the shared state for lost holds failed; trying again next round');
    }
  }

  /** A page of jobs, or undefined when the store failed (logged; the next round tries again). */
  private async read(services: Services, page: () => Promise<VideoJob[]>): Promise<VideoJob[] | undefined> {
    try {
      return await page();
    } catch (err) {
      services.logger.error({ err }, 'reading unfinished video jobs failed; retrying at the next poll');
      return undefined;
    }
  }

  /** Advances `jobs`, PARALLEL at a time; a job that fails is logged and left to the next round. */
  private async advanceAll(deps: AdvanceDeps, jobs: VideoJob[]): Promise<void> {
    let next = 0;
    const worker = async () => {
      while (next < jobs.length && !this.halting) {
        const job = jobs[next++];
        try {
          await advanceJob(deps, job);
        } catch (err) {
          deps.services.logger.error({ err, video_job_id: job.id }, 'advancing a video job failed; retrying at the next poll');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL, jobs.length) }, worker));
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
