import { describe, expect, it, vi } from 'vitest';
import type { Store, VideoJob, VideoJobStatus } from '../../src/store/types';
import { transition } from '../../src/videos/job';
import { assertTransition, canTransition, ImpossibleTransitionError, isFinished, VIDEO_TRANSITIONS } from '../../src/videos/states';

const STATUSES: VideoJobStatus[] = ['pending', 'in_progress', 'completed', 'failed', 'cancelled', 'expired'];

/** Every move the state machine allows (README "Video jobs"); every other pair is impossible. */
const ALLOWED = new Set([
  'pending→in_progress',
  'pending→failed',
  'pending→cancelled',
  'in_progress→completed',
  'in_progress→failed',
  'in_progress→cancelled',
  'completed→expired',
]);

describe('video job transitions', () => {
  const table = STATUSES.flatMap((from) => STATUSES.map((to) => ({ from, to, allowed: ALLOWED.has(`${from}→${to}`) })));

  it.each(table)('$from → $to: allowed $allowed', ({ from, to, allowed }) => {
    expect(canTransition(from, to)).toBe(allowed);
    if (allowed) expect(() => assertTransition(from, to)).not.toThrow();
    else expect(() => assertTransition(from, to)).toThrow(ImpossibleTransitionError);
  });

  it('the table covers every status and nothing else', () => {
    expect(Object.keys(VIDEO_TRANSITIONS).sort()).toEqual([...STATUSES].sort());
    expect(table.filter((t) => t.allowed)).toHaveLength(ALLOWED.size);
  });

  it('finished jobs: completed, failed, cancelled, expired (cancelling them is a conflict)', () => {
    expect(STATUSES.filter(isFinished)).toEqual(['completed', 'failed', 'cancelled', 'expired']);
  });

  it('transition() refuses an impossible move before touching the store, and compare-and-sets from the status it read', async () => {
    const updateVideoJob = vi.fn(async () => null);
    const store = { updateVideoJob } as unknown as Store;
    const job = { id: 'gen-vid-1-x', status: 'pending' } as VideoJob;
    await expect(transition(store, job, 'completed', {}, 5)).rejects.toThrow(ImpossibleTransitionError);
    await expect(transition(store, { ...job, status: 'expired' }, 'pending', {}, 5)).rejects.toThrow(/expired to pending/);
    expect(updateVideoJob).not.toHaveBeenCalled();
    expect(await transition(store, job, 'in_progress', { generationId: 'gen-1-a' }, 5)).toBeNull();
    expect(updateVideoJob).toHaveBeenCalledWith('gen-vid-1-x', 'pending', { status: 'in_progress', generationId: 'gen-1-a', updatedAt: 5 });
  });
});
