// Claims that carry reports, against a real server on each backend: the
// client's claimDetailed (each carried completion and failure answered on
// its own, jobs claimed in the same answer, a refused report never failing
// the claim, a request bad as a whole changing nothing), and the Worker
// sending its reports with its next claim (not held by a long-poll, resent
// by the old routes after a claim lost in transit or refused whole, no
// heartbeat once a job's report is on its way).

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client, Fatal, InvalidArgument, Retry, Worker, type Job, type LeaseLostEvent, type ReportResult } from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

async function history(c: Client, id: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of c.eventsAll(id)) out.push(e.event);
  return out;
}

async function settled(c: Client, id: string, states: Job["state"][], timeoutMs = 10_000): Promise<Job> {
  return eventually(
    `job ${id} to be ${states.join("|")}`,
    async () => {
      const j = await c.get(id);
      return states.includes(j.state) ? j : undefined;
    },
    timeoutMs,
  );
}

/** `[id, ok, error code]` of each report answer. */
function answers(reports: ReportResult[]): Array<[string, boolean, string | undefined]> {
  return reports.map((r) => [r.id, r.ok, r.ok ? undefined : r.error.code]);
}

/** A request the worker sent, as the recording fetch saw it. */
interface Sent {
  at: number;
  path: string;
  body: any;
}

/** A fetch that records every request (the server is real; `intercept` may answer instead of it or act around it). */
function recorder(intercept?: (s: Sent, real: () => Promise<Response>) => Promise<Response> | undefined) {
  const sent: Sent[] = [];
  const fetchFn: typeof fetch = (input, init) => {
    const s: Sent = { at: Date.now(), path: new URL(String(input)).pathname, body: init?.body ? JSON.parse(String(init.body)) : undefined };
    sent.push(s);
    const real = () => fetch(input, init);
    return intercept?.(s, real) ?? real();
  };
  const claims = () => sent.filter((s) => s.path.endsWith("/claim"));
  const carrying = () => claims().filter((s) => (s.body.complete?.length ?? 0) + (s.body.fail?.length ?? 0) > 0);
  return {
    sent,
    fetch: fetchFn,
    claims,
    carrying,
    /** Completions and failures carried by claims. */
    carriedIds: () => carrying().flatMap((s) => [...(s.body.complete ?? []), ...(s.body.fail ?? [])].map((i: any) => i.id as string)),
    /** Completions sent by `POST /v1/jobs/complete`. */
    batchedIds: () => sent.filter((s) => s.path === "/v1/jobs/complete").flatMap((s) => s.body.items.map((i: any) => i.id as string)),
    /** Failures sent by `POST /v1/jobs/{id}/fail`. */
    failedAloneIds: () => sent.filter((s) => /^\/v1\/jobs\/[^/]+\/fail$/.test(s.path)).map((s) => s.path.split("/")[3]!),
  };
}

/** The worker's log lines that say a report went wrong. */
function reportTrouble(lines: string[]): string[] {
  return lines.filter((l) => /lease lost|refused|could not report|failed unexpectedly/.test(l));
}

forEachBackend("claim carrying reports", (server) => {
  test("a claim carries completions and failures, answers each on its own (a refused one does not fail the claim) and claims in the same answer", async () => {
    const c = server().admin;
    const queue = queueName();
    const enqueued = await c.enqueueBatch([1, 2, 3, 4, 5].map((n) => ({ queue, kind: "w", payload: n })));
    const first = await c.claim(queue, { worker_id: "t", limit: 3, lease_ttl_ms: 30_000 });
    assert.equal(first.length, 3);
    const [a, b, d] = first as [(typeof first)[0], (typeof first)[0], (typeof first)[0]];
    const stranger = randomUUID();
    const r = await c.claimDetailed(queue, {
      worker_id: "t2",
      limit: 5,
      wait_ms: 0,
      complete: [
        { id: a.id, lease_token: a.lease_token, result: { n: 1 } },
        { id: b.id, lease_token: randomUUID(), result: "a wrong token" },
        { id: stranger, lease_token: randomUUID() },
      ],
      fail: [{ id: d.id, lease_token: d.lease_token, error: "boom", retry_after_ms: 60_000 }],
    });
    // Completions first, then failures, each in request order.
    assert.deepEqual(answers(r.reports), [
      [a.id, true, undefined],
      [b.id, false, "lease_lost"],
      [stranger, false, "not_found"],
      [d.id, true, undefined],
    ]);
    for (const x of r.reports) if (!x.ok) assert.ok(x.error.message.length > 0);
    // The two jobs left were claimed in the same answer.
    const rest = enqueued.map((e) => e.job.id).filter((id) => ![a.id, b.id, d.id].includes(id));
    assert.deepEqual(r.jobs.map((j) => j.id).sort(), rest.sort());
    for (const j of r.jobs) {
      assert.equal(j.state, "running");
      assert.equal(j.worker_id, "t2");
      assert.match(j.lease_token, /^[0-9a-f-]{36}$/);
    }
    const doneA = await c.get(a.id);
    assert.equal(doneA.state, "succeeded");
    assert.deepEqual(doneA.result, { n: 1 });
    assert.deepEqual(await history(c, a.id), ["enqueued", "claimed", "succeeded"]);
    const stillB = await c.get(b.id);
    assert.equal(stillB.state, "running", "a wrong token changes nothing");
    assert.equal(stillB.worker_id, "t");
    assert.equal(stillB.result, null);
    const failedD = await c.get(d.id);
    assert.equal(failedD.state, "queued");
    assert.equal(failedD.attempt, 1);
    assert.equal(failedD.last_error, "boom");
    assert.ok(Date.parse(failedD.run_at) - Date.now() > 50_000, "retry_after_ms was applied");
    assert.deepEqual(await history(c, d.id), ["enqueued", "claimed", "retry_scheduled"]);

    // The same reports again (as after an answer lost in transit): each answered as the first time, nothing changes.
    const again = await c.claimDetailed(queue, {
      worker_id: "t2",
      wait_ms: 0,
      complete: [{ id: a.id, lease_token: a.lease_token, result: { n: 1 } }],
      fail: [{ id: d.id, lease_token: d.lease_token, error: "boom", retry_after_ms: 60_000 }],
    });
    assert.deepEqual(answers(again.reports), [
      [a.id, true, undefined],
      [d.id, true, undefined],
    ]);
    assert.deepEqual(again.jobs, [], "nothing ready");
    assert.deepEqual(await history(c, a.id), ["enqueued", "claimed", "succeeded"]);
    assert.deepEqual(await history(c, d.id), ["enqueued", "claimed", "retry_scheduled"]);
    // Another report with a token that ended an attempt: invalid_state, and the first one stands.
    const other = await c.claimDetailed(queue, { worker_id: "t2", wait_ms: 0, complete: [{ id: a.id, lease_token: a.lease_token, result: { n: 2 } }] });
    assert.deepEqual(answers(other.reports), [[a.id, false, "invalid_state"]]);
    assert.deepEqual((await c.get(a.id)).result, { n: 1 });
    // A claim that carries nothing answers no reports.
    const plain = await c.claimDetailed(queue, { worker_id: "t2", wait_ms: 0 });
    assert.deepEqual(plain, { jobs: [], reports: [] });
    // claim() answers only jobs, so it does not take reports (their answers would be lost).
    await assert.rejects(c.claim(queue, { worker_id: "t2", complete: [{ id: b.id, lease_token: b.lease_token }] } as never), TypeError);
    assert.equal((await c.get(b.id)).state, "running");
  });

  test("a claim bad as a whole (1001 reports, a malformed item) is InvalidArgument and changes nothing", async () => {
    const c = server().admin;
    const queue = queueName();
    const [x, y] = await c.enqueueBatch([{ queue, kind: "w" }, { queue, kind: "w" }]);
    const [a] = await c.claim(queue, { worker_id: "t", lease_ttl_ms: 30_000 });
    assert.ok(a);
    const other = a.id === x!.job.id ? y!.job.id : x!.job.id;
    const tooMany = [{ id: a.id, lease_token: a.lease_token, result: 1 }, ...Array.from({ length: 999 }, () => ({ id: randomUUID(), lease_token: randomUUID() }))];
    await assert.rejects(
      c.claimDetailed(queue, { worker_id: "t", limit: 1, complete: tooMany, fail: [{ id: randomUUID(), lease_token: randomUUID(), error: "x" }] }),
      InvalidArgument,
    );
    const malformed = [{ id: a.id, lease_token: a.lease_token, result: 1 }, { id: "not-a-uuid", lease_token: randomUUID() }];
    await assert.rejects(c.claimDetailed(queue, { worker_id: "t", limit: 1, complete: malformed }), InvalidArgument);
    await assert.rejects(
      c.claimDetailed(queue, { worker_id: "t", limit: 1, fail: [{ id: a.id, lease_token: a.lease_token } as never] }),
      InvalidArgument,
      "a failure without its error",
    );
    const stillA = await c.get(a.id);
    assert.equal(stillA.state, "running");
    assert.equal(stillA.result, null);
    assert.deepEqual(await history(c, a.id), ["enqueued", "claimed"]);
    const stillQueued = await c.get(other);
    assert.equal(stillQueued.state, "queued", "nothing was claimed");
    assert.equal(stillQueued.attempt, 0);
    // Exactly 1000 is accepted: the real one completes, the others are not found.
    const r = await c.claimDetailed(queue, { worker_id: "t", limit: 1, wait_ms: 0, complete: tooMany.slice(0, 1000) });
    assert.equal(r.reports.length, 1000);
    assert.deepEqual(answers(r.reports.slice(0, 2)), [
      [a.id, true, undefined],
      [tooMany[1]!.id, false, "not_found"],
    ]);
    assert.deepEqual(r.jobs.map((j) => j.id), [other]);
  });

  test("the worker sends its completions and failures with its next claim", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const rec = recorder();
    const wc = new Client({ url: server().url, key: server().key, fetch: rec.fetch });
    const worker = new Worker(wc, { queue, concurrency: 4, claimWaitMs: 2_000, handleSignals: false, logger: mem.logger });
    worker.handle("ok", async (job) => ({ n: job.payload }));
    worker.handle("bad", async (job) => {
      throw new Retry(`bad ${job.payload}`);
    });
    const jobs = await c.enqueueBatch(Array.from({ length: 40 }, (_, i) => ({ queue, kind: i % 4 === 3 ? "bad" : "ok", payload: i, max_attempts: 1 })));
    const run = startWorker(worker);
    for (const [i, r] of jobs.entries()) {
      const j = await settled(c, r.job.id, ["succeeded", "failed"]);
      if (i % 4 === 3) {
        assert.equal(j.state, "failed");
        assert.equal(j.last_error, `bad ${i}`);
      } else {
        assert.equal(j.state, "succeeded");
        assert.deepEqual(j.result, { n: i });
      }
    }
    worker.shutdown();
    await run;
    const carried = rec.carriedIds();
    const byOldRoutes = [...rec.batchedIds(), ...rec.failedAloneIds()];
    // Every report was sent once, by a claim or by the old routes.
    assert.deepEqual([...carried, ...byOldRoutes].sort(), jobs.map((r) => r.job.id).sort());
    assert.ok(carried.length >= 20, `most reports ride a claim (${carried.length} carried, ${byOldRoutes.length} by the old routes)`);
    const carrying = rec.carrying();
    assert.ok(carrying.some((s) => s.body.complete?.length > 0) && carrying.some((s) => s.body.fail?.length > 0), "completions and failures both ride claims");
    assert.ok(carrying.every((s) => s.body.wait_ms === 0), "a claim that carries reports does not long-poll");
    assert.ok(rec.claims().every((s) => s.body.wait_ms === 0 || s.body.wait_ms === 2_000));
    assert.deepEqual(reportTrouble(mem.lines), []);
  });

  test("a report is not held by a long-poll: with a claim waiting, it goes by the old route at once", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const rec = recorder();
    const wc = new Client({ url: server().url, key: server().key, fetch: rec.fetch });
    // Two slots, one job: while it runs, the other slot's claim long-polls an empty queue for 6 s.
    const worker = new Worker(wc, { queue, concurrency: 2, claimWaitMs: 6_000, handleSignals: false, logger: mem.logger });
    let returnedAt = 0;
    worker.handle("k", async () => {
      await new Promise((r) => setTimeout(r, 500));
      returnedAt = Date.now();
      return "done";
    });
    const job = await c.enqueue({ queue, kind: "k" });
    const run = startWorker(worker);
    const j = await settled(c, job.id, ["succeeded"], 10_000);
    assert.equal(j.result, "done");
    const sentAt = rec.sent.find((s) => s.path === "/v1/jobs/complete" && s.body.items.some((i: any) => i.id === job.id))?.at;
    assert.ok(sentAt !== undefined, "sent by the batch route while the claim long-polled");
    // Held by the long-poll, it would go about 5 s after the handler returned; a stalled host may take a
    // second or two without that fault.
    assert.ok(sentAt - returnedAt < 3_500, `sent ${sentAt - returnedAt} ms after the handler returned`);
    assert.deepEqual(rec.carriedIds(), []);
    worker.shutdown();
    await run;
    assert.deepEqual(reportTrouble(mem.lines), []);
  });

  test("a one-slot worker's report rides the next claim, which does not wait; the claim after it long-polls", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const rec = recorder();
    const wc = new Client({ url: server().url, key: server().key, fetch: rec.fetch });
    const worker = new Worker(wc, { queue, concurrency: 1, claimWaitMs: 1_000, handleSignals: false, logger: mem.logger });
    worker.handle("k", async () => "done");
    const job = await c.enqueue({ queue, kind: "k" });
    const run = startWorker(worker);
    await settled(c, job.id, ["succeeded"], 5_000);
    await eventually("the claim after the carrying one", async () => rec.claims().length >= 3);
    worker.shutdown();
    await run;
    const claims = rec.claims();
    assert.deepEqual(
      claims.slice(0, 3).map((s) => [s.body.wait_ms, s.body.complete?.map((i: any) => i.id)]),
      [
        [1_000, undefined],
        [0, [job.id]],
        [1_000, undefined],
      ],
    );
    assert.deepEqual(rec.batchedIds(), []);
    assert.deepEqual(reportTrouble(mem.lines), []);
  });

  test("a claim whose answer was lost: its reports are resent by the old routes and answered as the first time", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const losts: LeaseLostEvent[] = [];
    // Every claim that carries reports reaches the server, but its answer is lost.
    const rec = recorder((s, real) =>
      s.body?.complete || s.body?.fail ? real().then(() => Promise.reject(new TypeError("simulated: the connection dropped before the answer"))) : undefined,
    );
    const wc = new Client({ url: server().url, key: server().key, fetch: rec.fetch });
    const worker = new Worker(wc, { queue, concurrency: 2, claimWaitMs: 500, handleSignals: false, logger: mem.logger, observer: { onLeaseLost: (e) => losts.push(e) } });
    worker.handle("ok", async () => "fine");
    worker.handle("fatal", async () => {
      throw new Fatal("never");
    });
    const [ok, fatal] = await c.enqueueBatch([
      { queue, kind: "ok" },
      { queue, kind: "fatal" },
    ]);
    const run = startWorker(worker);
    const j1 = await settled(c, ok!.job.id, ["succeeded"]);
    const j2 = await settled(c, fatal!.job.id, ["failed"]);
    assert.equal(j1.result, "fine");
    assert.equal(j2.last_error, "never");
    await eventually("the resends answered", async () => worker.jobsInFlight === 0);
    worker.shutdown();
    await run;
    assert.ok(rec.carrying().length >= 1, "a claim carried them");
    assert.ok(rec.batchedIds().includes(ok!.job.id) || rec.failedAloneIds().includes(fatal!.job.id), "resent by the old routes");
    for (const id of [...rec.carriedIds()]) assert.ok(rec.batchedIds().includes(id) || rec.failedAloneIds().includes(id), `${id} resent`);
    assert.deepEqual(await history(c, ok!.job.id), ["enqueued", "claimed", "succeeded"], "applied once");
    assert.deepEqual(await history(c, fatal!.job.id), ["enqueued", "claimed", "failed"]);
    assert.deepEqual(losts, []);
    assert.deepEqual(reportTrouble(mem.lines), []);
  });

  test("a claim refused as a whole does not lose its reports; a server that keeps refusing them gets them by the old routes", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    // Every claim carrying reports is refused as a server without the fields would refuse it (and the server never sees it).
    const refuse = () => Promise.resolve(Response.json({ error: { code: "invalid_argument", message: "unknown field `complete`" } }, { status: 400 }));
    const rec = recorder((s) => (s.body?.complete || s.body?.fail ? refuse() : undefined));
    const wc = new Client({ url: server().url, key: server().key, fetch: rec.fetch });
    const worker = new Worker(wc, { queue, concurrency: 1, claimWaitMs: 300, handleSignals: false, logger: mem.logger });
    worker.handle("ok", async (job) => job.payload);
    worker.handle("fatal", async () => {
      throw new Fatal("never");
    });
    const jobs = await c.enqueueBatch([
      { queue, kind: "ok", payload: 1 },
      { queue, kind: "fatal" },
      { queue, kind: "ok", payload: 3 },
      { queue, kind: "ok", payload: 4 },
      { queue, kind: "ok", payload: 5 },
    ]);
    const run = startWorker(worker);
    for (const r of jobs) {
      const j = await settled(c, r.job.id, r.job.kind === "fatal" ? ["failed"] : ["succeeded"]);
      assert.deepEqual(await history(c, j.id), ["enqueued", "claimed", j.state]);
    }
    await eventually("the reports answered", async () => worker.jobsInFlight === 0);
    worker.shutdown();
    await run;
    assert.equal(rec.carrying().length, 3, "three refusals in a row, then claims stop carrying");
    assert.ok(mem.lines.some((l) => l.includes("refuses reports on claims")));
    assert.deepEqual([...rec.batchedIds(), ...rec.failedAloneIds()].sort(), jobs.map((r) => r.job.id).sort());
    assert.deepEqual(reportTrouble(mem.lines), []);
  });

  test("a job whose report is on its way is not heartbeated", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const losts: LeaseLostEvent[] = [];
    // Claims that carry reports take 1.4 s to arrive: two heartbeat intervals of the 2 s lease, and well within the lease.
    const rec = recorder((s, real) => (s.body?.complete || s.body?.fail ? new Promise((r) => setTimeout(r, 1_400)).then(real) : undefined));
    const wc = new Client({ url: server().url, key: server().key, fetch: rec.fetch });
    const worker = new Worker(wc, { queue, concurrency: 2, leaseTtlMs: 2_000, claimWaitMs: 300, handleSignals: false, logger: mem.logger, observer: { onLeaseLost: (e) => losts.push(e) } });
    worker.handle("long", async () => {
      await new Promise((r) => setTimeout(r, 3_000));
      return "long";
    });
    worker.handle("quick", async () => {
      await new Promise((r) => setTimeout(r, 100));
      return "quick";
    });
    const [long, quick] = await c.enqueueBatch([
      { queue, kind: "long" },
      { queue, kind: "quick" },
    ]);
    const run = startWorker(worker);
    assert.equal((await settled(c, quick!.job.id, ["succeeded"])).result, "quick");
    assert.equal((await settled(c, long!.job.id, ["succeeded"])).result, "long");
    worker.shutdown();
    await run;
    const carriedAt = rec.carrying().find((s) => s.body.complete?.some((i: any) => i.id === quick!.job.id))?.at;
    assert.ok(carriedAt !== undefined, "a claim carried the quick job's report");
    const beats = rec.sent.filter((s) => s.path === "/v1/jobs/heartbeat");
    assert.ok(beats.some((s) => s.at > carriedAt + 400 && s.body.items.some((i: any) => i.id === long!.job.id)), "the long job was heartbeated meanwhile");
    const late = beats.filter((s) => s.at >= carriedAt && s.body.items.some((i: any) => i.id === quick!.job.id));
    assert.deepEqual(late, [], "no heartbeat of the quick job once its report was on its way");
    assert.deepEqual(await history(c, quick!.job.id), ["enqueued", "claimed", "succeeded"]);
    assert.deepEqual(await history(c, long!.job.id), ["enqueued", "claimed", "succeeded"]);
    assert.deepEqual(losts, []);
    assert.deepEqual(reportTrouble(mem.lines), []);
  });
});
