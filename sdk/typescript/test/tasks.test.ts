// Typed tasks against a real server on each backend: a task's defaults
// shape its enqueues (each call may override them), a worker runs its
// handler on the payload its validator answers, a payload the validator
// refuses fails the job for good with the validator's message, and
// waitResult answers the handler's result or throws JobNotSucceeded.
// (test/task-types.ts checks the types.)

import { test } from "node:test";
import assert from "node:assert/strict";
import { defineTask, JobNotSucceeded, Worker } from "../src/index.js";
import { forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

interface EmailIn {
  to: string;
  subject: string;
}
interface EmailOut {
  messageId: string;
  attempt: number;
}

/** A validator in the manner of a schema library's `parse`: answers the payload, with defaults, or throws. */
function parseEmail(x: unknown): EmailIn {
  const p = x as { to?: unknown; subject?: unknown } | null;
  if (typeof p?.to !== "string" || !p.to.includes("@")) throw new TypeError(`to: expected an email address, got ${JSON.stringify(p?.to)}`);
  return { to: p.to, subject: typeof p.subject === "string" ? p.subject : "(no subject)" };
}

forEachBackend("tasks", (server) => {
  test("a task's queue and defaults shape its enqueues; each call overrides them", async () => {
    const c = server().admin;
    const queue = queueName("emails");
    const task = defineTask<EmailIn, EmailOut>({ kind: "send-email", queue, maxAttempts: 5, timeoutMs: 60_000, priority: 3, tags: ["mail"] });
    const job = await c.enqueueTask(task, { to: "ada@example.com", subject: "hi" });
    assert.equal(job.queue, queue);
    assert.equal(job.kind, "send-email");
    assert.deepEqual(job.payload, { to: "ada@example.com", subject: "hi" });
    assert.equal(job.max_attempts, 5);
    assert.equal(job.timeout_ms, 60_000);
    assert.equal(job.priority, 3);
    assert.deepEqual(job.tags, ["mail"]);
    assert.equal(job.state, "queued");

    const other = queueName("urgent");
    const before = Date.now();
    const custom = await c.enqueueTask(
      task,
      { to: "bob@example.com", subject: "later" },
      { queue: other, maxAttempts: 2, timeoutMs: undefined, delayMs: 60_000, tags: ["vip"], idempotencyKey: queueName("idem"), concurrencyKey: "bob" },
    );
    assert.equal(custom.queue, other);
    assert.equal(custom.max_attempts, 2);
    assert.equal(custom.timeout_ms, 60_000, "an option given as undefined keeps the default");
    assert.deepEqual(custom.tags, ["vip"]);
    assert.equal(custom.concurrency_key, "bob");
    assert.ok(Date.parse(custom.run_at) - before >= 59_000, "delayed");
    const again = await c.enqueueTask(task, { to: "bob@example.com", subject: "later" }, { queue: other, idempotencyKey: custom.idempotency_key! });
    assert.equal(again.id, custom.id, "the idempotency key answers the first job");

    // request(): the wire's enqueue request, for a batch (and the dependencies it names).
    const [a, b] = await c.enqueueBatch([task.request({ to: "c@example.com", subject: "1" }), task.request({ to: "d@example.com", subject: "2" }, { dependsOn: [job], runAt: new Date(Date.now() + 3_600_000) })]);
    assert.equal(a!.job.max_attempts, 5);
    assert.deepEqual(b!.job.depends_on, [job.id]);
    assert.equal(b!.job.state, "waiting");
  });

  test("a worker runs a task's handler on its validated payload, and waitResult answers the result", async () => {
    const c = server().admin;
    const queue = queueName("emails");
    const task = defineTask<EmailIn, EmailOut>({ kind: "send-email", queue, validate: parseEmail });
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 300, handleSignals: false, logger });
    const seen: Array<{ payload: EmailIn; jobId: string }> = [];
    worker.handle(task, async (payload, ctx) => {
      seen.push({ payload, jobId: ctx.job.id });
      return { messageId: `<${payload.subject}@${payload.to}>`, attempt: ctx.job.attempt };
    });
    startWorker(worker);
    const job = await c.enqueueTask(task, { to: "ada@example.com" } as EmailIn);
    const out = await c.waitResult(job, { timeoutMs: 20_000 });
    assert.deepEqual(out, { messageId: "<(no subject)@ada@example.com>", attempt: 1 });
    assert.deepEqual(seen, [{ payload: { to: "ada@example.com", subject: "(no subject)" }, jobId: job.id }], "the handler got what validate answered");
    // The untyped API sees the same job.
    assert.deepEqual((await c.get(job.id)).result, out);
  });

  test("a payload the validator refuses fails the job for good with its message; the handler never runs", async () => {
    const c = server().admin;
    const queue = queueName("emails");
    const task = defineTask<EmailIn, EmailOut>({ kind: "send-email", queue, maxAttempts: 5, validate: parseEmail });
    const mem = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 300, handleSignals: false, logger: mem.logger });
    let ran = 0;
    worker.handle(task, (payload) => {
      ran++;
      return { messageId: payload.to, attempt: 0 };
    });
    startWorker(worker);
    // A producer that bypassed the types (an older one, another language).
    const job = await c.enqueue({ queue, kind: "send-email", payload: { to: 42 } });
    const failed = await c.wait(job.id, { timeoutMs: 20_000 });
    assert.equal(failed.state, "failed");
    assert.equal(failed.attempt, 1, "not retried: it would be refused again");
    assert.equal(failed.last_error, "the payload of task send-email was refused by its validate: to: expected an email address, got 42");
    assert.equal(ran, 0);
    assert.ok(mem.lines.some((l) => l.startsWith("error job failed for good (fatal)") && l.includes(job.id)), mem.lines.join("\n"));
    await assert.rejects(c.waitResult(job), (e: unknown) => {
      assert.ok(e instanceof JobNotSucceeded);
      assert.equal(e.job.state, "failed");
      assert.match(e.message, new RegExp(`^job ${job.id} \\(send-email\\) failed: the payload of task send-email was refused`));
      return true;
    });
  });

  test("waitResult throws JobNotSucceeded for a cancelled job and for one unfinished when the wait runs out", async () => {
    const c = server().admin;
    const queue = queueName();
    const task = defineTask<{ n: number }, number>({ kind: "count", queue });
    const waiting = await c.enqueueTask(task, { n: 1 });
    await assert.rejects(c.waitResult(waiting, { timeoutMs: 200 }), (e: unknown) => e instanceof JobNotSucceeded && e.job.state === "queued" && /has not finished after 200 ms \(it is queued\)/.test(e.message));
    await c.cancel(waiting.id);
    await assert.rejects(c.waitResult(waiting, { timeoutMs: 1_000 }), (e: unknown) => e instanceof JobNotSucceeded && e.job.state === "cancelled" && /was cancelled$/.test(e.message));
  });

  test("a task whose queue the worker does not work is served all the same, with a warning", async () => {
    const c = server().admin;
    const [worked, elsewhere] = [queueName("worked"), queueName("elsewhere")];
    const task = defineTask<{ n: number }, number>({ kind: "double", queue: elsewhere });
    const mem = memoryLogger();
    const worker = new Worker(c, { queue: worked, claimWaitMs: 300, handleSignals: false, logger: mem.logger });
    worker.handle(task, ({ n }) => n * 2);
    assert.ok(mem.lines.some((l) => l.startsWith(`warn task double goes to queue ${elsewhere}, which this worker does not work`)), mem.lines.join("\n"));
    startWorker(worker);
    const job = await c.enqueueTask(task, { n: 21 }, { queue: worked });
    assert.equal(await c.waitResult(job, { timeoutMs: 20_000 }), 42);
  });
});
