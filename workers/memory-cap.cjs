'use strict';
// Bounds the memory of the worker thread that requires it (workers/pdf-text.cjs). resourceLimits caps only
// the JavaScript heap; pdf.js keeps a PDF's decoded streams in ArrayBuffers outside it, and a 1 MB
// FlateDecode stream inflating to 1 GB of zeros took the gateway process to 2.1 GB RSS. pdf.js has no option
// that limits a decoded stream (maxImageSize only concerns images, which text extraction never decodes), so
// the worker watches its own heap plus ArrayBuffer/external memory (process.memoryUsage() is per isolate in a
// worker) and ends itself past the cap. Two checks, because pdf.js decodes streams two ways:
// - natively, through DecompressionStream (content streams, fonts, CMaps): the event loop turns between
//   chunks, so a timer samples the memory;
// - in JavaScript (LZW, RunLength, ASCIIHex…, and Flate behind them): a synchronous loop in which no timer
//   runs; every such decoder grows its buffer with `new Uint8Array(size)`, so the typed-array constructors
//   are wrapped to check the memory once per MB allocated, before the allocation is made.

const CHECK_EVERY_BYTES = 1 << 20;
const SAMPLE_MS = 10;
const TYPED = ['ArrayBuffer', 'Uint8Array', 'Uint8ClampedArray', 'Int8Array', 'Uint16Array', 'Int16Array', 'Uint32Array', 'Int32Array', 'Float32Array', 'Float64Array'];

/**
 * Installs the cap; call it before loading the code it guards (pdf.js looks its constructors up at call
 * time, so the wrapped ones are the ones it uses). `onOver(bytes)` must end the thread (it is called from
 * inside an allocation: returning would let the allocation go on).
 *
 * @example capMemory(256 * 2 ** 20, (used) => { parentPort.postMessage({ tooLarge: used }); process.exit(1); });
 */
function capMemory(maxBytes, onOver) {
  const used = () => {
    const m = process.memoryUsage();
    return m.heapUsed + m.external;
  };
  const check = (extra) => {
    const bytes = used() + extra;
    if (bytes > maxBytes) onOver(bytes);
  };
  setInterval(() => check(0), SAMPLE_MS).unref();

  let sinceCheck = 0;
  for (const name of TYPED) {
    const original = globalThis[name];
    const unit = original.BYTES_PER_ELEMENT || 1;
    // A Proxy, not a subclass: `instanceof`, statics and `extends` keep working with the original prototype.
    globalThis[name] = new Proxy(original, {
      construct(target, args, newTarget) {
        const a = args[0];
        const size = (typeof a === 'number' ? a : typeof a?.length === 'number' ? a.length : 0) * unit;
        sinceCheck += size;
        if (sinceCheck >= CHECK_EVERY_BYTES) {
          sinceCheck = 0;
          check(size);
        }
        return Reflect.construct(target, args, newTarget);
      },
    });
  }
}

module.exports = { capMemory };
