// The repository README's TypeScript examples (a worker, and a workflow
// whose job reads its parents' results), compiled with `tsc --strict` against this package and
// run as written against a real server.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "../src/index.js";
import { PKG_DIR, startServer, type Server } from "./harness.js";

let server: (Server & { stop: () => Promise<void> }) | undefined;
let dir: string;

before(async () => {
  server = await startServer("sqlite");
  dir = mkdtempSync(join(tmpdir(), "tether-ts-readme-"));
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Compiles `source` as `<name>.ts` in the scratch project; answers the path of the `.js`. */
function compile(name: string, source: string): string {
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
  mkdirSync(join(dir, "node_modules"), { recursive: true });
  if (!existsSync(join(dir, "node_modules/tether-client"))) symlinkSync(PKG_DIR, join(dir, "node_modules/tether-client"), "dir");
  writeFileSync(join(dir, `${name}.ts`), source);
  execFileSync(
    process.execPath,
    [
      join(PKG_DIR, "node_modules/typescript/bin/tsc"),
      "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022",
      "--lib", "es2022,dom", "--types", "node", "--typeRoots", join(PKG_DIR, "node_modules/@types"),
      `${name}.ts`,
    ],
    { cwd: dir, stdio: ["ignore", "inherit", "inherit"] },
  );
  return `${name}.js`;
}

function readmeExample(): string {
  const readme = readFileSync(join(PKG_DIR, "../../README.md"), "utf8");
  const section = readme.split("## Using it from TypeScript")[1]?.split("\n## ")[0] ?? "";
  const block = /```ts\n([\s\S]*?)```/.exec(section);
  assert.ok(block, "the README's TypeScript section has a ts block");
  return block[1]!;
}

test("the README example finishes its job", async () => {
  const script = compile("welcome", readmeExample());
  const child = spawn(process.execPath, [script], {
    cwd: dir,
    env: { ...process.env, TETHER_URL: server!.url, TETHER_KEY: server!.key },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => (out += chunk));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    const client = new Client({ url: server!.url, key: server!.key });
    const deadline = Date.now() + 20_000;
    let id: string | undefined;
    for (;;) {
      id ??= /enqueued (\S+)/.exec(out)?.[1];
      if (id && (await client.get(id)).state === "succeeded") break;
      assert.ok(Date.now() < deadline, `the job did not finish; output: ${out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual((await client.get(id)).result, { sent: true });
    child.kill("SIGTERM");
    assert.equal(await exited, 0, out);
    assert.match(out, /sending to ada@example\.com/);
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
});

test("the README's workflow example runs its workflow to succeeded", async () => {
  const readme = readFileSync(join(PKG_DIR, "../../README.md"), "utf8");
  const section = readme.split("\n### From TypeScript")[1]?.split("\n## ")[0]?.split("\n### ")[0] ?? "";
  const block = /```ts\n([\s\S]*?)```/.exec(section);
  assert.ok(block, "the README's graph example from TypeScript has a ts block");
  const script = compile("publish", block[1]!);
  const child = spawn(process.execPath, [script], {
    cwd: dir,
    env: { ...process.env, TETHER_URL: server!.url, TETHER_KEY: server!.key },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => (out += chunk));
  // "close": the process ended and its output has all been read.
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  try {
    assert.equal(await exited, 0, out);
  } finally {
    clearTimeout(timer);
  }
  const id = /workflow (\S+) publish \S+ waiting/.exec(out)?.[1];
  assert.ok(id, out);
  const graph = await new Client({ url: server!.url, key: server!.key }).getWorkflow(id);
  assert.equal(graph.state, "succeeded");
  assert.deepEqual(graph.jobs.map((j) => j.kind).sort(), ["notify", "notify", "publish", "thumbnail", "thumbnail"]);
  assert.match(out, /^succeeded /m);
});
