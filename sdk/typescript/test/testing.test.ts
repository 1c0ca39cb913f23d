// tether-client/testing: startTetherServer (a real server on a temporary
// SQLite directory, the binary found as documented), freshTenant (a tenant
// of its own per test), and drain (a worker worked in-process until nothing
// is due: its summary, a handler's error thrown in the test with its own
// stack, a second drain of the same worker, a time limit), on each backend.
// The packed package's subpath export and its `tether-server` lookup are
// tested by pack.test.ts.

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Client, Fatal, RetryAfter, Snooze, Unauthenticated, Worker, type Job } from "../src/index.js";
import { drain, startTetherServer, tetherBinary } from "../src/testing.js";
import { forEachBackend, TETHER_BIN } from "./harness.js";

/** Runs `f` with the environment variables `vars` set (undefined: unset), then puts them back. */
async function withEnv<T>(vars: Record<string, string | undefined>, f: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const set = (values: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  set(vars);
  try {
    return await f();
  } finally {
    set(saved);
  }
}

test("startTetherServer starts a ready server; each fresh tenant starts empty; stop ends it", async () => {
  const server = await withEnv({ TETHER_BIN: resolve(TETHER_BIN) }, () => startTetherServer());
  try {
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.deepEqual(await server.client().ready(), { status: "ok" });
    const me = await server.client().whoami();
    assert.equal(me.admin, true);
    const a = await server.freshTenant();
    const b = await server.freshTenant("billing");
    assert.match(a.tenant, /^test-[0-9a-f]{12}$/);
    assert.match(b.tenant, /^billing-[0-9a-f]{12}$/);
    assert.equal((await a.client.whoami()).tenant.name, a.tenant);
    const job = await a.client.enqueue({ queue: "emails", kind: "k" });
    assert.deepEqual((await a.client.list({ queue: "emails" })).jobs.map((j) => j.id), [job.id]);
    assert.deepEqual(await b.client.queues(), [], "another tenant sees none of it");
    assert.deepEqual((await server.client().list({ queue: "emails" })).jobs, [], "nor does the default tenant");
  } finally {
    await server.stop();
  }
  assert.throws(() => process.kill(server.pid, 0), { code: "ESRCH" }, "the process has ended");
  assert.ok(!existsSync(server.dataDir), "its data directory is removed");
});

test("the binary is TETHER_BIN, else tether on PATH; without one the error says how to get it", async () => {
  const dir = mkdtempSync(join(tmpdir(), "tether-ts-path-"));
  try {
    symlinkSync(resolve(TETHER_BIN), join(dir, "tether"));
    assert.equal(await withEnv({ TETHER_BIN: undefined, PATH: dir }, tetherBinary), join(dir, "tether"));
    assert.equal(await withEnv({ TETHER_BIN: resolve(TETHER_BIN), PATH: dir }, tetherBinary), resolve(TETHER_BIN));
    await assert.rejects(
      withEnv({ TETHER_BIN: undefined, PATH: join(dir, "nothing-here") }, tetherBinary),
      /no tether server binary: set TETHER_BIN to its path, install the tether-server npm package .* or put `tether` on PATH/,
    );
    await assert.rejects(withEnv({ TETHER_BIN: join(dir, "missing") }, tetherBinary), /TETHER_BIN=.*missing is not an executable tether binary/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

forEachBackend("drain", (server) => {
  test("drain works the queues until nothing is due and counts what happened", async () => {
    const { client } = await server().test.freshTenant();
    const worker = new Worker(client, { queue: ["shop", "mail"], claimWaitMs: 5_000 });
    worker.handle("charge", (job) => ({ charged: job.payload }));
    worker.handle("receipt", async (_job, ctx) => (await ctx.dependencies()).map((d) => d.result));
    worker.handle("later", () => {
      throw new RetryAfter(3_600_000, "the provider is busy");
    });
    worker.handle("refused", () => {
      throw new Fatal("bad address");
    });
    worker.handle("busy", () => {
      throw new Snooze(3_600_000);
    });
    const [charge, receipt] = await client.enqueueBatch([
      { queue: "shop", kind: "charge", payload: 42 },
      { queue: "mail", kind: "receipt", depends_on_entries: [0] },
    ]);
    const later = await client.enqueue({ queue: "mail", kind: "later" });
    await client.enqueue({ queue: "mail", kind: "refused" });
    await client.enqueue({ queue: "mail", kind: "busy" });
    const started = Date.now();
    const summary = await drain(worker);
    assert.deepEqual(summary, { succeeded: 2, failed: 1, retried: 1, snoozed: 1, cancelled: 0, errors: [] });
    assert.ok(Date.now() - started < 5_000, "its claims do not long-poll the worker's 5 s");
    // The receipt waited for the charge, then ran; the retry is due later, and stays.
    assert.equal((await client.get(charge!.job.id)).state, "succeeded");
    assert.deepEqual((await client.get(receipt!.job.id)).result, [{ charged: 42 }]);
    assert.equal((await client.get(later.id)).state, "queued");
    assert.equal(worker.claimWaitMs, 5_000, "the worker's own settings are left as they were");
    // The same worker, drained again: only what is due now.
    const again = await client.enqueue({ queue: "shop", kind: "charge", payload: 7 });
    assert.deepEqual(await drain(worker), { succeeded: 1, failed: 0, retried: 0, snoozed: 0, cancelled: 0, errors: [] });
    assert.deepEqual((await client.get(again.id)).result, { charged: 7 });
    assert.deepEqual(await drain(worker), { succeeded: 0, failed: 0, retried: 0, snoozed: 0, cancelled: 0, errors: [] });
  });

  test("a failing handler's error is thrown by drain, with the handler's stack", async () => {
    const { client } = await server().test.freshTenant();
    const worker = new Worker(client, { queue: "emails", logger: { debug() {}, info() {}, warn() {}, error() {} } });
    function sendWelcome(job: Job) {
      const payload = job.payload as { to: string; user?: { name: string } };
      // A bug: the payload has no user.
      return { greeting: `hello ${payload.user!.name}` };
    }
    worker.handle("send_welcome", sendWelcome);
    await client.enqueue({ queue: "emails", kind: "send_welcome", payload: { to: "ada@example.com" }, max_attempts: 2 });
    await assert.rejects(drain(worker), (e: unknown) => {
      assert.ok(e instanceof TypeError, `a TypeError, not ${String(e)}`);
      assert.match(e.message, /name/);
      assert.match(e.stack!.split("\n")[1]!, /at sendWelcome \(/, "its own stack: the handler's frame first");
      return true;
    });
    // Told not to throw, it answers the errors in the summary; the job is retried, then fails for good.
    const bob = await client.enqueue({ queue: "emails", kind: "send_welcome", payload: { to: "bob@example.com" }, max_attempts: 1 });
    const summary = await drain(worker, { rethrow: false });
    assert.equal(summary.failed, 1);
    assert.equal(summary.errors.length, 1);
    assert.ok(summary.errors[0] instanceof TypeError);
    assert.equal((await client.get(bob.id)).state, "failed");
  });

  test("drain gives up past its time limit, saying what is left; a refused key is thrown", async () => {
    const { client } = await server().test.freshTenant();
    const worker = new Worker(client, { queue: "emails" });
    worker.handle("k", () => null);
    await client.pause("emails"); // its job is due, and nobody gets it
    await client.enqueue({ queue: "emails", kind: "k" });
    await assert.rejects(drain(worker, { timeoutMs: 500 }), /drain: still due after 500 ms: queue emails: 1 ready, 0 running/);
    const stranger = new Worker(new Client({ url: server().url, key: "tth_not_a_key" }), { queue: "emails" });
    await assert.rejects(drain(stranger), Unauthenticated);
  });
});
