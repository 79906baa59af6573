import type { VideoJobStatus } from '../store/types';

/**
 * The video job state machine (spec 3 lists the states, not the moves; these are ours):
 *
 *   pending ──► in_progress ──► completed ──► expired
 *      │             │    └───► failed
 *      ├──► failed   └───► cancelled
 *      └──► cancelled
 *
 * pending → failed is for jobs the upstream rejects or loses before starting them (and queue timeouts):
 * such a job was never processed, so it gets no generation id. An upstream that finishes between two polls
 * still moves the job through in_progress, where the generation id is assigned.
 */
export const VIDEO_TRANSITIONS: Readonly<Record<VideoJobStatus, readonly VideoJobStatus[]>> = {
  pending: ['in_progress', 'failed', 'cancelled'],
  in_progress: ['completed', 'failed', 'cancelled'],
  completed: ['expired'],
  failed: [],
  cancelled: [],
  expired: [],
};

/** Whether a job may move from one status to another. */
export function canTransition(from: VideoJobStatus, to: VideoJobStatus): boolean {
  return VIDEO_TRANSITIONS[from].includes(to);
}

/** A job with no further status to reach; cancelling it is a conflict. */
export function isFinished(status: VideoJobStatus): boolean {
  return VIDEO_TRANSITIONS[status].length === 0 || status === 'completed';
}

/** A transition the state machine does not allow: a bug in the caller, never a client error. */
export class ImpossibleTransitionError extends Error {
  constructor(from: VideoJobStatus, to: VideoJobStatus) {
    super(`video job cannot move from ${from} to ${to}`);
    this.name = 'ImpossibleTransitionError';
  }
}

/** @example assertTransition('pending', 'completed') // throws ImpossibleTransitionError */
export function assertTransition(from: VideoJobStatus, to: VideoJobStatus): void {
  if (!canTransition(from, to)) throw new ImpossibleTransitionError(from, to);
}
