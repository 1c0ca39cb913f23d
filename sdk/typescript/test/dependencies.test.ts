// Jobs that wait for other jobs, against a real server on each backend: a
// dependent waits, its dependency's success releases it and its handler
// reads the dependency's result with ctx.dependencies(); a failed
// dependency cancels a `cancel` dependent and releases a `run` one; an
// unknown dependency is InvalidArgument; a batch enqueues a whole graph.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client, Fatal, InvalidArgument, NotFound, Worker, type DependencyJob, type Job } from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

async function history(c: Client, id: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of c.eventsAll(id)) out.push(e.event);
  return out;
}

async function settled(c: Client, id: string, states: Job["state"][]): Promise<Job> {
  return eventually(`job ${id} to be ${states.join("|")}`, async () => {
    const j = await c.get(id);
    return states.includes(j.state) ? j : undefined;
  });
}

forEachBackend("dependencies", (server) => {
  test("a dependent waits, is released by its dependency's success and reads its result", async () => {
    const c = server().admin;
    const queue = queueName();
    const a = await c.enqueue({ queue, kind: "a", payload: 1 });
    assert.deepEqual(a.depends_on, []);
    assert.equal(a.dependency_failure, "cancel");
    const b = await c.enqueue({ queue, kind: "b", depends_on: [a.id] });
    assert.equal(b.state, "waiting");
    assert.deepEqual(b.depends_on, [a.id]);
    assert.equal(b.dependency_failure, "cancel");
    const counts = (await c.getQueue(queue)).counts;
    assert.deepEqual([counts.waiting, counts.queued], [1, 1]);
    assert.deepEqual((await c.list({ depends_on: a.id })).jobs.map((j) => j.id), [b.id]);
    assert.deepEqual((await c.list({ queue, state: "waiting" })).jobs.map((j) => j.id), [b.id]);
    const [dep] = await c.dependencies(b.id);
    assert.deepEqual(dep, { id: a.id, kind: "a", state: "queued", result: null, last_error: null, finished_at: null });
    assert.deepEqual(await c.dependencies(a.id), []);

    // Only A is claimable; its completion releases B in the same transaction.
    const claimed = await c.claim(queue, { worker_id: "t", limit: 10 });
    assert.deepEqual(claimed.map((j) => j.id), [a.id]);
    await c.complete(a.id, { lease_token: claimed[0]!.lease_token, result: { sum: 41 } });
    assert.equal((await c.get(b.id)).state, "queued");
    assert.deepEqual(await history(c, b.id), ["enqueued", "released"]);
    const [done] = await c.dependencies(b.id);
    assert.equal(done!.state, "succeeded");
    assert.deepEqual(done!.result, { sum: 41 });
    assert.ok(done!.finished_at);
  });

  test("a worker's handler reads its dependencies' results with ctx.dependencies()", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, concurrency: 4, claimWaitMs: 500, handleSignals: false, logger });
    const seen = new Map<string, DependencyJob[]>();
    worker.handle("parent", async (job, ctx) => {
      seen.set(job.id, await ctx.dependencies());
      return { n: (job.payload as number) * 10 };
    });
    worker.handle("child", async (job, ctx) => {
      const deps = await ctx.dependencies();
      seen.set(job.id, deps);
      return deps.reduce((sum, d) => sum + (d.result as { n: number }).n, 0);
    });
    const [a, b] = (await c.enqueueBatch([{ queue, kind: "parent", payload: 1 }, { queue, kind: "parent", payload: 2 }])).map((r) => r.job);
    const child = await c.enqueue({ queue, kind: "child", depends_on: [a!.id, b!.id] });
    assert.equal(child.state, "waiting");
    const run = startWorker(worker);
    const finished = await settled(c, child.id, ["succeeded", "failed"]);
    worker.shutdown();
    await run;
    assert.equal(finished.result, 30);
    assert.deepEqual(seen.get(a!.id), [], "a job without dependencies reads none");
    assert.deepEqual(
      seen.get(child.id)!.map((d) => [d.id, d.state, d.result]),
      [
        [a!.id, "succeeded", { n: 10 }],
        [b!.id, "succeeded", { n: 20 }],
      ],
    );
    assert.deepEqual((await history(c, child.id)).slice(0, 3), ["enqueued", "released", "claimed"]);
  });

  test("a failed dependency cancels a `cancel` dependent and releases a `run` one", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, concurrency: 2, claimWaitMs: 500, handleSignals: false, logger });
    const ran: string[] = [];
    worker.handle("parent", () => {
      throw new Fatal("no luck");
    });
    worker.handle("child", async (job, ctx) => {
      ran.push(job.id);
      return (await ctx.dependencies()).map((d) => [d.state, d.last_error]);
    });
    const a = await c.enqueue({ queue, kind: "parent" });
    const cancel = await c.enqueue({ queue, kind: "child", depends_on: [a.id] });
    const grandchild = await c.enqueue({ queue, kind: "child", depends_on: [cancel.id] });
    const run = await c.enqueue({ queue, kind: "child", depends_on: [a.id], dependency_failure: "run" });
    assert.equal(run.dependency_failure, "run");
    const w = startWorker(worker);
    const finished = await settled(c, run.id, ["succeeded", "failed"]);
    worker.shutdown();
    await w;
    assert.deepEqual(finished.result, [["failed", "no luck"]]);
    assert.equal((await c.get(a.id)).state, "failed");
    for (const id of [cancel.id, grandchild.id]) {
      assert.equal((await c.get(id)).state, "cancelled");
      assert.equal((await history(c, id)).at(-1), "cancelled");
    }
    const last = [];
    for await (const e of c.eventsAll(cancel.id)) last.push(e);
    assert.match(String(last.at(-1)!.detail), new RegExp(a.id));
    assert.deepEqual(ran, [run.id]);
    // A dependency failed already applies the rule at enqueue.
    assert.equal((await c.enqueue({ queue, kind: "child", depends_on: [a.id] })).state, "cancelled");
  });

  test("an unknown dependency is InvalidArgument and enqueues nothing", async () => {
    const c = server().admin;
    const queue = queueName();
    await assert.rejects(c.enqueue({ queue, kind: "b", depends_on: [randomUUID()] }), (e) => e instanceof InvalidArgument && /depends_on/.test(e.message));
    await assert.rejects(c.enqueue({ queue, kind: "b", depends_on: ["not-a-uuid"] }), InvalidArgument);
    assert.deepEqual((await c.list({ queue })).jobs, []);
    await assert.rejects(c.dependencies(randomUUID()), NotFound);
  });

  test("a batch enqueues a graph with depends_on_entries", async () => {
    const c = server().admin;
    const queue = queueName();
    const results = await c.enqueueBatch([
      { queue, kind: "thumb", payload: 0 },
      { queue, kind: "thumb", payload: 1 },
      { queue, kind: "publish", depends_on_entries: [0, 1] },
      { queue, kind: "summary", depends_on_entries: [2], dependency_failure: "run" },
    ]);
    const [t0, t1, publish, summary] = results.map((r) => r.job) as [Job, Job, Job, Job];
    assert.deepEqual([t0.state, t1.state, publish.state, summary.state], ["queued", "queued", "waiting", "waiting"]);
    assert.deepEqual(publish.depends_on, [t0.id, t1.id]);
    assert.deepEqual(summary.depends_on, [publish.id]);
    assert.equal(summary.dependency_failure, "run");
    // An entry waits only for earlier entries, so a graph has no cycle.
    await assert.rejects(
      c.enqueueBatch([
        { queue, kind: "a", depends_on_entries: [1] },
        { queue, kind: "b" },
      ]),
      (e) => e instanceof InvalidArgument && /depends_on_entries/.test(e.message),
    );
    let n = 0;
    for await (const _ of c.listAll({ queue })) n++;
    assert.equal(n, 4);
  });
});
