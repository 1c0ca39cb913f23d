// Enqueueing in the caller's own PostgreSQL transaction (node-postgres, a
// devDependency of the tests only), against a real server on a fresh
// PostgreSQL database: a job enqueued with the application's own INSERT
// exists once the transaction commits — the API shows it, and a worker
// waiting in a long-poll is woken for it — and not at all after a
// rollback; a refused input is InvalidArgument and writes nothing.

import { test, before, after, afterEach, type TestContext } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import * as api from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  defineTask,
  enqueueInTransaction,
  enqueueManyInTransaction,
  enqueueTaskInTransaction,
  InvalidArgument,
  NotFound,
  Worker,
  type PgQueryable,
} from "../src/index.js";
import { eventually, queueName, startServer, startWorker, stopWorkers, type Server } from "./harness.js";

let server: (Server & { stop: () => Promise<void> }) | undefined;
let db: pg.Client;
let tenant: string;
/** Whether the server's schema has the SQL functions (migration 22): a test of them against an older binary skips, saying so. */
let hasFunctions = false;

/** Skips the test when the server under test predates the SQL functions; answers whether it did. */
function predates(t: TestContext): boolean {
  if (hasFunctions) return false;
  t.skip("the server under test predates tether.enqueue (PostgreSQL migration 22)");
  return true;
}

before(async () => {
  server = await startServer("postgres");
  db = new pg.Client({ connectionString: server.databaseUrl });
  await db.connect();
  await db.query("CREATE TABLE orders (id int PRIMARY KEY, total int NOT NULL)");
  tenant = (await server.admin.whoami()).tenant.name;
  const { rows } = await db.query<{ ok: boolean }>("SELECT to_regprocedure('tether.enqueue(text,text,text,jsonb,jsonb)') IS NOT NULL AS ok");
  hasFunctions = rows[0]!.ok;
});
// A test that failed half-way must not leave its transaction open (outside one, ROLLBACK only warns).
afterEach(async () => {
  await db.query("ROLLBACK");
});
after(async () => {
  await stopWorkers();
  await db?.end();
  await server?.stop();
});

/** The order ids in the application's table. */
async function orders(): Promise<number[]> {
  return (await db.query<{ id: number }>("SELECT id FROM orders ORDER BY id")).rows.map((r) => r.id);
}

test("a pg.Client and a PoolClient fit PgQueryable", () => {
  const client: PgQueryable = db;
  const pool = new pg.Pool();
  const check = async () => {
    const conn = await pool.connect();
    const fits: PgQueryable = conn;
    return fits;
  };
  assert.equal(typeof client.query, "function");
  assert.equal(typeof check, "function");
  void pool.end();
});

test("committed with the application's own write: the job is there, and a waiting worker is woken for it", async (t) => {
  if (predates(t)) return;
  const c = server!.admin;
  const queue = queueName("emails");
  const started: Array<{ id: string; at: number }> = [];
  // A claim long-polls 30 s: only the commit's wake-up brings the job sooner.
  const worker = new Worker(c, { queue, claimWaitMs: 30_000, handleSignals: false });
  worker.handle("send_receipt", (job) => {
    started.push({ id: job.id, at: Date.now() });
    return { sent: (job.payload as { order: number }).order };
  });
  void startWorker(worker);
  // Its first claim is waiting before anything is enqueued.
  await eventually("the worker's claim to wait", async () => (await c.workers()).some((w) => w.worker_id === worker.workerId));
  await new Promise((r) => setTimeout(r, 300));

  await db.query("BEGIN");
  await db.query("INSERT INTO orders (id, total) VALUES ($1, $2)", [42, 1999]);
  const first = await enqueueInTransaction(db, tenant, {
    queue,
    kind: "send_receipt",
    payload: { order: 42 },
    idempotency_key: `receipt:42:${queue}`,
    priority: 5,
    max_attempts: 3,
    timeout_ms: 60_000,
    tags: ["receipt"],
    headers: { origin: "checkout" },
  });
  assert.equal(first.created, true);
  const again = await enqueueInTransaction(db, tenant, { queue, kind: "send_receipt", payload: { order: 42 }, idempotency_key: `receipt:42:${queue}` });
  assert.deepEqual(again, { id: first.id, created: false }, "the same transaction sees its own enqueue's key");
  await assert.rejects(c.get(first.id), NotFound, "nothing is visible before the commit");
  await db.query("COMMIT");
  const committedAt = Date.now();

  const job = await c.get(first.id);
  assert.equal(job.queue, queue);
  assert.deepEqual(job.payload, { order: 42 });
  assert.equal(job.priority, 5);
  assert.equal(job.max_attempts, 3);
  assert.equal(job.timeout_ms, 60_000);
  assert.deepEqual(job.tags, ["receipt"]);
  assert.deepEqual(job.headers, { origin: "checkout" });
  const done = await c.wait(first.id, { timeoutMs: 20_000 });
  assert.equal(done.state, "succeeded");
  assert.deepEqual(done.result, { sent: 42 });
  assert.deepEqual(await orders(), [42]);
  const pickedUp = started.find((s) => s.id === first.id)!.at - committedAt;
  assert.ok(pickedUp < 5_000, `woken by the commit, not the end of the 30 s long-poll (${pickedUp} ms)`);

  // Several at once, and a typed task, in one more transaction.
  const receipt = defineTask<{ order: number }, { sent: number }>({ kind: "send_receipt", queue, maxAttempts: 4 });
  await db.query("BEGIN");
  await db.query("INSERT INTO orders (id, total) VALUES (43, 500), (44, 700)");
  const many = await enqueueManyInTransaction(db, tenant, [
    { queue, kind: "send_receipt", payload: { order: 43 }, unique_key: `u43:${queue}` },
    { queue, kind: "send_receipt", payload: { order: 43 }, unique_key: `u43:${queue}` },
    { queue, kind: "send_receipt", payload: { order: 44 }, delay_ms: 3_600_000 },
  ]);
  assert.equal(many.length, 3);
  assert.deepEqual([many[0]!.created, many[1]!.created, many[2]!.created], [true, false, true]);
  assert.equal(many[1]!.id, many[0]!.id, "a later entry sees an earlier one's unique key");
  const typed = await enqueueTaskInTransaction(db, tenant, receipt, { order: 44 }, { priority: -1 });
  await db.query("COMMIT");
  assert.equal((await c.wait(many[0]!.id, { timeoutMs: 20_000 })).state, "succeeded");
  const typedJob = await c.wait(typed.id, { timeoutMs: 20_000 });
  assert.equal(typedJob.state, "succeeded");
  assert.equal(typedJob.max_attempts, 4, "the task's defaults");
  assert.equal(typedJob.priority, -1, "overridden per call");
  assert.equal((await c.get(many[2]!.id)).state, "queued", "the delayed one waits for its time");
  assert.deepEqual(await orders(), [42, 43, 44]);
});

test("rolled back: no job, no order", async (t) => {
  if (predates(t)) return;
  const c = server!.admin;
  const queue = queueName("emails");
  await db.query("BEGIN");
  await db.query("INSERT INTO orders (id, total) VALUES (50, 1)");
  const one = await enqueueInTransaction(db, tenant, { queue, kind: "send_receipt", payload: { order: 50 } });
  const [two] = await enqueueManyInTransaction(db, tenant, [{ queue, kind: "send_receipt", payload: { order: 50 } }]);
  await db.query("ROLLBACK");
  await assert.rejects(c.get(one.id), NotFound);
  await assert.rejects(c.get(two!.id), NotFound);
  assert.deepEqual((await c.list({ queue })).jobs, []);
  assert.ok(!(await orders()).includes(50));
});

test("a refused input is InvalidArgument with the API's message, and nothing is written", async (t) => {
  if (predates(t)) return;
  const c = server!.admin;
  const queue = queueName("emails");
  const cases: Array<[() => Promise<unknown>, RegExp]> = [
    [() => enqueueInTransaction(db, tenant, { queue, kind: "k", priority: 101 }), /invalid priority: must be between -100 and 100, got 101/],
    [() => enqueueManyInTransaction(db, tenant, [{ queue, kind: "k" }, { queue, kind: "k", run_at: "tomorrow" }]), /invalid jobs\[1\]\.run_at/],
    [() => enqueueInTransaction(db, tenant, { queue, kind: "k", depends_on: ["0190f1d2-0000-7000-8000-000000000000"] }), /depends_on/],
  ];
  for (const [enqueue, message] of cases) {
    await db.query("BEGIN");
    await db.query("INSERT INTO orders (id, total) VALUES (60, 1)");
    const refused = await enqueue().then(
      () => assert.fail("the input was accepted"),
      (e: unknown) => e,
    );
    assert.ok(refused instanceof InvalidArgument, `InvalidArgument, not ${String(refused)}`);
    assert.equal(refused.code, "invalid_argument");
    assert.match(refused.message, message);
    assert.equal((refused.cause as { code?: string }).code, "22023", "node-postgres's error is its cause");
    // The transaction is aborted: it can only roll back.
    await assert.rejects(db.query("SELECT 1"), /current transaction is aborted/);
    await db.query("ROLLBACK");
  }
  assert.deepEqual((await c.list({ queue })).jobs, []);
  assert.ok(!(await orders()).includes(60));
  // Other database errors are node-postgres's own.
  await assert.rejects(enqueueInTransaction({ query: () => Promise.reject(Object.assign(new Error("connection lost"), { code: "08006" })) }, tenant, { queue, kind: "k" }), /connection lost/);
});

test("with tracing, the job carries the active trace context", async (t) => {
  if (predates(t)) return;
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const queue = queueName("emails");
  const parent = api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
    spanId: "00f067aa0ba902b7",
    traceFlags: api.TraceFlags.SAMPLED,
  });
  const { id } = await api.context.with(parent, () => enqueueInTransaction(db, tenant, { queue, kind: "k" }, { tracing: api }));
  const [own] = await api.context.with(parent, () =>
    enqueueManyInTransaction(db, tenant, [{ queue, kind: "k", headers: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" } }], { tracing: api }),
  );
  // Outside a transaction block each statement commits by itself.
  assert.deepEqual((await server!.admin.get(id)).headers, { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" });
  assert.deepEqual((await server!.admin.get(own!.id)).headers, { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
});
