import { getDocumentProxy } from 'unpdf';

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

/**
 * Extracts the text of the first `maxPages` pages of a PDF with pdf.js (through unpdf's bundled,
 * worker-less build, so no worker file and no native canvas are needed for text).
 *
 * @example const { pages, text } = await pdfText(buffer, { maxPages: 50 });
 */
export async function pdfText(bytes: Uint8Array, options: { maxPages: number }): Promise<PdfText> {
  if (!startsLikePdf(bytes)) throw new PdfUnreadable('Not a PDF (no %PDF- header)');
  // pdf.js takes ownership of (detaches) the buffer it is given: hand it a copy.
  const data = new Uint8Array(bytes);
  let doc: Awaited<ReturnType<typeof getDocumentProxy>>;
  try {
    // verbosity 0: pdf.js would otherwise print its recoverable-error warnings to the console.
    doc = await getDocumentProxy(data, { verbosity: 0, isEvalSupported: false });
  } catch (err) {
    throw new PdfUnreadable((err as Error).message || 'Invalid PDF');
  }
  try {
    const pagesRead = Math.min(doc.numPages, options.maxPages);
    const texts: string[] = [];
    for (let i = 1; i <= pagesRead; i++) {
      const page = await doc.getPage(i);
      const content = await page.getTextContent();
      let out = '';
      for (const item of content.items) {
        if (!('str' in item)) continue;
        out += item.str;
        if (item.hasEOL) out += '\n';
      }
      texts.push(out.trim());
      page.cleanup();
    }
    return { pages: doc.numPages, pagesRead, text: texts.join('\n\n') };
  } catch (err) {
    throw new PdfUnreadable((err as Error).message || 'Invalid PDF');
  } finally {
    await doc.destroy();
  }
}

function startsLikePdf(bytes: Uint8Array): boolean {
  // The header may follow up to 1024 bytes of junk (pdf.js and Acrobat accept that).
  const head = Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, 1024)).toString('latin1');
  return head.includes('%PDF-');
}
