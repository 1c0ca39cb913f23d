// Waiting for a result against a real server on each backend: `wait`
// answers as soon as a claim and a complete (or a worker) finish the job,
// and answers the unfinished job when its time is up; `waitWorkflow` does
// the same for a workflow; `enqueueAndWait` enqueues and waits.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client, InvalidArgument, NotFound, Worker, WorkflowBuilder } from "../src/index.js";
import { forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

/** A client of the server that counts its requests to `GET /v1/jobs/{id}` and `/v1/workflows/{id}`. */
function counting(url: string, key: string): { client: Client; reads: string[] } {
  const reads: string[] = [];
  const f: typeof fetch = (input, init) => {
    const u = new URL(input instanceof Request ? input.url : String(input));
    if (/^\/v1\/(jobs|workflows)\/[^/]+$/.test(u.pathname) && (init?.method ?? "GET") === "GET") reads.push(u.search);
    return fetch(input, init);
  };
  return { client: new Client({ url, key, fetch: f }), reads };
}

forEachBackend("wait", (server) => {
  test("wait answers as soon as a claim and a complete finish the job", async () => {
    const { client: c, reads } = counting(server().url, server().key);
    const queue = queueName();
    const job = await c.enqueue({ queue, kind: "k" });
    let settled = false;
    // Far longer than any stall of the host: answering within a fifth of it
    // can only be the job's end (and a wait run out would have read twice).
    const waiting = c.wait(job.id, { timeoutMs: 600_000 }).finally(() => (settled = true));
    // Let the wait reach the server and park there.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(settled, false, "an unfinished job's wait does not answer at once");
    const [claimed] = await c.claim(queue, { worker_id: "waiter-test" });
    assert.equal(claimed!.id, job.id);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(settled, false, "a running job's wait goes on");
    const completedAt = Date.now();
    await c.complete(job.id, { lease_token: claimed!.lease_token, result: { answer: 42 } });
    const done = await waiting;
    assert.ok(Date.now() - completedAt < 120_000, `answered ${Date.now() - completedAt} ms after the complete`);
    assert.equal(done.state, "succeeded");
    assert.deepEqual(done.result, { answer: 42 });
    assert.equal(reads.length, 1, `one read held by the server: ${reads.join(" ")}`);
    assert.equal(reads[0], "?wait_ms=30000");

    // A finished job answers at once; a failed one is finished too.
    const t0 = Date.now();
    assert.equal((await c.wait(job.id, { timeoutMs: 600_000 })).state, "succeeded");
    assert.ok(Date.now() - t0 < 120_000);
    const dead = await c.enqueue({ queue, kind: "k", max_attempts: 1 });
    const [cl] = await c.claim(queue, { worker_id: "waiter-test" });
    await c.fail(dead.id, { lease_token: cl!.lease_token, error: "boom", fatal: true });
    const failed = await c.wait(dead.id, { timeoutMs: 600_000 });
    assert.deepEqual([failed.state, failed.last_error], ["failed", "boom"]);
  });

  test("a wait that runs out answers the unfinished job", async () => {
    const { client: c, reads } = counting(server().url, server().key);
    const queue = queueName();
    const job = await c.enqueue({ queue, kind: "k" });
    const t0 = Date.now();
    const still = await c.wait(job.id, { timeoutMs: 800 });
    const took = Date.now() - t0;
    assert.equal(still.state, "queued");
    assert.equal(still.id, job.id);
    assert.ok(took >= 700, `waited only ${took} ms`);
    assert.ok(took < 120_000, `waited ${took} ms`);
    assert.ok(reads.length >= 1 && reads.length <= 3, `reads: ${reads.join(" ")}`);
    assert.equal(reads[0], "?wait_ms=800");

    // timeoutMs 0: one read, no wait.
    reads.length = 0;
    const t1 = Date.now();
    assert.equal((await c.wait(job.id, { timeoutMs: 0 })).state, "queued");
    assert.ok(Date.now() - t1 < 25_000, "one read answered at once, not held for a wait");
    assert.deepEqual(reads, ["?wait_ms=0"]);

    await assert.rejects(c.wait(randomUUID(), { timeoutMs: 100 }), NotFound);
    await assert.rejects(c.wait(job.id, { timeoutMs: -1 }), RangeError);
    await assert.rejects(c.request("GET", `/v1/jobs/${job.id}`, { query: { wait_ms: 30_001 } }), InvalidArgument);
  });

  test("a signal ends a wait", async () => {
    const c = server().admin;
    const job = await c.enqueue({ queue: queueName(), kind: "k" });
    const ac = new AbortController();
    const t0 = Date.now();
    setTimeout(() => ac.abort(new Error("enough")), 300);
    await assert.rejects(c.wait(job.id, { timeoutMs: 600_000, signal: ac.signal }), /enough/);
    assert.ok(Date.now() - t0 < 120_000);
  });

  test("enqueueAndWait answers the result a worker returned", async () => {
    const c = server().admin;
    const queue = queueName();
    const w = new Worker(c, { queue, claimWaitMs: 500, handleSignals: false, logger: memoryLogger().logger });
    w.handle("double", (job) => ({ doubled: (job.payload as { n: number }).n * 2 }));
    startWorker(w);
    const job = await c.enqueueAndWait({ queue, kind: "double", payload: { n: 21 } }, { timeoutMs: 600_000 });
    assert.equal(job.state, "succeeded");
    assert.deepEqual(job.result, { doubled: 42 });
  });

  test("waitWorkflow answers once every job has finished, or the running workflow when time is up", async () => {
    const c = server().admin;
    const queue = queueName();
    const wf = new WorkflowBuilder(queueName("wf"));
    const a = wf.add({ queue, kind: "step", payload: 1 });
    wf.add({ queue, kind: "step", payload: 2, after: [a] });
    const done = await c.enqueueWorkflow(wf);

    const t0 = Date.now();
    const running = await c.waitWorkflow(done.workflowId, { timeoutMs: 600 });
    assert.equal(running.state, "running");
    assert.ok(Date.now() - t0 >= 500);
    assert.equal(running.jobs.length, 2);

    const w = new Worker(c, { queue, claimWaitMs: 500, handleSignals: false, logger: memoryLogger().logger });
    w.handle("step", (job) => job.payload);
    const waiting = c.waitWorkflow(done.workflowId, { timeoutMs: 600_000 });
    startWorker(w);
    const finished = await waiting;
    assert.equal(finished.state, "succeeded");
    assert.deepEqual(finished.jobs.map((j) => j.state), ["succeeded", "succeeded"]);
    assert.ok(finished.finished_at);
    await assert.rejects(c.waitWorkflow(randomUUID(), { timeoutMs: 100 }), NotFound);
  });
});
