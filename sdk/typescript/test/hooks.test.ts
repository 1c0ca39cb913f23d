// Hooks around handlers against a real server on each backend: before,
// after and onError hooks run in registration order around every handler,
// in the handler's own async context (AsyncLocalStorage, ctx.locals); a
// throwing before fails the job as the handler would have (onError and
// after still run); what an after or onError hook throws is logged and
// changes nothing; after is told every kind of outcome.

import { test } from "node:test";
import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { Fatal, JobAborted, RetryAfter, Snooze, Worker, type JobContext, type JobOutcome } from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

forEachBackend("hooks", (server) => {
  test("hooks run in order around the handler, in its own async context", async () => {
    const c = server().admin;
    const queue = queueName();
    const als = new AsyncLocalStorage<string>();
    const seen = new Map<string, { order: string[]; inHandler: unknown; inAfter: unknown; outcome?: JobOutcome }>();
    const errors: unknown[] = [];
    const worker = new Worker(c, { queue, concurrency: 4, claimWaitMs: 200, handleSignals: false })
      .before((ctx) => {
        // Entered in a plain hook: the handler's store, and this job's alone (four start at once, from one
        // claim: a job that enters none sees none).
        if ((ctx.job.payload as number) % 2 === 1) als.enterWith(ctx.job.id);
        seen.set(ctx.job.id, { order: ["before 1"], inHandler: undefined, inAfter: undefined });
        ctx.locals.startedAt = Date.now();
      })
      .before(async (ctx) => {
        seen.get(ctx.job.id)!.order.push("before 2");
        await new Promise((r) => setTimeout(r, 20));
      })
      .after(async (ctx, outcome) => {
        const s = seen.get(ctx.job.id)!;
        await new Promise((r) => setTimeout(r, 5));
        s.order.push("after 1");
        s.inAfter = als.getStore();
        s.outcome = outcome;
      })
      .after((ctx) => void seen.get(ctx.job.id)!.order.push("after 2"))
      .onError((_ctx, e) => void errors.push(e));
    worker.handle("k", async (job, ctx: JobContext) => {
      const s = seen.get(job.id)!;
      s.order.push("handler");
      s.inHandler = als.getStore();
      assert.equal(typeof ctx.locals.startedAt, "number", "what a before hook put in ctx.locals");
      await new Promise((r) => setTimeout(r, 30));
      return { n: job.payload as number, store: als.getStore() ?? null };
    });
    const jobs = await c.enqueueBatch([1, 2, 3, 4].map((n) => ({ queue, kind: "k", payload: n })));
    void startWorker(worker);
    for (const { job } of jobs) {
      const done = await eventually("the job to succeed", async () => ((await c.get(job.id)).state === "succeeded" ? c.get(job.id) : undefined));
      const store = (job.payload as number) % 2 === 1 ? job.id : null;
      assert.deepEqual(done.result, { n: job.payload, store }, "the store the before hook entered (if it did), in the handler");
      const s = seen.get(job.id)!;
      assert.deepEqual(s.order, ["before 1", "before 2", "handler", "after 1", "after 2"]);
      assert.equal(s.inHandler ?? null, store);
      assert.equal(s.inAfter ?? null, store, "the after hooks run in the handler's context");
      assert.deepEqual(s.outcome, { status: "succeeded", result: { n: job.payload, store } });
    }
    assert.deepEqual(errors, [], "onError runs only for a failed attempt");
    assert.equal(als.getStore(), undefined, "no job's store leaks out of its run");
  });

  test("a before hook that throws fails the job as if the handler had thrown it; onError and after still run", async () => {
    const c = server().admin;
    const queue = queueName();
    let handlerRuns = 0;
    let laterBefores = 0;
    const errors = new Map<string, unknown>();
    const outcomes = new Map<string, JobOutcome>();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 200, handleSignals: false, logger })
      .before((ctx) => {
        if (ctx.job.kind === "refused") throw new Fatal("the tenant is closed");
        throw new TypeError(`no account for ${JSON.stringify(ctx.job.payload)}`);
      })
      .before(() => void (laterBefores += 1))
      .onError((ctx, e) => void errors.set(ctx.job.id, e))
      .after((ctx, outcome) => void outcomes.set(ctx.job.id, outcome));
    const handler = () => {
      handlerRuns += 1;
      return "ran";
    };
    worker.handle("plain", handler).handle("refused", handler);
    const plain = await c.enqueue({ queue, kind: "plain", payload: "ada", max_attempts: 1 });
    const refused = await c.enqueue({ queue, kind: "refused", max_attempts: 5 });
    void startWorker(worker);
    const failedPlain = await eventually("the job to fail", async () => ((await c.get(plain.id)).state === "failed" ? c.get(plain.id) : undefined));
    const failedRefused = await eventually("the job to fail", async () => ((await c.get(refused.id)).state === "failed" ? c.get(refused.id) : undefined));
    assert.match(failedPlain.last_error!, /^TypeError: no account for "ada"\n\s+at /, "the stored error is the thrown one, with its stack");
    assert.equal(failedRefused.last_error, "the tenant is closed", "a Fatal from a before hook fails the job for good");
    assert.equal(failedRefused.attempt, 1);
    assert.equal(handlerRuns, 0, "the handler does not run");
    assert.equal(laterBefores, 0, "nor do the later before hooks");
    await eventually("the after hooks", async () => outcomes.size === 2);
    const e = errors.get(plain.id);
    assert.ok(e instanceof TypeError && e.message === 'no account for "ada"');
    assert.deepEqual(outcomes.get(plain.id), { status: "failed", error: e });
    assert.ok(errors.get(refused.id) instanceof Fatal);
    assert.equal(outcomes.get(refused.id)?.status, "failed");
  });

  test("what an after or onError hook throws is logged and changes no outcome", async () => {
    const c = server().admin;
    const queue = queueName();
    const { lines, logger } = memoryLogger();
    const laterAfters: string[] = [];
    const worker = new Worker(c, { queue, claimWaitMs: 200, handleSignals: false, logger })
      .onError(function reportToTracker() {
        throw new Error("the tracker is down");
      })
      .after(async function flushMetrics() {
        await new Promise((r) => setTimeout(r, 1));
        throw new RangeError("the after hook broke");
      })
      .after((ctx) => void laterAfters.push(ctx.job.kind));
    worker.handle("ok", () => ({ fine: true }));
    worker.handle("bad", () => {
      throw new Error("the handler's own error");
    });
    const ok = await c.enqueue({ queue, kind: "ok" });
    const bad = await c.enqueue({ queue, kind: "bad", max_attempts: 1 });
    void startWorker(worker);
    const done = await eventually("the job to succeed", async () => ((await c.get(ok.id)).state === "succeeded" ? c.get(ok.id) : undefined));
    assert.deepEqual(done.result, { fine: true });
    const failed = await eventually("the job to fail", async () => ((await c.get(bad.id)).state === "failed" ? c.get(bad.id) : undefined));
    assert.match(failed.last_error!, /^Error: the handler's own error/, "the handler's error, not a hook's");
    await eventually("the later after hooks", async () => laterAfters.length === 2);
    assert.deepEqual(laterAfters.sort(), ["bad", "ok"], "a hook that threw does not stop the next");
    const afterLines = lines.filter((l) => l.startsWith("error the after hook threw; the job's outcome stands"));
    assert.equal(afterLines.length, 2);
    assert.ok(afterLines.every((l) => l.includes('"hook":"flushMetrics"') && l.includes("the after hook broke")));
    const errorLines = lines.filter((l) => l.startsWith("error the onError hook threw; the job's outcome stands"));
    assert.equal(errorLines.length, 1);
    assert.ok(errorLines[0]!.includes(`"job_id":"${bad.id}"`) && errorLines[0]!.includes('"hook":"reportToTracker"'));
  });

  test("after is told every outcome: retryAfter, snooze, a timeout, a cancel", async () => {
    const c = server().admin;
    const queue = queueName();
    const outcomes = new Map<string, JobOutcome>();
    const errors = new Map<string, unknown>();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, concurrency: 4, claimWaitMs: 200, handleSignals: false, logger })
      .onError((ctx, e) => void errors.set(ctx.job.id, e))
      .after((ctx, outcome) => void outcomes.set(ctx.job.id, outcome));
    const untilAborted = async (_job: unknown, ctx: JobContext) => {
      const signal = ctx.signal;
      if (!signal.aborted) await new Promise((r) => signal.addEventListener("abort", r, { once: true }));
      throw signal.reason;
    };
    worker
      .handle("later", () => {
        throw new RetryAfter(60_000, "the provider said later");
      })
      .handle("busy", () => {
        throw new Snooze(60_000);
      })
      .handle("slow", untilAborted)
      .handle("cancelled", untilAborted);
    const later = await c.enqueue({ queue, kind: "later" });
    const busy = await c.enqueue({ queue, kind: "busy" });
    const slow = await c.enqueue({ queue, kind: "slow", timeout_ms: 300, max_attempts: 1 });
    const cancelled = await c.enqueue({ queue, kind: "cancelled" });
    void startWorker(worker);
    await eventually("the job to run", async () => (await c.get(cancelled.id)).state === "running");
    await c.cancel(cancelled.id);
    await eventually("every after hook", async () => outcomes.size === 4);
    const l = outcomes.get(later.id)!;
    assert.ok(l.status === "retryAfter" && l.delayMs === 60_000 && l.error instanceof RetryAfter);
    assert.equal(errors.get(later.id), l.error, "a RetryAfter is a failed attempt: onError sees it");
    const b = outcomes.get(busy.id)!;
    assert.ok(b.status === "snooze" && b.delayMs === 60_000 && b.error instanceof Snooze);
    assert.ok(!errors.has(busy.id), "a snooze is no failure");
    const s = outcomes.get(slow.id)!;
    assert.ok(s.status === "failed" && s.error instanceof JobAborted && s.error.why === "timeout", `a timeout: ${JSON.stringify(s)}`);
    assert.equal(errors.get(slow.id), s.error);
    const x = outcomes.get(cancelled.id)!;
    assert.ok(x.status === "cancelled" && x.error instanceof JobAborted && x.error.why === "cancel");
    assert.ok(!errors.has(cancelled.id), "a cancel is no failure");
    // The hooks of a run the worker gave up on do not hold up its report: it may come a moment later.
    await eventually("the timed-out job to fail", async () => (await c.get(slow.id)).state === "failed");
    await eventually("the cancel", async () => (await c.get(cancelled.id)).state === "cancelled");
  });
});
