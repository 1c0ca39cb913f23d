// SIGTERM on a real worker process (examples/worker.mjs, run against the
// built package): it stops claiming, lets the short job finish within the
// grace, hands the long one back (queued again, attempt given back, history
// `snoozed`) and exits 0.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { eventually, forEachBackend, PKG_DIR, queueName } from "./harness.js";

forEachBackend("SIGTERM", (server) => {
  test("a worker process hands back unfinished jobs on SIGTERM", async () => {
    const c = server().admin;
    const queue = queueName("sigterm");
    const [short, long] = await c.enqueueBatch([
      { queue, kind: "sleep", payload: { ms: 800 } },
      { queue, kind: "sleep", payload: { ms: 60_000 } },
    ]);
    const child = spawn(process.execPath, [join(PKG_DIR, "examples/worker.mjs")], {
      cwd: PKG_DIR,
      env: {
        ...process.env,
        TETHER_URL: server().url,
        TETHER_KEY: server().key,
        QUEUE: queue,
        CONCURRENCY: "4",
        CLAIM_WAIT_MS: "500",
        LEASE_TTL_MS: "3000",
        SHUTDOWN_GRACE_MS: "1500",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      // Their handlers, not only their claim: a claim whose answer the signal beats hands its jobs straight back.
      await eventually("both handlers running", async () => output.includes("sleeping 800 ms") && output.includes("sleeping 60000 ms"));
      child.kill("SIGTERM");
      const code = await Promise.race([exited, new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 10_000))]);
      assert.equal(code, 0, `the worker exits 0 after the drain; its output:\n${output}`);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    assert.match(output, /worker drained; bye/);
    const s = await c.get(short!.job.id);
    assert.equal(s.state, "succeeded", "the short job finished within the grace");
    assert.deepEqual(s.result, { slept: 800 });
    const l = await c.get(long!.job.id);
    assert.equal(l.state, "queued", "the long job is queued again");
    assert.equal(l.attempt, 0, "its attempt was given back");
    const events = [];
    for await (const e of c.eventsAll(long!.job.id)) events.push(e.event);
    assert.deepEqual(events, ["enqueued", "claimed", "snoozed"]);
    // Nothing else was claimed after the signal.
    const q = await c.getQueue(queue);
    assert.equal(q.counts.running, 0);
  });
});
