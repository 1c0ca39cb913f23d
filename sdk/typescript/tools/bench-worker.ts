// The TypeScript bench worker: tether-bench runs it as `node
// sdk/typescript/build-test/tools/bench-worker.js <base-url> <key> <queue>
// <concurrency> <pickup|throughput>`. One Worker with no-op handlers of
// kind `noop`; in pickup mode each handler first prints
// `START <job-id> <unix-µs>`.

import { Client, Worker } from "../src/index.js";
import { emit, nowUs, runUntilStopped, stderrLogger } from "./process.js";

function main(): void {
  const [url, key, queue, concurrencyArg, mode] = process.argv.slice(2);
  const concurrency = Number(concurrencyArg);
  if (!url || !key || !queue || !Number.isInteger(concurrency) || concurrency < 1 || (mode !== "pickup" && mode !== "throughput")) {
    process.stderr.write("usage: bench-worker <base-url> <key> <queue> <concurrency> <pickup|throughput>\n");
    process.exit(2);
  }
  const worker = new Worker(new Client({ url, key }), {
    queue,
    concurrency,
    claimWaitMs: 5_000,
    handleSignals: false,
    logger: stderrLogger("bench worker:", true),
  });
  const pickup = mode === "pickup";
  worker.handle("noop", (job) => {
    if (pickup) emit(`START ${job.id} ${nowUs()}`);
  });
  runUntilStopped([worker], () => emit("READY"));
}

main();
