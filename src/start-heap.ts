/**
 * Imported first by `src/main.ts`, for its effect alone: holds the young generation at its starting size
 * while the rest of the gateway loads (see `holdYoungGeneration`). It and `heap-tuning` import nothing but
 * Node's own modules, so it runs before any other module of the gateway is loaded.
 */
import { holdYoungGeneration } from './heap-tuning';

holdYoungGeneration();
