// `unavailable`: a PostgreSQL database that refuses connections makes the
// server answer 503, which the client maps to Unavailable; once the
// database is back, the same client works again.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, Unavailable } from "../src/index.js";
import { DATABASE_URL, eventually, psql, startServer, type Server } from "./harness.js";

let server: (Server & { stop: () => Promise<void> }) | undefined;

before(async () => {
  server = await startServer("postgres");
});
after(async () => {
  if (server?.dbName) psql(DATABASE_URL, `ALTER DATABASE ${server.dbName} ALLOW_CONNECTIONS true`);
  await server?.stop();
});

test("a database that refuses connections answers Unavailable (503)", async () => {
  const db = server!.dbName!;
  const c = new Client({ url: server!.url, key: server!.key, retries: 1 });
  const job = await c.enqueue({ queue: "unavail", kind: "k" });
  psql(DATABASE_URL, `ALTER DATABASE ${db} ALLOW_CONNECTIONS false`);
  psql(DATABASE_URL, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db}'`);
  await assert.rejects(c.ready(), (e: unknown) => {
    assert.ok(e instanceof Unavailable, String(e));
    assert.equal(e.status, 503);
    assert.equal(e.code, "unavailable");
    return true;
  });
  psql(DATABASE_URL, `ALTER DATABASE ${db} ALLOW_CONNECTIONS true`);
  await eventually("the server to reconnect", async () => (await c.ready().catch(() => undefined))?.status === "ok");
  assert.equal((await c.get(job.id)).id, job.id);
});
