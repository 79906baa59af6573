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

/**
 * Amounts (CPU samples, sampled bytes) added up by function and by place, reported as the largest shares.
 *
 * @example const shares = new Shares(); shares.add(node.callFrame, node.hitCount); shares.top('place', 25);
 */
export class Shares {
  readonly byFunction = new Map<string, number>();
  readonly byPlace = new Map<string, number>();
  total = 0;

  add(frame: CallFrame, amount: number): void {
    const fn = functionOf(frame);
    const place = placeOf(frame);
    this.byFunction.set(fn, (this.byFunction.get(fn) ?? 0) + amount);
    this.byPlace.set(place, (this.byPlace.get(place) ?? 0) + amount);
    this.total += amount;
  }

  /** `  12.3%  name` lines of the `k` largest, by function or by place. */
  top(by: 'function' | 'place', k: number): string[] {
    const m = by === 'function' ? this.byFunction : this.byPlace;
    return [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([name, v]) => `${((100 * v) / this.total).toFixed(1).padStart(5)}%  ${name}`);
  }
}
