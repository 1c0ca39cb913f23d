// `npm pack` makes a package that installs into an empty project and runs
// there on its own: a producer and a worker, against a real server. (It
// packs a copy of the sources: its build must not rewrite the dist/ other
// tests run from meanwhile.)

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packSdk, PKG_DIR, startServer, type Server } from "./harness.js";

let server: (Server & { stop: () => Promise<void> }) | undefined;
let dir: string;

before(async () => {
  server = await startServer("sqlite");
  dir = mkdtempSync(join(tmpdir(), "tether-ts-pack-"));
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("npm pack installs and runs on its own", () => {
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const tgz = packSdk(join(dir, "pack"));
  const app = join(dir, "app");
  execFileSync("mkdir", ["-p", app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module", private: true }));
  execFileSync(npm, ["install", "--offline", "--no-audit", "--no-fund", "--silent", tgz], { cwd: app, stdio: ["ignore", "ignore", "inherit"] });
  const installed = join(app, "node_modules/tether-client");
  assert.ok(existsSync(join(installed, "dist/index.js")));
  assert.ok(existsSync(join(installed, "dist/index.d.ts")), "type declarations are shipped");
  assert.deepEqual(readdirSync(join(app, "node_modules")).filter((f) => !f.startsWith(".")), ["tether-client"], "no runtime dependencies");
  writeFileSync(
    join(app, "main.mjs"),
    `import { Client, Worker } from "tether-client";
const client = new Client();
const job = await client.enqueue({ queue: "pack", kind: "hello", payload: { name: "Ada" } });
const worker = new Worker(client, { queue: "pack", claimWaitMs: 200, handleSignals: false });
worker.handle("hello", async (job) => ({ greeting: "hello " + job.payload.name }));
const run = worker.run();
for (;;) {
  const j = await client.get(job.id);
  if (j.state === "succeeded") { console.log(JSON.stringify(j.result)); break; }
  await new Promise((r) => setTimeout(r, 50));
}
worker.shutdown();
await run;
`,
  );
  // The declarations serve a strict TypeScript consumer.
  writeFileSync(
    join(app, "check.ts"),
    `import { Client, Worker, RetryAfter, Snooze, Fatal, LeaseLost, defineTask, type Job, type JobContext } from "tether-client";
const client = new Client({ url: "http://127.0.0.1:7070", key: "k", tenant: "acme" });
const worker = new Worker(client, { queue: { emails: 8, reports: 2 } });
const report = defineTask<{ month: string }, { rows: number }>({ kind: "report", queue: "reports", maxAttempts: 3 });
worker.handle(report, async (payload, ctx) => ({ rows: payload.month.length + ctx.job.attempt }));
export async function g(): Promise<number> {
  const job = await client.enqueueTask(report, { month: "2026-12" }, { delayMs: 1_000 });
  return (await client.waitResult(job)).rows;
}
worker.handle("send_welcome", async (job: Job, ctx: JobContext) => {
  ctx.progress({ step: 1 });
  if (ctx.signal.aborted) throw new Snooze(1000);
  if (job.attempt > 3) throw new Fatal("no");
  if (job.attempt > 2) throw new RetryAfter(500);
  return { sent: true };
});
export async function f(): Promise<string> {
  const job = await client.enqueue({ queue: "emails", kind: "send_welcome", payload: { to: "ada@example.com" }, idempotency_key: "x" });
  const e: unknown = null;
  return e instanceof LeaseLost ? e.code : job.state;
}
`,
  );
  execFileSync(
    process.execPath,
    [join(PKG_DIR, "node_modules/typescript/bin/tsc"), "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--lib", "es2022,dom", "check.ts"],
    { cwd: app, stdio: ["ignore", "inherit", "inherit"] },
  );
  const out = execFileSync(process.execPath, ["main.mjs"], {
    cwd: app,
    env: { ...process.env, TETHER_URL: server!.url, TETHER_KEY: server!.key },
    encoding: "utf8",
    timeout: 30_000,
    stdio: ["ignore", "pipe", "ignore"],
  });
  assert.equal(out.trim(), JSON.stringify({ greeting: "hello Ada" }));
});
