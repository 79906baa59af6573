import type { StageDefinition, StageRegistry } from '../src/pipeline/types';
import { auth } from './auth';
import { autoRouter } from './auto-router';
import { budgetCheck } from './budget-check';
import { contextCompression } from './context-compression';
import { fileParser } from './file-parser';
import { fusion } from './fusion';
import { guardrail } from './guardrail';
import { maxTokensCap } from './max-tokens-cap';
import { moderation } from './moderation';
import { paretoRouter } from './pareto-router';
import { rateLimit } from './rate-limit';
import { responseHealing } from './response-healing';
import { upstream } from './upstream';
import { validate } from './validate';
import { web } from './web';
import { webFetch } from './web-fetch';

/** Every stage a pipeline may name. A test checks each folder under plugins/ is listed here. */
export const STAGES: readonly StageDefinition[] = [auth, validate, rateLimit, budgetCheck, upstream, responseHealing, guardrail, autoRouter, paretoRouter, contextCompression, webFetch, maxTokensCap, moderation, web, fileParser, fusion];

export const registry: StageRegistry = new Map(STAGES.map((s) => [s.id, s]));
