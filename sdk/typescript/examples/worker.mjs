// A small tether worker: runs jobs of one queue until SIGTERM or SIGINT,
// then lets running handlers finish within the grace period and hands the
// rest back to the queue.
//
//   TETHER_URL=http://127.0.0.1:7070 TETHER_KEY=tth_... node examples/worker.mjs
//
// Settings (environment): QUEUE (default "emails"), CONCURRENCY (default 4),
// LEASE_TTL_MS (default: unset, so each job gets its queue's lease),
// CLAIM_WAIT_MS (default 5000),
// SHUTDOWN_GRACE_MS (default 30000).
//
// Kinds it handles:
//   send_welcome  {to}           pretends to send an email, answers {sent: true}
//   sleep         {ms}           waits ms milliseconds (stops early when asked to)
//   flaky         {}             fails with RetryAfter(1000) on its first attempt

import { Client, Worker, RetryAfter, Fatal } from "tether-client";

const env = process.env;
const num = (name, dflt) => (env[name] ? Number(env[name]) : dflt);

const client = new Client(); // TETHER_URL and TETHER_KEY
const worker = new Worker(client, {
  queue: env.QUEUE ?? "emails",
  concurrency: num("CONCURRENCY", 4),
  leaseTtlMs: num("LEASE_TTL_MS", undefined),
  claimWaitMs: num("CLAIM_WAIT_MS", 5_000),
  shutdownGraceMs: num("SHUTDOWN_GRACE_MS", 30_000),
});

worker.handle("send_welcome", async (job) => {
  const to = job.payload?.to;
  if (typeof to !== "string") throw new Fatal("payload.to must be an email address");
  console.log(`sending a welcome email to ${to}`);
  return { sent: true };
});

worker.handle("sleep", async (job, ctx) => {
  const ms = Number(job.payload?.ms ?? 1000);
  console.log(`sleeping ${ms} ms`);
  await new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    ctx.signal.addEventListener("abort", () => {
      clearTimeout(t);
      reject(ctx.signal.reason);
    });
  });
  return { slept: ms };
});

worker.handle("flaky", async (job) => {
  if (job.attempt <= 1) throw new RetryAfter(1000, "the upstream asked us to come back in a second");
  return "ok";
});

console.log(`worker ${worker.workerId} on queue ${Object.keys(worker.queues).join(", ")}`);
await worker.run();
console.log("worker drained; bye");
