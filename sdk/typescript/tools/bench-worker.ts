// The TypeScript bench worker: tether-bench runs it as `node
// sdk/typescript/build-test/tools/bench-worker.js <base-url> <key> <queue>
// <concurrency> <pickup|throughput|cancel> [--hooks]`. One Worker with handlers of
// kind `noop`: no-ops in throughput mode; in pickup mode each first prints
// `START <job-id> <unix-µs>`; in cancel mode each prints that, then waits
// for its signal and prints `CANCELLED <job-id> <unix-µs>` when a cancel
// aborts it (the parent cancels the running job and measures how long that
// took). With `--hooks`, the worker also has one no-op before, after and
// onError hook, and runs each job in an OpenTelemetry span when
// `@opentelemetry/api` is installed (no provider or exporter registered:
// what instrumented code costs when tracing is off), so the bench can
// compare the two.

import { Client, JobAborted, Worker, type TracingApi } from "../src/index.js";
import { emit, nowUs, runUntilStopped, stderrLogger } from "./process.js";

const MODES = ["pickup", "throughput", "cancel"] as const;
type Mode = (typeof MODES)[number];

function isMode(m: string | undefined): m is Mode {
  return (MODES as readonly (string | undefined)[]).includes(m);
}

/** OpenTelemetry's API if it is installed, else undefined (named through a variable: no dependency of the SDK). */
async function openTelemetry(): Promise<TracingApi | undefined> {
  const name = "@opentelemetry/api";
  try {
    return (await import(name)) as TracingApi;
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const [url, key, queue, concurrencyArg, mode, ...flags] = process.argv.slice(2);
  const concurrency = Number(concurrencyArg);
  const hooks = flags.length === 1 && flags[0] === "--hooks";
  if (!url || !key || !queue || !Number.isInteger(concurrency) || concurrency < 1 || !isMode(mode) || (flags.length > 0 && !hooks)) {
    process.stderr.write("usage: bench-worker <base-url> <key> <queue> <concurrency> <pickup|throughput|cancel> [--hooks]\n");
    process.exit(2);
  }
  const tracing = hooks ? await openTelemetry() : undefined;
  if (hooks) process.stderr.write(`bench worker: hooks on; tracing ${tracing ? "on (@opentelemetry/api, no provider)" : "off (@opentelemetry/api is not installed)"}\n`);
  const worker = new Worker(new Client({ url, key }), {
    queue,
    concurrency,
    claimWaitMs: 5_000,
    handleSignals: false,
    logger: stderrLogger("bench worker:", { warnings: true, failures: true }),
    tracing,
  });
  if (hooks) {
    worker.before(() => {});
    worker.after(() => {});
    worker.onError(() => {});
  }
  if (mode === "cancel") {
    worker.handle("noop", async (job, ctx) => {
      emit(`START ${job.id} ${nowUs()}`);
      const signal = ctx.signal;
      if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
      // Stamped first, so the line measures the signal's arrival, not the write.
      const at = nowUs();
      // Only a cancel is news to the parent (a shutdown past its grace aborts the signal too).
      if (signal.reason instanceof JobAborted && signal.reason.why === "cancel") emit(`CANCELLED ${job.id} ${at}`);
      // As a cancelled handler should: stop with the signal's reason (the worker reports the job cancelled).
      throw signal.reason;
    });
  } else {
    const pickup = mode === "pickup";
    worker.handle("noop", (job) => {
      if (pickup) emit(`START ${job.id} ${nowUs()}`);
    });
  }
  runUntilStopped([worker], () => emit("READY"));
}

void main();
