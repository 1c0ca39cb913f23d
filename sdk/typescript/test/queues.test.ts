// One worker for several queues, against a real server on each backend:
// each queue is claimed by its own loop into its own slots (a name list
// gives each `concurrency`, a record each its own), the handlers serve
// every queue by kind, a busy queue never holds back another, and a
// shutdown drains them all.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, JobAborted, Worker, type Job } from "../src/index.js";
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { eventually, forEachBackend, memoryLogger, PKG_DIR, queueName, serverHas, startWorker } from "./harness.js";

/** A gate the handlers wait at until the test opens it. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { opened, open };
}

/** The job once it has finished, or fails the test after 20 s. */
async function finished(c: Client, id: string): Promise<Job> {
  const j = await c.wait(id, { timeoutMs: 20_000 });
  assert.ok(["succeeded", "failed", "cancelled"].includes(j.state), `job ${id} still ${j.state}`);
  return j;
}

forEachBackend("several queues", (server) => {
  test("a list of queues: each gets `concurrency` slots and its own claims, and a busy one holds back no other", async () => {
    const c = server().admin;
    const [busy, other] = [queueName("busy"), queueName("other")];
    const { logger } = memoryLogger();
    const claims: Array<{ queue: string; limit: number }> = [];
    const recording: typeof fetch = (input, init) => {
      const m = /\/v1\/queues\/([^/]+)\/claim$/.exec(new URL(String(input)).pathname);
      if (m) claims.push({ queue: decodeURIComponent(m[1]!), limit: (JSON.parse(String(init?.body)) as { limit: number }).limit });
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: recording });
    const worker = new Worker(wc, { queue: [busy, other], concurrency: 2, claimWaitMs: 300, handleSignals: false, logger });
    assert.deepEqual(worker.queues, { [busy]: 2, [other]: 2 });
    assert.equal(worker.concurrency, 4);
    const g = gate();
    const running = new Map<string, number>();
    const most = new Map<string, number>();
    // One handler per kind, whatever the queue.
    worker.handle("block", async (job) => {
      running.set(job.queue, (running.get(job.queue) ?? 0) + 1);
      most.set(job.queue, Math.max(most.get(job.queue) ?? 0, running.get(job.queue)!));
      await g.opened;
      running.set(job.queue, running.get(job.queue)! - 1);
      return job.queue;
    });
    worker.handle("echo", (job) => ({ queue: job.queue, payload: job.payload }));
    const blocked = await c.enqueueBatch(Array.from({ length: 5 }, () => ({ queue: busy, kind: "block" })));
    startWorker(worker);
    await eventually("two blocked handlers", async () => running.get(busy) === 2);
    // The busy queue's slots are all taken: the other queue's jobs still run at once, by either kind.
    const echo = await c.enqueue({ queue: other, kind: "echo", payload: 1 });
    assert.deepEqual((await finished(c, echo.id)).result, { queue: other, payload: 1 });
    const block = await c.enqueue({ queue: other, kind: "block" });
    await eventually("a blocked handler of the other queue", async () => running.get(other) === 1);
    const echo2 = await c.enqueue({ queue: other, kind: "echo", payload: 2 });
    assert.deepEqual((await finished(c, echo2.id)).result, { queue: other, payload: 2 }, "its second slot is free");
    assert.equal((await c.getQueue(busy)).counts.queued, 3, "the busy queue's other jobs wait for its own slots");
    g.open();
    for (const r of blocked) assert.equal((await finished(c, r.job.id)).result, busy);
    assert.equal((await finished(c, block.id)).result, other);
    assert.equal(most.get(busy), 2, "never more than its 2 slots");
    assert.ok(claims.some((x) => x.queue === busy) && claims.some((x) => x.queue === other), "each queue is claimed");
    assert.ok(claims.every((x) => x.limit >= 1 && x.limit <= 2), `a claim asks at most its queue's free slots: ${JSON.stringify(claims)}`);
  });

  test("a record gives each queue its own concurrency", async () => {
    const c = server().admin;
    const [wide, narrow] = [queueName("wide"), queueName("narrow")];
    const { logger } = memoryLogger();
    const first = new Map<string, number>();
    const recording: typeof fetch = (input, init) => {
      const m = /\/v1\/queues\/([^/]+)\/claim$/.exec(new URL(String(input)).pathname);
      if (m && !first.has(decodeURIComponent(m[1]!))) first.set(decodeURIComponent(m[1]!), (JSON.parse(String(init?.body)) as { limit: number }).limit);
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: recording });
    // `concurrency` applies only to names given as a name or a list: the record's numbers win.
    const worker = new Worker(wc, { queue: { [wide]: 3, [narrow]: 1 }, concurrency: 50, claimWaitMs: 300, handleSignals: false, logger });
    assert.deepEqual(worker.queues, { [wide]: 3, [narrow]: 1 });
    assert.equal(worker.concurrency, 4);
    const g = gate();
    const running = new Map<string, number>();
    const most = new Map<string, number>();
    worker.handle("k", async (job) => {
      running.set(job.queue, (running.get(job.queue) ?? 0) + 1);
      most.set(job.queue, Math.max(most.get(job.queue) ?? 0, running.get(job.queue)!));
      await g.opened;
      running.set(job.queue, running.get(job.queue)! - 1);
    });
    const jobs = await c.enqueueBatch([...Array.from({ length: 4 }, () => ({ queue: wide, kind: "k" })), ...Array.from({ length: 3 }, () => ({ queue: narrow, kind: "k" }))]);
    startWorker(worker);
    await eventually("every slot taken", async () => running.get(wide) === 3 && running.get(narrow) === 1);
    await new Promise((r) => setTimeout(r, 300));
    g.open();
    for (const r of jobs) assert.equal((await finished(c, r.job.id)).state, "succeeded");
    assert.deepEqual([most.get(wide), most.get(narrow)], [3, 1]);
    assert.deepEqual([first.get(wide), first.get(narrow)], [3, 1], "an idle queue claims as many as it has slots");
  });

  test("a shutdown drains every queue: finished within the grace, or handed back", async () => {
    const c = server().admin;
    const queues = [queueName("a"), queueName("b"), queueName("c")];
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue: queues, concurrency: 1, claimWaitMs: 300, shutdownGraceMs: 500, handleSignals: false, logger });
    const aborted: unknown[] = [];
    worker.handle("quick", async () => {
      await new Promise((r) => setTimeout(r, 200));
      return "finished";
    });
    worker.handle("forever", async (_job, ctx) => {
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
      aborted.push(ctx.signal.reason);
      throw ctx.signal.reason;
    });
    const [quick, ...forever] = await c.enqueueBatch([
      { queue: queues[0]!, kind: "quick" },
      { queue: queues[1]!, kind: "forever" },
      { queue: queues[2]!, kind: "forever" },
    ]);
    const run = startWorker(worker);
    await eventually("every queue's job running", async () => (await Promise.all([quick!, ...forever].map((r) => c.get(r.job.id)))).every((j) => j.state === "running"));
    worker.shutdown();
    await run;
    assert.equal((await c.get(quick!.job.id)).state, "succeeded");
    for (const r of forever) {
      const j = await c.get(r.job.id);
      assert.equal(j.state, "queued", "handed back");
      assert.equal(j.attempt, 0, "its attempt given back");
    }
    assert.equal(aborted.length, 2);
    assert.ok(aborted.every((r) => r instanceof JobAborted && r.why === "shutdown"));
    assert.equal(worker.jobsInFlight, 0);
    // Nothing was claimed after the shutdown began.
    for (const q of queues) assert.equal((await c.getQueue(q)).counts.running, 0);
  });

  test("a worker announces its queues, concurrency, SDK and process while it runs, idle or not", async (t) => {
    if (!(await serverHas(server(), "PUT /v1/workers/{worker_id}"))) return t.skip("the server under test predates PUT /v1/workers/{worker_id}");
    const c = server().admin;
    const queues = { [queueName("x")]: 3, [queueName("y")]: 2 };
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue: queues, claimWaitMs: 300, handleSignals: false, logger });
    startWorker(worker);
    const seen = await eventually("the worker listed", async () => (await c.workers()).find((w) => w.worker_id === worker.workerId));
    const pkg = JSON.parse(readFileSync(join(PKG_DIR, "package.json"), "utf8")) as { version: string };
    assert.deepEqual([...seen.queues].sort(), Object.keys(queues).sort());
    assert.equal(seen.concurrency, 5);
    assert.equal(seen.sdk, "typescript");
    assert.equal(seen.version, pkg.version);
    assert.equal(seen.host, hostname());
    assert.equal(seen.pid, process.pid);
    assert.equal(seen.running, 0, "idle, and listed");
    assert.ok(seen.last_seen_at);
  });

  test("a bad set of queues is refused at construction", () => {
    const c = server().admin;
    assert.throws(() => new Worker(c, { queue: [] }), /at least one queue/);
    assert.throws(() => new Worker(c, { queue: {} }), /at least one queue/);
    assert.throws(() => new Worker(c, { queue: ["a", "a"] }), /named twice/);
    assert.throws(() => new Worker(c, { queue: { a: 0 } }), /concurrency of queue a/);
    assert.throws(() => new Worker(c, { queue: "a", concurrency: 1.5 }), RangeError);
    assert.throws(() => new Worker(c, { queue: "" }), RangeError);
  });
});
