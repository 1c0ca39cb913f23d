// The programs in tools/ as their parents run them, against a real server:
// the chaos worker follows each job's plan (exact messages, results naming
// the worker) and prints its claims; the bench worker prints START lines
// (and CANCELLED ones in cancel mode), and runs with --hooks too; both exit
// 0 after SIGTERM and 3 at once when stdin closes.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";
import { join } from "node:path";
import type { Job, Json } from "../src/index.js";
import { eventually, PKG_DIR, queueName, startServer, type Server } from "./harness.js";

let server: (Server & { stop: () => Promise<void> }) | undefined;

before(async () => {
  server = await startServer("sqlite");
});
after(async () => {
  await server?.stop();
});

/** A tool process, its stdout lines as they come, and its exit. */
function start(tool: string, args: string[]) {
  const child: ChildProcessWithoutNullStreams = spawn(process.execPath, [join(PKG_DIR, "build-test/tools", tool), ...args], { stdio: ["pipe", "pipe", "pipe"] });
  const lines: string[] = [];
  createInterface({ input: child.stdout }).on("line", (l) => lines.push(l));
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const exitWithin = (ms: number) => Promise.race([exited, new Promise<"still running">((r) => setTimeout(() => r("still running"), ms))]);
  return { child, lines, exitWithin, stderr: () => stderr };
}

async function settled(id: string, state: Job["state"]): Promise<Job> {
  return eventually(`job ${id} ${state}`, async () => {
    const j = await server!.admin.get(id);
    return j.state === state ? j : undefined;
  });
}

async function history(id: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of server!.admin.eventsAll(id)) out.push(e.event);
  return out;
}

test("the chaos worker runs each job's plan, prints its claims, and stops on SIGTERM", async () => {
  const c = server!.admin;
  // Seed 1 (see chaos-plan.test.ts): n=2 ok, n=0 always_retry, n=30 fatal, n=5 a short snooze, n=6 a long one.
  const w = start("chaos-worker.js", [server!.url, server!.key, "1", "t1"]);
  try {
    await eventually("READY", async () => w.lines.includes("READY"));
    const jobs = await c.enqueueBatch(
      ([{ n: 2 }, { n: 0 }, { n: 30 }, { n: 5 }, { n: 6 }, { other: 1 }] as Json[]).map((payload) => ({ queue: "chaos", kind: "chaos", payload, max_attempts: 1 })),
    );
    const [ok, retry, fatal, inProcess, toQueue, noN] = jobs.map((r) => r.job.id) as [string, string, string, string, string, string];
    for (const [id, n] of [[ok, 2], [inProcess, 5], [toQueue, 6]] as const) {
      assert.deepEqual((await settled(id, "succeeded")).result, { n, by: "t1.m", attempt: 1 });
    }
    assert.deepEqual(await history(inProcess), ["enqueued", "claimed", "snoozed", "claimed", "succeeded"], "a short snooze goes to the server too");
    assert.deepEqual(await history(toQueue), ["enqueued", "claimed", "snoozed", "claimed", "succeeded"], "a long one goes back to the queue once");
    assert.equal((await settled(retry, "failed")).last_error, "chaos: planned failure on attempt 1");
    assert.equal((await settled(fatal, "failed")).last_error, "chaos: planned fatal failure");
    assert.equal((await settled(noN, "failed")).last_error, "chaos: payload without n");

    const now = Date.now() * 1000;
    const claims = w.lines.filter((l) => l.startsWith("CLAIM ")).map((l) => l.split(" "));
    for (const id of [ok, retry, fatal, noN]) {
      const mine = claims.filter((f) => f[1] === id);
      assert.equal(mine.length, 1, `one CLAIM line for ${id}: ${w.lines.join("\n")}`);
      const [, , attempt, token, worker, at] = mine[0]!;
      assert.equal(attempt, "1");
      assert.match(token!, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      assert.equal(worker, "t1.m");
      assert.ok(Math.abs(Number(at) - now) < 30_000_000, "µs since the epoch, now-ish");
    }
    assert.equal(claims.filter((f) => f[1] === toQueue).length, 2);
    // Snoozed once (the attempt given back), then claimed again at the same attempt.
    assert.deepEqual(claims.filter((f) => f[1] === inProcess).map((f) => f[2]), ["1", "1"]);
    assert.ok(w.lines.every((l) => /^(READY|CLAIM \S+ \d+ \S+ \S+ \d+|ERR \S+ \S+|LOST \S+ \S+ \S+ \d+)$/.test(l)), w.lines.join("\n"));
    w.child.kill("SIGTERM");
    assert.equal(await w.exitWithin(10_000), 0, w.stderr());
  } finally {
    w.child.kill("SIGKILL");
  }
});

test("the chaos worker exits 3 at once when its stdin closes, holding a job", async () => {
  const c = server!.admin;
  // Seed 1, n=11: a slow job (3.2 s), running when stdin closes.
  const w = start("chaos-worker.js", [server!.url, server!.key, "1", "t2"]);
  try {
    await eventually("READY", async () => w.lines.includes("READY"));
    const job = await c.enqueue({ queue: "chaos-slow", kind: "chaos", payload: { n: 11 } });
    await settled(job.id, "running");
    w.child.stdin.end();
    assert.equal(await w.exitWithin(2_000), 3, w.stderr());
    assert.equal((await c.get(job.id)).state, "running", "nothing graceful: the lease will lapse");
  } finally {
    w.child.kill("SIGKILL");
  }
});

test("the bench worker prints START for each job in pickup mode and stops on SIGTERM", async () => {
  const c = server!.admin;
  const queue = queueName("bench");
  const w = start("bench-worker.js", [server!.url, server!.key, queue, "4", "pickup"]);
  try {
    await eventually("READY", async () => w.lines.includes("READY"));
    const sent = Date.now() * 1000;
    const job = await c.enqueue({ queue, kind: "noop" });
    const done = await settled(job.id, "succeeded");
    assert.equal(done.result, null);
    const start = w.lines.find((l) => l.startsWith("START "))?.split(" ");
    assert.ok(start, w.lines.join("\n"));
    assert.equal(start[1], job.id);
    assert.ok(Number(start[2]) >= sent - 1000 && Number(start[2]) <= Date.now() * 1000 + 1000, "the handler's start, in µs since the epoch");
    w.child.kill("SIGTERM");
    assert.equal(await w.exitWithin(10_000), 0, w.stderr());
  } finally {
    w.child.kill("SIGKILL");
  }
});

test("the bench worker prints START and then CANCELLED when a running job is cancelled in cancel mode", async () => {
  const c = server!.admin;
  const queue = queueName("bench-cancel");
  const w = start("bench-worker.js", [server!.url, server!.key, queue, "4", "cancel"]);
  try {
    await eventually("READY", async () => w.lines.includes("READY"));
    const job = await c.enqueue({ queue, kind: "noop" });
    const started = await eventually("START", async () => w.lines.find((l) => l.startsWith(`START ${job.id} `)));
    const asked = Date.now() * 1000;
    await c.cancel(job.id);
    // The queue's lease is 30 s, so a heartbeat would bring it in 10 s at the earliest; the push is
    // expected at once, but only a minute proves anything on a stalled host.
    const cancelled = await eventually("CANCELLED", async () => w.lines.find((l) => l.startsWith(`CANCELLED ${job.id} `)), 60_000);
    assert.equal((await settled(job.id, "cancelled")).last_error, "cancelled on request");
    const [startUs, cancelledUs] = [Number(started.split(" ")[2]), Number(cancelled.split(" ")[2])];
    assert.ok(cancelledUs >= startUs && cancelledUs >= asked - 1000 && cancelledUs <= Date.now() * 1000 + 1000, `${started} / ${cancelled}`);
    assert.ok(w.lines.every((l) => /^(READY|START \S+ \d+|CANCELLED \S+ \d+)$/.test(l)), w.lines.join("\n"));
    w.child.kill("SIGTERM");
    assert.equal(await w.exitWithin(10_000), 0, w.stderr());
  } finally {
    w.child.kill("SIGKILL");
  }
});

test("the bench worker with --hooks runs its jobs with the hooks and tracing on; a flag it does not know exits 2", async () => {
  const c = server!.admin;
  const queue = queueName("bench-hooks");
  const w = start("bench-worker.js", [server!.url, server!.key, queue, "4", "throughput", "--hooks"]);
  try {
    await eventually("READY", async () => w.lines.includes("READY"));
    const jobs = await c.enqueueBatch(Array.from({ length: 20 }, () => ({ queue, kind: "noop" })));
    for (const { job } of jobs) assert.equal((await settled(job.id, "succeeded")).result, null);
    // @opentelemetry/api is a devDependency of the tests, so the bench worker finds it.
    assert.match(w.stderr(), /bench worker: hooks on; tracing on \(@opentelemetry\/api, no provider\)/);
    assert.deepEqual(w.lines, ["READY"], "throughput mode prints nothing per job");
    w.child.kill("SIGTERM");
    assert.equal(await w.exitWithin(10_000), 0, w.stderr());
  } finally {
    w.child.kill("SIGKILL");
  }
  const bad = start("bench-worker.js", [server!.url, server!.key, queue, "4", "throughput", "--hook"]);
  assert.equal(await bad.exitWithin(10_000), 2);
  assert.match(bad.stderr(), /usage: bench-worker .* \[--hooks\]/);
});
