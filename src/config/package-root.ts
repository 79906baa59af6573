import { existsSync } from 'node:fs';
import path from 'node:path';

let root: string | undefined;

/**
 * The package's root folder, found by walking up from this file; works from `src/` under vitest and from
 * the compiled `dist/src/`.
 */
export function packageRoot(): string {
  if (root) return root;
  let dir = __dirname;
  while (!existsSync(path.join(dir, 'schemas', 'gateway.schema.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('cannot find the package root (schemas/gateway.schema.json)');
    dir = up;
  }
  root = dir;
  return dir;
}

export function findPackageFile(relative: string): string {
  return path.join(packageRoot(), relative);
}
