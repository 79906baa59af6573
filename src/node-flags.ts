/**
 * The node flags the shipped start commands run the gateway with (`npm start`, `npm run gateway`; the
 * benchmarks start it the same way). They must be on node's own command line: V8 reads them when the
 * process starts, and node refuses them in `NODE_OPTIONS`. `test/unit/node-flags.test.ts` checks that
 * package.json's scripts carry them and that this node still knows them.
 *
 * `--no-concurrent-recompilation`: V8 optimises hot functions on the main thread instead of its helper
 * threads. Each helper thread that compiled kept the compiler's freed memory in a malloc arena of its own
 * (~10 MiB in all under load, measured in `/proc/<pid>/smaps`); on the main thread that memory is reused.
 * `npm run bench:ab`: peak RSS under chat load 121.3 -> 112.1 MiB, chat streams 126.9 -> 114.5, agent-sized
 * requests 163.4 -> 149.8, CPU per request unchanged within the rounds' spread. The cost: a function's
 * optimisation runs on the event loop (~1 s of it in all over the first seconds of load, single compiles
 * up to ~20 ms; a few ms per second after). README, Performance.
 */
export const NODE_FLAGS: readonly string[] = ['--no-concurrent-recompilation'];
