/** A V8 profile call frame (CPU or sampling heap profile). */
export interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

/** `name file:line`, the file shortened to `node_modules/…` or `dist/…`. */
export function functionOf(f: CallFrame): string {
  return `${f.functionName || '(anonymous)'} ${f.url.replace(/^.*\/(node_modules\/|dist\/)/, '$1')}:${f.lineNumber + 1}`;
}

/** Where the code lives: a package, a folder of ours (`src/routing`), node's internals (`node:streams`), or the function. */
export function placeOf(f: CallFrame): string {
  const url = f.url;
  return (
    /node_modules\/((@[^/]+\/)?[^/]+)/.exec(url)?.[1] ??
    /dist\/((src|plugins)\/[^/]+)/.exec(url)?.[1] ??
    (url.startsWith('node:') ? url.replace(/^node:(internal\/)?([^/]+).*/, 'node:$2') : f.functionName || '(native)')
  );
}
