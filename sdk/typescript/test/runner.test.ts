// The `tether-worker` runner as a user runs it: the packed package
// installed into an empty project, its bin started as a child process on a
// module of that project, against a real server. It builds the module's
// worker on a client made from its flags (else the environment), runs it
// until SIGTERM or SIGINT, drains it and exits 0.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "../src/index.js";
import { packSdk, queueName, startServer, type Server } from "./harness.js";

let server: (Server & { stop: () => Promise<void> }) | undefined;
let dir: string;
let app: string;

before(async () => {
  server = await startServer("sqlite");
  dir = mkdtempSync(join(tmpdir(), "tether-ts-runner-"));
  const tgz = packSdk(join(dir, "pack"));
  app = join(dir, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module", private: true }));
  execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", "--silent", tgz], { cwd: app, stdio: ["ignore", "ignore", "inherit"] });
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The environment without the settings of the client (each test gives its own). */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  for (const k of ["TETHER_URL", "TETHER_KEY", "TETHER_TENANT"]) if (!(k in extra)) delete env[k];
  return env;
}

/** Starts `npx tether-worker` (the installed bin) in the project; its output, and its exit status within `ms`. */
function runner(args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(join(app, "node_modules/.bin/tether-worker"), args, { cwd: app, env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  // "close": exited, and its output all read.
  const closed = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  const exit = (ms: number) => Promise.race([closed, new Promise<"still running">((r) => setTimeout(() => r("still running"), ms))]);
  return { child, output: () => output, exit };
}

/** The job once it has finished, or fails the test after 20 s. */
async function finished(c: Client, id: string) {
  const j = await c.wait(id, { timeoutMs: 20_000 });
  assert.ok(["succeeded", "failed", "cancelled"].includes(j.state), `job ${id} still ${j.state}`);
  return j;
}

test("a function export runs on the client of --url, --api-key and --tenant until SIGTERM, drains, and exits 0", async () => {
  const admin = server!.admin;
  const tenant = await admin.createTenant(queueName("runner"));
  const own = new Client({ url: server!.url, key: tenant.api_key });
  const queue = queueName();
  writeFileSync(
    join(app, "tasks.mjs"),
    `import { Worker } from "tether-client";
export default (client) =>
  new Worker(client, { queue: ${JSON.stringify(queue)}, claimWaitMs: 300, shutdownGraceMs: 500 })
    .handle("greet", (job) => ({ hello: job.payload.name, tenant: client.tenant }))
    .handle("forever", (job, ctx) => new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))));
`,
  );
  // The environment names another server and key: the flags win.
  const env = cleanEnv({ TETHER_URL: "http://127.0.0.1:9", TETHER_KEY: "tth_wrong" });
  const r = runner(["./tasks.mjs", "--url", server!.url, "--api-key", server!.key, `--tenant=${tenant.tenant.name}`], env);
  try {
    const greet = await own.enqueue({ queue, kind: "greet", payload: { name: "Ada" } });
    const done = await finished(own, greet.id);
    assert.equal(done.state, "succeeded", r.output());
    assert.deepEqual(done.result, { hello: "Ada", tenant: tenant.tenant.name });
    const forever = await own.enqueue({ queue, kind: "forever" });
    for (let end = Date.now() + 20_000; (await own.get(forever.id)).state !== "running"; ) {
      assert.ok(Date.now() < end, r.output());
      await new Promise((res) => setTimeout(res, 50));
    }
    r.child.kill("SIGTERM");
    assert.equal(await r.exit(15_000), 0, r.output());
    const handedBack = await own.get(forever.id);
    assert.equal(handedBack.state, "queued", "the drain handed the running job back");
    assert.equal(handedBack.attempt, 0);
    assert.match(r.output(), new RegExp(`key checked tenant=${tenant.tenant.name}`));
    assert.match(r.output(), /SIGTERM: shutting down/);
  } finally {
    r.child.kill("SIGKILL");
  }
});

test("without flags the client comes from TETHER_URL and TETHER_KEY; a Worker exported as `worker` runs until SIGINT", async () => {
  const c = server!.admin;
  const queue = queueName();
  // A worker that leaves signals to its owner: the runner takes them.
  writeFileSync(
    join(app, "named.mjs"),
    `import { Client, Worker } from "tether-client";
export const worker = new Worker(new Client(), { queue: ${JSON.stringify(queue)}, claimWaitMs: 300, handleSignals: false });
worker.handle("double", (job) => job.payload * 2);
`,
  );
  const r = runner(["named.mjs"], cleanEnv({ TETHER_URL: server!.url, TETHER_KEY: server!.key }));
  try {
    const job = await c.enqueue({ queue, kind: "double", payload: 21 });
    assert.equal((await finished(c, job.id)).result, 42, r.output());
    r.child.kill("SIGINT");
    assert.equal(await r.exit(15_000), 0, r.output());
  } finally {
    r.child.kill("SIGKILL");
  }
});

test("a bad command line exits 2 with the usage; a module without a worker exits 1 saying why", async () => {
  const env = cleanEnv({ TETHER_URL: server!.url, TETHER_KEY: server!.key });
  const none = runner([], env);
  assert.equal(await none.exit(15_000), 2);
  assert.match(none.output(), /no module given\nusage: tether-worker <module>/);
  const unknown = runner(["x.mjs", "--key", "k"], env);
  assert.equal(await unknown.exit(15_000), 2);
  assert.match(unknown.output(), /unknown option --key/);
  const help = runner(["--help"], env);
  assert.equal(await help.exit(15_000), 0);
  assert.match(help.output(), /^usage: tether-worker/);
  writeFileSync(join(app, "empty.mjs"), "export const answer = 42;\n");
  const empty = runner(["./empty.mjs"], env);
  assert.equal(await empty.exit(15_000), 1);
  assert.match(empty.output(), /^tether-worker: \.\/empty\.mjs exports no worker: its default export \(or one named "worker"\) must be a Worker or a function \(client\) => Worker, not undefined\n$/);
  writeFileSync(join(app, "plain.mjs"), `import { Worker } from "tether-client";\nexport default (client) => new Worker(client, { queue: "plain" });\n`);
  const refused = runner(["./plain.mjs", "--api-key", "tth_wrong"], env);
  assert.equal(await refused.exit(15_000), 1);
  assert.match(refused.output(), /^tether-worker: Unauthenticated: the worker's API key was refused/m);
});
