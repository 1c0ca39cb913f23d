#!/usr/bin/env node
// Packs a built `tether` binary as the npm package `tether-server`.
//
//   node packaging/npm/build.mjs BINARY OUTDIR
//
// Stages the package in a temporary directory (package.json, bin/tether,
// index.js, index.d.ts, README.md), runs `npm pack --pack-destination
// OUTDIR` and prints the tarball's path. `npm install` of that tarball puts
// `tether` in node_modules/.bin (`npx tether serve`), with no Rust and no
// install script. Node 20 or later, no dependencies.
//
// The package is for the platform this runs on ("os" and "cpu" of
// package.json), so the binary must have been built for it, as each of
// esbuild's per-platform packages carries one binary. The version is the
// workspace version in the root Cargo.toml, which the binary also reports.

import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

function fail(message) {
  console.error(`build.mjs: ${message}`);
  process.exit(1);
}

function workspaceVersion() {
  const cargoToml = join(repo, "Cargo.toml");
  const text = readFileSync(cargoToml, "utf8");
  const section = /^\[workspace\.package\]\s*$([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(text);
  const version = section && /^version\s*=\s*"([^"]+)"/m.exec(section[1]);
  if (!version) fail(`no version in [workspace.package] of ${cargoToml}`);
  return version[1];
}

const [binaryArg, outdirArg, ...rest] = process.argv.slice(2);
if (!binaryArg || !outdirArg || rest.length) fail("usage: node packaging/npm/build.mjs BINARY OUTDIR");
const binary = resolve(binaryArg);
const outdir = resolve(outdirArg);
try {
  if (!statSync(binary).isFile()) throw new Error();
} catch {
  fail(`no binary at ${binary}`);
}

const version = workspaceVersion();
const exe = process.platform === "win32" ? "tether.exe" : "tether";
const description = "The tether server (a durable background-job queue) as a prebuilt binary";

const packageJson = {
  name: "tether-server",
  version,
  description,
  license: "MIT OR Apache-2.0",
  type: "module",
  os: [process.platform],
  cpu: [process.arch],
  bin: { tether: `bin/${exe}` },
  main: "./index.js",
  types: "./index.d.ts",
  exports: { ".": { types: "./index.d.ts", default: "./index.js" } },
  files: ["bin", "index.js", "index.d.ts", "README.md"],
  engines: { node: ">=20" },
};

const indexJs = `import { fileURLToPath } from "node:url";

/** The path of the bundled \`tether\` executable. */
export function binaryPath() {
  return fileURLToPath(new URL("./bin/${exe}", import.meta.url));
}
`;

const indexDts = `/** The path of the bundled \`tether\` executable (the tether server and CLI). */
export declare function binaryPath(): string;
`;

const readme = `# tether-server

The \`tether\` binary (the server of tether, a durable background-job queue,
and its operator CLI), prebuilt for ${process.platform}-${process.arch}.
After \`npm install\`, \`npx tether serve\` runs the service on an embedded
SQLite file under \`./tether-data\`; \`npx tether --help\` lists every
command. From code, \`binaryPath()\` gives the executable's path:

\`\`\`js
import { spawn } from "node:child_process";
import { binaryPath } from "tether-server";

spawn(binaryPath(), ["serve", "--listen", "127.0.0.1:0"], { stdio: "inherit" });
\`\`\`

The TypeScript SDK to enqueue and work on jobs is a separate package
(\`tether-client\`).
`;

const stage = mkdtempSync(join(tmpdir(), "tether-npm-"));
try {
  mkdirSync(join(stage, "bin"));
  copyFileSync(binary, join(stage, "bin", exe));
  chmodSync(join(stage, "bin", exe), 0o755);
  writeFileSync(join(stage, "package.json"), JSON.stringify(packageJson, null, 2) + "\n");
  writeFileSync(join(stage, "index.js"), indexJs);
  writeFileSync(join(stage, "index.d.ts"), indexDts);
  writeFileSync(join(stage, "README.md"), readme);
  mkdirSync(outdir, { recursive: true });
  const out = execFileSync("npm", ["pack", "--json", "--pack-destination", outdir], {
    cwd: stage,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    shell: process.platform === "win32",
  });
  const [{ filename }] = JSON.parse(out);
  console.log(join(outdir, filename));
} finally {
  rmSync(stage, { recursive: true, force: true });
}
