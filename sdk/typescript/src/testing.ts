// tether-client/testing: testing code that uses tether against a real
// server. `startTetherServer()` starts `tether serve` on a temporary SQLite
// data directory (or a PostgreSQL database) and a free port; its
// `freshTenant()` gives each test a tenant of its own and a Client acting
// for it; `drain(worker)` works a worker's queues in-process until nothing
// is due and rethrows the first error a handler threw.

import { spawn } from "node:child_process";
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { randomBytes } from "node:crypto";
import { Client } from "./client.js";
import { Fatal, Retry } from "./errors.js";
import { runDrained, type Worker } from "./worker.js";

/** Options of {@link startTetherServer}. */
export interface StartServerOptions {
  /**
   * The `tether` binary. Default: `TETHER_BIN`, else the `tether-server` npm package's `binaryPath()` if it
   * is installed, else `tether` on `PATH` (see {@link tetherBinary}).
   */
  bin?: string;
  /** A PostgreSQL database (`postgres://…`) to run on instead of SQLite in the temporary data directory. */
  databaseUrl?: string;
  /** More arguments of `tether serve`. */
  args?: string[];
  /** Called with the server's log output (its stderr) as it comes; default: kept, and shown if it fails to start. */
  onLog?: (text: string) => void;
  /** How long the server may take to listen and answer `/readyz` (ms). Default 30 000. */
  startTimeoutMs?: number;
}

/** A `tether serve` that {@link startTetherServer} started. */
export interface TetherTestServer {
  /** Its base URL, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  /** Its admin API key. */
  readonly key: string;
  /** Its temporary data directory (removed by `stop()`). */
  readonly dataDir: string;
  /** The server's process id. */
  readonly pid: number;
  /**
   * A client of the server with its admin key: acting for `tenant` (a name or id; `X-Tether-Tenant`) when
   * given, else for the `default` tenant.
   */
  client(tenant?: string): Client;
  /**
   * A new tenant (made with the admin API, named `test-<random>` or `<prefix>-<random>`) and a client
   * acting for it: each test that calls it starts without a job, queue or schedule of another test.
   */
  freshTenant(prefix?: string): Promise<{ tenant: string; client: Client }>;
  /** The last part of the server's log (its stderr), unless `onLog` took it. */
  log(): string;
  /** Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its data directory. */
  stop(): Promise<void>;
}

/** The line `tether serve` prints on stdout once it listens. */
const BANNER = /tether serve: listening on (http:\/\/\S+)/;

/** Whether `path` is a file this process may execute. */
function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The `tether` server binary: `TETHER_BIN`; else the `tether-server` npm package's `binaryPath()`, if that
 * package is installed; else `tether` on `PATH`. Throws an error saying how to get one otherwise.
 */
export async function tetherBinary(): Promise<string> {
  const fromEnv = process.env.TETHER_BIN;
  if (fromEnv) {
    if (!executable(fromEnv)) throw new Error(`TETHER_BIN=${fromEnv} is not an executable tether binary`);
    return fromEnv;
  }
  // Named through a variable: a package this one does not depend on, found at run time if installed.
  const serverPackage = "tether-server";
  let bundled: unknown;
  try {
    const mod = (await import(serverPackage)) as { binaryPath?: unknown };
    if (typeof mod.binaryPath === "function") bundled = (mod.binaryPath as () => unknown)();
  } catch {
    // not installed (or not for this platform): try PATH
  }
  if (typeof bundled === "string" && executable(bundled)) return bundled;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, process.platform === "win32" ? "tether.exe" : "tether");
    if (existsSync(candidate) && executable(candidate)) return candidate;
  }
  throw new Error(
    "no tether server binary: set TETHER_BIN to its path, install the tether-server npm package " +
      "(`node packaging/npm/build.mjs BINARY OUTDIR` in the tether repository packs one), or put `tether` on PATH " +
      "(from a checkout of the tether repository: `cargo build --release`, then TETHER_BIN=target/release/tether)",
  );
}

/**
 * Starts a real `tether serve` for tests: on a temporary SQLite data directory (or `databaseUrl`), listening
 * on a free port of 127.0.0.1, its maintenance every 200 ms (retries and expiries come sooner than with
 * the default second); resolves once it answers `/readyz`. No `TETHER_*` variable of this process reaches
 * it but `TETHER_LOG` (default `warn`). Call `stop()` when done (an exit of this process kills it too).
 *
 * ```ts
 * let server: TetherTestServer;
 * before(async () => (server = await startTetherServer()));
 * after(() => server.stop());
 * ```
 */
export async function startTetherServer(options: StartServerOptions = {}): Promise<TetherTestServer> {
  const bin = options.bin ?? (await tetherBinary());
  const dataDir = mkdtempSync(join(tmpdir(), "tether-test-"));
  const args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--maintenance-tick", "200ms"];
  if (options.databaseUrl) args.push("--database-url", options.databaseUrl);
  args.push(...(options.args ?? []));
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("TETHER_")) env[k] = v;
  env.TETHER_LOG = process.env.TETHER_LOG ?? "warn";
  const proc = spawn(bin, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d: Buffer) => {
    if (options.onLog) return options.onLog(d.toString());
    stderr += d.toString();
    if (stderr.length > 20_000) stderr = stderr.slice(-10_000);
  });
  // Killed with this process, should a test end without stopping it.
  const killOnExit = () => proc.kill("SIGKILL");
  process.once("exit", killOnExit);
  const stop = async () => {
    process.off("exit", killOnExit);
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      const t = setTimeout(() => proc.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(t);
    }
    rmSync(dataDir, { recursive: true, force: true });
  };
  const timeoutMs = options.startTimeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`tether serve did not listen within ${timeoutMs} ms:\n${stderr}`)), timeoutMs);
      proc.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        const m = BANNER.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      proc.once("error", (e) => {
        clearTimeout(timer);
        reject(new Error(`tether serve could not start (${bin}): ${e.message}`));
      });
      proc.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`tether serve exited (${code ?? signal}) before listening:\n${stderr}`));
      });
    });
    // Its stdout is read no further, but drained, so the server never blocks on it.
    proc.stdout.resume();
    const key = readFileSync(join(dataDir, "admin.key"), "utf8").trim();
    const admin = new Client({ url, key, retries: 0 });
    for (;;) {
      try {
        await admin.ready({ timeoutMs: 5_000 });
        break;
      } catch (e) {
        if (Date.now() > deadline) throw new Error(`tether serve at ${url} was not ready within ${timeoutMs} ms (${String(e)}):\n${stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    const client = (tenant?: string) => new Client({ url, key, tenant: tenant ?? "", retries: 4 });
    return {
      url,
      key,
      dataDir,
      pid: proc.pid!,
      client,
      async freshTenant(prefix = "test") {
        const tenant = `${prefix}-${randomBytes(6).toString("hex")}`;
        await client().createTenant(tenant);
        return { tenant, client: client(tenant) };
      },
      log: () => stderr,
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

// ---------------------------------------------------------------- drain

/** Options of {@link drain}. */
export interface DrainOptions {
  /** Longest the drain may take (ms): past it, with jobs still due, it throws saying what is left. Default 30 000. */
  timeoutMs?: number;
  /**
   * Whether the first error a handler (or a `before` hook) threw is thrown by `drain` itself, once the
   * worker has stopped, with its own stack. Default true; false answers the summary, the errors in it.
   */
  rethrow?: boolean;
}

/** What {@link drain} saw the worker do: one count per run of a job that ended. */
export interface DrainSummary {
  /** Runs that succeeded. */
  succeeded: number;
  /** Runs that failed for good: `Fatal` (a payload a task's `validate` refused too), or the last attempt. */
  failed: number;
  /** Failed runs that will run again (a thrown error, `Retry`, `RetryAfter`, a timeout, with attempts left). */
  retried: number;
  /** Runs that threw `Snooze` (or were handed back). */
  snoozed: number;
  /** Runs of jobs whose cancel was requested. */
  cancelled: number;
  /**
   * What handlers (and `before` hooks) threw that failed their runs, in order, other than the SDK's
   * `Retry` and `Fatal` (and `RetryAfter` and `Snooze`, which are no failure of the code).
   */
  errors: unknown[];
}

/** How often {@link drain} looks whether anything is still due (ms). */
const CHECK_EVERY_MS = 50;
/** The longest claim long-poll of a worker {@link drain} runs (ms): a claim in flight is never cut, so stopping waits for it. */
const DRAIN_CLAIM_WAIT_MS = 200;

/** What is still due on the worker's queues (`""` when nothing is): its own jobs in flight, and jobs ready or running. */
async function stillDue(worker: Worker): Promise<string> {
  if (worker.jobsInFlight > 0) return `${worker.jobsInFlight} jobs in flight in the worker`;
  const left: string[] = [];
  for (const name of Object.keys(worker.queues)) {
    const q = await worker.client.getQueue(name);
    if (q.ready > 0 || q.counts.running > 0) left.push(`queue ${name}: ${q.ready} ready, ${q.counts.running} running`);
  }
  return left.join("; ");
}

/**
 * Runs `worker` in this process — its handlers, hooks and typed tasks, against its client's server and
 * tenant — until nothing of its queues is due: no job ready now, none running (claimed by anyone), none of
 * its own in flight; then stops it and answers a {@link DrainSummary}. Jobs due later (a retry's backoff, a
 * delay, a snooze) are left for later. Its claims long-poll at most 200 ms meanwhile, and it handles no
 * signals. Unless `rethrow: false`, the first error a handler threw (see {@link DrainSummary.errors}) is
 * thrown here, with its own stack, so the test fails where the handler did. Past `timeoutMs` with jobs still
 * due, it throws an error saying what is left. The worker may be drained again (or run) afterwards.
 */
export async function drain(worker: Worker, options: DrainOptions = {}): Promise<DrainSummary> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const summary: DrainSummary = { succeeded: 0, failed: 0, retried: 0, snoozed: 0, cancelled: 0, errors: [] };
  const running = runDrained(worker, {
    claimWaitMs: DRAIN_CLAIM_WAIT_MS,
    onOutcome(job, outcome, thrown) {
      switch (outcome.status) {
        case "succeeded":
          summary.succeeded += 1;
          break;
        case "failed":
        case "retryAfter":
          if (thrown instanceof Fatal || job.attempt >= job.max_attempts) summary.failed += 1;
          else summary.retried += 1;
          if (outcome.status === "failed" && thrown !== undefined && !(thrown instanceof Fatal || thrown instanceof Retry)) summary.errors.push(thrown);
          break;
        case "snooze":
          summary.snoozed += 1;
          break;
        case "cancelled":
          summary.cancelled += 1;
          break;
      }
    },
  });
  let ended = false;
  const watched = running.then(
    () => (ended = true),
    () => (ended = true),
  );
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      await Promise.race([watched, new Promise((r) => setTimeout(r, CHECK_EVERY_MS))]);
      // It stopped by itself (a refused key: thrown below, or a shutdown from elsewhere).
      if (ended) break;
      const left = await stillDue(worker);
      if (!left) break;
      if (Date.now() > deadline) {
        const first = summary.errors.length > 0 ? ` (first error: ${String(summary.errors[0])})` : "";
        throw new Error(`drain: still due after ${timeoutMs} ms: ${left}${first}`);
      }
    }
  } finally {
    worker.shutdown();
    await running.catch(() => undefined);
  }
  await running;
  if ((options.rethrow ?? true) && summary.errors.length > 0) throw summary.errors[0];
  return summary;
}
