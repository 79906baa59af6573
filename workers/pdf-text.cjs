'use strict';
// Runs in a worker thread (src/files/pdf-text.ts starts it): pdf.js parses and inflates untrusted PDFs, and a
// small file can inflate to gigabytes or take seconds of CPU. Here that work cannot block the gateway's event
// loop, is stopped at the host's time limit, and is bounded in memory: the heap by the worker's resource
// limits, the heap plus decoded data by memory-cap.cjs.
// Plain JavaScript so the same file serves the compiled build and the TypeScript sources under test.
const { parentPort, workerData } = require('node:worker_threads');
const { capMemory } = require('./memory-cap.cjs');

capMemory(workerData.maxMemoryMb * 2 ** 20, () => {
  // Delivered before the host sees the thread exit (Node drains a worker's messages first).
  parentPort.postMessage({ tooLarge: `parsing needed more than ${workerData.maxMemoryMb} MB` });
  process.exit(1);
});

async function extract({ bytes, maxPages, maxChars }) {
  const { getDocumentProxy } = await import('unpdf');
  let doc;
  try {
    // verbosity 0: pdf.js would otherwise print its recoverable-error warnings to the console.
    doc = await getDocumentProxy(bytes, { verbosity: 0, isEvalSupported: false });
  } catch (err) {
    return { unreadable: (err && err.message) || 'Invalid PDF' };
  }
  try {
    const pagesRead = Math.min(doc.numPages, maxPages);
    const texts = [];
    let chars = 0;
    let read = 0;
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
      read = i;
      chars += out.length;
      // More than the prompt will take: the pages after it are not read (their text would be cut anyway).
      if (chars > maxChars) break;
    }
    return { pages: doc.numPages, pagesRead: read, text: texts.join('\n\n') };
  } catch (err) {
    return { unreadable: (err && err.message) || 'Invalid PDF' };
  } finally {
    await doc.destroy();
  }
}

extract(workerData).then(
  (result) => parentPort.postMessage(result),
  (err) => parentPort.postMessage({ unreadable: (err && err.message) || 'Invalid PDF' }),
);
