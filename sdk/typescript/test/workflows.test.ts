// Workflows against a real server on each backend: a graph written with
// WorkflowBuilder runs to `succeeded` and reads back whole; its idempotency
// key answers the first workflow; a failure fails it and a retry runs it
// again; cancel and the state filter; a handler that adds jobs to its own
// workflow. And what the builder refuses before any request.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import {
  Client,
  EnqueuedWorkflow,
  Fatal,
  InvalidArgument,
  InvalidState,
  MAX_WORKFLOW_ENTRIES,
  NotFound,
  Worker,
  WorkflowBuilder,
  type BatchEnqueueRequest,
  type Job,
  type WorkflowResponse,
  type WorkflowState,
  type WorkflowStep,
} from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

function unique(prefix = "wf"): string {
  return `${prefix}-${randomBytes(6).toString("hex")}`;
}

async function ended(c: Client, id: string, state: WorkflowState): Promise<WorkflowResponse> {
  return eventually(
    `workflow ${id} to be ${state}`,
    async () => {
      const w = await c.getWorkflow(id);
      return w.state === state ? w : undefined;
    },
    20_000,
  );
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

async function history(c: Client, id: string): Promise<string[]> {
  return (await collect(c.eventsAll(id))).map((e) => e.event);
}

function worker(c: Client, queue: string): Worker {
  return new Worker(c, { queue, concurrency: 4, claimWaitMs: 500, handleSignals: false, logger: memoryLogger().logger });
}

forEachBackend("workflows", (server) => {
  test("a diamond built with WorkflowBuilder runs to succeeded and reads back whole", async () => {
    const c = server().admin;
    const queue = queueName();
    const name = unique();
    const wf = new WorkflowBuilder(name);
    const top = wf.add({ queue, kind: "step", payload: "top" });
    const left = wf.add({ queue, kind: "step", payload: "left", after: [top] });
    const right = wf.add({ queue, kind: "step", payload: "right", after: [top] });
    const bottom = wf.add({ queue, kind: "join", after: [left, right] });
    assert.equal(wf.size, 4);
    assert.deepEqual(wf.entries, [top, left, right, bottom]);
    const done = await c.enqueueWorkflow(wf);
    assert.ok(done instanceof EnqueuedWorkflow && done.created);
    assert.deepEqual(
      wf.entries.map((e) => done.job(e).state),
      ["queued", "waiting", "waiting", "waiting"],
    );
    assert.deepEqual(done.job(left).depends_on, [done.job(top).id]);
    assert.deepEqual(done.job(bottom).depends_on, [done.job(left).id, done.job(right).id]);
    assert.deepEqual(new Set(done.jobs.map((j) => j.workflow_id)), new Set([done.workflowId]));

    const w = worker(c, queue);
    const seen = new Set<string | null>();
    w.handle("step", (job) => {
      seen.add(job.workflow_id);
      return job.payload;
    });
    w.handle("join", async (_job, ctx) => (await ctx.dependencies()).map((d) => d.result).sort());
    const run = startWorker(w);
    const detail = await ended(c, done.workflowId, "succeeded");
    w.shutdown();
    await run;
    assert.deepEqual([...seen], [done.workflowId]);
    assert.deepEqual([detail.id, detail.name, detail.idempotency_key], [done.workflowId, name, null]);
    assert.ok(detail.finished_at && detail.created_at);
    assert.deepEqual([detail.counts.succeeded, detail.counts.waiting, detail.counts.failed], [4, 0, 0]);
    assert.deepEqual(
      detail.jobs,
      wf.entries.map((e) => ({ id: done.job(e).id, kind: e.kind, state: "succeeded", depends_on: done.job(e).depends_on })),
    );
    assert.deepEqual((await c.get(done.job(bottom).id)).result, ["left", "right"]);
    const listed = await collect(c.listAll({ workflow_id: done.workflowId }));
    assert.deepEqual(new Set(listed.map((j) => j.id)), new Set(done.jobs.map((j) => j.id)));
    const [summary, ...more] = await collect(c.listWorkflowsAll({ name }));
    assert.deepEqual(more, []);
    assert.deepEqual(
      [summary!.id, summary!.state, summary!.counts.succeeded, summary!.finished_at],
      [done.workflowId, "succeeded", 4, detail.finished_at],
    );
    assert.equal("jobs" in summary!, false);
  });

  test("the idempotency key answers the first workflow and writes nothing", async () => {
    const c = server().admin;
    const queue = queueName();
    const name = unique();
    const key = unique("key");
    const existing = await c.enqueue({ queue, kind: "before" });
    const build = () => {
      const wf = new WorkflowBuilder(name, { idempotency_key: key });
      const a = wf.add({ queue, kind: "a", payload: { n: 1 } });
      // An existing job (a Job or its id) and an entry: depends_on lists the existing jobs first.
      const b = wf.add({ queue, kind: "b", after: [a, existing] });
      return { wf, a, b };
    };
    const one = build();
    const first = await c.enqueueWorkflow(one.wf);
    assert.ok(first.created);
    assert.deepEqual(first.job(one.b).depends_on, [existing.id, first.job(one.a).id]);
    const two = build();
    const again = await c.enqueueWorkflow(two.wf);
    assert.equal(again.created, false);
    assert.equal(again.workflowId, first.workflowId);
    assert.deepEqual(again.results.map((r) => r.created), [false, false]);
    assert.deepEqual([again.job(two.a).id, again.job(two.b).id], [first.job(one.a).id, first.job(one.b).id]);
    assert.equal((await collect(c.listAll({ queue }))).length, 3, "nothing more was written");
    assert.deepEqual((await collect(c.listWorkflowsAll({ name }))).map((w) => w.id), [first.workflowId]);
    assert.equal((await c.getWorkflow(first.workflowId)).idempotency_key, key);

    // The key used for another graph: the first workflow is answered, and its jobs are not this builder's.
    const other = new WorkflowBuilder(name, { idempotency_key: key });
    const x = other.add({ queue, kind: "something-else" });
    const answer = await c.enqueueWorkflow(other);
    assert.equal(answer.workflowId, first.workflowId);
    assert.equal(answer.created, false);
    assert.deepEqual(answer.jobs.map((j) => j.id), [first.job(one.a).id, first.job(one.b).id]);
    assert.throws(() => answer.job(x), /idempotency key/);
    assert.throws(() => first.job(x), /not an entry/);
  });

  test("a failure fails the workflow and a retry runs it again", async () => {
    const c = server().admin;
    const queue = queueName();
    const wf = new WorkflowBuilder(unique());
    const flaky = wf.add({ queue, kind: "flaky" });
    const middle = wf.add({ queue, kind: "step", after: [flaky] });
    const last = wf.add({ queue, kind: "step", after: [middle] });
    const side = wf.add({ queue, kind: "step" }); // not downstream: left alone by the retries
    const done = await c.enqueueWorkflow(wf);
    let fixed = false;
    const w = worker(c, queue);
    w.handle("flaky", () => {
      if (!fixed) throw new Fatal("not yet");
      return "fixed";
    });
    w.handle("step", () => "ok");
    const run = startWorker(w);
    let detail = await ended(c, done.workflowId, "failed");
    const states = new Map(detail.jobs.map((j) => [j.id, j.state]));
    assert.deepEqual(
      wf.entries.map((e) => states.get(done.job(e).id)),
      ["failed", "cancelled", "cancelled", "succeeded"],
    );
    assert.deepEqual([detail.counts.failed, detail.counts.cancelled, detail.counts.succeeded], [1, 2, 1]);
    assert.ok(detail.finished_at);

    // `failed`: only the failed job goes back (and fails again).
    assert.deepEqual(await c.retryWorkflow(done.workflowId, { mode: "failed" }), { replayed: 1 });
    await eventually("the flaky job to fail again", async () => (await history(c, done.job(flaky).id)).filter((e) => e === "failed").length === 2, 20_000);
    await ended(c, done.workflowId, "failed");
    assert.equal((await c.get(done.job(middle).id)).state, "cancelled");

    // `failed_and_downstream`: what its failure cancelled waits for it again.
    fixed = true;
    assert.deepEqual(await c.retryWorkflow(done.workflowId, { mode: "failed_and_downstream" }), { replayed: 3 });
    detail = await ended(c, done.workflowId, "succeeded");
    w.shutdown();
    await run;
    assert.equal(detail.counts.succeeded, 4);
    assert.equal((await c.get(done.job(flaky).id)).result, "fixed");
    assert.equal((await history(c, done.job(last).id)).filter((e) => e === "replayed").length, 1);
    // Its own events (it may also carry the first run's `workflow_finished`).
    const own = (await history(c, done.job(side).id)).filter((e) => !e.startsWith("workflow_"));
    assert.deepEqual(own, ["enqueued", "claimed", "succeeded"]);
    await assert.rejects(c.retryWorkflow(done.workflowId, { mode: "everything" as "failed" }), InvalidArgument);
  });

  test("cancel ends every unfinished job, and a finished workflow takes no more", async () => {
    const c = server().admin;
    const queue = queueName();
    const wf = new WorkflowBuilder(unique());
    const first = wf.add({ queue, kind: "a", priority: 10 });
    wf.add({ queue, kind: "b", after: [first] });
    wf.add({ queue, kind: "c" });
    const done = await c.enqueueWorkflow(wf);
    const [claimed] = await c.claim(queue, { worker_id: "t", limit: 1 });
    assert.equal(claimed!.id, done.job(first).id);
    assert.equal(claimed!.workflow_id, done.workflowId);

    assert.deepEqual(await c.cancelWorkflow(done.workflowId), { cancelled: 2, cancel_requested: 1 });
    assert.equal((await c.get(claimed!.id)).cancel_requested, true);
    assert.equal((await c.getWorkflow(done.workflowId)).state, "running");
    await c.fail(claimed!.id, { lease_token: claimed!.lease_token, error: "stopped", cancelled: true });
    const detail = await c.getWorkflow(done.workflowId);
    assert.equal(detail.state, "cancelled");
    assert.equal(detail.counts.cancelled, 3);
    assert.deepEqual(await c.cancelWorkflow(done.workflowId), { cancelled: 0, cancel_requested: 0 });

    // A finished workflow takes no more jobs; an unknown one is a bad argument.
    await assert.rejects(c.enqueue({ queue, kind: "late", workflow_id: done.workflowId }), InvalidState);
    await assert.rejects(c.enqueue({ queue, kind: "late", workflow_id: randomUUID() }), (e) => e instanceof InvalidArgument && /workflow_id/.test(e.message));
    await assert.rejects(c.getWorkflow(randomUUID()), NotFound);
    await assert.rejects(c.cancelWorkflow(randomUUID()), NotFound);
    await assert.rejects(c.retryWorkflow(randomUUID(), { mode: "failed" }), NotFound);
  });

  test("workflows are listed newest first, page by page and by state", async () => {
    const c = server().admin;
    const queue = queueName();
    const name = unique();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const wf = new WorkflowBuilder(name);
      wf.add({ queue, kind: "k", payload: i });
      ids.push((await c.enqueueWorkflow(wf)).workflowId);
    }
    await c.cancelWorkflow(ids[1]!);
    const newestFirst = [...ids].reverse();
    assert.deepEqual((await collect(c.listWorkflowsAll({ name }))).map((w) => w.id), newestFirst);
    assert.deepEqual((await collect(c.listWorkflowsAll({ name, limit: 1 }))).map((w) => w.id), newestFirst);
    const page = await c.listWorkflows({ name, limit: 2 });
    assert.deepEqual(page.workflows.map((w) => w.id), [ids[2], ids[1]]);
    assert.ok(page.next_cursor);
    const rest = await c.listWorkflows({ name, limit: 2, cursor: page.next_cursor });
    assert.deepEqual(rest.workflows.map((w) => w.id), [ids[0]]);
    assert.deepEqual((await collect(c.listWorkflowsAll({ name, state: "running" }))).map((w) => w.id), [ids[2], ids[0]]);
    const cancelled = await collect(c.listWorkflowsAll({ name, state: "cancelled" }));
    assert.deepEqual(
      cancelled.map((w) => [w.id, w.state, w.counts.cancelled]),
      [[ids[1], "cancelled", 1]],
    );
    assert.deepEqual(await collect(c.listWorkflowsAll({ name, state: "succeeded" })), []);
    await assert.rejects(c.listWorkflows({ state: "sleeping" as WorkflowState }), InvalidArgument);
  });

  test("a handler adds jobs to its own workflow with job.workflow_id", async () => {
    const c = server().admin;
    const queue = queueName();
    const wf = new WorkflowBuilder(unique());
    const root = wf.add({ queue, kind: "split", payload: 3 });
    const done = await c.enqueueWorkflow(wf);
    const w = worker(c, queue);
    w.handle("split", async (job) => {
      const parts: Job[] = [];
      for (let i = 0; i < (job.payload as number); i++) {
        parts.push(await c.enqueue({ queue, kind: "part", payload: i, workflow_id: job.workflow_id }));
      }
      const sum = await c.enqueue({ queue, kind: "sum", workflow_id: job.workflow_id, depends_on: [job.id, ...parts.map((p) => p.id)] });
      return { sum: sum.id };
    });
    w.handle("part", (job) => (job.payload as number) * 10);
    w.handle("sum", async (_job, ctx) =>
      (await ctx.dependencies()).filter((d) => d.kind === "part").reduce((n, d) => n + (d.result as number), 0),
    );
    const run = startWorker(w);
    const detail = await ended(c, done.workflowId, "succeeded");
    w.shutdown();
    await run;
    assert.deepEqual(detail.jobs.map((j) => j.kind), ["split", "part", "part", "part", "sum"]);
    assert.equal(detail.counts.succeeded, 5);
    const sumId = ((await c.get(done.job(root).id)).result as { sum: string }).sum;
    const sum = await c.get(sumId);
    assert.equal(sum.result, 30);
    assert.equal(sum.workflow_id, done.workflowId);
    assert.equal(detail.jobs.at(-1)!.depends_on[0], done.job(root).id);
  });

  test("a builder of 1000 entries is one batch", async () => {
    const c = server().admin;
    const queue = queueName();
    const wf = new WorkflowBuilder(unique());
    const entries = Array.from({ length: MAX_WORKFLOW_ENTRIES }, (_, i) => wf.add({ queue, kind: "n", payload: i }));
    const done = await c.enqueueWorkflow(wf);
    assert.ok(done.created);
    assert.equal(done.job(entries.at(-1)!).payload, 999);
    assert.equal((await c.getWorkflow(done.workflowId)).counts.queued, 1000);
    await c.cancelWorkflow(done.workflowId);
  });
});

test("the builder refuses what the server would, before any request", async () => {
  const wf = new WorkflowBuilder("w", { idempotency_key: "k" });
  const a = wf.add({ queue: "q", kind: "a" });
  const existing = randomUUID();
  const b = wf.add({ queue: "q", kind: "b", payload: { x: 1 }, after: [a, existing], dependency_failure: "run", tags: ["t"] });
  assert.deepEqual([a.index, b.index, b.queue, b.kind], [0, 1, "q", "b"]);
  const body: BatchEnqueueRequest = wf.toRequest();
  assert.deepEqual(body.workflow, { name: "w", idempotency_key: "k" });
  assert.deepEqual(body.jobs[1], {
    queue: "q",
    kind: "b",
    payload: { x: 1 },
    tags: ["t"],
    dependency_failure: "run",
    depends_on: [existing],
    depends_on_entries: [0],
  });
  assert.deepEqual(new WorkflowBuilder("plain").toRequest(), { jobs: [], workflow: { name: "plain" } });
  assert.throws(() => new WorkflowBuilder("other").add({ queue: "q", kind: "c", after: [a] }), /another WorkflowBuilder/);
  // @ts-expect-error: a step names its dependencies with `after`
  assert.throws(() => wf.add({ queue: "q", kind: "c", depends_on: [existing] }), /after/);
  // @ts-expect-error: the batch makes the workflow
  assert.throws(() => wf.add({ queue: "q", kind: "c", workflow_id: randomUUID() }), /after/);
  // @ts-expect-error: entries, ids and jobs only
  assert.throws(() => wf.add({ queue: "q", kind: "c", after: [1] }), TypeError);
  const step: WorkflowStep = { queue: "q", kind: "typed", after: [a, existing] };
  assert.equal(wf.add(step).index, 2);

  const big = new WorkflowBuilder("big");
  for (let i = 0; i < MAX_WORKFLOW_ENTRIES; i++) big.add({ queue: "q", kind: "n" });
  assert.throws(() => big.add({ queue: "q", kind: "one-too-many" }), (e) => e instanceof RangeError && /1000/.test(e.message));
  assert.equal(big.size, 1000);

  // Nothing listens here: the refusals come before any request.
  const c = new Client({ url: "http://127.0.0.1:9", key: "none", retries: 0 });
  await assert.rejects(c.enqueueWorkflow(new WorkflowBuilder("empty")), (e) => e instanceof RangeError && /no jobs/.test(e.message));
});
