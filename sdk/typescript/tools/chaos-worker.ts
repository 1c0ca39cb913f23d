// The TypeScript chaos worker: `tether-chaos --worker-cmd "node
// sdk/typescript/build-test/tools/chaos-worker.js"` runs it as
// `<cmd> <base-url> <key> <seed> <name>`. A port of
// crates/tether-chaos/src/worker.rs on this SDK's Worker: three workers in
// one process (queues chaos, chaos-slow and chaos-limited, the one the run
// gives flow-control limits) whose handler follows each job's plan, printing every claim,
// every error and every lease_lost the SDK saw (through its observer) as
// the lines of crates/tether-chaos/src/obs.rs.

import { Client, Fatal, Retry, RetryAfter, Snooze, Worker, type Job, type JobContext, type Json, type WorkerObserver } from "../src/index.js";
import { failureOn, plan } from "./chaos-plan.js";
import { emit, nowUs, runUntilStopped, stderrLogger } from "./process.js";

/** A job whose run_at is this close to its created_at was never moved (plan.rs UNMOVED_SLACK_MS). */
const UNMOVED_SLACK_MS = 50;

/** Sleeps `ms`; rejects with the abort reason if the worker asks the handler to stop. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    // The worker aborts with a JobAborted, an Error.
    if (signal.aborted) return reject(signal.reason as Error);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason as Error);
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** The handler of worker `by` (worker.rs `handle`). `snoozed` holds "<job>:<attempt>" that already snoozed in this process. */
function handler(seed: bigint, by: string, snoozed: Set<string>) {
  return async (job: Job, ctx: JobContext): Promise<Json> => {
    const attempt = job.attempt;
    const payload = job.payload;
    const n = payload !== null && typeof payload === "object" && !Array.isArray(payload) ? payload.n : undefined;
    if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) throw new Fatal("chaos: payload without n");
    const p = plan(seed, BigInt(n));
    const failure = failureOn(p, attempt);
    if (failure) {
      if (failure.fatal) throw new Fatal(failure.message);
      if (p.kind === "flaky" && p.retryAfterMs !== undefined) throw new RetryAfter(p.retryAfterMs, failure.message);
      // Retry, not a plain Error: the checker compares the stored error with the message byte for byte.
      throw new Retry(failure.message);
    }
    switch (p.kind) {
      case "ok":
      case "slow":
        await sleep(p.sleepMs, ctx.signal);
        break;
      case "snooze_queue":
        // Millisecond precision, as the Rust handler's num_milliseconds.
        if (Date.parse(job.run_at) - Date.parse(job.created_at) < UNMOVED_SLACK_MS) throw new Snooze(p.delayMs);
        break;
      case "snooze_in_process": {
        // A short snooze, once per (job, attempt) in this process. Like every snooze it goes to the server
        // (the attempt is given back, so a claim here again sees the same attempt and succeeds).
        const key = `${job.id}:${attempt}`;
        if (!snoozed.has(key)) {
          snoozed.add(key);
          throw new Snooze(p.delayMs);
        }
        break;
      }
      default:
        break;
    }
    return { n, by, attempt };
  };
}

const observer: WorkerObserver = {
  onClaim({ jobs, workerId }) {
    const at = nowUs();
    for (const j of jobs) emit(`CLAIM ${j.id} ${j.attempt} ${j.lease_token} ${workerId} ${at}`);
  },
  onError({ op, code }) {
    emit(`ERR ${op} ${code}`);
  },
  onLeaseLost({ op, jobId, leaseToken }) {
    emit(`LOST ${op} ${jobId} ${leaseToken} ${nowUs()}`);
  },
};

function main(): void {
  const [url, key, seedArg, name] = process.argv.slice(2);
  if (!url || !key || !seedArg || !/^\d+$/.test(seedArg) || BigInt(seedArg) >= 1n << 64n || !name) {
    process.stderr.write("usage: chaos-worker <base-url> <key> <seed (u64)> <name>\n");
    process.exit(2);
  }
  const seed = BigInt(seedArg);
  const client = new Client({ url, key, timeoutMs: 10_000 });
  const snoozed = new Set<string>();
  const build = (suffix: string, queue: string, concurrency: number, leaseTtlMs: number) => {
    const workerId = `${name}.${suffix}`;
    return new Worker(client, {
      queue,
      concurrency,
      leaseTtlMs,
      workerId,
      claimWaitMs: 2_000,
      pollIntervalMs: 500,
      shutdownGraceMs: 5_000,
      handleSignals: false,
      // Warnings (failed tries, lost leases) and the jobs' failures are what the faults and the plans cause
      // by design: the lines on stdout count them.
      logger: stderrLogger(`chaos worker ${workerId}:`, { warnings: false, failures: false }),
      observer,
    }).handle("chaos", handler(seed, workerId, snoozed));
  };
  const workers = [build("m", "chaos", 16, 4_000), build("s", "chaos-slow", 10, 2_000), build("l", "chaos-limited", 4, 4_000)];
  runUntilStopped(workers, () => emit("READY"));
}

main();
