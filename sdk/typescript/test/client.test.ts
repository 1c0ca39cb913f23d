// Every Client method and every error class that can be provoked, against
// a real server on each backend.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import {
  AlreadyExists,
  Client,
  InvalidArgument,
  InvalidState,
  LeaseLost,
  MethodNotAllowed,
  NotFound,
  PayloadTooLarge,
  PermissionDenied,
  TetherError,
  TransportError,
  Unauthenticated,
  UnsupportedMediaType,
  errorFromApi,
  type Job,
} from "../src/index.js";
import { forEachBackend, queueName, serverHas } from "./harness.js";

test("errorFromApi maps codes to classes (unknown codes stay TetherError)", () => {
  const e = errorFromApi(415, "unsupported_media_type", "nope");
  assert.ok(e instanceof UnsupportedMediaType && e instanceof TetherError);
  assert.equal(e.code, "unsupported_media_type");
  assert.equal(e.status, 415);
  assert.equal(e.name, "UnsupportedMediaType");
  const u = errorFromApi(418, "teapot", "?");
  assert.equal(u.constructor, TetherError);
});

test("url and key fall back to TETHER_URL and TETHER_KEY", () => {
  const saved = { url: process.env.TETHER_URL, key: process.env.TETHER_KEY };
  process.env.TETHER_URL = "http://example.invalid:1234/";
  process.env.TETHER_KEY = "k";
  try {
    const c = new Client();
    assert.equal(c.url, "http://example.invalid:1234");
  } finally {
    if (saved.url === undefined) delete process.env.TETHER_URL;
    else process.env.TETHER_URL = saved.url;
    if (saved.key === undefined) delete process.env.TETHER_KEY;
    else process.env.TETHER_KEY = saved.key;
  }
});

test("transport errors: reads are retried with backoff, unsafe writes are not", async () => {
  let calls = 0;
  const counting: typeof fetch = (input, init) => {
    calls++;
    return fetch(input, init);
  };
  // Nothing listens on port 9 of localhost.
  const c = new Client({ url: "http://127.0.0.1:9", key: "x", retries: 2, fetch: counting });
  await assert.rejects(c.get(randomUUID()), TransportError);
  assert.equal(calls, 3, "a read is tried 1 + retries times");
  calls = 0;
  await assert.rejects(c.enqueue({ queue: "q", kind: "k" }), TransportError);
  assert.equal(calls, 1, "an enqueue without an idempotency key is sent once");
  calls = 0;
  await assert.rejects(c.enqueue({ queue: "q", kind: "k", idempotency_key: "i" }), TransportError);
  assert.equal(calls, 3, "an enqueue with an idempotency key is retried");
});

forEachBackend("client", (server) => {
  test("health, ready, metrics, openapi", async () => {
    const c = server().admin;
    assert.equal((await c.health()).status, "ok");
    assert.equal((await c.ready()).status, "ok");
    await c.enqueue({ queue: queueName("metrics"), kind: "k" });
    assert.match(await c.metrics(), /^tether_queue_jobs\{/m);
    const doc = await c.openapi();
    assert.ok((doc.paths as Record<string, unknown>)["/v1/jobs"]);
    const t = await c.createTenant(queueName("m"));
    await assert.rejects(new Client({ url: server().url, key: t.api_key }).metrics(), PermissionDenied);
  });

  test("enqueue, idempotency, get, list and its pages", async () => {
    const c = server().admin;
    const queue = queueName();
    const job = await c.enqueue({ queue, kind: "send_welcome", payload: { to: "ada@example.com" }, tags: ["t1"], priority: 5, max_attempts: 3 });
    assert.equal(job.queue, queue);
    assert.equal(job.state, "queued");
    assert.deepEqual(job.payload, { to: "ada@example.com" });
    assert.equal(job.max_attempts, 3);
    const first = await c.enqueueDetailed({ queue, kind: "k", idempotency_key: "idem-1" });
    assert.equal(first.created, true);
    const again = await c.enqueueDetailed({ queue, kind: "k", idempotency_key: "idem-1", payload: 2 });
    assert.equal(again.created, false);
    assert.equal(again.job.id, first.job.id);
    const got = await c.get(job.id);
    assert.equal(got.id, job.id);
    assert.deepEqual(got.tags, ["t1"]);
    const batch = await c.enqueueBatch([
      { queue, kind: "b", delay_ms: 60_000 },
      { queue, kind: "b", unique_key: "u-1" },
      { queue, kind: "b", unique_key: "u-1" },
    ]);
    assert.equal(batch.length, 3);
    assert.equal(batch[1]!.created, true);
    assert.equal(batch[2]!.created, false);
    assert.equal(batch[2]!.job.id, batch[1]!.job.id);
    const page = await c.list({ queue, limit: 2 });
    assert.equal(page.jobs.length, 2);
    assert.ok(page.next_cursor);
    const pages = [];
    for await (const p of c.listPages({ queue, limit: 2 })) pages.push(p);
    assert.ok(pages.length >= 2);
    const all: Job[] = [];
    for await (const j of c.listAll({ queue, limit: 2 })) all.push(j);
    assert.equal(all.length, 4);
    assert.equal(new Set(all.map((j) => j.id)).size, 4);
    const tagged = await c.list({ queue, tag: "t1" });
    assert.deepEqual(tagged.jobs.map((j) => j.id), [job.id]);
    const byKind = await c.list({ queue, kind: "b", state: "queued" });
    assert.equal(byKind.jobs.length, 2);
  });

  test("claim, heartbeat, complete, fail, snooze and the batch forms", async () => {
    const c = server().admin;
    const queue = queueName();
    await c.enqueueBatch([1, 2, 3, 4].map((n) => ({ queue, kind: "w", payload: n })));
    const claimed = await c.claim(queue, { worker_id: "t", limit: 4, lease_ttl_ms: 5000 });
    assert.equal(claimed.length, 4);
    const [a, b, d, e] = claimed as [typeof claimed[0], typeof claimed[0], typeof claimed[0], typeof claimed[0]];
    assert.ok(a.lease_token);
    assert.equal(a.state, "running");
    assert.equal(a.attempt, 1);
    const hb = await c.heartbeat(a.id, { lease_token: a.lease_token, progress: { pct: 10 } });
    assert.equal(hb.cancel_requested, false);
    assert.deepEqual((await c.get(a.id)).progress, { pct: 10 });
    const hbs = await c.heartbeatBatch([
      { id: a.id, lease_token: a.lease_token },
      { id: b.id, lease_token: randomUUID() },
    ]);
    assert.equal(hbs[0]!.ok, true);
    assert.equal(hbs[1]!.ok, false);
    if (!hbs[1]!.ok) assert.equal(hbs[1]!.error.code, "lease_lost");
    const done = await c.complete(a.id, { lease_token: a.lease_token, result: { ok: 1 } });
    assert.equal(done.state, "succeeded");
    assert.deepEqual(done.result, { ok: 1 });
    const batch = await c.completeBatch([
      { id: b.id, lease_token: b.lease_token, result: "b" },
      { id: d.id, lease_token: randomUUID() },
    ]);
    assert.deepEqual(batch[0], { id: b.id, ok: true });
    assert.equal(batch[1]!.ok, false);
    const failed = await c.fail(d.id, { lease_token: d.lease_token, error: "boom", retry_after_ms: 60_000 });
    assert.equal(failed.state, "queued");
    assert.equal(failed.last_error, "boom");
    assert.equal(failed.attempt, 1);
    const snoozed = await c.snooze(e.id, { lease_token: e.lease_token, delay_ms: 60_000 });
    assert.equal(snoozed.state, "queued");
    assert.equal(snoozed.attempt, 0, "a snooze gives the attempt back");
    await assert.rejects(c.complete(e.id, { lease_token: e.lease_token }), (err) => err instanceof LeaseLost || err instanceof InvalidState);
    // Reports are safe to resend: the same report with the token that ended
    // the attempt answers like the first, in single and batch form alike; a
    // different one with that token is invalid_state and changes nothing
    // (invariant 20).
    assert.deepEqual(await c.complete(a.id, { lease_token: a.lease_token, result: { ok: 1 } }), await c.get(a.id));
    await assert.rejects(c.complete(a.id, { lease_token: a.lease_token, result: { ok: 2 } }), InvalidState);
    assert.deepEqual((await c.get(a.id)).result, { ok: 1 });
    assert.deepEqual((await c.completeBatch([{ id: b.id, lease_token: b.lease_token, result: "b" }]))[0], { id: b.id, ok: true });
    assert.equal((await c.fail(d.id, { lease_token: d.lease_token, error: "boom", retry_after_ms: 60_000 })).attempt, 1);
    assert.equal((await c.snooze(e.id, { lease_token: e.lease_token, delay_ms: 60_000 })).attempt, 0);
  });

  test("events are paged and follow next_cursor", async () => {
    const c = server().admin;
    const queue = queueName();
    const job = await c.enqueue({ queue, kind: "k" });
    const [cl] = await c.claim(queue, { worker_id: "t" });
    await c.complete(job.id, { lease_token: cl!.lease_token });
    const page = await c.events(job.id, { limit: 1 });
    assert.equal(page.events.length, 1);
    assert.equal(page.events[0]!.event, "enqueued");
    assert.ok(page.next_cursor);
    const all = [];
    for await (const ev of c.eventsAll(job.id, { limit: 1 })) all.push(ev.event);
    assert.deepEqual(all, ["enqueued", "claimed", "succeeded"]);
  });

  test("cancel, replay, replayQueue", async () => {
    const c = server().admin;
    const queue = queueName();
    const job = await c.enqueue({ queue, kind: "k" });
    const cancelled = await c.cancel(job.id);
    assert.equal(cancelled.state, "cancelled");
    await assert.rejects(c.cancel(job.id), InvalidState);
    const replayed = await c.replay(job.id, { expires_at: "2999-01-01T00:00:00Z" });
    assert.equal(replayed.state, "queued");
    assert.equal(replayed.attempt, 0);
    assert.equal(replayed.expires_at, "2999-01-01T00:00:00.000Z");
    await assert.rejects(c.replay(job.id), InvalidState);
    // Two dead jobs, replayed in bulk.
    const dead = await c.enqueueBatch([{ queue, kind: "d" }, { queue, kind: "d" }]);
    const claimed = await c.claim(queue, { worker_id: "t", limit: 3 });
    for (const cl of claimed) {
      if (cl.kind === "d") await c.fail(cl.id, { lease_token: cl.lease_token, error: "x", fatal: true });
      else await c.complete(cl.id, { lease_token: cl.lease_token });
    }
    for (const d of dead) assert.equal((await c.get(d.job.id)).state, "failed");
    const r = await c.replayQueue(queue, { kind: "d" });
    assert.equal(r.replayed, 2);
    assert.equal(r.next_cursor, null);
    assert.equal((await c.get(dead[0]!.job.id)).state, "queued");
  });

  test("queues, getQueue, pause, resume, configureQueue", async () => {
    const c = server().admin;
    const queue = queueName();
    await c.enqueue({ queue, kind: "k" });
    const q = await c.getQueue(queue);
    assert.equal(q.name, queue);
    assert.equal(q.counts.queued, 1);
    assert.equal(q.ready, 1);
    assert.ok((await c.queues()).some((x) => x.name === queue));
    assert.equal((await c.pause(queue)).paused, true);
    assert.deepEqual(await c.claim(queue, { worker_id: "t" }), [], "a paused queue hands out nothing");
    assert.equal((await c.resume(queue)).paused, false);
    const conf = await c.configureQueue(queue, { max_attempts: 9, backoff: { base_ms: 2000, cap_ms: 9000 }, default_lease_ttl_ms: 12_000 });
    assert.equal(conf.max_attempts, 9);
    assert.deepEqual(conf.backoff, { base_ms: 2000, cap_ms: 9000 });
    assert.equal(conf.default_lease_ttl_ms, 12_000);
    assert.equal((await c.enqueue({ queue, kind: "k" })).max_attempts, 9, "an enqueue that names none takes the queue's attempts");
    const unused = await c.getQueue(queueName("unused"));
    assert.equal(unused.counts.queued, 0);
  });

  test("many jobs at once: cancelJobs and replayJobs answer each id on its own, in order", async () => {
    const c = server().admin;
    const queue = queueName();
    const [a, b] = (await c.enqueueBatch([{ queue, kind: "k" }, { queue, kind: "k" }])).map((r) => r.job.id) as [string, string];
    const missing = randomUUID();
    const cancelled = await c.cancelJobs([a, missing, b]);
    assert.deepEqual(cancelled.map((r) => [r.id, r.ok]), [[a, true], [missing, false], [b, true]]);
    assert.ok(cancelled[0]!.ok && cancelled[0]!.job.state === "cancelled");
    assert.ok(!cancelled[1]!.ok && cancelled[1]!.error.code === "not_found");
    const replayed = await c.replayJobs([b, a], { expires_at: "2999-01-01T00:00:00Z" });
    assert.deepEqual(replayed.map((r) => r.id), [b, a]);
    for (const r of replayed) {
      assert.ok(r.ok, JSON.stringify(r));
      assert.equal(r.job.state, "queued");
      assert.equal(r.job.expires_at, "2999-01-01T00:00:00.000Z");
    }
    const again = await c.replayJobs([a]);
    assert.ok(!again[0]!.ok && again[0]!.error.code === "invalid_state", "a queued job is not replayed");
    await assert.rejects(c.cancelJobs([]), InvalidArgument);
  });

  test("list narrows by id prefix and creation time", async () => {
    const c = server().admin;
    const queue = queueName();
    const first = await c.enqueue({ queue, kind: "k" });
    await new Promise((r) => setTimeout(r, 20));
    const second = await c.enqueue({ queue, kind: "k" });
    const prefix = second.id.replace(/-/g, "").slice(0, 20);
    assert.deepEqual((await c.list({ queue, id_prefix: prefix })).jobs.map((j) => j.id), [second.id]);
    assert.deepEqual((await c.list({ queue, created_after: second.created_at })).jobs.map((j) => j.id), [second.id]);
    assert.deepEqual((await c.list({ queue, created_before: second.created_at })).jobs.map((j) => j.id), [first.id]);
    await assert.rejects(c.list({ id_prefix: "not hex" }), InvalidArgument);
  });

  test("throughput counts a queue's outcomes per minute; workers lists who holds jobs; deleteQueue removes an empty queue", async () => {
    const c = server().admin;
    const queue = queueName();
    const job = await c.enqueue({ queue, kind: "k" });
    const [claimed] = await c.claim(queue, { worker_id: "tp-worker" });
    assert.ok(claimed);
    const holding = (await c.workers()).find((w) => w.worker_id === "tp-worker");
    assert.ok(holding, "a worker holding a job is listed");
    assert.deepEqual(holding.queues, [queue]);
    assert.equal(holding.running, 1);
    await c.complete(job.id, { lease_token: claimed.lease_token });
    const t = await c.throughput(queue, { minutes: 5 });
    assert.equal(t.minutes.length, 5);
    assert.equal(t.minutes.reduce((n, m) => n + m.succeeded, 0), 1);
    assert.ok(t.run_ms && t.wait_ms, "percentiles of the finished job");
    assert.equal((await c.throughput(queue)).minutes.length, 60, "an hour by default");
    await assert.rejects(c.throughput(queue, { minutes: 0 }), InvalidArgument);
    await assert.rejects(c.deleteQueue(queue), InvalidState, "a queue holding a job stays");
    const empty = queueName("empty");
    await c.pause(empty);
    assert.ok((await c.queues()).some((q) => q.name === empty));
    await c.deleteQueue(empty);
    assert.ok(!(await c.queues()).some((q) => q.name === empty));
    await assert.rejects(c.deleteQueue(empty), NotFound);
  });

  test("ensureSchedule creates, leaves unchanged and replaces by name, keeping the id", async (t) => {
    if (!(await serverHas(server(), "PUT /v1/schedules/{id}"))) return t.skip("the server under test predates PUT /v1/schedules/{name}");
    const c = server().admin;
    const queue = queueName();
    const name = queueName("declared");
    const body = { cron: "0 3 * * *", timezone: "Europe/Paris", queue, kind: "nightly", payload: { a: 1 } };
    const created = await c.ensureSchedule(name, body);
    assert.equal(created.outcome, "created");
    assert.equal(created.schedule.name, name);
    assert.equal((await c.ensureSchedule(name, body)).outcome, "unchanged");
    const updated = await c.ensureSchedule(name, { ...body, cron: "0 4 * * *" });
    assert.equal(updated.outcome, "updated");
    assert.equal(updated.schedule.id, created.schedule.id, "its id is kept");
    assert.equal(updated.schedule.cron, "0 4 * * *");
    assert.equal(updated.schedule.timezone, "Europe/Paris");
    // Exactly the body: what it leaves out takes its default.
    assert.equal((await c.ensureSchedule(name, { cron: "0 4 * * *", queue, kind: "nightly" })).schedule.timezone, "UTC");
    await assert.rejects(c.ensureSchedule(name, { ...body, cron: "not cron" }), InvalidArgument);
    await c.deleteSchedule(created.schedule.id);
  });

  test("headers travel with a job: enqueue, claim, get", async (t) => {
    if (!(await serverHas(server(), "PUT /v1/workers/{worker_id}"))) return t.skip("the server under test predates job headers");
    const c = server().admin;
    const queue = queueName();
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const job = await c.enqueue({ queue, kind: "k", headers: { traceparent } });
    assert.deepEqual(job.headers, { traceparent });
    const [claimed] = await c.claim(queue, { worker_id: "h" });
    assert.deepEqual(claimed!.headers, { traceparent });
    assert.deepEqual((await c.enqueue({ queue, kind: "k" })).headers, {}, "none: {}");
    await assert.rejects(c.enqueue({ queue, kind: "k", headers: { "bad name": "x" } }), InvalidArgument);
  });

  test("schedules: create, get, list, patch, trigger, runs, delete; cronPreview", async () => {
    const c = server().admin;
    const queue = queueName();
    const name = queueName("sched");
    const s = await c.createSchedule({ name, cron: "0 3 * * *", timezone: "Europe/Paris", queue, kind: "nightly", payload: { a: 1 } });
    assert.equal(s.name, name);
    assert.equal(s.enabled, true);
    assert.equal(s.overlap, "allow");
    assert.ok(s.next_run_at);
    assert.equal((await c.getSchedule(s.id)).id, s.id);
    assert.ok((await c.listSchedules()).some((x) => x.id === s.id));
    const listed = (await c.listSchedules({ runs: 2, next: 3 })).find((x) => x.id === s.id)!;
    assert.equal(listed.next_runs?.length, 3, "next: the next fire instants");
    assert.deepEqual(listed.recent_runs, [], "runs: none yet");
    await assert.rejects(c.createSchedule({ name, cron: "* * * * *", queue, kind: "k" }), AlreadyExists);
    await assert.rejects(c.createSchedule({ name: queueName("s"), cron: "not cron", queue, kind: "k" }), InvalidArgument);
    const p = await c.patchSchedule(s.id, { enabled: false, overlap: "skip" });
    assert.equal(p.enabled, false);
    assert.equal(p.next_run_at, null);
    assert.equal(p.overlap, "skip");
    const job = await c.triggerSchedule(s.id);
    assert.equal(job.queue, queue);
    assert.equal(job.kind, "nightly");
    const runs = await c.scheduleRuns(s.id);
    assert.equal(runs.length, 1);
    assert.equal(runs[0]!.job_id, job.id);
    assert.equal(runs[0]!.outcome, "enqueued");
    await c.deleteSchedule(s.id);
    await assert.rejects(c.getSchedule(s.id), NotFound);
    const times = await c.cronPreview({ cron: "30 2 * * *", timezone: "America/New_York", from: "2026-03-07T12:00:00Z", count: 2 });
    assert.deepEqual(times, ["2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"]);
  });

  test("tenants and keys: create, list, revoke; permission and authentication errors", async () => {
    const c = server().admin;
    const name = queueName("tenant");
    const t = await c.createTenant(name);
    assert.equal(t.tenant.name, name);
    assert.ok(t.api_key);
    assert.ok((await c.listTenants()).some((x) => x.id === t.tenant.id));
    await assert.rejects(c.createTenant(name), AlreadyExists);
    const tc = new Client({ url: server().url, key: t.api_key });
    await assert.rejects(tc.listTenants(), PermissionDenied);
    // Tenants are isolated: the admin's jobs are not found by the tenant.
    const job = await c.enqueue({ queue: queueName(), kind: "k" });
    await assert.rejects(tc.get(job.id), NotFound);
    const k = await c.createKey(t.tenant.id, { name: "second" });
    const keys = await c.listKeys(t.tenant.id);
    assert.ok(keys.some((x) => x.id === k.key_id && x.name === "second" && x.revoked_at === null));
    await assert.rejects(c.createKey(t.tenant.id, { admin: true }), InvalidArgument);
    const kc = new Client({ url: server().url, key: k.api_key });
    assert.ok(Array.isArray(await kc.queues()));
    await c.revokeKey(k.key_id);
    await assert.rejects(kc.queues(), Unauthenticated);
    assert.ok((await c.listKeys(t.tenant.id)).find((x) => x.id === k.key_id)!.revoked_at);
    await assert.rejects(new Client({ url: server().url, key: "tth_nope" }).queues(), Unauthenticated);
  });

  test("suspend and resume a tenant: its key is refused, then accepted again", async () => {
    const c = server().admin;
    const t = await c.createTenant(queueName("susp"));
    assert.equal(t.tenant.suspended_at, null);
    const tc = new Client({ url: server().url, key: t.api_key, retries: 0 });
    assert.ok(Array.isArray(await tc.queues()));
    const s = await c.suspendTenant(t.tenant.id);
    assert.equal(s.id, t.tenant.id);
    assert.ok(s.suspended_at && !Number.isNaN(Date.parse(s.suspended_at)), "suspended_at is a timestamp");
    await assert.rejects(tc.queues(), (e: unknown) => {
      assert.ok(e instanceof PermissionDenied);
      assert.equal(e.status, 403);
      assert.equal(e.code, "permission_denied");
      assert.match(e.message, /suspended/);
      return true;
    });
    // Suspending again keeps the first instant; the listing shows it.
    assert.equal((await c.suspendTenant(t.tenant.id)).suspended_at, s.suspended_at);
    assert.equal((await c.listTenants()).find((x) => x.id === t.tenant.id)!.suspended_at, s.suspended_at);
    const me = await c.whoami();
    await assert.rejects(c.suspendTenant(me.tenant.id), InvalidArgument);
    await assert.rejects(c.suspendTenant("00000000-0000-0000-0000-000000000000"), NotFound);
    await assert.rejects(tc.suspendTenant(t.tenant.id), PermissionDenied);
    const r = await c.resumeTenant(t.tenant.id);
    assert.equal(r.suspended_at, null);
    assert.ok(Array.isArray(await tc.queues()));
    assert.equal((await c.resumeTenant(t.tenant.id)).suspended_at, null);
  });

  test("whoami answers the key's tenant", async () => {
    const c = server().admin;
    const me = await c.whoami();
    assert.equal(me.tenant.name, "default");
    assert.equal(me.admin, true);
    assert.ok(me.key_id);
    const t = await c.createTenant(queueName("who"));
    const them = await new Client({ url: server().url, key: t.api_key }).whoami();
    assert.deepEqual(them.tenant, { id: t.tenant.id, name: t.tenant.name });
    assert.equal(them.admin, false);
  });

  test("error classes: invalid argument, not found, method not allowed, payload too large", async () => {
    const c = server().admin;
    await assert.rejects(c.enqueue({ queue: "bad name!", kind: "k" }), (e: unknown) => {
      assert.ok(e instanceof InvalidArgument);
      assert.equal(e.status, 400);
      assert.equal(e.code, "invalid_argument");
      return true;
    });
    await assert.rejects(c.enqueue({ queue: "q", kind: "k", delay_ms: 5, run_at: "2030-01-01T00:00:00Z" }), InvalidArgument);
    await assert.rejects(c.get(randomUUID()), NotFound);
    await assert.rejects(c.get("not-a-uuid"), NotFound);
    await assert.rejects(c.request("DELETE", "/v1/jobs"), MethodNotAllowed);
    await assert.rejects(c.enqueue({ queue: queueName(), kind: "k", payload: "x".repeat(1_100_000) }), PayloadTooLarge);
  });
});
