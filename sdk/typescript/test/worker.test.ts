// The Worker against a real server on each backend: outcomes, heartbeats
// beyond the lease TTL, fencing, retry-after vs snooze, cancel (pushed by
// the event stream, or brought by a heartbeat when the stream is down or
// refused) and timeout through ctx.signal, prompt coalesced progress, and
// the graceful shutdown's hand-back.

import { test } from "node:test";
import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { Client, Fatal, JobAborted, LeaseLost, Retry, RetryAfter, Snooze, TooManyRequests, Unauthenticated, Worker, type Job } from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

async function history(c: Client, id: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of c.eventsAll(id)) out.push(e.event);
  return out;
}

/** The lease a job's claim (or last heartbeat) granted, in ms. */
function leaseMs(job: Job): number {
  return Date.parse(job.lease_expires_at!) - Date.parse(job.heartbeat_at!);
}

async function settled(c: Client, id: string, states: Job["state"][], what = "the job to settle", timeoutMs = 10_000): Promise<Job> {
  return eventually(
    `${what} (${states.join("|")})`,
    async () => {
      const j = await c.get(id);
      return states.includes(j.state) ? j : undefined;
    },
    timeoutMs,
  );
}

/** `p`, or a rejection naming `what` after `ms`. */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** A promise and the function that resolves it. */
function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** A handler that waits for its signal, hands over its reason, and stops with it (as a cancelled handler should). */
function waitsForAbort(reason: (r: unknown) => void) {
  return async (_job: Job, ctx: { signal: AbortSignal }) => {
    const signal = ctx.signal;
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    reason(signal.reason);
    throw signal.reason;
  };
}

/**
 * Holds one event stream of `c` open (it counts against the tenant's cap) until the answered function
 * closes it; rejects with what the server answered (TooManyRequests past the cap).
 */
async function holdStream(c: Client): Promise<() => Promise<void>> {
  const ac = new AbortController();
  const opened = deferred<undefined>();
  // A queue nothing is enqueued to: the stream stays silent until it is closed.
  const stream = c.streamEvents({ queue: queueName("silent") }, { signal: ac.signal, onOpen: () => opened.resolve(undefined) });
  const reading = stream.next().then(
    () => new Error("an event on a silent stream"),
    (e: unknown) => e,
  );
  const failed = await Promise.race([opened.promise, reading]);
  if (failed !== undefined) throw failed;
  return async () => {
    ac.abort();
    await reading;
  };
}

forEachBackend("worker", (server) => {
  test("failing heartbeats back off instead of retrying as fast as they fail", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    // The server stays up; only heartbeats fail, at once, as a refused
    // connection does. A stalled host makes fewer tries, never more.
    let down = false;
    let failed = 0;
    const flaky: typeof fetch = (input, init) => {
      if (down && new URL(String(input)).pathname.endsWith("/heartbeat")) {
        failed++;
        return Promise.reject(new TypeError("fetch failed"));
      }
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: flaky });
    // A heartbeat every third of a second.
    const worker = new Worker(wc, { queue, concurrency: 1, claimWaitMs: 500, leaseTtlMs: 1000, handleSignals: false, logger });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    worker.handle("k", async () => {
      await released;
      return "done";
    });
    const job = await c.enqueue({ queue, kind: "k", payload: null });
    startWorker(worker);
    await settled(c, job.id, ["running"], "the job to start");
    down = true;
    // From the first failure on: a stalled host cannot end the outage untried.
    await eventually("a heartbeat to fail", async () => failed > 0, 30_000);
    await new Promise((r) => setTimeout(r, 2000));
    down = false;
    const tries = failed;
    release();
    await settled(c, job.id, ["succeeded"]);
    // 100 ms doubling, capped at the 1/3 s interval: about 8 in 2 s.
    assert.ok(tries >= 1 && tries <= 40, `${tries} failed heartbeats in 2 s`);
  });

  test("runs handlers concurrently, completes in batches, carries progress", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    // Record what the worker sends (the server is real; this only watches).
    const sent: Array<{ path: string; body: any }> = [];
    const recording: typeof fetch = (input, init) => {
      sent.push({ path: new URL(String(input)).pathname, body: init?.body ? JSON.parse(String(init.body)) : undefined });
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: recording });
    const worker = new Worker(wc, { queue, concurrency: 8, claimWaitMs: 500, leaseTtlMs: 1500, handleSignals: false, logger });
    let running = 0;
    let most = 0;
    worker.handle("add", async (job, ctx) => {
      running++;
      most = Math.max(most, running);
      ctx.progress({ started: true });
      await new Promise((r) => setTimeout(r, job.payload === 0 ? 1200 : 50));
      running--;
      const p = job.payload as number;
      return { sum: p + 1 };
    });
    const jobs = await c.enqueueBatch(Array.from({ length: 20 }, (_, i) => ({ queue, kind: "add", payload: i })));
    const run = startWorker(worker);
    const slow = jobs[0]!.job.id;
    // The slow job's progress reaches the server with a heartbeat.
    await eventually("progress", async () => (await c.get(slow)).progress !== null);
    assert.deepEqual((await c.get(slow)).progress, { started: true });
    for (const [i, r] of jobs.entries()) {
      const j = await settled(c, r.job.id, ["succeeded"]);
      assert.deepEqual(j.result, { sum: i + 1 });
      assert.equal(j.attempt, 1);
    }
    assert.ok(most > 1 && most <= 8, `at most 8 at once, more than 1 (saw ${most})`);
    worker.shutdown();
    await run;
    const claims = sent.filter((r) => r.path.endsWith("/claim"));
    assert.equal(claims[0]!.body.limit, 8, "an idle worker claims as many as it has slots");
    // A claim long-polls unless it carries reports (their answers would wait for the poll).
    assert.ok(claims.every((r) => r.body.limit >= 1 && r.body.limit <= 8 && r.body.lease_ttl_ms === 1500 && r.body.wait_ms === (r.body.complete ? 0 : 500)));
    const completes = sent.filter((r) => r.path === "/v1/jobs/complete");
    const carried = claims.reduce((n, r) => n + (r.body.complete?.length ?? 0), 0);
    const batched = completes.reduce((n, r) => n + r.body.items.length, 0);
    assert.equal(carried + batched, 20, "every success rides a claim or goes through the batch route");
    assert.ok(carried > 0, "successes ride claims");
    assert.ok(completes.length + claims.filter((r) => r.body.complete).length < 20, `completions are batched (${completes.length} batches and ${carried} carried for 20 jobs)`);
    assert.ok(sent.every((r) => !/\/v1\/jobs\/[^/]+\/(complete|heartbeat)$/.test(r.path)), "no per-job complete or heartbeat");
    const beats = sent.filter((r) => r.path === "/v1/jobs/heartbeat");
    assert.ok(beats.length >= 1, "the slow job was heartbeated");
    assert.ok(beats.some((r) => r.body.items.some((i: any) => i.id === slow && i.progress?.started === true)), "progress travels with a heartbeat");
  });

  test("heartbeats keep a job beyond its lease TTL", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, leaseTtlMs: 1000, claimWaitMs: 500, handleSignals: false, logger });
    worker.handle("slow", async () => {
      await new Promise((r) => setTimeout(r, 3500));
      return "done";
    });
    const job = await c.enqueue({ queue, kind: "slow" });
    const run = startWorker(worker);
    const j = await settled(c, job.id, ["succeeded"]);
    assert.equal(j.attempt, 1, "never reclaimed");
    const events = await history(c, job.id);
    assert.deepEqual(events, ["enqueued", "claimed", "succeeded"], "no lease expiry in the history");
    worker.shutdown();
    await run;
  });

  test("fencing: a stale owner's complete is rejected with LeaseLost", async () => {
    const c = server().admin;
    const queue = queueName();
    const job = await c.enqueue({ queue, kind: "k" });
    const [stale] = await c.claim(queue, { worker_id: "stale", lease_ttl_ms: 1000 });
    assert.ok(stale);
    // The lease lapses, the server's reaper requeues it, a new owner claims it.
    const fresh = await eventually("a second claim", async () => (await c.claim(queue, { worker_id: "fresh", lease_ttl_ms: 30_000 }))[0]);
    assert.equal(fresh.id, job.id);
    assert.notEqual(fresh.lease_token, stale.lease_token);
    await assert.rejects(c.complete(job.id, { lease_token: stale.lease_token, result: 1 }), LeaseLost);
    await assert.rejects(c.heartbeat(job.id, { lease_token: stale.lease_token }), LeaseLost);
    const batch = await c.completeBatch([{ id: job.id, lease_token: stale.lease_token }]);
    assert.equal(batch[0]!.ok, false);
    const done = await c.complete(job.id, { lease_token: fresh.lease_token, result: 2 });
    assert.equal(done.state, "succeeded");
    assert.equal(done.result, 2);
  });

  test("a worker whose lease was lost discards its result and logs it", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    // This worker's heartbeats never arrive (a network that drops them), so
    // its lease lapses and the server's reaper requeues the job.
    const dropHeartbeats: typeof fetch = (input, init) =>
      String(input).endsWith("/v1/jobs/heartbeat") ? Promise.reject(new TypeError("simulated network failure")) : fetch(input, init);
    const lossy = new Client({ url: server().url, key: server().key, fetch: dropHeartbeats });
    // One slot, held by the job: the worker cannot claim it again itself once its lease lapsed (the test does).
    const worker = new Worker(lossy, { queue, concurrency: 1, leaseTtlMs: 1000, claimWaitMs: 300, handleSignals: false, logger: mem.logger });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    worker.handle("k", async () => {
      await gate;
      return "late";
    });
    const job = await c.enqueue({ queue, kind: "k" });
    const run = startWorker(worker);
    await settled(c, job.id, ["running"]);
    const fresh = await eventually("a new owner", async () => (await c.claim(queue, { worker_id: "fresh", lease_ttl_ms: 30_000 }))[0]);
    release();
    await eventually("the loss logged", async () => mem.lines.some((l) => l.includes("lease lost")));
    const during = await c.get(job.id);
    assert.equal(during.state, "running");
    assert.equal(during.worker_id, "fresh");
    const done = await c.complete(job.id, { lease_token: fresh.lease_token, result: "fresh" });
    assert.equal(done.result, "fresh", "the stale worker's result was discarded");
    assert.ok((await history(c, job.id)).includes("lease_lost"));
    worker.shutdown();
    await run;
  });

  test("a job claimed again by the same worker after its lease lapsed is held twice, and the shutdown drains both", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    // Heartbeats never arrive: the lease lapses while the handler runs, and the worker's free slot claims the job again.
    const dropHeartbeats: typeof fetch = (input, init) =>
      String(input).endsWith("/v1/jobs/heartbeat") ? Promise.reject(new TypeError("simulated network failure")) : fetch(input, init);
    const lossy = new Client({ url: server().url, key: server().key, fetch: dropHeartbeats });
    const worker = new Worker(lossy, { queue, concurrency: 2, leaseTtlMs: 1000, claimWaitMs: 300, shutdownGraceMs: 300, handleSignals: false, logger: mem.logger });
    const attempts: number[] = [];
    worker.handle("k", async (job, ctx) => {
      attempts.push(job.attempt);
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
      throw ctx.signal.reason;
    });
    const job = await c.enqueue({ queue, kind: "k" });
    const run = startWorker(worker);
    await eventually("the second claim", async () => attempts.length >= 2, 20_000);
    assert.deepEqual(attempts.slice(0, 2), [1, 2]);
    assert.equal(worker.jobsInFlight, 2, "both holds are tracked");
    worker.shutdown();
    await within(run, 10_000, "the drain of both holds");
    assert.equal(worker.jobsInFlight, 0);
    // Handed back by its current owner (or, on a host too slow to hand it back within its lease, requeued by the reaper).
    await eventually("the job queued again", async () => (await c.get(job.id)).state === "queued");
  });

  test("RetryAfter fails with the exact delay; Snooze gives the attempt back; Fatal and throws", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, concurrency: 4, claimWaitMs: 500, handleSignals: false, logger });
    worker.handle("retry", async () => {
      throw new RetryAfter(60_000, "upstream said 60 s");
    });
    worker.handle("snooze", async () => {
      throw new Snooze(60_000);
    });
    worker.handle("fatal", async () => {
      throw new Fatal("cannot ever work");
    });
    worker.handle("throw", async () => {
      throw new TypeError("plain bug");
    });
    const [r, s, f, t, n] = await c.enqueueBatch([
      { queue, kind: "retry" },
      { queue, kind: "snooze" },
      { queue, kind: "fatal" },
      { queue, kind: "throw" },
      { queue, kind: "nobody" },
    ]);
    const before = Date.now();
    const run = startWorker(worker);
    const retried = await eventually("retry", async () => {
      const j = await c.get(r!.job.id);
      return j.state === "queued" && j.attempt === 1 ? j : undefined;
    });
    assert.equal(retried.last_error, "upstream said 60 s");
    const delay = Date.parse(retried.run_at) - before;
    assert.ok(delay >= 59_000 && delay <= 61_000 + 5_000, `run_at about 60 s later (was ${delay} ms)`);
    assert.ok((await history(c, r!.job.id)).includes("retry_scheduled"));

    const snoozed = await eventually("snooze", async () => {
      const h = await history(c, s!.job.id);
      return h.includes("snoozed") ? c.get(s!.job.id) : undefined;
    });
    assert.equal(snoozed.state, "queued");
    assert.equal(snoozed.attempt, 0, "snooze gives the attempt back");
    assert.ok(Date.parse(snoozed.run_at) - before >= 59_000);

    const fatal = await settled(c, f!.job.id, ["failed"]);
    assert.equal(fatal.last_error, "cannot ever work");
    assert.equal(fatal.attempt, 1);

    const thrown = await eventually("throw", async () => {
      const j = await c.get(t!.job.id);
      return j.state === "queued" && j.attempt === 1 ? j : undefined;
    });
    assert.match(thrown.last_error!, /TypeError: plain bug/);
    assert.match(thrown.last_error!, /\n\s+at /, "the stack's tail is sent");

    const nobody = await eventually("no handler", async () => {
      const j = await c.get(n!.job.id);
      return j.attempt === 1 && j.state === "queued" ? j : undefined;
    });
    assert.match(nobody.last_error!, /no handler for kind nobody/);
    worker.shutdown();
    await run;
  });

  test("Retry fails the attempt with exactly its message, retried with the queue's backoff until attempts run out", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 300, handleSignals: false, logger });
    const messages: string[] = [];
    worker.handle("retry", async (job) => {
      // Byte for byte, whitespace and all: no stack, no class name.
      const message = `  planned failure on attempt ${job.attempt}\n(second line) `;
      messages.push(message);
      throw new Retry(message);
    });
    const job = await c.enqueue({ queue, kind: "retry", max_attempts: 2, backoff: { base_ms: 100, cap_ms: 200 } });
    startWorker(worker);
    const failed = await settled(c, job.id, ["failed"]);
    assert.equal(failed.attempt, 2);
    assert.deepEqual(messages, ["  planned failure on attempt 1\n(second line) ", "  planned failure on attempt 2\n(second line) "]);
    assert.equal(failed.last_error, messages[1]);
    const events = [];
    for await (const e of c.eventsAll(job.id)) events.push(e);
    assert.deepEqual(
      events.map((e) => [e.event, e.detail]),
      [
        ["enqueued", null],
        ["claimed", null],
        ["retry_scheduled", messages[0]],
        ["claimed", null],
        ["failed", messages[1]],
      ],
    );
  });

  test("a short Snooze goes to the server: the history shows it and the job runs again", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    // The old in-process limit is still accepted and hides nothing.
    const worker = new Worker(c, { queue, claimWaitMs: 300, maxInProcessSnoozeMs: 5_000, handleSignals: false, logger });
    const calls: Array<{ at: number; attempt: number }> = [];
    worker.handle("busy", async (job) => {
      calls.push({ at: Date.now(), attempt: job.attempt });
      if (calls.length === 1) throw new Snooze(100);
      return "second time lucky";
    });
    const job = await c.enqueue({ queue, kind: "busy" });
    startWorker(worker);
    const j = await settled(c, job.id, ["succeeded"]);
    assert.deepEqual(
      calls.map((x) => x.attempt),
      [1, 1],
      "the snoozed attempt was given back",
    );
    assert.ok(calls[1]!.at - calls[0]!.at >= 100);
    assert.equal(j.attempt, 1);
    assert.equal(j.result, "second time lucky");
    assert.deepEqual(await history(c, job.id), ["enqueued", "claimed", "snoozed", "claimed", "succeeded"]);
  });

  test("snoozes leave no listener behind on the worker's signals", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 300, handleSignals: false, logger });
    let calls = 0;
    worker.handle("busy", async (_job, ctx) => {
      if (++calls <= 5) throw new Snooze(1);
      return getEventListeners(ctx.shutdown, "abort").length;
    });
    const job = await c.enqueue({ queue, kind: "busy" });
    startWorker(worker);
    const j = await settled(c, job.id, ["succeeded"], "the job after 5 snoozes", 20_000);
    assert.equal(calls, 6);
    // The worker's own (one sleep or slot wait at a time), not one per snooze.
    assert.ok((j.result as number) <= 2, `${j.result} abort listeners on the shutdown signal after 5 snoozes`);
  });

  test("without leaseTtlMs a job gets its queue's lease and is heartbeated at a third of it", async () => {
    const c = server().admin;
    const queue = queueName();
    await c.configureQueue(queue, { default_lease_ttl_ms: 2_000 });
    const { logger } = memoryLogger();
    const claims: any[] = [];
    const recording: typeof fetch = (input, init) => {
      if (String(input).endsWith("/claim")) claims.push(JSON.parse(String(init?.body)));
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: recording });
    const worker = new Worker(wc, { queue, claimWaitMs: 300, handleSignals: false, logger });
    assert.equal(worker.leaseTtlMs, undefined);
    let claimedLease: number | undefined;
    worker.handle("long", async (job) => {
      claimedLease = leaseMs(job);
      await new Promise((r) => setTimeout(r, 3_000));
      return "done";
    });
    const job = await c.enqueue({ queue, kind: "long" });
    const run = startWorker(worker);
    // While it runs, every lease it holds is 2 s long, and heartbeats move it on
    // (about every 0.67 s) while the server reaps lapsed leases every 200 ms.
    const leases: number[] = [];
    const beats = new Set<string>();
    const done = await eventually(
      "the long job to end",
      async () => {
        const j = await c.get(job.id);
        if (j.state === "running" && j.lease_expires_at && j.heartbeat_at) {
          leases.push(leaseMs(j));
          beats.add(j.heartbeat_at);
        }
        return j.state === "queued" || j.state === "running" ? undefined : j;
      },
      20_000,
    );
    worker.shutdown();
    await run;
    assert.equal(claimedLease, 2_000, "the claim granted the queue's lease");
    assert.ok(leases.length > 0 && leases.every((l) => l === 2_000), `leases while running: ${leases.join(", ")}`);
    assert.ok(beats.size >= 2, `heartbeats seen: ${[...beats].join(", ")}`);
    assert.equal(done.state, "succeeded");
    assert.equal(done.attempt, 1);
    assert.deepEqual(await history(c, job.id), ["enqueued", "claimed", "succeeded"], "no lease_expired or lease_lost");
    assert.ok(claims.length > 0 && claims.every((b) => !("lease_ttl_ms" in b)), "no claim names a lease TTL");
  });

  test("an explicit leaseTtlMs wins over the queue's lease", async () => {
    const c = server().admin;
    const queue = queueName();
    await c.configureQueue(queue, { default_lease_ttl_ms: 2_000 });
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, leaseTtlMs: 5_000, claimWaitMs: 300, handleSignals: false, logger });
    let claimedLease: number | undefined;
    worker.handle("k", async (job) => {
      claimedLease = leaseMs(job);
    });
    const job = await c.enqueue({ queue, kind: "k" });
    startWorker(worker);
    await settled(c, job.id, ["succeeded"]);
    assert.equal(claimedLease, 5_000);
    assert.throws(() => new Worker(c, { queue, leaseTtlMs: 999 }), RangeError);
  });

  test("an empty claim that was not long-polled is followed by a pause of pollIntervalMs", async () => {
    const { logger } = memoryLogger();
    let claims = 0;
    const counting: typeof fetch = (input, init) => {
      if (String(input).endsWith("/claim")) claims++;
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: counting });
    // claimWaitMs 0: the server answers an empty queue at once.
    const worker = new Worker(wc, { queue: queueName(), claimWaitMs: 0, pollIntervalMs: 100, handleSignals: false, logger });
    const run = startWorker(worker);
    await new Promise((r) => setTimeout(r, 1000));
    worker.shutdown();
    await run;
    assert.ok(claims >= 4 && claims <= 12, `about one claim per 100 ms in 1 s (saw ${claims})`);
  });

  test("a worker with a refused key stops at start with Unauthenticated", async () => {
    const { logger } = memoryLogger();
    const worker = new Worker(new Client({ url: server().url, key: "tth_wrong" }), { queue: queueName(), handleSignals: false, logger });
    await assert.rejects(worker.run(), Unauthenticated);
  });

  test("cancel reaches a running handler through ctx.signal", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, leaseTtlMs: 1500, claimWaitMs: 500, handleSignals: false, logger });
    let reason: unknown;
    worker.handle("long", async (_job, ctx) => {
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
      reason = ctx.signal.reason;
      throw ctx.signal.reason;
    });
    const job = await c.enqueue({ queue, kind: "long" });
    const run = startWorker(worker);
    await settled(c, job.id, ["running"]);
    const asked = await c.cancel(job.id);
    assert.equal(asked.cancel_requested, true);
    assert.equal(asked.state, "running");
    const j = await settled(c, job.id, ["cancelled"]);
    assert.ok(reason instanceof JobAborted);
    assert.equal(reason.why, "cancel");
    assert.equal(j.last_error, "cancelled on request");
    worker.shutdown();
    await run;
  });

  test("a handler that ignores a cancel is given up a lease TTL later and the job ends cancelled", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, leaseTtlMs: 1000, claimWaitMs: 300, handleSignals: false, logger });
    worker.handle("deaf", () => new Promise<never>(() => {}));
    const job = await c.enqueue({ queue, kind: "deaf" });
    const run = startWorker(worker);
    await settled(c, job.id, ["running"]);
    await c.cancel(job.id);
    const j = await settled(c, job.id, ["cancelled"]);
    assert.equal(j.last_error, "cancelled on request");
    // Reported by the worker (it stopped waiting), not reaped after its heartbeats stopped.
    assert.deepEqual(await history(c, job.id), ["enqueued", "claimed", "cancel_requested", "cancelled"]);
    worker.shutdown();
    await run;
  });

  test("a job's timeout_ms aborts ctx.signal and fails the attempt", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 500, handleSignals: false, logger });
    let reason: unknown;
    worker.handle("stuck", async (_job, ctx) => {
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
      reason = ctx.signal.reason;
      return "too late";
    });
    const job = await c.enqueue({ queue, kind: "stuck", timeout_ms: 300, max_attempts: 1 });
    const run = startWorker(worker);
    const j = await settled(c, job.id, ["failed"]);
    assert.equal(j.last_error, "timed out after 300 ms");
    assert.ok(reason instanceof JobAborted && reason.why === "timeout");
    worker.shutdown();
    await run;
  });

  test("shutdown: handlers finish within the grace; the rest are handed back with the attempt given back", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, concurrency: 2, claimWaitMs: 300, shutdownGraceMs: 500, handleSignals: false, logger });
    let shutdownSeen = false;
    let aborted: unknown;
    worker.handle("quick", async (_job, ctx) => {
      await new Promise((r) => setTimeout(r, 200));
      shutdownSeen = ctx.shutdown.aborted;
      return "finished";
    });
    worker.handle("forever", async (_job, ctx) => {
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
      aborted = ctx.signal.reason;
      await new Promise((r) => setTimeout(r, 10_000));
    });
    const [q, f] = await c.enqueueBatch([
      { queue, kind: "quick" },
      { queue, kind: "forever" },
    ]);
    const run = startWorker(worker);
    await settled(c, f!.job.id, ["running"]);
    await settled(c, q!.job.id, ["running"]);
    const t0 = Date.now();
    worker.shutdown();
    await run;
    const took = Date.now() - t0;
    assert.ok(took < 3000, `drained after the grace (${took} ms)`);
    assert.equal(shutdownSeen, true);
    const quick = await c.get(q!.job.id);
    assert.equal(quick.state, "succeeded");
    const handed = await c.get(f!.job.id);
    assert.equal(handed.state, "queued");
    assert.equal(handed.attempt, 0);
    assert.ok(aborted instanceof JobAborted && aborted.why === "shutdown");
    assert.deepEqual(await history(c, f!.job.id), ["enqueued", "claimed", "snoozed"]);
    assert.equal(worker.jobsInFlight, 0);
  });
  test("a cancel reaches a running handler by the event stream, long before a heartbeat could (lease 300 s)", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    // Record the worker's requests (the server is real; this only watches), and the stream's signal.
    const paths: string[] = [];
    const streamSignals: AbortSignal[] = [];
    const recording: typeof fetch = (input, init) => {
      const path = new URL(String(input)).pathname;
      paths.push(path);
      if (path === "/v1/events" && init?.signal) streamSignals.push(init.signal);
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: recording });
    // A heartbeat every 100 s: only the push can bring the cancel within the test's minute.
    const worker = new Worker(wc, { queue, leaseTtlMs: 300_000, claimWaitMs: 500, handleSignals: false, logger: mem.logger });
    const aborted = deferred<unknown>();
    worker.handle("long", waitsForAbort(aborted.resolve));
    const job = await c.enqueue({ queue, kind: "long" });
    const run = startWorker(worker);
    await settled(c, job.id, ["running"]);
    // A stream without a cursor starts live when it opens: the cancel must come after that.
    await eventually("the worker's event stream to open", async () => mem.lines.some((l) => l.includes("the event stream of cancellations is open")), 30_000);
    const asked = await c.cancel(job.id);
    assert.equal(asked.cancel_requested, true);
    // Expected within a second; bound at a minute so a stalled host cannot fail it (a heartbeat takes 100 s).
    const reason = await within(aborted.promise, 60_000, "the handler's signal to abort");
    assert.ok(reason instanceof JobAborted && reason.why === "cancel", String(reason));
    const j = await settled(c, job.id, ["cancelled"], "the job to end cancelled", 30_000);
    assert.equal(j.last_error, "cancelled on request");
    assert.ok(!paths.includes("/v1/jobs/heartbeat"), `no heartbeat was sent: ${paths.join(" ")}`);
    assert.ok(mem.lines.some((l) => l.startsWith("info cancel requested") && l.includes(`"via":"event stream"`)), mem.lines.join("\n"));
    worker.shutdown();
    await run;
    // One stream for the worker, closed with it: no connection left to keep the process alive.
    assert.equal(streamSignals.length, 1, paths.join(" "));
    assert.equal(streamSignals[0]!.aborted, true, "the stream's connection is closed once the worker has stopped");
  });

  test("heartbeats still bring a cancel while the event stream cannot connect, logged once", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    // Every connection of the stream fails, as a refused one does; everything else reaches the server.
    let refused = 0;
    const noStream: typeof fetch = (input, init) => {
      if (new URL(String(input)).pathname === "/v1/events") {
        refused++;
        return Promise.reject(new TypeError("fetch failed"));
      }
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: noStream });
    // A heartbeat every half second.
    const worker = new Worker(wc, { queue, leaseTtlMs: 1500, claimWaitMs: 500, handleSignals: false, logger: mem.logger });
    const aborted = deferred<unknown>();
    worker.handle("long", waitsForAbort(aborted.resolve));
    worker.handle("quick", (job) => job.payload);
    const job = await c.enqueue({ queue, kind: "long" });
    const run = startWorker(worker);
    await settled(c, job.id, ["running"]);
    await eventually("the stream to fail twice", async () => refused >= 2);
    await c.cancel(job.id);
    const reason = await within(aborted.promise, 60_000, "the handler's signal to abort");
    assert.ok(reason instanceof JobAborted && reason.why === "cancel", String(reason));
    assert.equal((await settled(c, job.id, ["cancelled"])).last_error, "cancelled on request");
    assert.ok(mem.lines.some((l) => l.startsWith("info cancel requested") && l.includes(`"via":"heartbeat"`)), mem.lines.join("\n"));
    // The worker goes on working.
    const quick = await c.enqueue({ queue, kind: "quick", payload: 7 });
    assert.equal((await settled(c, quick.id, ["succeeded"])).result, 7);
    const warnings = mem.lines.filter((l) => l.startsWith("warn") && l.includes("event stream"));
    assert.equal(warnings.length, 1, `one warning for ${refused} failed connections: ${warnings.join("\n")}`);
    worker.shutdown();
    await run;
  });

  test("a worker whose event stream is refused (429: the tenant's streams are all taken) keeps running jobs and opens it when a place frees", async () => {
    const c = server().admin;
    // `tether serve` has no flag for the cap, so this takes every place of a tenant of its own (64 by
    // default: opened until the server refuses one), which other tests' streams cannot free.
    const t = await c.createTenant(queueName("cap"));
    const tc = new Client({ url: server().url, key: t.api_key });
    const holders: Array<() => Promise<void>> = [];
    try {
      for (;;) {
        try {
          holders.push(await holdStream(tc));
        } catch (e) {
          if (e instanceof TooManyRequests) break;
          throw e;
        }
        assert.ok(holders.length <= 10_000, "the server never refused a stream");
      }
      const queue = queueName();
      const mem = memoryLogger();
      const worker = new Worker(tc, { queue, concurrency: 2, leaseTtlMs: 300_000, claimWaitMs: 500, handleSignals: false, logger: mem.logger });
      const aborted = deferred<unknown>();
      worker.handle("long", waitsForAbort(aborted.resolve));
      worker.handle("quick", (job) => job.payload);
      const run = startWorker(worker);
      const streamLines = () => mem.lines.filter((l) => l.includes("event stream of cancellations"));
      await eventually("two refusals", async () => streamLines().filter((l) => l.includes("too_many_requests") || l.includes("event streams open")).length >= 2, 30_000);
      const warnings = mem.lines.filter((l) => l.startsWith("warn") && l.includes("event stream"));
      assert.equal(warnings.length, 1, `logged once: ${streamLines().join("\n")}`);
      // Jobs run all the same.
      const quick = await tc.enqueueBatch([1, 2, 3].map((payload) => ({ queue, kind: "quick", payload })));
      for (const [i, r] of quick.entries()) assert.equal((await settled(tc, r.job.id, ["succeeded"])).result, i + 1);
      // Places free: the worker's next try opens its stream, and cancels are pushed again.
      await Promise.all(holders.splice(0).map((close) => close()));
      await eventually("the stream to open again", async () => mem.lines.some((l) => l.startsWith("info the event stream of cancellations is open again")), 90_000);
      const job = await tc.enqueue({ queue, kind: "long" });
      await settled(tc, job.id, ["running"]);
      await tc.cancel(job.id);
      // A heartbeat would take 100 s.
      const reason = await within(aborted.promise, 60_000, "the handler's signal to abort");
      assert.ok(reason instanceof JobAborted && reason.why === "cancel", String(reason));
      assert.equal((await settled(tc, job.id, ["cancelled"])).last_error, "cancelled on request");
      worker.shutdown();
      await run;
    } finally {
      await Promise.all(holders.map((close) => close()));
    }
  });

  test("progress shows in the API within about half a second while the lease is long, in at most two heartbeats a second", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const beats: Array<Array<{ id: string; progress?: unknown }>> = [];
    const recording: typeof fetch = (input, init) => {
      if (new URL(String(input)).pathname === "/v1/jobs/heartbeat") beats.push((JSON.parse(String(init?.body)) as { items: Array<{ id: string; progress?: unknown }> }).items);
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: recording });
    // A heartbeat due every 100 s: only the progress can send one within the test.
    const worker = new Worker(wc, { queue, concurrency: 2, leaseTtlMs: 300_000, claimWaitMs: 500, handleSignals: false, logger });
    const release = deferred<undefined>();
    const reported = deferred<number>();
    let firstAt = 0;
    worker.handle("busy", async (_job, ctx) => {
      // About a thousand reports a second for a second and a half.
      firstAt = Date.now();
      let n = 0;
      while (Date.now() - firstAt < 1500) {
        ctx.progress({ n: ++n });
        await new Promise((r) => setTimeout(r, 1));
      }
      reported.resolve(n);
      await release.promise;
      return n;
    });
    const job = await c.enqueue({ queue, kind: "busy" });
    startWorker(worker);
    await eventually("some progress", async () => (await c.get(job.id)).progress !== null, 30_000);
    const last = await within(reported.promise, 60_000, "the handler's reports");
    // The last report shows too (within half a second; bound generously).
    await eventually("the last progress", async () => ((await c.get(job.id)).progress as { n?: number } | null)?.n === last, 30_000);
    const elapsed = Date.now() - firstAt;
    release.resolve(undefined);
    assert.equal((await settled(c, job.id, ["succeeded"])).result, last);
    assert.ok(last > 50, `${last} reports`);
    // Coalesced: one at once, then at most one per half second (a stalled host sends fewer, not more).
    assert.ok(beats.length >= 1 && beats.length <= 2 + Math.ceil(elapsed / 500), `${beats.length} heartbeats for ${last} reports in ${elapsed} ms`);
    assert.ok(beats.every((items) => items.length === 1 && items[0]!.id === job.id && items[0]!.progress !== undefined), JSON.stringify(beats));
  });

  test("progress of several jobs goes in one heartbeat", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const beats: Array<Array<{ id: string; progress?: unknown }>> = [];
    const recording: typeof fetch = (input, init) => {
      if (new URL(String(input)).pathname === "/v1/jobs/heartbeat") beats.push((JSON.parse(String(init?.body)) as { items: Array<{ id: string; progress?: unknown }> }).items);
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, fetch: recording });
    const worker = new Worker(wc, { queue, concurrency: 3, leaseTtlMs: 300_000, claimWaitMs: 500, handleSignals: false, logger });
    const release = deferred<undefined>();
    const started = { n: 0 };
    const allStarted = deferred<undefined>();
    worker.handle("step", async (job, ctx) => {
      if (++started.n === 3) allStarted.resolve(undefined);
      await allStarted.promise;
      ctx.progress({ step: job.payload });
      await release.promise;
    });
    const jobs = await c.enqueueBatch([1, 2, 3].map((payload) => ({ queue, kind: "step", payload })));
    startWorker(worker);
    for (const [i, r] of jobs.entries()) {
      await eventually(`job ${i + 1}'s progress`, async () => ((await c.get(r.job.id)).progress as { step?: number } | null)?.step === i + 1, 30_000);
    }
    release.resolve(undefined);
    for (const r of jobs) await settled(c, r.job.id, ["succeeded"]);
    // Reported in one turn of the event loop: one heartbeat carries all three.
    assert.equal(beats.length, 1, JSON.stringify(beats));
    assert.deepEqual(beats[0]!.map((i) => i.progress).sort((a, b) => (a as { step: number }).step - (b as { step: number }).step), [{ step: 1 }, { step: 2 }, { step: 3 }]);
  });
});
