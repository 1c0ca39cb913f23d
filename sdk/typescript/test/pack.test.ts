// `npm pack` makes a package that installs into an empty project and runs
// there on its own: a producer and a worker, against a real server. (It
// packs a copy of the sources: its build must not rewrite the dist/ other
// tests run from meanwhile.) Then the README's `node:test` example of
// `tether-client/testing` runs as written in a project that installed the
// package and the `tether-server` package (packed from TETHER_BIN by
// packaging/npm/build.mjs), with no TETHER_BIN and no tether on PATH: the
// subpath export, and the server binary found through that package.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { packSdk, PKG_DIR, REPO_DIR, startServer, TETHER_BIN, type Server } from "./harness.js";

let server: (Server & { stop: () => Promise<void> }) | undefined;
let dir: string;
/** The tarball of the package, packed once for both tests. */
let tgz: string | undefined;
function packed(): string {
  return (tgz ??= packSdk(join(dir, "pack")));
}

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
  const tgz = packed();
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
    `import { Client, Worker, RetryAfter, Snooze, Fatal, LeaseLost, defineTask, enqueueInTransaction, type Job, type JobContext, type JobOutcome } from "tether-client";
import { drain, startTetherServer, type DrainSummary, type TetherTestServer } from "tether-client/testing";
const client = new Client({ url: "http://127.0.0.1:7070", key: "k", tenant: "acme" });
const worker = new Worker(client, { queue: { emails: 8, reports: 2 } });
worker.before((ctx) => void (ctx.locals.t = 1)).after((_ctx, o: JobOutcome) => void o.status).onError((_ctx, e: unknown) => void e);
export async function t(): Promise<DrainSummary> {
  const server: TetherTestServer = await startTetherServer();
  const { client: c } = await server.freshTenant();
  await enqueueInTransaction({ query: async () => ({ rows: [] }) }, "acme", { queue: "q", kind: "k" });
  return drain(new Worker(c, { queue: "q" }));
}
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

/** The fenced block of `lang` right after the line `marker` in the SDK's README. */
function readmeBlock(marker: string, lang: string): string {
  const readme = readFileSync(join(PKG_DIR, "README.md"), "utf8");
  const after = readme.split(`\n${marker}\n`)[1];
  assert.ok(after, `the README has ${JSON.stringify(marker)}`);
  const m = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(after);
  assert.ok(m, `a ${lang} block after ${JSON.stringify(marker)}`);
  return m[1]!;
}

test("the README's tether-client/testing example runs as written, the server binary from the tether-server package", () => {
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const serverPack = join(dir, "server-pack");
  const serverTgz = execFileSync(process.execPath, [join(REPO_DIR, "packaging/npm/build.mjs"), resolve(TETHER_BIN), serverPack], { encoding: "utf8" }).trim();
  const app = join(dir, "app-testing");
  execFileSync("mkdir", ["-p", app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module", private: true }));
  execFileSync(npm, ["install", "--offline", "--no-audit", "--no-fund", "--silent", packed(), serverTgz], { cwd: app, stdio: ["ignore", "ignore", "inherit"] });
  const example = readmeBlock("## Testing your code: `tether-client/testing`", "ts");
  assert.match(example, /^\/\/ welcome\.test\.ts\n/);
  writeFileSync(join(app, "welcome.test.ts"), example);
  execFileSync(
    process.execPath,
    [
      join(PKG_DIR, "node_modules/typescript/bin/tsc"),
      "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022",
      "--lib", "es2022,dom", "--types", "node", "--typeRoots", join(PKG_DIR, "node_modules/@types"),
      "welcome.test.ts",
    ],
    { cwd: app, stdio: ["ignore", "inherit", "inherit"] },
  );
  // No TETHER_BIN, and a PATH of node alone and the system's: the binary can only come from tether-server.
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: [dirname(process.execPath), "/usr/bin", "/bin"].join(":") };
  for (const k of Object.keys(env)) if (k.startsWith("TETHER_")) delete env[k];
  // Not a child of this test run: its own runner, reporting on stdout.
  delete env.NODE_TEST_CONTEXT;
  const run = spawnSync(process.execPath, ["--test", "welcome.test.js"], { cwd: app, env, encoding: "utf8", timeout: 120_000 });
  assert.equal(run.status, 0, `node --test failed:\n${run.stdout}\n${run.stderr}`);
  assert.match(run.stdout, /^# pass 2$/m);
  assert.match(run.stdout, /^# fail 0$/m);
  // The handler's error, logged with its stack: the user's frames alone.
  assert.match(run.stdout, /# TypeError: not an address: nobody\n#\s+at sendWelcome \(file:.*welcome\.test\.js:\d+:\d+\)\n# 2/);
});
