#!/usr/bin/env node
// tether-worker: runs the worker a module defines until SIGTERM or SIGINT,
// then lets it drain (as `worker.run()` does) and exits 0.
//
//   npx tether-worker ./worker.js [--url URL] [--api-key KEY] [--tenant TENANT]
//
// The module's default export (or its export named `worker`) is a Worker,
// or a function (client) => Worker (or a promise of one) that builds it on
// the client made from the flags, else from TETHER_URL, TETHER_KEY and
// TETHER_TENANT.

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { Client } from "./client.js";
import { TetherError } from "./errors.js";
import type { Worker } from "./worker.js";

const USAGE = `usage: tether-worker <module> [--url URL] [--api-key KEY] [--tenant TENANT]

Runs the worker <module> exports until SIGTERM or SIGINT (a second one ends
the drain at once). The module's default export, or its export named
"worker", is a Worker or a function (client) => Worker. The client is made
from --url, --api-key and --tenant, else from TETHER_URL, TETHER_KEY and
TETHER_TENANT.
`;

/** A bad command line: the usage goes with it, and the exit status is 2. */
class UsageError extends Error {}

/** A module that defines no worker: its message says all (no stack of this program's). */
class ModuleError extends Error {}

/** What the command line says. */
interface Args {
  module: string;
  url?: string;
  key?: string;
  tenant?: string;
}

const FLAGS: Record<string, "url" | "key" | "tenant"> = { "--url": "url", "--api-key": "key", "--tenant": "tenant" };

function parseArgs(argv: string[]): Args | "help" {
  const out: Partial<Args> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "-h" || arg === "--help") return "help";
    const eq = arg.indexOf("=");
    const name = arg.startsWith("--") && eq > 0 ? arg.slice(0, eq) : arg;
    const field = FLAGS[name];
    if (field) {
      const value = eq > 0 && name !== arg ? arg.slice(eq + 1) : argv[++i];
      if (value === undefined || value === "") throw new UsageError(`${name} needs a value`);
      out[field] = value;
    } else if (arg.startsWith("-")) {
      throw new UsageError(`unknown option ${arg}`);
    } else if (out.module === undefined) {
      out.module = arg;
    } else {
      throw new UsageError(`one module only (got ${out.module} and ${arg})`);
    }
  }
  if (out.module === undefined) throw new UsageError("no module given");
  return out as Args;
}

/** Whether `x` looks like a Worker (not `instanceof`: the module may load another copy of this package). */
function isWorker(x: unknown): x is Worker {
  const w = x as Partial<Record<"run" | "shutdown" | "handle", unknown>> | null;
  return typeof w === "object" && w !== null && typeof w.run === "function" && typeof w.shutdown === "function" && typeof w.handle === "function";
}

/** The worker `args.module` defines, built on a client made from `args` if the module asks for one. */
async function load(args: Args): Promise<Worker> {
  const url = pathToFileURL(resolve(process.cwd(), args.module)).href;
  const mod = (await import(url)) as { default?: unknown; worker?: unknown };
  const exported = mod.default ?? mod.worker;
  if (isWorker(exported)) {
    // Built with its own client: the connection flags cannot reach it.
    if (args.url !== undefined || args.key !== undefined || args.tenant !== undefined) {
      process.stderr.write(`tether-worker: ${args.module} exports a Worker built with its own client: --url, --api-key and --tenant are not used (export a function (client) => Worker to take them)\n`);
    }
    return exported;
  }
  if (typeof exported === "function") {
    const client = new Client({ url: args.url, key: args.key, tenant: args.tenant });
    const built: unknown = await (exported as (client: Client) => unknown)(client);
    if (isWorker(built)) return built;
    throw new ModuleError(`the function ${args.module} exports answered ${describe(built)}, not a Worker`);
  }
  throw new ModuleError(`${args.module} exports no worker: its default export (or one named "worker") must be a Worker or a function (client) => Worker, not ${describe(exported)}`);
}

function describe(x: unknown): string {
  return x === null ? "null" : typeof x === "object" ? `an object (${Object.keys(x).join(", ") || "no keys"})` : typeof x;
}

async function main(): Promise<number> {
  let args: Args | "help";
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`tether-worker: ${e.message}\n${USAGE}`);
    return 2;
  }
  if (args === "help") {
    process.stdout.write(USAGE);
    return 0;
  }
  const worker = await load(args);
  if (!worker.handleSignals) {
    // The worker leaves signals to its owner: this process is its owner. A second signal ends the drain at once.
    const stop = () => worker.shutdown();
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
  }
  await worker.run();
  return 0;
}

main().then(
  // Exits even if the module left something open (a timer, a pool): the worker has drained.
  (code) => process.exit(code),
  (e: unknown) => {
    // Ours and the server's errors say what is wrong; anything else (the module failed to load) shows its stack.
    const text = e instanceof ModuleError ? e.message : e instanceof TetherError || !(e instanceof Error) ? String(e) : (e.stack ?? String(e));
    process.stderr.write(`tether-worker: ${text}\n`);
    process.exit(1);
  },
);
