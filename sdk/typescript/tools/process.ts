// What the chaos and bench worker programs share: the line protocol on
// stdout, and the process lifecycle their parents (tether-chaos,
// tether-bench) expect: SIGTERM/SIGINT stop the workers gracefully and exit
// 0; stdin closing (the parent is gone) exits 3 at once.

import { writeSync } from "node:fs";
import type { Logger, Worker } from "../src/index.js";

/**
 * Prints one protocol line in a single write(2) to fd 1, synchronously: a
 * line the program printed survives a SIGKILL right after, and two lines
 * never interleave. (A pipe write of at most PIPE_BUF bytes is atomic.)
 * fd 1 is used directly, never `process.stdout`, so it stays the blocking
 * pipe the parent gave us.
 */
export function emit(line: string): void {
  const buf = Buffer.from(line + "\n", "utf8");
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(1, buf, off);
    } catch (e) {
      // Only if someone made fd 1 non-blocking and the parent lags: try again.
      if ((e as NodeJS.ErrnoException).code !== "EAGAIN") throw e;
    }
  }
}

/**
 * Wall-clock microseconds since the Unix epoch (the parent compares them
 * with its own and the database's clock on this host). Date.now() has only
 * milliseconds; the process's time origin plus the monotonic clock has
 * microseconds and cannot drift measurably within a run.
 */
export function nowUs(): number {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

/**
 * Errors (and warnings, if `warnings`) on stderr, prefixed with `who`; debug and info dropped. Without
 * `failures`, the worker's line for each failed attempt ("job failed …", warn or error) is dropped too: a
 * run whose jobs fail by design would print one per planned failure.
 */
export function stderrLogger(who: string, opts: { warnings: boolean; failures: boolean }): Logger {
  const write = (level: string, on: boolean) => (msg: string, fields?: Record<string, unknown>) => {
    if (!on || (!opts.failures && msg.startsWith("job failed"))) return;
    process.stderr.write(`${who} ${level} ${msg}${fields ? " " + JSON.stringify(fields) : ""}\n`);
  };
  return { debug() {}, info() {}, warn: write("WARN", opts.warnings), error: write("ERROR", true) };
}

/**
 * Runs `workers` until SIGTERM or SIGINT (a second one ends the shutdown
 * grace at once), then exits 0 once every one has drained; exits 3 at once,
 * with nothing graceful, when stdin reaches its end. Calls `ready` once
 * every worker has started.
 */
export function runUntilStopped(workers: Worker[], ready: () => void): void {
  process.stdin.on("data", () => {});
  process.stdin.on("end", () => process.exit(3));
  process.stdin.on("error", () => process.exit(3));
  const stop = () => {
    for (const w of workers) w.shutdown();
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  const runs = workers.map((w) => w.run());
  ready();
  Promise.all(runs).then(
    () => process.exit(0),
    (e: unknown) => {
      process.stderr.write(`worker failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
      process.exit(1);
    },
  );
}
