import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startNode, type Started } from './processes';

/**
 * Installs the open-source Portkey gateway from npm into `dir` (never a dependency of this project) and
 * starts it (under `wrapper`, e.g. valgrind, if given). Portkey 1.15.2 resolves @hono/node-server 1.19, with which its streaming answers 500, so the
 * install pins @hono/node-server 1.13.5 and hono 4.9.7 through npm overrides.
 */
export async function startPortkey(dir: string, port: number, pin: string[], wrapper?: string[]): Promise<Started> {
  const entry = path.join(dir, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js');
  if (!existsSync(entry)) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      path.join(dir, 'package.json'),
      JSON.stringify({
        name: 'portkey-peer',
        private: true,
        dependencies: { '@portkey-ai/gateway': '1.15.2' },
        overrides: { '@hono/node-server': '1.13.5', hono: '4.9.7' },
      }),
    );
    process.stderr.write(`installing @portkey-ai/gateway 1.15.2 into ${dir} …\n`);
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, stdio: 'inherit' });
  }
  return startNode([entry, `--port=${port}`, '--headless'], {
    pin,
    wrapper,
    ready: /Ready for connections|running at/,
    cwd: dir,
    logFile: path.join(dir, 'portkey.log'),
    timeoutMs: wrapper ? 300_000 : 60_000,
  });
}

/** How Portkey is reached in front of an OpenAI-compatible upstream. */
export function portkeyHeaders(upstreamUrl: string): Record<string, string> {
  return { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': upstreamUrl, authorization: 'Bearer sk-bench' };
}
