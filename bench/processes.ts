import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';

/** `taskset -c <core>` when taskset exists and the machine has that core; otherwise no pinning. */
export function pinTo(core: number): string[] {
  try {
    execFileSync('taskset', ['-c', String(core), 'true'], { stdio: 'ignore' });
    return ['taskset', '-c', String(core)];
  } catch {
    return [];
  }
}

export interface Started {
  child: ChildProcess;
  /** Everything the process printed so far (read from its log file). */
  output(): string;
  stop(): Promise<void>;
}

/**
 * Starts `node <args>` (pinned, under `wrapper` if given) with stdout and stderr going to `logFile` (so a chatty server under load
 * costs the driver nothing), and resolves once the log matches `ready`; rejects on exit or timeout. The
 * match is returned so a caller can read a port out of it.
 */
export async function startNode(
  args: string[],
  options: { pin: string[]; ready: RegExp; logFile: string; cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; wrapper?: string[] },
): Promise<Started & { match: RegExpMatchArray }> {
  // `wrapper`: a program node runs under (e.g. valgrind and its options).
  const [cmd, ...pre] = [...options.pin, ...(options.wrapper ?? []), process.execPath];
  const fd = openSync(options.logFile, 'w');
  const child = spawn(cmd, [...pre, ...args], { cwd: options.cwd, env: options.env ?? process.env, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const output = () => readFileSync(options.logFile, 'utf8');
  let exited: number | null | undefined;
  child.once('exit', (code) => (exited = code));
  const started: Started = {
    child,
    output,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 5000).unref();
      }),
  };
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  for (;;) {
    const m = output().match(options.ready);
    if (m) return { ...started, match: m };
    if (exited !== undefined) throw new Error(`${args.join(' ')} exited with ${exited} before it was ready: ${output().slice(-800)}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${args.join(' ')} did not become ready: ${output().slice(-800)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Resident set size of a process in MiB (Linux /proc), or NaN elsewhere. */
export function rssMiB(pid: number | undefined): number {
  if (!pid) return Number.NaN;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Math.round((Number(m[1]) / 1024) * 10) / 10 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** CPU time (user + system) a process has used so far, in microseconds (Linux /proc), or NaN elsewhere. */
export function cpuUs(pid: number | undefined): number {
  if (!pid) return Number.NaN;
  try {
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS;
  } catch {
    return Number.NaN;
  }
}

/** USER_HZ: the unit of /proc/<pid>/stat times; 100 on every Linux build Node supports. */
const CLOCK_TICKS = 100;

/** Samples RSS every `everyMs` until stopped; returns the peak. */
export function rssSampler(pid: number | undefined, everyMs = 250): { stop(): number } {
  let peak = rssMiB(pid);
  const t = setInterval(() => {
    const v = rssMiB(pid);
    if (v > peak || Number.isNaN(peak)) peak = v;
  }, everyMs);
  return {
    stop() {
      clearInterval(t);
      return peak;
    },
  };
}
