import { Worker } from 'node:worker_threads';
import { findPackageFile } from '../config/package-root';
import type { ParserSlots } from './parser-slots';

/** Text of a PDF, page by page up to a cap. */
export interface PdfText {
  /** Pages in the document. */
  pages: number;
  /** Pages whose text was read (at most the cap). */
  pagesRead: number;
  /** The pages' text, pages separated by a blank line. */
  text: string;
}

/** The bytes are not a PDF pdf.js can read (bad structure, encrypted, truncated, too slow…). */
export class PdfUnreadable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PdfUnreadable';
  }
}

/** Parsing the PDF needed more than `maxMemoryMb` (a decompression bomb, typically). */
export class PdfTooLarge extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PdfTooLarge';
  }
}

/** No parser slot came free within the PDF's time: the gateway is busy parsing other PDFs. */
export class PdfBusy extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PdfBusy';
  }
}

export interface PdfTextOptions {
  maxPages: number;
  maxChars: number;
  /**
   * Queue wait plus parse: past it, a waiting PDF is PdfBusy, and a parsing one PdfUnreadable (PdfBusy when
   * the wait took more than half of it).
   */
  timeoutMs: number;
  /** The worker's heap, and its heap plus decoded data (ArrayBuffers), each at most this. */
  maxMemoryMb: number;
  /** The process-wide limit on parses at once. */
  slots: ParserSlots;
  /** The request's cancellation: a waiting parse leaves the queue, a running one is stopped. */
  signal?: AbortSignal;
}

/**
 * Extracts the text of the first `maxPages` pages of a PDF with pdf.js (unpdf's bundled build: no canvas
 * needed for text), in a worker thread (`workers/pdf-text.cjs`): a small hostile PDF can inflate to
 * gigabytes or take seconds of CPU, and on the gateway's own thread that blocked every other request (a
 * 29 KB file inflating to 10 MB held the event loop 14 s). At most `slots.limit` workers run at once, the
 * others wait; a worker is stopped at the deadline, past its memory cap, or when the request is cancelled,
 * and it stops reading pages once it has more than `maxChars` characters.
 *
 * @example const { pages, text } = await pdfText(buffer, { maxPages: 50, maxChars: 100_000, timeoutMs: 15_000, maxMemoryMb: 256, slots, signal });
 */
export async function pdfText(bytes: Uint8Array, options: PdfTextOptions): Promise<PdfText> {
  if (!startsLikePdf(bytes)) throw new PdfUnreadable('Not a PDF (no %PDF- header)');
  const deadline = performance.now() + options.timeoutMs;
  const release = await options.slots.acquire(options.signal, options.timeoutMs);
  if (!release) throw new PdfBusy(`no PDF parser came free within ${options.timeoutMs} ms (${options.slots.limit} at work)`);
  try {
    return await parseInWorker(bytes, options, Math.max(1, deadline - performance.now()));
  } finally {
    release();
  }
}

async function parseInWorker(bytes: Uint8Array, options: PdfTextOptions, timeoutMs: number): Promise<PdfText> {
  const { maxMemoryMb, signal } = options;
  // pdf.js takes ownership of (detaches) the buffer it is given: the worker gets a copy.
  const data = new Uint8Array(bytes);
  const worker = new Worker(findPackageFile('workers/pdf-text.cjs'), {
    workerData: { bytes: data, maxPages: options.maxPages, maxChars: options.maxChars, maxMemoryMb },
    transferList: [data.buffer],
    resourceLimits: { maxOldGenerationSizeMb: maxMemoryMb },
    stdout: true,
    stderr: true,
  });
  // What pdf.js prints is not the gateway's output: read and dropped.
  worker.stdout.resume();
  worker.stderr.resume();
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  try {
    const result = await new Promise<PdfText | { unreadable: string } | { tooLarge: string }>((resolve, reject) => {
      timer = setTimeout(() => reject(outOfTime(options.timeoutMs, timeoutMs)), timeoutMs);
      onAbort = () => reject(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (signal?.aborted) onAbort();
      worker.once('message', resolve);
      worker.once('error', (err: Error & { code?: string }) =>
        reject(err.code === 'ERR_WORKER_OUT_OF_MEMORY' ? new PdfTooLarge(`parsing needed more than ${maxMemoryMb} MB`) : new PdfUnreadable(err.message || 'Invalid PDF')),
      );
      worker.once('exit', (code) => reject(new PdfUnreadable(`the parser stopped (exit ${code})`)));
    });
    if ('unreadable' in result) throw new PdfUnreadable(result.unreadable);
    if ('tooLarge' in result) throw new PdfTooLarge(result.tooLarge);
    return result;
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
    // The slot is given back only once the thread is gone: a stopping worker still holds its memory.
    await worker.terminate();
  }
}

/**
 * The error of a parse stopped at the deadline. One that waited for a parser more than half of `timeoutMs`
 * had too little time left to blame the PDF: it is PdfBusy (the gateway's load, a retryable 503), not
 * PdfUnreadable (the client's 400).
 */
function outOfTime(timeoutMs: number, leftMs: number): Error {
  if (leftMs < timeoutMs / 2) return new PdfBusy(`waiting for a PDF parser left ${Math.round(leftMs)} of ${timeoutMs} ms to parse`);
  return new PdfUnreadable(`parsing took longer than ${timeoutMs} ms`);
}

function startsLikePdf(bytes: Uint8Array): boolean {
  // The header may follow up to 1024 bytes of junk (pdf.js and Acrobat accept that).
  const head = Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, 1024)).toString('latin1');
  return head.includes('%PDF-');
}
