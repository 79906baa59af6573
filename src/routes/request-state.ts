import { ROOT_CONTEXT, type Span } from '@opentelemetry/api';
import type { RequestAbort } from '../pipeline/request-abort';
import type { ApiStyle } from '../errors/envelope';
import type { EndpointId, GatewayState } from '../pipeline/types';
import type { ClientBytes } from './client-bytes';
import type { ExactIntegers } from './exact-integers';

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- the class carries every GatewayState field
export interface RequestState extends GatewayState {}

/**
 * A request's GatewayState. A class (not an object literal) only so that `signal` can be a getter on the
 * prototype, made on first read from the request's RequestAbort: an accessor in an object literal makes V8
 * build every state on its slow path, and those states then outlived young GCs (measured with
 * `npm run bench:alloc -- --survivors`).
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class RequestState {
  /** The abort behind `signal` (`abort` is typed as what stages may read: an AbortWatch). */
  readonly #requestAbort: RequestAbort;

  constructor(init: { endpoint: EndpointId; style: ApiStyle; body: Record<string, unknown> | null; clientBytes?: ClientBytes | null; exactIntegers?: ExactIntegers | null; abort: RequestAbort; span: Span; startedAt: number; session: string | null; metadataOptIn: boolean }) {
    this.endpoint = init.endpoint;
    this.style = init.style;
    this.body = init.body;
    this.clientBytes = init.clientBytes ?? null;
    this.exactIntegers = init.exactIntegers ?? null;
    this.key = null;
    this.requestId = null;
    this.startedAt = init.startedAt;
    this.session = init.session;
    this.debugEchoes = [];
    this.metadataOptIn = init.metadataOptIn;
    this.abort = init.abort;
    this.#requestAbort = init.abort;
    this.span = init.span;
    this.traceContext = ROOT_CONTEXT;
    this.route = null;
    this.pipeline = [];
    this.candidates = [];
    this.attempts = [];
    this.upstreamMs = -1;
    this.usage = null;
    this.costUsd = null;
    this.outcome = 'completed';
    this.onFinish = [];
    this.response = null;
    this.answerer = null;
    this.streamAccepted = null;
    this.askedText = null;
    this.pendingLedger = { id: null };
  }

  get signal(): AbortSignal {
    return this.#requestAbort.signal;
  }
}
