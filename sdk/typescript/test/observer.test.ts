// The Worker's observer against a real server on each backend: it sees
// every claim answer before the handlers start, every failed request (each
// try) with its code, and every lease_lost answer with the token the worker
// presented; an observer that throws does not break the worker.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, Retry, Worker, type ClaimEvent, type LeaseLostEvent, type RequestErrorEvent } from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

/** Everything an observer saw, plus the handlers' starts, in one ordered log. */
function recorder() {
  const log: string[] = [];
  const claims: ClaimEvent[] = [];
  const errors: RequestErrorEvent[] = [];
  const losts: LeaseLostEvent[] = [];
  const observer = {
    onClaim(e: ClaimEvent) {
      claims.push(e);
      for (const j of e.jobs) log.push(`claim ${j.id}`);
    },
    onError(e: RequestErrorEvent) {
      errors.push(e);
    },
    onLeaseLost(e: LeaseLostEvent) {
      losts.push(e);
    },
  };
  return { log, claims, errors, losts, observer };
}

forEachBackend("observer", (server) => {
  test("sees claim answers before handlers start and every failed claim with its code; a throwing observer is ignored", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const rec = recorder();
    // The first claim hangs past its time limit, the second gets no answer, the third answers 503; then the real server answers.
    let claimsSent = 0;
    const faulty: typeof fetch = (input, init) => {
      if (!String(input).endsWith("/claim")) return fetch(input, init);
      claimsSent++;
      if (claimsSent === 1) return new Promise((_, reject) => init!.signal!.addEventListener("abort", () => reject(init!.signal!.reason)));
      if (claimsSent === 2) return Promise.reject(new TypeError("simulated network failure"));
      if (claimsSent === 3) return Promise.resolve(Response.json({ error: { code: "unavailable", message: "simulated" } }, { status: 503 }));
      return fetch(input, init);
    };
    const wc = new Client({ url: server().url, key: server().key, timeoutMs: 700, fetch: faulty });
    const worker = new Worker(wc, {
      queue,
      concurrency: 4,
      claimWaitMs: 300,
      handleSignals: false,
      logger: mem.logger,
      observer: {
        ...rec.observer,
        onClaim(e) {
          rec.observer.onClaim(e);
          throw new Error("a buggy observer");
        },
      },
    });
    worker.handle("k", async (job) => {
      rec.log.push(`start ${job.id}`);
      return job.payload;
    });
    const jobs = await c.enqueueBatch([1, 2, 3].map((p) => ({ queue, kind: "k", payload: p })));
    startWorker(worker);
    for (const j of jobs) await eventually("the jobs to succeed", async () => (await c.get(j.job.id)).state === "succeeded");

    assert.deepEqual(
      rec.errors.slice(0, 3).map((e) => [e.op, e.code, e.jobId, e.workerId]),
      [
        ["claim", "timeout", undefined, worker.workerId],
        ["claim", "transport", undefined, worker.workerId],
        ["claim", "unavailable", undefined, worker.workerId],
      ],
    );
    assert.equal(rec.errors[2]!.error.status, 503);
    const claimed = rec.claims.flatMap((e) => e.jobs.map((j) => ({ ...j, workerId: e.workerId, queue: e.queue })));
    for (const j of jobs) {
      const seen = claimed.filter((x) => x.id === j.job.id);
      assert.equal(seen.length, 1, "each job claimed once");
      assert.equal(seen[0]!.workerId, worker.workerId);
      assert.equal(seen[0]!.queue, queue);
      assert.match(seen[0]!.lease_token, /^[0-9a-f-]{36}$/, "the claim carries the lease token");
      assert.equal(seen[0]!.attempt, 1);
      const i = rec.log.indexOf(`claim ${j.job.id}`);
      assert.ok(i >= 0 && i < rec.log.indexOf(`start ${j.job.id}`), `the claim was observed before the handler started: ${rec.log}`);
    }
    assert.ok(mem.lines.some((l) => l.includes("the observer threw") && l.includes("a buggy observer")), "the observer's error is logged");
  });

  test("sees lease_lost answers of complete, fail and heartbeat with the token presented, and failed heartbeats", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const rec = recorder();
    // Heartbeats get no answer until the test lets them through, so the leases lapse and another owner takes the jobs.
    let dropHeartbeats = true;
    const lossy: typeof fetch = (input, init) =>
      dropHeartbeats && String(input).endsWith("/v1/jobs/heartbeat") ? Promise.reject(new TypeError("simulated network failure")) : fetch(input, init);
    const wc = new Client({ url: server().url, key: server().key, fetch: lossy });
    const worker = new Worker(wc, { queue, concurrency: 3, leaseTtlMs: 1000, claimWaitMs: 300, handleSignals: false, logger: mem.logger, observer: rec.observer });
    const gates = new Map<string, () => void>();
    const gate = (kind: string) => new Promise<void>((r) => gates.set(kind, r));
    worker.handle("completes", async () => {
      await gate("completes");
      return "late";
    });
    worker.handle("fails", async () => {
      await gate("fails");
      throw new Retry("late failure");
    });
    worker.handle("waits", async (_job, ctx) => {
      await new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }));
      throw ctx.signal.reason;
    });
    const [a, b, w] = await c.enqueueBatch(["completes", "fails", "waits"].map((kind) => ({ queue, kind })));
    const ids = { complete: a!.job.id, fail: b!.job.id, heartbeat: w!.job.id };
    startWorker(worker);
    await eventually("all three running", async () => gates.size === 2 && rec.claims.flatMap((e) => e.jobs).length === 3);
    const token = new Map(rec.claims.flatMap((e) => e.jobs.map((j) => [j.id, j.lease_token] as const)));
    // The leases lapse, the reaper requeues the jobs, a new owner claims them.
    const fresh = new Map<string, string>();
    await eventually(
      "a new owner of all three",
      async () => {
        for (const j of await c.claim(queue, { worker_id: "fresh", limit: 3, lease_ttl_ms: 60_000 })) fresh.set(j.id, j.lease_token);
        return fresh.size === 3;
      },
      15_000,
    );
    gates.get("completes")!();
    gates.get("fails")!();
    await eventually("complete and fail answered lease_lost", async () => rec.losts.length >= 2);
    dropHeartbeats = false;
    await eventually("a heartbeat answered lease_lost", async () => rec.losts.some((l) => l.op === "heartbeat"));

    const lostBy = (op: string) => rec.losts.filter((l) => l.op === op).map((l) => ({ jobId: l.jobId, leaseToken: l.leaseToken, workerId: l.workerId }));
    for (const op of ["complete", "fail", "heartbeat"] as const) {
      assert.deepEqual(lostBy(op), [{ jobId: ids[op], leaseToken: token.get(ids[op]), workerId: worker.workerId }], op);
      assert.notEqual(token.get(ids[op]), fresh.get(ids[op]));
      // Each lease_lost is an error of its operation too.
      assert.ok(rec.errors.some((e) => e.op === op && e.code === "lease_lost" && e.jobId === ids[op] && e.error.code === "lease_lost"), op);
    }
    const dropped = rec.errors.filter((e) => e.op === "heartbeat" && e.code === "transport");
    assert.ok(dropped.length >= 2, "every failed heartbeat try is seen");
    assert.ok(dropped.every((e) => e.jobId === undefined));
    // The new owner's claims stand: the stale outcomes were fenced off.
    for (const id of Object.values(ids)) {
      const j = await c.get(id);
      assert.equal(j.state, "running");
      assert.equal(j.worker_id, "fresh");
      assert.equal(j.result, null);
      assert.match(j.last_error ?? "", /^lease expired/, "the reaper's error, not the stale worker's");
    }
  });
});
