// The repository README's TypeScript examples against a real server. The
// quick start runs as a newcomer follows it: its shell blocks and its
// welcome.ts exactly as written, in a new directory outside the repository,
// with the tarball `npm pack` builds in a clone (here, a copy of the SDK's
// sources: `npm ci` there must not touch this checkout), typescript from
// the registry, and `node welcome.js` stopped by SIGTERM. The workflow
// example (a job that reads its parents' results) is compiled with
// `tsc --strict` against this package and run as written.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "../src/index.js";
import { copySdk, PKG_DIR, startServer, type Server } from "./harness.js";

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

/** The `sh` and `ts` blocks of the README's "Using it from TypeScript" section, in order. */
function quickStart(): { sh: string[]; ts: string[] } {
  const readme = readFileSync(join(PKG_DIR, "../../README.md"), "utf8");
  const section = readme.split("\n## Using it from TypeScript\n")[1]?.split("\n## ")[0] ?? "";
  const blocks = [...section.matchAll(/```(sh|ts)\n([\s\S]*?)```/g)];
  return { sh: blocks.filter((b) => b[1] === "sh").map((b) => b[2]!), ts: blocks.filter((b) => b[1] === "ts").map((b) => b[2]!) };
}

/** `text` with `from` replaced by `to`, which it must hold exactly once (the README cannot drift unnoticed). */
function replaceOnce(text: string, from: string, to: string): string {
  assert.equal(text.split(from).length - 1, 1, `the quick start says ${JSON.stringify(from)} once:\n${text}`);
  return text.replace(from, () => to);
}

test("the README's TypeScript quick start runs as written in a new project and finishes its job", async () => {
  const { sh, ts } = quickStart();
  assert.equal(sh.length, 2, "two shell blocks: set up, then compile and run");
  assert.equal(ts.length, 1, "one welcome.ts");
  // A clone of the repository, as far as the quick start reads it: the SDK's sources and the server's key.
  const clone = join(dir, "tether");
  copySdk(join(clone, "sdk/typescript"));
  mkdirSync(join(clone, "tether-data"));
  writeFileSync(join(clone, "tether-data/admin.key"), server!.key + "\n");
  // Only where the clone is and where the server listens differ from the text.
  const setUp = replaceOnce(replaceOnce(sh[0]!, "TETHER_REPO=/path/to/tether", `TETHER_REPO=${clone}`), "http://127.0.0.1:7070", server!.url);
  const script = [setUp, "cat > welcome.ts <<'WELCOME_TS'", ts[0]!.replace(/\n$/, ""), "WELCOME_TS", sh[1]!].join("\n");
  const work = join(dir, "work");
  mkdirSync(work);
  writeFileSync(join(dir, "quickstart.sh"), script);
  const child = spawn("bash", ["-e", join(dir, "quickstart.sh")], {
    cwd: work,
    // What a newcomer's shell has: no settings of tether's; npm takes what it has cached before asking the registry.
    env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("TETHER_"))), npm_config_prefer_offline: "true", npm_config_fund: "false", npm_config_audit: "false" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => (out += chunk));
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk: string) => (out += chunk));
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  try {
    const client = new Client({ url: server!.url, key: server!.key });
    // Installing and building take a while, the registry perhaps included.
    const deadline = Date.now() + 240_000;
    let id: string | undefined;
    for (;;) {
      id ??= /^enqueued (\S+)$/m.exec(out)?.[1];
      if (id && (await client.get(id)).state === "succeeded") break;
      assert.ok(child.exitCode === null, `the quick start ended early; its output:\n${out}`);
      assert.ok(Date.now() < deadline, `the job did not finish; output:\n${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.deepEqual((await client.get(id)).result, { sent: true });
    assert.match(out, /^sending to ada@example\.com$/m);
    assert.ok(existsSync(join(work, "welcome/welcome.js")), "compiled in the new project");
    assert.ok(!existsSync(join(work, "welcome.ts")), "the project is the directory the quick start made");
    // Ctrl-C's stand-in: SIGTERM to `node welcome.js`, the script's last command, which drains and exits 0.
    const node = execFileSync("pgrep", ["-P", String(child.pid), "-x", "node"], { encoding: "utf8" }).trim();
    assert.match(node, /^\d+$/, `one node process under the script: ${node}`);
    process.kill(Number(node), "SIGTERM");
    assert.equal(await exited, 0, out);
    assert.match(out, /worker stopped/);
  } finally {
    if (child.exitCode === null) {
      // Whatever the script runs now (npm, node), then the script.
      const kids = spawnSync("pgrep", ["-P", String(child.pid)], { encoding: "utf8" }).stdout ?? "";
      for (const pid of kids.split("\n").filter(Boolean)) process.kill(Number(pid), "SIGKILL");
      child.kill("SIGKILL");
    }
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
