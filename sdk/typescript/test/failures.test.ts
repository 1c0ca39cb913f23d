// How a worker tells of a handler's failure, against a real server on each
// backend: each failed attempt is logged once (warn while the job will run
// again, error when it failed for good) with the job, the error's message
// and the user's stack, by a given logger and by the default one on
// stderr; the stored error's stack is the user's, without the SDK's frames;
// and a worker runs 8 handlers at once unless told otherwise.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, Fatal, Worker, type Job } from "../src/index.js";
import { forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

/** Where the handlers below throw from: a function of this file, so its frame names this file. */
function parseAddress(payload: unknown): string {
  const to = (payload as { to?: unknown } | null)?.to;
  if (typeof to !== "string") throw new TypeError(`no address in ${JSON.stringify(payload)}`);
  return to;
}

/** {@link parseAddress} after an await: its stack goes on through the awaits of its callers. */
async function parseLater(payload: unknown): Promise<string> {
  await new Promise((r) => setTimeout(r, 5));
  return parseAddress(payload);
}

/** A frame of this file, e.g. `(file:///…/build-test/test/failures.test.js:15:37)`. */
const THIS_FILE = /failures\.test\.js:\d+:\d+/;
/** A frame of the SDK's own compiled code. */
const SDK_FRAME = /[/\\](src|dist)[/\\](worker|client|handler|index)\.js/;

/** The job once it has finished, or fails the test after 20 s. */
async function finished(c: Client, id: string): Promise<Job> {
  const j = await c.wait(id, { timeoutMs: 20_000 });
  assert.ok(["succeeded", "failed", "cancelled"].includes(j.state), `job ${id} still ${j.state}`);
  return j;
}

forEachBackend("failures", (server) => {
  test("a failed attempt is logged once: warn while the job will run again, error on its last; the stored stack is the user's", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 300, handleSignals: false, logger: mem.logger });
    worker.handle("send", (job) => ({ to: parseAddress(job.payload) }));
    const job = await c.enqueue({ queue, kind: "send", payload: { nobody: true }, max_attempts: 2, backoff: { base_ms: 100, cap_ms: 200 } });
    startWorker(worker);
    const done = await finished(c, job.id);
    assert.equal(done.state, "failed");
    assert.equal(done.attempt, 2);

    const failures = mem.lines.filter((l) => /^(warn|error) job failed/.test(l));
    assert.equal(failures.length, 2, mem.lines.join("\n"));
    const [first, last] = failures.map((l) => {
      const [level, ...rest] = l.split(" ");
      const text = rest.join(" ");
      return { level, text, fields: JSON.parse(text.slice(text.indexOf("{"))) as Record<string, unknown> };
    }) as [{ level: string; text: string; fields: Record<string, any> }, { level: string; text: string; fields: Record<string, any> }];
    assert.equal(first.level, "warn");
    assert.match(first.text, /^job failed; it will run again /);
    assert.equal(last.level, "error");
    assert.match(last.text, /^job failed for good \(no attempts left\) /);
    for (const [i, f] of [first, last].entries()) {
      assert.equal(f.fields.job_id, job.id);
      assert.equal(f.fields.kind, "send");
      assert.equal(f.fields.queue, queue);
      assert.equal(f.fields.attempt, i + 1);
      assert.equal(f.fields.max_attempts, 2);
      assert.equal(f.fields.error, 'no address in {"nobody":true}');
      assert.match(f.fields.stack, /^TypeError: no address in/);
      assert.match(f.fields.stack, THIS_FILE);
      assert.doesNotMatch(f.fields.stack, SDK_FRAME);
    }

    // What the server keeps: the message and the user's frames, first of all the handler's helper.
    const stored = done.last_error!;
    const frames = stored.split("\n").filter((l) => /^\s+at /.test(l));
    assert.match(stored, /^TypeError: no address in \{"nobody":true\}\n/);
    assert.ok(frames.length >= 1, stored);
    assert.match(frames[0]!, /at parseAddress .*failures\.test\.js:\d+:\d+/, stored);
    assert.ok(frames.every((f) => !SDK_FRAME.test(f) && !f.includes("worker.js")), `no frame of the SDK:\n${stored}`);
    assert.ok(!frames.at(-1)!.includes("node:internal"), `no scheduler frame trails the user's:\n${stored}`);
  });

  test("a Fatal is logged once as an error, with the stack of the throw; an async handler's stack keeps its await frames", async () => {
    const c = server().admin;
    const queue = queueName();
    const mem = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 300, handleSignals: false, logger: mem.logger });
    worker.handle("fatal", () => {
      throw new Fatal("the address is refused");
    });
    worker.handle("later", async (job) => await parseLater(job.payload));
    const [fatal, later] = await c.enqueueBatch([
      { queue, kind: "fatal", max_attempts: 5 },
      { queue, kind: "later", payload: 7, max_attempts: 1 },
    ]);
    startWorker(worker);
    const f = await finished(c, fatal!.job.id);
    assert.equal(f.state, "failed");
    assert.equal(f.attempt, 1);
    assert.equal(f.last_error, "the address is refused", "a Fatal stores its message alone");
    const l = await finished(c, later!.job.id);
    assert.equal(l.state, "failed");
    assert.match(l.last_error!, /at parseAddress .*failures\.test\.js/);
    assert.match(l.last_error!, /at parseLater .*failures\.test\.js/);
    assert.match(l.last_error!, /at async .*failures\.test\.js/, "the handler that awaited it");
    assert.doesNotMatch(l.last_error!, SDK_FRAME);

    const fatalLines = mem.lines.filter((x) => x.includes(fatal!.job.id) && /^(warn|error) job failed/.test(x));
    assert.equal(fatalLines.length, 1, mem.lines.join("\n"));
    assert.match(fatalLines[0]!, /^error job failed for good \(fatal\) /);
    const fields = JSON.parse(fatalLines[0]!.slice(fatalLines[0]!.indexOf("{")));
    assert.equal(fields.error, "the address is refused");
    assert.match(fields.stack, /^Fatal: the address is refused\n\s+at .*failures\.test\.js/);
    const laterLines = mem.lines.filter((x) => x.includes(later!.job.id) && /^(warn|error) job failed/.test(x));
    assert.equal(laterLines.length, 1);
    assert.match(laterLines[0]!, /^error job failed for good \(no attempts left\) /);
  });

  test("the default logger writes each failure on stderr with the job, the message and the user's stack under it", async () => {
    const c = server().admin;
    const queue = queueName();
    const worker = new Worker(c, { queue, claimWaitMs: 300, handleSignals: false });
    worker.handle("send", (job) => parseAddress(job.payload));
    const job = await c.enqueue({ queue, kind: "send", payload: null, max_attempts: 3, backoff: { base_ms: 60_000, cap_ms: 60_000 } });
    let written = "";
    const write = process.stderr.write;
    process.stderr.write = ((chunk: string | Uint8Array) => {
      written += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString();
      return true;
    }) as typeof process.stderr.write;
    try {
      const run = startWorker(worker);
      for (const end = Date.now() + 20_000; !written.includes("job failed"); ) {
        assert.ok(Date.now() < end, `nothing logged:\n${written}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      worker.shutdown();
      await run;
    } finally {
      process.stderr.write = write;
    }
    const lines = written.split("\n");
    const at = lines.findIndex((l) => l.includes("job failed"));
    assert.equal(lines.filter((l) => l.includes("job failed")).length, 1, written);
    assert.match(
      lines[at]!,
      new RegExp(`^\\S+ WARN tether worker: job failed; it will run again job_id=${job.id} kind=send queue=${queue} attempt=1 max_attempts=3 error=no address in null$`),
    );
    assert.equal(lines[at + 1], "TypeError: no address in null");
    assert.match(lines[at + 2]!, /^\s+at parseAddress .*failures\.test\.js:\d+:\d+/);
    const stack = [];
    for (let i = at + 2; i < lines.length && /^\s+at /.test(lines[i]!); i++) stack.push(lines[i]!);
    assert.ok(stack.every((l) => !SDK_FRAME.test(l)), stack.join("\n"));
  });

  test("a worker runs 8 handlers at once unless told otherwise", async () => {
    const c = server().admin;
    const queue = queueName();
    const { logger } = memoryLogger();
    const limits: number[] = [];
    const recording: typeof fetch = (input, init) => {
      if (String(input).endsWith("/claim")) limits.push((JSON.parse(String(init?.body)) as { limit: number }).limit);
      return fetch(input, init);
    };
    const worker = new Worker(new Client({ url: server().url, key: server().key, fetch: recording }), { queue, claimWaitMs: 300, handleSignals: false, logger });
    assert.equal(worker.concurrency, 8);
    let running = 0;
    let most = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    worker.handle("k", async () => {
      most = Math.max(most, ++running);
      await gate;
      running--;
    });
    const jobs = await c.enqueueBatch(Array.from({ length: 10 }, () => ({ queue, kind: "k" })));
    startWorker(worker);
    for (let end = Date.now() + 20_000; most < 8; ) {
      assert.ok(Date.now() < end, `only ${most} at once`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(most, 8, "never more than 8");
    assert.equal(limits[0], 8, "an idle worker claims 8");
    release();
    for (const r of jobs) assert.equal((await finished(c, r.job.id)).state, "succeeded");
  });
});
