// Acting for a tenant (docs/API.md): a client with `tenant` sends
// `X-Tether-Tenant` on every request, its event streams included, so an
// admin key enqueues into another tenant and a worker built on that client
// claims there and gets its cancellations pushed. Other keys are refused.
// Against a real server on each backend.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, JobAborted, NotFound, PermissionDenied, Worker } from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

forEachBackend("tenant", (server) => {
  test("an admin key acting for a second tenant enqueues there, and a worker with that tenant claims it", async () => {
    const admin = server().admin;
    const name = queueName("acme");
    const t = await admin.createTenant(name);
    const own = new Client({ url: server().url, key: t.api_key });
    const actingByName = new Client({ url: server().url, key: server().key, tenant: name });
    const actingById = new Client({ url: server().url, key: server().key, tenant: t.tenant.id });
    assert.equal(actingByName.tenant, name);
    assert.equal((await actingByName.whoami()).tenant.id, t.tenant.id);
    assert.equal((await actingById.whoami()).tenant.name, name);

    const queue = queueName();
    const job = await actingByName.enqueue({ queue, kind: "greet", payload: { who: "acme" } });
    // It is the tenant's job: its own key reads it, the admin's own tenant does not have it.
    assert.equal((await own.get(job.id)).queue, queue);
    await assert.rejects(admin.get(job.id), NotFound);

    const mem = memoryLogger();
    const worker = new Worker(actingById, { queue, claimWaitMs: 300, handleSignals: false, logger: mem.logger });
    worker.handle("greet", (j) => ({ hello: (j.payload as { who: string }).who }));
    const aborted: unknown[] = [];
    worker.handle("long", async (_j, ctx) => {
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
      aborted.push(ctx.signal.reason);
      throw ctx.signal.reason;
    });
    startWorker(worker);
    const done = await own.wait(job.id, { timeoutMs: 20_000 });
    assert.ok(mem.lines.some((l) => l.startsWith("info key checked") && l.includes(`"tenant":"${name}"`)), mem.lines.join("\n"));
    assert.equal(done.state, "succeeded");
    assert.deepEqual(done.result, { hello: "acme" });
    assert.equal(done.worker_id, worker.workerId);

    // The worker's event stream acts for the tenant too: a cancel there is pushed to the handler.
    await eventually("the worker's event stream to open", async () => mem.lines.some((l) => l.includes("the event stream of cancellations is open")), 30_000);
    const long = await own.enqueue({ queue, kind: "long" });
    await eventually("the long job running", async () => (await own.get(long.id)).state === "running");
    await own.cancel(long.id);
    assert.equal((await own.wait(long.id, { timeoutMs: 30_000 })).state, "cancelled");
    assert.ok(aborted[0] instanceof JobAborted && aborted[0].why === "cancel");
    assert.ok(mem.lines.some((l) => l.startsWith("info cancel requested") && l.includes(`"via":"event stream"`)), mem.lines.join("\n"));
  });

  test("a key that is not an admin's may not act for a tenant; an unknown tenant is NotFound; the worker says so at start", async () => {
    const admin = server().admin;
    const a = await admin.createTenant(queueName("a"));
    const b = await admin.createTenant(queueName("b"));
    const refused = new Client({ url: server().url, key: a.api_key, tenant: b.tenant.name, retries: 0 });
    await assert.rejects(refused.queues(), PermissionDenied);
    // Even naming its own tenant.
    await assert.rejects(new Client({ url: server().url, key: a.api_key, tenant: a.tenant.name }).queues(), PermissionDenied);
    const { logger } = memoryLogger();
    await assert.rejects(new Worker(refused, { queue: queueName(), handleSignals: false, logger }).run(), (e: unknown) => {
      assert.ok(e instanceof PermissionDenied, String(e));
      assert.match(e.message, new RegExp(`may not act for tenant ${b.tenant.name}: only an admin key`));
      return true;
    });
    const unknown = new Client({ url: server().url, key: server().key, tenant: queueName("nobody") });
    await assert.rejects(unknown.queues(), NotFound);
    await assert.rejects(new Worker(unknown, { queue: queueName(), handleSignals: false, logger }).run(), (e: unknown) => e instanceof NotFound && /no such tenant/.test(e.message));
  });

  test("TETHER_TENANT is the default tenant; an empty one is none", async () => {
    const admin = server().admin;
    const t = await admin.createTenant(queueName("env"));
    const saved = process.env.TETHER_TENANT;
    try {
      process.env.TETHER_TENANT = t.tenant.name;
      const c = new Client({ url: server().url, key: server().key });
      assert.equal((await c.whoami()).tenant.id, t.tenant.id);
      // The option wins over the environment.
      assert.equal((await new Client({ url: server().url, key: server().key, tenant: "default" }).whoami()).tenant.name, "default");
      process.env.TETHER_TENANT = "";
      const none = new Client({ url: server().url, key: server().key });
      assert.equal(none.tenant, undefined);
      assert.equal((await none.whoami()).tenant.name, "default");
    } finally {
      if (saved === undefined) delete process.env.TETHER_TENANT;
      else process.env.TETHER_TENANT = saved;
    }
  });
});
