// Test harness: starts a real `tether serve` per backend (a temporary
// SQLite data directory, and a throwaway PostgreSQL database) with the
// SDK's own `startTetherServer` (tether-client/testing), and runs a suite
// against each. Nothing is mocked; a missing binary or database fails the
// run.

import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, readdirSync, existsSync, symlinkSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, before, after, afterEach } from "node:test";
import { randomBytes } from "node:crypto";
import type { Client, Worker } from "../src/index.js";
import { startTetherServer, type TetherTestServer } from "../src/testing.js";

/** sdk/typescript, wherever the tests were compiled to. */
export const PKG_DIR = (() => {
  let d = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(d, "package.json"))) {
    const up = dirname(d);
    if (up === d) throw new Error("package.json not found above the tests");
    d = up;
  }
  return d;
})();
export const REPO_DIR = resolve(PKG_DIR, "../..");
export const TETHER_BIN = process.env.TETHER_BIN || join(REPO_DIR, "target/debug/tether");
export const DATABASE_URL = process.env.TETHER_TEST_DATABASE_URL || "postgres://postgres@127.0.0.1:5432/postgres";

export type Backend = "sqlite" | "postgres";
export const BACKENDS: Backend[] = ["sqlite", "postgres"];

/** A running server and an admin client of it. */
export interface Server {
  backend: Backend;
  url: string;
  key: string;
  admin: Client;
  /** The server as `tether-client/testing` started it. */
  test: TetherTestServer;
  /** The throwaway PostgreSQL database (postgres backend only). */
  dbName?: string;
  /** The URL of that database (postgres backend only). */
  databaseUrl?: string;
}

export function psql(url: string, sql: string) {
  const r = spawnSync("psql", ["-v", "ON_ERROR_STOP=1", "-X", "-q", "-d", url, "-c", sql], { encoding: "utf8" });
  if (r.error) throw new Error(`psql could not run: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`psql failed (${sql}): ${r.stderr}`);
}

function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = "/" + db;
  return u.toString();
}

/**
 * Starts `tether serve` on the backend with `startTetherServer` (tether-client/testing), on a throwaway
 * PostgreSQL database for `postgres`; resolves once it is ready.
 */
export async function startServer(backend: Backend): Promise<Server & { stop: () => Promise<void> }> {
  if (!existsSync(TETHER_BIN)) throw new Error(`tether binary not found at ${TETHER_BIN} (set TETHER_BIN)`);
  let dbName: string | undefined;
  let databaseUrl: string | undefined;
  if (backend === "postgres") {
    dbName = `tether_test_${process.pid}_${randomBytes(4).toString("hex")}`;
    psql(DATABASE_URL, `CREATE DATABASE ${dbName}`);
    databaseUrl = withDatabase(DATABASE_URL, dbName);
  }
  const dropDatabase = () => {
    if (dbName) psql(DATABASE_URL, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  };
  let test: TetherTestServer;
  try {
    test = await startTetherServer({
      bin: TETHER_BIN,
      databaseUrl,
      onLog: process.env.TETHER_TEST_SERVER_LOG ? (text) => process.stderr.write(text) : undefined,
    });
  } catch (e) {
    dropDatabase();
    throw e;
  }
  const stop = async () => {
    await test.stop();
    dropDatabase();
  };
  return { backend, url: test.url, key: test.key, admin: test.client(), test, dbName, databaseUrl, stop };
}

/**
 * Defines `suite` once per backend, each against its own server. `get()`
 * answers the running server inside tests.
 */
export function forEachBackend(name: string, suite: (get: () => Server) => void) {
  for (const backend of BACKENDS) {
    describe(`${name} [${backend}]`, () => {
      let server: (Server & { stop: () => Promise<void> }) | undefined;
      before(async () => {
        server = await startServer(backend);
      });
      after(async () => {
        await server?.stop();
      });
      // A test that fails half-way must not leave its worker running.
      afterEach(async () => {
        await stopWorkers();
      });
      suite(() => {
        if (!server) throw new Error("the server did not start");
        return server;
      });
    });
  }
}

const documents = new WeakMap<Server, Promise<Record<string, any>>>();

/**
 * Whether the server under test has `route` (e.g. `PUT /v1/workers/{worker_id}`), by its own
 * `/openapi.json`: a test of a route newer than the binary it runs against skips, saying so, rather than
 * failing on a server that predates it (`TETHER_BIN` may be an older build than docs/openapi.json).
 */
export async function serverHas(server: Server, route: string): Promise<boolean> {
  let doc = documents.get(server);
  if (!doc) documents.set(server, (doc = server.admin.openapi()));
  const [method, path] = route.split(" ") as [string, string];
  return !!(await doc).paths?.[path]?.[method.toLowerCase()];
}

/** What `npm pack` builds the package from: the package files, the build's settings, the sources, the examples. */
const SDK_SOURCES = ["package.json", "package-lock.json", "tsconfig.json", "README.md", "src", "examples"];

/** Copies the SDK's sources (what `npm ci && npm pack` needs, no node_modules, no build) into `dir`. */
export function copySdk(dir: string): void {
  for (const f of SDK_SOURCES) cpSync(join(PKG_DIR, f), join(dir, f), { recursive: true });
}

/**
 * The package as `npm pack` makes it (its `prepack` builds dist/), made from a copy of the sources in
 * `dir`, so that the build never rewrites this checkout's dist/ while other tests run from it. Answers the
 * tarball's path (in `dir`).
 */
export function packSdk(dir: string): string {
  const copy = join(dir, "sdk");
  copySdk(copy);
  symlinkSync(join(PKG_DIR, "node_modules"), join(copy, "node_modules"), "dir");
  execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: copy, stdio: ["ignore", "ignore", "inherit"] });
  const tgz = readdirSync(dir).find((f) => f.endsWith(".tgz"));
  if (!tgz) throw new Error(`npm pack made no tarball in ${dir}`);
  return join(dir, tgz);
}

/** A fresh queue name per test. */
export function queueName(prefix = "q"): string {
  return `${prefix}-${randomBytes(5).toString("hex")}`;
}

/** Polls `f` until it answers truthy, or fails after `timeoutMs`. */
export async function eventually<T>(what: string, f: () => Promise<T | undefined | false | null>, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A logger that keeps lines for assertions (and stays quiet). */
export function memoryLogger() {
  const lines: string[] = [];
  const log = (level: string) => (msg: string, fields?: Record<string, unknown>) => {
    lines.push(`${level} ${msg} ${fields ? JSON.stringify(fields) : ""}`);
  };
  return { lines, logger: { debug: log("debug"), info: log("info"), warn: log("warn"), error: log("error") } };
}

const running: Array<{ worker: Worker; run: Promise<void> }> = [];

/** Starts `worker.run()`; the worker is shut down after the test whatever happens. */
export function startWorker(worker: Worker): Promise<void> {
  const run = worker.run();
  running.push({ worker, run });
  return run;
}

/** Shuts down every worker started with {@link startWorker} and waits for their drain. */
export async function stopWorkers(): Promise<void> {
  const all = running.splice(0);
  for (const w of all) w.worker.shutdown();
  await Promise.all(all.map((w) => w.run));
}
