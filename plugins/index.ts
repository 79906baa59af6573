import type { StageDefinition, StageRegistry } from '../src/pipeline/types';
import { auth } from './auth';
import { budgetCheck } from './budget-check';
import { rateLimit } from './rate-limit';
import { upstream } from './upstream';
import { validate } from './validate';

/** Every stage a pipeline may name. A test checks each folder under plugins/ is listed here. */
export const STAGES: readonly StageDefinition[] = [auth, validate, rateLimit, budgetCheck, upstream];

export const registry: StageRegistry = new Map(STAGES.map((s) => [s.id, s]));
