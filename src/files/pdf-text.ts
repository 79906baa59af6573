import { Worker } from 'node:worker_threads';
import { findPackageFile } from '../config/package-root';

/** Text of a PDF, page by page up to a cap. */
export interface PdfText {
  /** Pages in the document. */
  pages: number;
  /** Pages whose text was read (at most the cap). */
  pagesRead: number;
  /** The pages' text, pages separated by a blank line. */
  text: string;
}

/** The bytes are not a PDF pdf.js can read (bad structure, encrypted, truncated…). */
export class PdfUnreadable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PdfUnreadable';
  }
}

/** Memory a PDF's parse may use (the worker's old generation): a decompression bomb stops there. */
const WORKER_HEAP_MB = 256;

/**
 * Extracts the text of the first `maxPages` pages of a PDF with pdf.js (unpdf's bundled build: no canvas
 * needed for text), in a worker thread (`workers/pdf-text.cjs`): a small hostile PDF can inflate to
 * gigabytes or take seconds of CPU, and on the gateway's own thread that blocked every other request (a
 * 29 KB file inflating to 10 MB held the event loop 14 s). The worker is stopped after `timeoutMs`, its heap
 * is capped, and it stops reading pages once it has more than `maxChars` characters.
 *
 * @example const { pages, text } = await pdfText(buffer, { maxPages: 50, maxChars: 100_000, timeoutMs: 15_000 });
 */
export async function pdfText(bytes: Uint8Array, options: { maxPages: number; maxChars: number; timeoutMs: number }): Promise<PdfText> {
  if (!startsLikePdf(bytes)) throw new PdfUnreadable('Not a PDF (no %PDF- header)');
  // pdf.js takes ownership of (detaches) the buffer it is given: the worker gets a copy.
  const data = new Uint8Array(bytes);
  const worker = new Worker(findPackageFile('workers/pdf-text.cjs'), {
    workerData: { bytes: data, maxPages: options.maxPages, maxChars: options.maxChars },
    transferList: [data.buffer],
    resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB },
    stdout: true,
    stderr: true,
  });
  // What pdf.js prints is not the gateway's output: read and dropped.
  worker.stdout.resume();
  worker.stderr.resume();
  let timer: NodeJS.Timeout | undefined;
  try {
    const result = await new Promise<PdfText | { unreadable: string }>((resolve, reject) => {
      timer = setTimeout(() => reject(new PdfUnreadable(`parsing took longer than ${options.timeoutMs} ms`)), options.timeoutMs);
      worker.once('message', resolve);
      worker.once('error', (err: Error & { code?: string }) =>
        reject(new PdfUnreadable(err.code === 'ERR_WORKER_OUT_OF_MEMORY' ? `parsing needed more than ${WORKER_HEAP_MB} MB` : err.message || 'Invalid PDF')),
      );
      worker.once('exit', (code) => reject(new PdfUnreadable(`the parser stopped (exit ${code})`)));
    });
    if ('unreadable' in result) throw new PdfUnreadable(result.unreadable);
    return result;
  } finally {
    clearTimeout(timer);
    void worker.terminate();
  }
}

function startsLikePdf(bytes: Uint8Array): boolean {
  // The header may follow up to 1024 bytes of junk (pdf.js and Acrobat accept that).
  const head = Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, 1024)).toString('latin1');
  return head.includes('%PDF-');
}
