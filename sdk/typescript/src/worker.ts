// The tether worker: claims jobs of one queue or several (one claim loop
// and its own slots per queue) from a tether server and runs their
// handlers, with the same guarantees as the Rust worker runtime:
// long-poll claims sized to free slots, the queue's lease unless the user
// set one (a worker default never overrides what the operator configured),
// batched heartbeats at a third of each job's lease (and within half a
// second of new progress, coalesced), reports (completions and failures)
// carried by the next claim (one request and one commit for both; batched
// completions and single failures as the fallback), fenced results (a lost
// lease discards the outcome), retry-after vs snooze (every snooze
// reported, so the history shows it), cooperative cancel pushed by one
// event stream per worker (heartbeats notice it too, should the stream be
// down), per-job timeouts, and a graceful shutdown that hands unfinished
// jobs back with the attempt given back. Hooks (`before`, `after`,
// `onError`) run around every handler, in its own async context and, with
// `tracing`, in its OpenTelemetry span.

import { Client, isTransient, sleep } from "./client.js";
import { errorFromApi, Fatal, Internal, InvalidArgument, LeaseLost, NotFound, PayloadTooLarge, PermissionDenied, Retry, RetryAfter, Snooze, TetherError, TransportError, Unauthenticated } from "./errors.js";
import type { ClaimAnswer } from "./client.js";
import type { AnnounceWorkerBody, ClaimBody, ClaimedJob, CompleteItem, ErrorDetail, FailBody, FailItem, Job, Json, ReportResult } from "./types.js";
import { JobAborted } from "./handler.js";
import type { AfterHook, BeforeHook, ErrorHook, FailureCode, Handler, JobContext, JobOutcome, Logger, WorkerObserver, WorkerOp } from "./handler.js";
import type { Task, TaskHandler, TaskPayload, TaskResult } from "./task.js";
import { endJobSpan, startJobSpan, type JobSpan, type TracingApi } from "./tracing.js";
import { AsyncResource } from "node:async_hooks";
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import { dirname, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/**
 * The queues a worker works: one name, several names (each with `concurrency` slots), or a record of each
 * queue's own number of slots, e.g. `{ emails: 8, reports: 2 }`.
 */
export type WorkerQueues = string | readonly string[] | Readonly<Record<string, number>>;

/** Options of a {@link Worker}. */
export interface WorkerOptions {
  /**
   * The queue or queues to work (see {@link WorkerQueues}). Each queue is claimed by its own loop into its
   * own slots, so a busy queue never takes the slots of another; the handlers serve every queue by kind.
   */
  queue: WorkerQueues;
  /**
   * Handlers running at once, per queue named by `queue` as a name or a list (a record gives each queue its
   * own). Default 8, as in the Python SDK.
   */
  concurrency?: number;
  /**
   * Lease asked for at each claim (ms, 1 000–3 600 000), overriding the queue's. Left out (the default),
   * claims name none and each job gets the lease configured on its queue (30 000 unless the operator set
   * another). Either way each job is heartbeated every third of the lease its claim granted.
   */
  leaseTtlMs?: number;
  /** Long-poll of a claim when the queue is empty (ms, 0–30 000). Default 5 000. A shutdown waits for a claim in flight. */
  claimWaitMs?: number;
  /** How long running handlers may take to finish after a shutdown begins (ms). Default 30 000. */
  shutdownGraceMs?: number;
  /** Worker id shown on jobs and in history. Default `<host>:<pid>:<random>`. */
  workerId?: string;
  /** @deprecated Has no effect: every `Snooze`, however short, is reported to the server (the history shows `snoozed`). */
  maxInProcessSnoozeMs?: number;
  /** Pause after an empty claim the server answered early (it did not hold the long-poll), and after every empty claim when `claimWaitMs` is 0 (ms). Default 1 000. */
  pollIntervalMs?: number;
  /** Whether `run()` stops on SIGTERM/SIGINT (a second signal exits at once). Default true. */
  handleSignals?: boolean;
  /**
   * Logs; default: one line per message on stderr (a multi-line field, such as a stack, on the lines after
   * it), `debug` dropped. Every failed attempt is logged once: `warn` while the job will run again,
   * `error` when it failed for good (see {@link Logger}).
   */
  logger?: Logger;
  /** Sees every claim answer, failed request and `lease_lost` answer (see {@link WorkerObserver}). */
  observer?: WorkerObserver;
  /**
   * OpenTelemetry's API (`import * as api from "@opentelemetry/api"`): each job's hooks and handler then run
   * in a span `tether.job <kind>` (kind CONSUMER) whose parent is the trace context of the job's headers.
   * Default: the client's `tracing`, if it has one (so the enqueues it makes carry the context too).
   */
  tracing?: TracingApi;
}

/** How often a report (complete, fail, snooze) is tried before giving up on it (the lease then lapses and the reaper requeues the job). */
const REPORT_TRIES = 8;
/** Most items in one batch (the server's limit). */
const MAX_BATCH = 1000;
/** Most completions in one batch and batches in flight at once (the fallback for reports no claim carries). */
const COMPLETION_BATCH = 250;
const COMPLETIONS_IN_FLIGHT = 4;
/**
 * Longest wait of a report (complete or fail) for a claim to carry it while the next claim is expected soon
 * (ms); past it, or at once when no claim is coming soon (a long-poll in flight, a pause, a shutdown), the
 * completer sends it by the old routes.
 */
const CARRY_WAIT_MS = 20;
/** An empty claim answered this much before its wait ended was not held by the server. */
const EARLY_SLACK_MS = 250;
/** Longest wait for more free slots before claiming into a partly busy worker. */
const FETCH_COOLDOWN_MS = 5;
/** Most characters of an error sent with a failure. */
const ERROR_CHARS = 4000;
/** The server's lease (ms) when neither the worker nor the queue sets one; assumed only for a claimed job that does not show its lease. */
const DEFAULT_LEASE_TTL_MS = 30_000;
/** Longest sleep of the heartbeater while it holds nothing (a new job wakes it). */
const HEARTBEAT_IDLE_MS = 3_600_000;
/**
 * Least time between two heartbeats sent for new progress (ms): progress shows in the API within about
 * this long, and a handler reporting on every step costs at most two requests a second, whatever its pace.
 */
const PROGRESS_INTERVAL_MS = 500;
/**
 * First and longest pause before opening the cancellation stream again after the server refused it
 * (`too_many_requests` when the tenant holds as many streams as allowed, or a server without the route):
 * slow, since heartbeats deliver cancellations meanwhile and every try takes a request of a capped tenant.
 */
const STREAM_RETRY_FIRST_MS = 1_000;
const STREAM_RETRY_MOST_MS = 60_000;

/** How often a worker announces itself (`PUT /v1/workers/{id}`): well inside the 5 minutes after which the server forgets it. */
const ANNOUNCE_EVERY_MS = 60_000;
/** This SDK's version, as a worker announces it: package.json's (a test keeps them equal). */
const SDK_VERSION = "0.1.0";

/** Jittered exponential backoff: each pause is between half and all of `first`·2ⁿ, at most `most`. */
class Backoff {
  #n = 0;
  readonly #first: number;
  readonly #most: number;
  constructor(firstMs = 100, mostMs = 5000) {
    this.#first = firstMs;
    this.#most = mostMs;
  }
  next(): number {
    const step = Math.min(this.#most, this.#first * 2 ** this.#n);
    this.#n = Math.min(this.#n + 1, 16);
    return step / 2 + Math.random() * (step / 2);
  }
  reset() {
    this.#n = 0;
  }
}

const stderrLogger: Logger = {
  debug() {},
  info: (m, f) => write("INFO", m, f),
  warn: (m, f) => write("WARN", m, f),
  error: (m, f) => write("ERROR", m, f),
};
function write(level: string, msg: string, fields?: Record<string, unknown>) {
  let line = `${new Date().toISOString()} ${level} tether worker: ${msg}`;
  // A multi-line text (a stack) goes under the line, as the runtime prints one, not escaped into it.
  const blocks: string[] = [];
  for (const [k, v] of Object.entries(fields ?? {})) {
    if (typeof v === "string" && v.includes("\n")) blocks.push(v.replace(/\n*$/, "\n"));
    else line += ` ${k}=${typeof v === "string" ? v : JSON.stringify(v)}`;
  }
  process.stderr.write(`${line}\n${blocks.join("")}`);
}

/** One queue of a worker: its claim loop's state and its slots. */
interface Lane {
  readonly queue: string;
  /** Its slots: handlers of its jobs running at once. */
  readonly concurrency: number;
  /** Its handlers running (slots taken). */
  running: number;
  /** Told when one of its slots frees (or the stop begins). */
  slotWaiters: Array<() => void>;
  /**
   * Whether its claim loop claims as soon as one of its slots frees (and carries what is pending then):
   * false during a long-poll, a pause, and once it stopped.
   */
  claimSoon: boolean;
}

/** A job this worker holds, from claim until its outcome is reported. */
interface InFlight {
  job: ClaimedJob;
  /** The queue it was claimed from. */
  lane: Lane;
  /** The lease its claim granted (ms): it is heartbeated every third of it. */
  leaseTtlMs: number;
  /** When its last heartbeat was sent (`performance.now()`; at first, when the claim answered). */
  lastBeat: number;
  /** Made on the handler's first read of `ctx.signal`: an AbortSignal costs more to make than a no-op job takes to run. */
  ctrl: AbortController | undefined;
  /** Why the handler was asked to stop, once it was (the first reason stays). */
  aborted: JobAborted | undefined;
  /** Told when the handler is asked to stop, while it runs. */
  onAbort: (() => void) | undefined;
  progress: { value: Json } | undefined;
  cancelRequested: boolean;
  lost: boolean;
  /** When the report began (`performance.now()`), if it did. */
  reportingSince: number | undefined;
  /**
   * While its handler runs: decides how the run ended, the first time it is called (the handler ending, its
   * timeout, a cancel it did not answer, the end of the shutdown grace); true when that call decided.
   */
  decide: ((ended: Ended) => boolean) | undefined;
  /** How the run ended, once that is decided: the report says so, and its hooks are told it. */
  decided: Ended | undefined;
  /** Handed back at the end of the shutdown grace. */
  abandoned: boolean;
}

/** How a run ended. */
type Ended =
  | { kind: "returned"; result: Json | undefined }
  | { kind: "threw"; error: unknown }
  | { kind: "timed_out"; ms: number }
  | { kind: "unanswered" }
  | { kind: "abandoned" }
  | { kind: "no_handler" };

/** What the hooks are told, and the worker reports, for a run that ended so (the report's cases, in its order). */
function outcomeOf(ended: Ended, fl: InFlight): JobOutcome {
  if (ended.kind === "abandoned" || (fl.abandoned && !fl.cancelRequested)) return { status: "snooze", error: undefined, delayMs: 0 };
  const thrown = ended.kind === "threw" ? ended.error : undefined;
  if (fl.cancelRequested || ended.kind === "unanswered") return { status: "cancelled", error: thrown };
  switch (ended.kind) {
    case "timed_out":
      return { status: "failed", error: fl.aborted?.why === "timeout" ? fl.aborted : new JobAborted("timeout", `timed out after ${ended.ms} ms`) };
    case "no_handler":
      return { status: "failed", error: new Error(`no handler for kind ${fl.job.kind}`) };
    case "returned":
      return { status: "succeeded", result: ended.result };
  }
  if (thrown instanceof Snooze) return { status: "snooze", error: thrown, delayMs: thrown.ms };
  if (thrown instanceof RetryAfter) return { status: "retryAfter", error: thrown, delayMs: thrown.ms };
  return { status: "failed", error: thrown };
}

/**
 * What `drain` (`tether-client/testing`) changes in a run of a worker: a shorter claim long-poll, no
 * signal handlers, and a look at every outcome. Not part of the public API.
 */
export interface DrainRun {
  claimWaitMs: number;
  /** Every run that ended, as it is reported: the job, its outcome, and what its handler (or a before hook) threw. */
  onOutcome(job: Job, outcome: JobOutcome, thrown: unknown): void;
}

/** Runs `worker` as {@link DrainRun} says, until it is shut down (set by the Worker class, which alone can). */
let runDrainedImpl: ((worker: Worker, drain: DrainRun) => Promise<void>) | undefined;

/** `worker.run()` as `drain` of `tether-client/testing` needs it (see {@link DrainRun}). */
export function runDrained(worker: Worker, drain: DrainRun): Promise<void> {
  return runDrainedImpl!(worker, drain);
}

/** What became of a report. */
type Reported =
  | { kind: "done"; state: string | undefined }
  | { kind: "lease_lost" }
  | { kind: "rejected"; error: unknown }
  | { kind: "gave_up"; error: unknown };

/** A report (complete or fail) waiting for a claim to carry it, or for the completer to send it by the old routes. */
type PendingReport = ({ kind: "complete"; item: CompleteItem } | { kind: "fail"; item: FailItem }) & {
  done: (r: Reported) => void;
  /** The queue of its job: the slot its job freed lets out that queue's next claim, which may carry it. */
  lane: Lane;
  /** When it was queued (`performance.now()`). */
  since: number;
  /** A claim carried it and got no usable answer for it: it is the completer's now (the old routes). */
  carried: boolean;
};

/**
 * The lease (ms) a claim granted `job`: `lease_expires_at` − `heartbeat_at`, both set by the claim on the
 * server's clock; else what the worker asked for, else the server's default.
 */
function grantedLease(job: Job, asked: number | undefined): number {
  const since = job.heartbeat_at ?? job.started_at;
  const ms = job.lease_expires_at && since ? Date.parse(job.lease_expires_at) - Date.parse(since) : NaN;
  if (ms >= 1000 && ms <= 3_600_000) return ms;
  return asked ?? DEFAULT_LEASE_TTL_MS;
}

/** Heartbeats run three times per lease, so one lost or slow heartbeat never costs it. */
function beatInterval(fl: InFlight): number {
  return fl.leaseTtlMs / 3;
}

/**
 * When a job's next heartbeat is due (`performance.now()`). Only a job whose outcome is not on its way is
 * heartbeated (see {@link reporting}).
 */
function beatDue(fl: InFlight): number {
  return fl.lastBeat + beatInterval(fl);
}

/**
 * Whether a job's report is on its way (queued for a claim to carry it, in a claim or a batch, or being
 * resent): it is no longer heartbeated, since a heartbeat after the report was applied finds no lease to
 * extend and is answered `lease_lost`, which says nothing about the job (the report's own answer does).
 */
function reporting(fl: InFlight): boolean {
  return fl.reportingSince !== undefined;
}

/** The AbortSignal of a job, made on first use (aborted already if the job was). */
function signalOf(fl: InFlight): AbortSignal {
  if (!fl.ctrl) {
    fl.ctrl = new AbortController();
    if (fl.aborted) fl.ctrl.abort(fl.aborted);
  }
  return fl.ctrl.signal;
}

/** Asks a job's handler to stop; the first reason stays. */
function abort(fl: InFlight, reason: JobAborted): void {
  if (fl.aborted) return;
  fl.aborted = reason;
  fl.ctrl?.abort(reason);
  fl.onAbort?.();
}

/** The directory of this SDK's compiled files (this module's), as a path and as a `file:` URL prefix. */
const SDK_DIR = dirname(fileURLToPath(import.meta.url)) + sep;
const SDK_URL = pathToFileURL(SDK_DIR).href;

/** Whether a stack line is a frame of this SDK's own code (the worker that called the handler, the client). */
function sdkFrame(line: string): boolean {
  return /^\s+at /.test(line) && (line.includes(SDK_URL) || line.includes(SDK_DIR));
}

/**
 * A frame of Node.js's own machinery that the worker's calls leave under the user's frames: its scheduler,
 * the async scope each job runs in, and the `Promise.all` of the claim loops.
 */
const SCHEDULER_FRAME = /^\s+at (?:.*\(?node:(?:internal\/|async_hooks:)|async Promise\.all \(index \d+\))/;

/**
 * The stack of `e` as its user wrote it: the SDK's own frames dropped (the worker's loops that called the
 * handler, the client's when a request failed), and so the Node.js scheduler frames that, once those are
 * gone, trail the last frame of the user's code (see SCHEDULER_FRAME). Those frames would bury the handler's in every failure.
 */
function userStack(e: Error): string {
  const lines = (e.stack && e.stack.includes(e.message) ? e.stack : `${e.name}: ${e.message}\n${e.stack ?? ""}`).split("\n").filter((l) => !sdkFrame(l));
  while (lines.length > 1 && SCHEDULER_FRAME.test(lines[lines.length - 1])) lines.pop();
  return lines.join("\n").replace(/\n+$/, "");
}

function errorText(e: unknown): string {
  let text: string;
  if (e instanceof Error) {
    text = userStack(e);
  } else {
    try {
      text = typeof e === "string" ? e : JSON.stringify(e);
    } catch {
      text = String(e);
    }
  }
  // The server keeps the tail; so do we, so the innermost frames survive.
  return text.length > ERROR_CHARS ? "…" + text.slice(text.length - ERROR_CHARS) : text;
}

/** The observer's code of a failed request. */
function failureCode(e: TetherError): FailureCode {
  if (!(e instanceof TransportError)) return e.code;
  return e.reason === "network" ? "transport" : e.reason;
}

/** Worth another try of a report: no answer, `unavailable`, or `internal` (within the same try budget). */
function retryable(e: unknown): boolean {
  return isTransient(e) || e instanceof Internal;
}

function classify(e: unknown): Reported {
  // Not found: the job is gone (pruned, or another tenant's): nothing to report to.
  if (e instanceof LeaseLost || e instanceof NotFound) return { kind: "lease_lost" };
  if (retryable(e)) return { kind: "gave_up", error: e };
  return { kind: "rejected", error: e };
}

/** The lanes of `queues` given `concurrency` slots per named queue; throws a RangeError on a bad set. */
function lanesOf(queues: WorkerQueues, concurrency: number | undefined): Lane[] {
  const slots = concurrency ?? 8;
  const pairs: Array<[string, number]> =
    typeof queues === "string"
      ? [[queues, slots]]
      : Array.isArray(queues)
        ? (queues as readonly string[]).map((q): [string, number] => [q, slots])
        : Object.entries(queues as Readonly<Record<string, number>>);
  if (pairs.length === 0) throw new RangeError("a worker needs at least one queue");
  const seen = new Set<string>();
  return pairs.map(([queue, n]) => {
    if (typeof queue !== "string" || queue === "") throw new RangeError(`a queue name must be a non-empty string, not ${JSON.stringify(queue)}`);
    if (seen.has(queue)) throw new RangeError(`queue ${queue} is named twice`);
    seen.add(queue);
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`the concurrency of queue ${queue} must be a whole number of at least 1, not ${n}`);
    return { queue, concurrency: n, running: 0, slotWaiters: [], claimSoon: true };
  });
}

/**
 * A worker of one queue or several. Register handlers with {@link Worker.handle}, then
 * `await worker.run()`: it resolves after SIGTERM/SIGINT (or
 * {@link Worker.shutdown}) and the drain of every queue.
 */
export class Worker {
  readonly client: Client;
  /** Each queue it works and its number of slots, in the order given. */
  readonly queues: Readonly<Record<string, number>>;
  /** Handlers it runs at once, over all its queues. */
  readonly concurrency: number;
  /** The lease asked for at claim, if the user set one; otherwise each job gets its queue's. */
  readonly leaseTtlMs: number | undefined;
  readonly claimWaitMs: number;
  readonly shutdownGraceMs: number;
  readonly workerId: string;
  readonly handleSignals: boolean;
  readonly pollIntervalMs: number;
  readonly log: Logger;
  readonly observer: WorkerObserver | undefined;
  /** OpenTelemetry's API, when jobs run in spans (see {@link WorkerOptions.tracing}). */
  readonly tracing: TracingApi | undefined;

  static {
    runDrainedImpl = (worker, drain) => worker.#run(drain);
  }

  #handlers = new Map<string, Handler>();
  #before: BeforeHook[] = [];
  #after: AfterHook[] = [];
  #onError: ErrorHook[] = [];
  /** The run's drain settings, while `drain` runs it. */
  #drain: DrainRun | undefined;
  /** Whether a run is under way (`run()` has not resolved yet). */
  #active = false;
  /**
   * The jobs held, by lease token: one job may be held twice, when its lease lapsed while its handler ran
   * (heartbeats not getting through) and this worker claimed it again.
   */
  #inflight = new Map<string, InFlight>();
  readonly #lanes: Lane[];
  /** Handlers running over all queues. */
  #running = 0;
  /** Told when no handler runs any more. */
  #idleWaiters: Array<() => void> = [];
  #stop = new AbortController();
  /** Aborted when every job's outcome is reported: background loops end. */
  #drained = new AbortController();
  #graceOver = new AbortController();
  /** Reports waiting for a claim to carry them or for the completer. */
  #pending: PendingReport[] = [];
  /** Wakes the sleeping completer. */
  #completerWake: (() => void) | undefined;
  /** When the sleeping completer wakes by itself, if it set a timer. */
  #completerWakeAt: number | undefined;
  /** Whether claims carry reports (until a server refuses them). */
  #carryReports = true;
  #reports = new Set<Promise<void>>();
  /** When the heartbeater wakes next (`performance.now()`; undefined while it holds nothing). */
  #beatAt: number | undefined;
  /** Wakes the sleeping heartbeater: a new job is due before `#beatAt`. */
  #beatSooner: (() => void) | undefined;
  /** The heartbeat request on its way, if any (settled, never rejected). */
  #beatInFlight: Promise<unknown> | undefined;
  /** When the heartbeater sends the progress reported since its last cycle (`performance.now()`; undefined while none waits). */
  #progressAt: number | undefined;
  /** When a heartbeat last carried progress (`performance.now()`). */
  #progressSentAt = -Infinity;

  constructor(client: Client, options: WorkerOptions) {
    this.client = client;
    this.#lanes = lanesOf(options.queue, options.concurrency);
    this.queues = Object.freeze(Object.fromEntries(this.#lanes.map((l) => [l.queue, l.concurrency])));
    this.concurrency = this.#lanes.reduce((n, l) => n + l.concurrency, 0);
    this.leaseTtlMs = options.leaseTtlMs;
    if (this.leaseTtlMs !== undefined && !(this.leaseTtlMs >= 1000 && this.leaseTtlMs <= 3_600_000)) {
      throw new RangeError(`leaseTtlMs must be 1000..3600000, got ${this.leaseTtlMs}`);
    }
    this.claimWaitMs = Math.min(30_000, Math.max(0, options.claimWaitMs ?? 5_000));
    this.shutdownGraceMs = options.shutdownGraceMs ?? 30_000;
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.handleSignals = options.handleSignals ?? true;
    this.pollIntervalMs = Math.max(0, options.pollIntervalMs ?? 1_000);
    this.log = options.logger ?? stderrLogger;
    this.observer = options.observer;
    this.tracing = options.tracing ?? client.tracing;
  }

  // ---------------------------------------------------------------- observer

  /** Calls the observer; what it throws is logged, never the worker's problem. */
  #observe(call: (o: WorkerObserver) => void): void {
    if (!this.observer) return;
    try {
      call(this.observer);
    } catch (e) {
      this.log.error("the observer threw; ignored", { error: errorText(e) });
    }
  }

  /** A whole request failed (one try). A `lease_lost` answer of a report of `job` is also a lease loss. */
  #requestFailed(op: WorkerOp, e: unknown, job?: { id: string; lease_token: string }): void {
    if (!this.observer) return;
    // The client only throws TetherErrors; anything else is an answer it could not read.
    const error = e instanceof TetherError ? e : new TransportError(`${op}: ${String(e)}`, "transport", 0, { cause: e, reason: "decode" });
    const workerId = this.workerId;
    this.#observe((o) => o.onError?.({ workerId, op, code: failureCode(error), error, jobId: job?.id }));
    if (job && op !== "claim" && error instanceof LeaseLost) {
      this.#observe((o) => o.onLeaseLost?.({ workerId, op, jobId: job.id, leaseToken: job.lease_token }));
    }
  }

  /** One item of a heartbeat or complete batch, or one report a claim carried, failed. */
  #itemFailed(op: "heartbeat" | "complete" | "fail", job: { id: string; lease_token: string }, detail: ErrorDetail): void {
    if (!this.observer) return;
    // Status 0: the item has no HTTP status of its own.
    this.#requestFailed(op, errorFromApi(0, detail.code, detail.message), job);
  }

  /**
   * Registers the handler of a job kind, or of a task (see `defineTask`), replacing an earlier one of the
   * same kind. A kind's handler gets the job; a task's gets its payload, checked by the task's `validate`
   * first (a payload it refuses fails the job for good, with its message), and must answer the task's
   * result type. Either serves the kind's jobs of every queue of the worker.
   */
  handle(kind: string, handler: Handler): this;
  handle<T extends Task<unknown, unknown>>(task: T, handler: TaskHandler<TaskPayload<T>, TaskResult<T>>): this;
  handle(what: string | Task<unknown, unknown>, handler: Handler | TaskHandler<unknown, unknown>): this {
    if (typeof what === "string") {
      this.#handlers.set(what, handler as Handler);
      return this;
    }
    const task = what;
    const run = handler as TaskHandler<unknown, unknown>;
    if (!(task.queue in this.queues)) {
      // Its jobs may still come by another queue (an enqueue may name one), but most likely this is a slip.
      this.log.warn(`task ${task.kind} goes to queue ${task.queue}, which this worker does not work`, { queues: Object.keys(this.queues) });
    }
    this.#handlers.set(task.kind, async (job, ctx) => {
      let payload: unknown = job.payload;
      if (task.validate) {
        try {
          payload = task.validate(job.payload);
        } catch (e) {
          // The same payload would be refused at every attempt.
          throw new Fatal(`the payload of task ${task.kind} was refused by its validate: ${e instanceof Error ? e.message : String(e)}`);
        }
      }
      return (await run(payload, ctx)) as Json | void;
    });
    return this;
  }

  /**
   * Registers a hook run before every handler of this worker (a kind's or a task's), after the ones
   * registered before it, in the handler's own async context: a value it sets on `ctx.locals` (or on `ctx`),
   * an `AsyncLocalStorage` store it enters with `enterWith` (in a plain function, or an `async` one before
   * its first `await`), the OpenTelemetry span of the job, are the handler's too. May be `async`. What it
   * throws fails the job exactly as if the handler had thrown it (`Retry`, `Snooze`, … work too): the
   * handler and the later `before` hooks do not run, the `onError` and `after` hooks do.
   */
  before(hook: BeforeHook): this {
    this.#before.push(hook);
    return this;
  }

  /**
   * Registers a hook run once every handler of this worker has ended, whatever it did, after the ones
   * registered before it: `hook(ctx, outcome)`, where `outcome` (a {@link JobOutcome}) is what the worker
   * then reports: `succeeded` (`result`), `failed` (`error`), `retryAfter`, `snooze` or `cancelled`. It runs in
   * the handler's context (its span, its `AsyncLocalStorage` stores) before the report is sent; the job's
   * slot stays taken meanwhile, so keep it quick. May be `async`. What it throws is logged and changes
   * nothing. A handler the worker gave up on (its timeout, a cancel it did not answer for a lease, the end
   * of the shutdown grace) is reported at once, and its `after` hooks run when it ends, told that outcome.
   */
  after(hook: AfterHook): this {
    this.#after.push(hook);
    return this;
  }

  /**
   * Registers a hook run when an attempt failed — the handler or a `before` hook threw (anything but
   * `Snooze`, and a cancelled job's answer), or the job ran past its timeout — with the error (a
   * {@link JobAborted} for a timeout): for error trackers such as Sentry. It runs before the `after` hooks,
   * in the same way; what it throws is logged and changes nothing.
   */
  onError(hook: ErrorHook): this {
    this.#onError.push(hook);
    return this;
  }

  /** Jobs held now (running, or waiting for their outcome to be acknowledged). */
  get jobsInFlight(): number {
    return this.#inflight.size;
  }

  /** Whether a shutdown has begun. */
  get stopping(): boolean {
    return this.#stop.signal.aborted;
  }

  /**
   * Begins a graceful shutdown (idempotent): no more claims; running
   * handlers get the grace period to finish, then their `ctx.signal` is
   * aborted and their jobs are handed back (snooze 0, attempt given back).
   * `run()` resolves when that is done. Called a second time, ends the grace at once.
   */
  shutdown(): void {
    if (this.#stop.signal.aborted) {
      this.#graceOver.abort();
      return;
    }
    this.#stop.abort();
  }

  /**
   * Runs until a shutdown (SIGTERM, SIGINT or {@link Worker.shutdown}) and its drain. Once that has
   * resolved, it may be called again (a new run, with every queue claimed again); never twice at once.
   */
  run(): Promise<void> {
    return this.#run(undefined);
  }

  async #run(drain: DrainRun | undefined): Promise<void> {
    if (this.#active) throw new Error("this Worker is running already: a Worker runs once at a time");
    this.#active = true;
    try {
      await this.#runOnce(drain);
    } finally {
      this.#active = false;
      this.#drain = undefined;
    }
  }

  async #runOnce(drain: DrainRun | undefined): Promise<void> {
    if (this.#drained.signal.aborted) {
      // A new run after an earlier one: fresh signals, and every queue claimed again.
      this.#stop = new AbortController();
      this.#drained = new AbortController();
      this.#graceOver = new AbortController();
      for (const lane of this.#lanes) lane.claimSoon = true;
    }
    this.#drain = drain;
    const handleSignals = this.handleSignals && !drain;
    await this.#checkKey();
    const onSignal = (sig: NodeJS.Signals) => {
      if (this.stopping) {
        // As the Rust runtime: a second signal exits at once; the leases lapse and the server requeues the jobs.
        this.log.warn(`${sig} again: exiting at once without handing jobs back`, { worker_id: this.workerId, jobs: this.#inflight.size });
        process.exit(1);
      }
      this.log.info(`${sig}: shutting down, no more claims`, { worker_id: this.workerId });
      this.shutdown();
    };
    if (handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    this.log.info("worker started", { worker_id: this.workerId, queues: this.queues });
    const heartbeater = this.#heartbeatLoop();
    const completer = this.#completerLoop();
    const cancels = this.#cancelStreamLoop();
    const announcer = this.#announceLoop();
    try {
      await this.#fetchLoop();
      // No more claims. Wait for the handlers, at most the grace.
      const graceTimer = setTimeout(() => this.#graceOver.abort(), this.shutdownGraceMs);
      await Promise.race([this.#allHandlersDone(), new Promise((r) => this.#graceOver.signal.addEventListener("abort", r, { once: true }))]);
      clearTimeout(graceTimer);
      // Handlers still running (not those that ended, whose after hooks run on to their report).
      const left = [...this.#inflight.values()].filter((fl) => fl.reportingSince === undefined && fl.decided === undefined);
      if (left.length > 0) {
        this.log.warn("handlers still running after the shutdown grace: aborting them and handing their jobs back", { jobs: left.length });
        for (const fl of left) {
          if (!fl.decide?.({ kind: "abandoned" })) continue;
          fl.abandoned = true;
          abort(fl, new JobAborted("shutdown", "the worker is shutting down"));
        }
      }
      while (this.#reports.size > 0) await Promise.all([...this.#reports]);
    } finally {
      this.#drained.abort();
      this.#completerWake?.();
      await Promise.all([heartbeater, completer, cancels, announcer]);
      if (handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      this.log.info("worker stopped", { worker_id: this.workerId });
    }
  }

  /**
   * Checks the key once before claiming: a wrong or revoked key, or a tenant it may not act for, stops the
   * worker with a clear error.
   */
  async #checkKey(): Promise<void> {
    const tenant = this.client.tenant;
    try {
      const me = await this.client.whoami();
      this.log.info("key checked", { tenant: me.tenant.name, key_id: me.key_id });
    } catch (e) {
      if (tenant !== undefined && (e instanceof PermissionDenied || e instanceof NotFound)) {
        const why = e instanceof NotFound ? "there is no such tenant" : "only an admin key may act for a tenant";
        throw errorFromApi(e.status, e.code, `the worker may not act for tenant ${tenant}: ${why} (${e.message})`);
      }
      if (e instanceof Unauthenticated || e instanceof PermissionDenied) {
        throw new Unauthenticated(`the worker's API key was refused (${e.message}): check TETHER_KEY`, e.code, e.status);
      }
      // A server without the route, or one not answering yet: the claim loop copes (with backoff).
      this.log.warn("could not check the key", { error: String(e) });
    }
  }

  /**
   * Announces the worker (`PUT /v1/workers/{id}`: its queues, concurrency, SDK, host and pid) now and every
   * minute until it stops claiming, so `GET /v1/workers` lists it while it is idle, as the Rust runtime does.
   * Presence never holds up work: a failed announcement (a server without the route, say) is logged at
   * `debug` and tried again next time.
   */
  async #announceLoop(): Promise<void> {
    const body: AnnounceWorkerBody = {
      queues: Object.keys(this.queues),
      concurrency: Math.min(100_000, this.concurrency),
      sdk: "typescript",
      version: SDK_VERSION,
      host: hostname(),
      pid: process.pid,
    };
    // The drain ends it too, should the claims end otherwise than by a stop.
    const signal = AbortSignal.any([this.#stop.signal, this.#drained.signal]);
    while (!signal.aborted) {
      try {
        await this.client.announceWorker(this.workerId, body, { signal });
      } catch (e) {
        if (signal.aborted) break;
        this.log.debug("announcing the worker failed", { worker_id: this.workerId, error: String(e) });
      }
      await sleep(ANNOUNCE_EVERY_MS, signal);
    }
  }

  #allHandlersDone(): Promise<void> {
    return new Promise((resolve) => (this.#running === 0 ? resolve() : this.#idleWaiters.push(resolve)));
  }

  /** Resolves when a slot of `lane` frees (or the stop begins). */
  #slotFreed(lane: Lane, timeoutMs?: number): Promise<void> {
    return new Promise((resolve) => {
      let t: NodeJS.Timeout | undefined;
      const done = () => {
        if (t) clearTimeout(t);
        this.#stop.signal.removeEventListener("abort", done);
        resolve();
      };
      lane.slotWaiters.push(done);
      this.#stop.signal.addEventListener("abort", done, { once: true });
      if (timeoutMs !== undefined) t = setTimeout(done, timeoutMs);
    });
  }

  #freeSlot(lane: Lane) {
    lane.running -= 1;
    this.#running -= 1;
    const waiters = lane.slotWaiters;
    lane.slotWaiters = [];
    for (const w of waiters) w();
    if (this.#running === 0) for (const w of this.#idleWaiters.splice(0)) w();
  }

  // ---------------------------------------------------------------- claims

  /** Claims every queue, each on its own loop, until the stop. */
  async #fetchLoop(): Promise<void> {
    await Promise.all(
      this.#lanes.map(async (lane) => {
        try {
          await this.#claimLoop(lane);
        } finally {
          // No claim of this queue will carry anything any more: the completer sends its reports at once.
          this.#setClaimSoon(lane, false);
        }
      }),
    );
  }

  /** Claims `lane`'s queue into its free slots until the stop. */
  async #claimLoop(lane: Lane): Promise<void> {
    const backoff = new Backoff();
    const stop = this.#stop.signal;
    /** Carrying claims refused whole as invalid in a row: a server older than carrying refuses the fields. */
    let refusedCarrying = 0;
    const claimWaitMs = this.#drain ? Math.min(this.claimWaitMs, this.#drain.claimWaitMs) : this.claimWaitMs;
    while (!stop.aborted) {
      if (lane.running >= lane.concurrency) {
        await this.#slotFreed(lane);
        continue;
      }
      // A busy worker would claim one job per freed slot; wait briefly for
      // half the slots so claims come in batches. An idle one claims at once.
      const target = Math.max(1, Math.floor(lane.concurrency / 2));
      const cooldownEnd = Date.now() + FETCH_COOLDOWN_MS;
      while (lane.concurrency - lane.running < target && Date.now() < cooldownEnd && !stop.aborted) {
        await this.#slotFreed(lane, Math.max(0, cooldownEnd - Date.now()));
      }
      if (stop.aborted) break;
      const limit = Math.min(MAX_BATCH, lane.concurrency - lane.running);
      // The reports waiting now ride this claim: one request and one commit instead of two.
      const carried = this.#carryReports ? this.#takeCarriable() : [];
      // A claim that carries reports does not long-poll: their answers come back only with the claim's.
      const waitMs = carried.length > 0 ? 0 : claimWaitMs;
      const body: ClaimBody = { worker_id: this.workerId, limit, wait_ms: waitMs };
      // Only a TTL the user set: otherwise the queue's applies.
      if (this.leaseTtlMs !== undefined) body.lease_ttl_ms = this.leaseTtlMs;
      const complete: CompleteItem[] = [];
      const fail: FailItem[] = [];
      for (const p of carried) {
        if (p.kind === "complete") complete.push(p.item);
        else fail.push(p.item);
      }
      if (complete.length > 0) body.complete = complete;
      if (fail.length > 0) body.fail = fail;
      // The server answers completions first, then failures.
      const order = [...carried.filter((p) => p.kind === "complete"), ...carried.filter((p) => p.kind === "fail")];
      // While a long-poll is in flight no claim can carry what finishes meanwhile.
      this.#setClaimSoon(lane, waitMs === 0);
      const started = Date.now();
      let answer: ClaimAnswer;
      try {
        // Not interrupted by a shutdown: its jobs would be lost until their leases lapse.
        answer = await this.client.claimDetailed(lane.queue, body);
        backoff.reset();
      } catch (e) {
        this.#requestFailed("claim", e);
        // In transit or refused whole: its reports go by the old routes, where a bad one is refused alone
        // and a resend with the same token is answered as the first send was.
        for (const p of order) this.#toFallback(p);
        if (order.length > 0 && (e instanceof InvalidArgument || e instanceof PayloadTooLarge)) {
          // Refused because of what it carried (too large, a bad report, or fields this server does not
          // know): the claim goes again at once, without them.
          if (e instanceof InvalidArgument && ++refusedCarrying >= 3) {
            this.#carryReports = false;
            this.log.warn("the server refuses reports on claims (an older server?): sending them by the old routes from now on", { error: String(e) });
          }
          continue;
        }
        const delay = backoff.next();
        this.log.warn(`claim failed; trying again in ${Math.round(delay)} ms`, { queue: lane.queue, error: String(e), reports: order.length });
        this.#setClaimSoon(lane, false);
        await sleep(delay, stop);
        this.#setClaimSoon(lane, true);
        continue;
      }
      this.#setClaimSoon(lane, true);
      if (order.length > 0) refusedCarrying = 0;
      order.forEach((p, i) => this.#answerCarried(p, answer.reports[i]));
      const claimed = answer.jobs;
      const workerId = this.workerId;
      const queue = lane.queue;
      this.#observe((o) => o.onClaim?.({ workerId, queue, jobs: claimed }));
      if (stop.aborted) {
        // Claimed while stopping: give them straight back.
        await Promise.all(claimed.map((c) => this.#handBackUnstarted(c)));
        break;
      }
      for (const c of claimed) this.#start(c, lane);
      if (claimed.length > 0 || carried.length > 0) {
        // More work, or a claim that carried reports did not wait: the next one (long-polling) goes at once.
        continue;
      }
      const elapsed = Date.now() - started;
      let pause: number | undefined;
      if (elapsed + EARLY_SLACK_MS < claimWaitMs) {
        // The server did not hold the long-poll: pause instead of spinning.
        pause = Math.min(claimWaitMs - elapsed, this.pollIntervalMs);
      } else if (claimWaitMs === 0) {
        pause = this.pollIntervalMs;
      }
      if (pause !== undefined) {
        this.#setClaimSoon(lane, false);
        await sleep(pause, stop);
        this.#setClaimSoon(lane, true);
      }
    }
  }

  /** Says whether `lane`'s claim is coming soon; the completer sends its pending reports at once when none is. */
  #setClaimSoon(lane: Lane, soon: boolean): void {
    if (lane.claimSoon === soon) return;
    lane.claimSoon = soon;
    if (!soon && this.#pending.some((p) => p.lane === lane)) this.#completerWake?.();
  }

  /**
   * Whether a claim that may carry `p` is coming soon: its queue's, let out by the slot its job freed. (A
   * claim of another queue carries it too if it goes first, but nothing says when that one goes.)
   */
  #carrierSoon(p: PendingReport): boolean {
    return p.lane.claimSoon && this.#carryReports;
  }

  /** Takes the reports a claim may carry (at most the server's 1000), oldest first. */
  #takeCarriable(): PendingReport[] {
    if (this.#pending.length === 0) return [];
    const take: PendingReport[] = [];
    const keep: PendingReport[] = [];
    for (const p of this.#pending) (!p.carried && take.length < MAX_BATCH ? take : keep).push(p);
    this.#pending = keep;
    return take;
  }

  /** Hands a report to the completer's old routes (after a claim that carried it got no usable answer for it). */
  #toFallback(p: PendingReport): void {
    p.carried = true;
    this.#pending.unshift(p);
    this.#completerWake?.();
  }

  /** The answer to a report a claim carried, handled as the old routes' answers are. */
  #answerCarried(p: PendingReport, r: ReportResult | undefined): void {
    // No answer for it: the old routes will tell.
    if (!r || r.id !== p.item.id) return this.#toFallback(p);
    if (r.ok) return p.done({ kind: "done", state: p.kind === "complete" ? "succeeded" : undefined });
    this.#itemFailed(p.kind, p.item, r.error);
    if (r.error.code === "lease_lost" || r.error.code === "not_found") p.done({ kind: "lease_lost" });
    // Worth another try, by the old routes (the same report, so safe to resend).
    else if (r.error.code === "unavailable" || r.error.code === "internal") this.#toFallback(p);
    else p.done({ kind: "rejected", error: new TetherError(r.error.message, r.error.code, 0) });
  }

  async #handBackUnstarted(c: ClaimedJob): Promise<void> {
    const r = await this.#retrying("snooze", c, () => this.client.snooze(c.id, { lease_token: c.lease_token, delay_ms: 0 }).then((j) => j.state));
    this.#settle(r, c, () => "handed back (claimed while stopping)");
  }

  #start(job: ClaimedJob, lane: Lane) {
    const fl: InFlight = {
      job,
      lane,
      leaseTtlMs: grantedLease(job, this.leaseTtlMs),
      lastBeat: performance.now(),
      ctrl: undefined,
      aborted: undefined,
      onAbort: undefined,
      progress: undefined,
      cancelRequested: false,
      lost: false,
      reportingSince: undefined,
      decide: undefined,
      decided: undefined,
      abandoned: false,
    };
    this.#inflight.set(job.lease_token, fl);
    const due = beatDue(fl);
    if (this.#beatAt === undefined || due < this.#beatAt) {
      this.#beatAt = due;
      this.#beatSooner?.();
    }
    lane.running += 1;
    this.#running += 1;
    const p = this.#runJob(fl).finally(() => {
      this.#inflight.delete(job.lease_token);
      this.#reports.delete(p);
    });
    this.#reports.add(p);
  }

  // ---------------------------------------------------------------- running

  async #runJob(fl: InFlight): Promise<void> {
    let ended: Ended;
    try {
      ended = await this.#execute(fl);
    } finally {
      // The slot frees when the handler is done, not after the report's round trip. The claim loop it wakes
      // resumes only after this synchronous run: #report queues a complete or fail (#queueReport) before
      // its first await, so the claim that slot lets out finds the report there and carries it.
      this.#freeSlot(fl.lane);
    }
    fl.reportingSince = performance.now();
    try {
      await this.#report(fl, ended);
    } catch (e) {
      this.log.error("reporting the outcome failed unexpectedly", { job_id: fl.job.id, error: errorText(e) });
    }
  }

  /**
   * Runs the job's hooks and handler until the run's ending is decided: the handler's (after its `onError`
   * and `after` hooks, which run before the report), or the worker's when it gives up on the handler first
   * (its timeout, a cancel it did not answer for a lease, the end of the shutdown grace), which is reported
   * at once (the hooks then run when the handler ends). A Snooze is an answer like any other: it is
   * reported, never slept here.
   */
  async #execute(fl: InFlight): Promise<Ended> {
    const handler = this.#handlers.get(fl.job.kind);
    if (!handler) return { kind: "no_handler" };
    const timers: NodeJS.Timeout[] = [];
    let settle!: (ended: Ended) => void;
    const decided = new Promise<Ended>((resolve) => (settle = resolve));
    fl.decide = (ended) => {
      if (fl.decided) return false;
      fl.decided = ended;
      settle(ended);
      return true;
    };
    const timeoutMs = fl.job.timeout_ms && fl.job.timeout_ms > 0 ? fl.job.timeout_ms : undefined;
    if (timeoutMs !== undefined) {
      timers.push(
        setTimeout(() => {
          if (fl.decide!({ kind: "timed_out", ms: timeoutMs })) abort(fl, new JobAborted("timeout", `timed out after ${timeoutMs} ms`));
        }, timeoutMs),
      );
    }
    // A handler asked to stop gets one lease TTL to do so.
    fl.onAbort = () => timers.push(setTimeout(() => fl.decide!({ kind: "unanswered" }), fl.leaseTtlMs));
    // Strip the lease token: handlers get the job as the API shows it.
    const { lease_token: _token, ...job } = fl.job;
    const ctx: JobContext = {
      job,
      get signal() {
        return signalOf(fl);
      },
      shutdown: this.#stop.signal,
      workerId: this.workerId,
      progress: (value: Json) => {
        fl.progress = { value };
        this.#progressReported();
      },
      // A job without dependencies (or from a server older than them) has none to read.
      dependencies: () => (fl.job.depends_on?.length ? this.client.dependencies(fl.job.id) : Promise.resolve([])),
      locals: {},
    };
    const tracing = this.tracing;
    const span = tracing ? startJobSpan(tracing, SDK_VERSION, fl.job) : undefined;
    /** Whether the handler's own ending decided the run (its hooks then run before the report). */
    let handlerDecided = false;
    const body = async (): Promise<void> => {
      let own: Ended;
      try {
        for (const hook of this.#before) await hook(ctx);
        const result = await handler(job, ctx);
        own = { kind: "returned", result: result === undefined ? undefined : result };
      } catch (error) {
        own = { kind: "threw", error };
      }
      handlerDecided = fl.decide!(own);
      await this.#afterRun(fl, ctx, fl.decided!, span);
    };
    // Each job runs in an async context of its own: an AsyncLocalStorage store a hook or the handler enters
    // stays the job's, and the OpenTelemetry context the job's span's.
    const main = tracing && span ? () => tracing.context.with(span.context, body) : body;
    const running = new AsyncResource("tether.job").runInAsyncScope(main).catch((e: unknown) => {
      this.log.error("running the job's hooks failed unexpectedly", { job_id: fl.job.id, error: errorText(e) });
    });
    try {
      const ended = await decided;
      if (handlerDecided) await running;
      return ended;
    } finally {
      fl.onAbort = undefined;
      for (const t of timers) clearTimeout(t);
    }
  }

  /**
   * Once the handler ended (told how the run ended, which may be the worker's own ending if it gave up on
   * the handler first): the `onError` hooks for a failed attempt, then the `after` hooks, then the end of the
   * job's span. What a hook throws is logged, never the job's outcome.
   */
  async #afterRun(fl: InFlight, ctx: JobContext, ended: Ended, span: JobSpan | undefined): Promise<void> {
    if (!span && this.#after.length === 0 && this.#onError.length === 0) return;
    const outcome = outcomeOf(ended, fl);
    try {
      if (outcome.status === "failed" || outcome.status === "retryAfter") {
        for (const hook of this.#onError) await this.#callHook("onError", hook, fl.job.id, () => hook(ctx, outcome.error));
      }
      for (const hook of this.#after) await this.#callHook("after", hook, fl.job.id, () => hook(ctx, outcome));
    } finally {
      if (span) endJobSpan(this.tracing!, span.span, outcome);
    }
  }

  /** Calls an `after` or `onError` hook; what it throws (or rejects with) is logged: the job's outcome stands. */
  async #callHook(which: "after" | "onError", hook: AfterHook | ErrorHook, jobId: string, call: () => void | Promise<void>): Promise<void> {
    try {
      await call();
    } catch (e) {
      const fields: Record<string, unknown> = { job_id: jobId, hook: hook.name || "(anonymous)", error: e instanceof Error ? e.message : errorText(e) };
      if (e instanceof Error) fields.stack = userStack(e);
      this.log.error(`the ${which} hook threw; the job's outcome stands`, fields);
    }
  }

  // ---------------------------------------------------------------- reporting

  async #report(fl: InFlight, ended: Ended): Promise<void> {
    const job = fl.job;
    if (this.#drain) {
      try {
        this.#drain.onOutcome(job, outcomeOf(ended, fl), ended.kind === "threw" ? ended.error : undefined);
      } catch (e) {
        this.log.error("drain: counting the outcome failed", { job_id: job.id, error: errorText(e) });
      }
    }
    if (fl.lost) {
      this.log.warn("lease lost while the handler ran (another owner has the job): its outcome is discarded", { job_id: job.id });
      return;
    }
    let failure: Omit<FailBody, "lease_token">;
    if (ended.kind === "abandoned" || (fl.abandoned && !fl.cancelRequested)) {
      const r = await this.#snooze(fl, 0);
      this.#settle(r, job, (s) => (s === "cancelled" ? "cancelled" : "handed back at shutdown (attempt given back)"));
      return;
    } else if (fl.cancelRequested) {
      // Whatever the handler answers once a cancel was requested, the worker acknowledges the cancellation.
      failure = { error: "cancelled on request", cancelled: true };
    } else if (ended.kind === "unanswered") {
      failure = { error: "cancelled: the handler did not stop when asked", cancelled: true };
    } else if (ended.kind === "no_handler") {
      failure = { error: `no handler for kind ${job.kind} on worker ${this.workerId}` };
      this.#logFailure(job, failure, undefined);
    } else if (ended.kind === "timed_out") {
      failure = { error: `timed out after ${ended.ms} ms` };
      this.#logFailure(job, failure, undefined);
    } else if (ended.kind === "returned") {
      await this.#complete(fl, ended.result);
      return;
    } else {
      const e = ended.error;
      if (e instanceof Snooze) {
        const r = await this.#snooze(fl, e.ms);
        this.#settle(r, job, (s) => (s === "cancelled" ? "cancelled" : `snoozed ${e.ms} ms`));
        return;
      } else if (e instanceof Retry) {
        failure = { error: e.message };
      } else if (e instanceof RetryAfter) {
        failure = { error: e.message, retry_after_ms: e.ms };
      } else if (e instanceof Fatal) {
        failure = { error: e.message, fatal: true };
      } else {
        failure = { error: errorText(e) };
      }
      this.#logFailure(job, failure, e);
    }
    const r = await this.#fail(fl, failure);
    // A failure a claim carried is answered without the job's new state.
    this.#settle(r, job, (s) => (s === undefined ? "failure reported" : s === "queued" ? "failure reported; retry scheduled" : `failure reported; job ${s}`));
  }

  /**
   * Logs a failed attempt, once, as it is reported: `warn` while the job will run again, `error` when it
   * failed for good (`fatal`, or its last attempt). The fields name the job and carry the error's message
   * and, for a thrown Error, its stack (the SDK's frames dropped) even when the stored error is the message
   * alone (`Retry`, `RetryAfter`, `Fatal`), so the log shows where the handler gave up.
   */
  #logFailure(job: Job, failure: Omit<FailBody, "lease_token">, thrown: unknown): void {
    const final = !!failure.fatal || job.attempt >= job.max_attempts;
    const fields: Record<string, unknown> = {
      job_id: job.id,
      kind: job.kind,
      queue: job.queue,
      attempt: job.attempt,
      max_attempts: job.max_attempts,
      error: thrown instanceof Error ? thrown.message : failure.error,
    };
    if (failure.retry_after_ms != null && !final) fields.retry_after_ms = failure.retry_after_ms;
    if (thrown instanceof Error) fields.stack = userStack(thrown);
    if (!final) this.log.warn("job failed; it will run again", fields);
    else this.log.error(failure.fatal ? "job failed for good (fatal)" : "job failed for good (no attempts left)", fields);
  }

  #settle(r: Reported, job: { id: string }, onDone: (state: string | undefined) => string) {
    switch (r.kind) {
      case "done":
        this.log.debug(onDone(r.state), { job_id: job.id });
        break;
      case "lease_lost":
        this.log.warn("lease lost (another owner has the job): the outcome is discarded", { job_id: job.id });
        break;
      case "rejected":
        this.log.error("the outcome was refused; the lease will lapse and the server requeue the job", { job_id: job.id, error: String(r.error) });
        break;
      case "gave_up":
        this.log.error("could not report the outcome; the lease will lapse and the server requeue the job", { job_id: job.id, error: String(r.error) });
        break;
    }
  }

  /** Tries `f` (a report of `job`) up to REPORT_TRIES times while it fails transiently. */
  async #retrying(what: "fail" | "snooze", job: { id: string; lease_token: string }, f: () => Promise<string>): Promise<Reported> {
    const backoff = new Backoff();
    for (let i = 1; ; i++) {
      try {
        return { kind: "done", state: await f() };
      } catch (e) {
        this.#requestFailed(what, e, job);
        if (!retryable(e) || i >= REPORT_TRIES) return classify(e);
        const d = backoff.next();
        this.log.warn(`${what} failed; trying again in ${Math.round(d)} ms`, { error: String(e) });
        await sleep(d);
      }
    }
  }

  /** Queues a failure for the next claim to carry (or the completer, by `POST /v1/jobs/{id}/fail`). */
  #fail(fl: InFlight, failure: Omit<FailBody, "lease_token">): Promise<Reported> {
    const item: FailItem = { id: fl.job.id, lease_token: fl.job.lease_token, ...failure };
    return new Promise<Reported>((done) => this.#queueReport({ kind: "fail", item, done, lane: fl.lane, since: performance.now(), carried: false }));
  }

  async #snooze(fl: InFlight, delayMs: number): Promise<Reported> {
    // A heartbeat of this job sent before its report began (later ones leave it out) must not reach the
    // server after the snooze: the server would record a lease_lost for the job it just requeued. (A
    // snooze is one request of its own; completions and failures go in batches and keep that race.)
    await this.#beatInFlight;
    return this.#retrying("snooze", fl.job, () => this.client.snooze(fl.job.id, { lease_token: fl.job.lease_token, delay_ms: delayMs }).then((j) => j.state));
  }

  /** Queues a success for the next claim to carry (or the completer's batches); a result the server refuses fails the attempt instead. */
  async #complete(fl: InFlight, result: Json | undefined): Promise<void> {
    const item: CompleteItem = { id: fl.job.id, lease_token: fl.job.lease_token };
    if (result !== undefined) item.result = result;
    const answer = await new Promise<Reported>((done) => this.#queueReport({ kind: "complete", item, done, lane: fl.lane, since: performance.now(), carried: false }));
    if (answer.kind === "rejected") {
      this.log.warn("the result was refused; failing the attempt", { job_id: fl.job.id, error: String(answer.error) });
      const r = await this.#fail(fl, { error: `the result could not be stored: ${String(answer.error)}` });
      this.#settle(r, fl.job, () => "failed");
      return;
    }
    this.#settle(answer, fl.job, () => "succeeded");
  }

  #queueReport(p: PendingReport): void {
    this.#pending.push(p);
    // The completer sets a timer for the first report it sees; with no claim coming soon it sends at once.
    if (!this.#carrierSoon(p) || this.#completerWakeAt === undefined) this.#completerWake?.();
  }

  /**
   * Sends by the old routes the reports no claim took soon: those a claim carried without a usable answer,
   * those that waited CARRY_WAIT_MS, and every one while no claim is coming soon. Completions go in batches
   * (`POST /v1/jobs/complete`, up to 250, 4 in flight), failures each alone.
   */
  async #completerLoop(): Promise<void> {
    const batches = new Set<Promise<void>>();
    const others = new Set<Promise<void>>();
    const track = (set: Set<Promise<void>>, p: Promise<void>) => {
      const q = p.finally(() => set.delete(q));
      set.add(q);
    };
    for (;;) {
      const now = performance.now();
      let wakeAt: number | undefined;
      const completes: PendingReport[] = [];
      const keep: PendingReport[] = [];
      for (const p of this.#pending) {
        if (p.carried || !this.#carrierSoon(p) || now - p.since >= CARRY_WAIT_MS) {
          if (p.kind === "fail") track(others, this.#failAlone(p.item, p.done));
          else completes.push(p);
        } else {
          keep.push(p);
          const at = p.since + CARRY_WAIT_MS;
          if (wakeAt === undefined || at < wakeAt) wakeAt = at;
        }
      }
      while (completes.length > 0 && batches.size < COMPLETIONS_IN_FLIGHT) {
        track(batches, this.#completeBatch(completes.splice(0, COMPLETION_BATCH)));
      }
      // Completions that found every batch slot taken wait for one (a claim may still take them meanwhile).
      this.#pending = completes.length > 0 ? completes.concat(keep) : keep;
      if (this.#pending.length === 0 && this.#drained.signal.aborted) break;
      await new Promise<void>((resolve) => {
        let timer: NodeJS.Timeout | undefined;
        const wake = () => {
          if (this.#completerWake !== wake) return;
          clearTimeout(timer);
          this.#completerWake = undefined;
          this.#completerWakeAt = undefined;
          resolve();
        };
        this.#completerWake = wake;
        this.#completerWakeAt = wakeAt;
        if (wakeAt !== undefined) timer = setTimeout(wake, Math.max(0, wakeAt - performance.now()));
        if (completes.length > 0) void Promise.race(batches).then(wake);
      });
    }
    await Promise.all([...batches, ...others]);
  }

  /** A failure by `POST /v1/jobs/{id}/fail`, retried while it fails transiently. */
  async #failAlone(item: FailItem, done: (r: Reported) => void): Promise<void> {
    const { id, ...body } = item;
    done(await this.#retrying("fail", item, () => this.client.fail(id, body).then((j) => j.state)));
  }

  async #completeBatch(batch: PendingReport[]): Promise<void> {
    const items = batch.map((p) => p.item as CompleteItem);
    let results: Awaited<ReturnType<Client["completeBatch"]>> | undefined;
    let failure: unknown;
    const backoff = new Backoff();
    // A resend with the same tokens answers as the first send did, so a batch whose answer was lost is safe to send again.
    for (let i = 1; ; i++) {
      try {
        results = await this.client.completeBatch(items);
        break;
      } catch (e) {
        this.#requestFailed("complete", e);
        failure = e;
        if (!retryable(e) || i >= REPORT_TRIES) break;
        await sleep(backoff.next());
      }
    }
    if (results) {
      batch.forEach((p, i) => {
        const r = results[i];
        if (!r) return p.done({ kind: "gave_up", error: new Error("the server answered fewer items than it was given") });
        if (r.ok) return p.done({ kind: "done", state: "succeeded" });
        this.#itemFailed("complete", p.item, r.error);
        if (r.error.code === "lease_lost" || r.error.code === "not_found") p.done({ kind: "lease_lost" });
        else if (r.error.code === "unavailable" || r.error.code === "internal") p.done({ kind: "gave_up", error: r.error });
        else p.done({ kind: "rejected", error: new TetherError(r.error.message, r.error.code, 0) });
      });
      return;
    }
    if (retryable(failure) || batch.length === 1) {
      const r = classify(failure);
      for (const p of batch) p.done(r);
      return;
    }
    // Refused whole (one oversize result refuses them all): send each alone so only the culprit is refused.
    for (const p of batch) await this.#completeBatch([p]);
  }

  // ---------------------------------------------------------------- cancellation

  /**
   * A cancel was requested for a job this worker runs, as a heartbeat's answer or the event stream says:
   * asks its handler to stop (once; the report then acknowledges the cancellation whatever it answers).
   * Both paths end here, so a cancel acts the same whichever noticed it first.
   */
  #cancelRequested(fl: InFlight, via: "heartbeat" | "event stream"): void {
    // Once the run's ending is decided (the handler ended, its after hooks may still run), it stands.
    if (fl.cancelRequested || fl.decided) return;
    fl.cancelRequested = true;
    this.log.info("cancel requested: asking the handler to stop", { job_id: fl.job.id, via });
    abort(fl, new JobAborted("cancel", "the job's cancellation was requested"));
  }

  /**
   * Keeps one event stream of the tenant's `cancel_requested` events open while the worker runs, so a
   * cancellation reaches its handler at once instead of at the next heartbeat (a third of the lease). No
   * queue filter: the events of other queues are few and dropped here. The stream reopens by itself (with
   * `Last-Event-ID` once it has had an event) after a dropped connection or a 503; a refusal it throws (429 when
   * the tenant holds as many streams as the server allows, a server without the route) is tried again
   * here with a slow backoff. Neither ever fails the worker, and each outage is logged once: heartbeats
   * still deliver cancellations meanwhile. It closes at the drain, as handlers may be cancelled until then.
   */
  async #cancelStreamLoop(): Promise<void> {
    const signal = this.#drained.signal;
    const backoff = new Backoff(STREAM_RETRY_FIRST_MS, STREAM_RETRY_MOST_MS);
    /** Whether the stream's trouble was logged since it was last open. */
    let warned = false;
    const trouble = (error: unknown, delayMs: number) => {
      const fields = { worker_id: this.workerId, error: String(error), retry_in_ms: Math.round(delayMs) };
      if (warned) return this.log.debug("the event stream of cancellations is still not open", fields);
      warned = true;
      this.log.warn("the event stream of cancellations failed: heartbeats deliver cancellations until it is open again; retrying with backoff", fields);
    };
    while (!signal.aborted) {
      try {
        const stream = this.client.streamEvents(
          { events: ["cancel_requested"] },
          {
            signal,
            onOpen: () => {
              backoff.reset();
              if (warned) this.log.info("the event stream of cancellations is open again", { worker_id: this.workerId });
              else this.log.debug("the event stream of cancellations is open", { worker_id: this.workerId });
              warned = false;
            },
            // The server ended it when `error` is undefined (it is stopping, say).
            onReconnect: ({ error, delayMs }) => trouble(error ?? "the server ended the stream", delayMs),
          },
        );
        for await (const e of stream) {
          // A gap (retention removed events it had not read) loses nothing a heartbeat will not tell.
          if (e.event !== "cancel_requested") continue;
          // Only the attempt this worker runs; once its report is on its way (or its lease is lost), the
          // report's answer decides, as for a heartbeat's answer.
          for (const fl of this.#inflight.values()) {
            if (fl.job.id !== e.job_id || fl.job.attempt !== e.attempt || reporting(fl) || fl.lost) continue;
            this.#cancelRequested(fl, "event stream");
          }
        }
      } catch (e) {
        if (signal.aborted) break;
        const delay = backoff.next();
        trouble(e, delay);
        await sleep(delay, signal);
      }
    }
  }

  // ---------------------------------------------------------------- heartbeats

  /**
   * Handler progress was reported: the heartbeater sends it at once, or PROGRESS_INTERVAL_MS after it last
   * sent progress, taking along whatever else is reported until then (one value per job: the last).
   */
  #progressReported(): void {
    // Already scheduled: this value rides that heartbeat.
    if (this.#progressAt !== undefined) return;
    this.#progressAt = Math.max(performance.now(), this.#progressSentAt + PROGRESS_INTERVAL_MS);
    if (this.#beatAt === undefined || this.#progressAt < this.#beatAt) this.#beatSooner?.();
  }

  /**
   * Heartbeats every held job every third of its own lease: wakes when the first job is due and takes along
   * every job due within the shortest interval among them, so jobs of one lease share a batch. Wakes too
   * when new progress is to be sent (see `#progressReported`); every heartbeat carries the
   * progress of all the jobs that have new progress.
   */
  async #heartbeatLoop(): Promise<void> {
    const backoff = new Backoff();
    let retryAt: number | undefined;
    while (!this.#drained.signal.aborted) {
      let due: number | undefined;
      for (const fl of this.#inflight.values()) {
        if (reporting(fl)) continue;
        const d = beatDue(fl);
        if (due === undefined || d < due) due = d;
      }
      // After a failure, the retry's time alone: the jobs it failed for are overdue, and waking
      // for them at once would try again as fast as the errors come back. The retry comes
      // within the interval (and carries the progress).
      const beatsAt = retryAt ?? due;
      const progressAt = retryAt === undefined ? this.#progressAt : undefined;
      this.#beatAt = beatsAt === undefined ? progressAt : progressAt === undefined ? beatsAt : Math.min(beatsAt, progressAt);
      const wait = this.#beatAt === undefined ? HEARTBEAT_IDLE_MS : Math.max(0, this.#beatAt - performance.now());
      const woke = await new Promise<"timer" | "sooner">((resolve) => {
        const drained = this.#drained.signal;
        const done = (r: "timer" | "sooner") => {
          clearTimeout(timer);
          drained.removeEventListener("abort", onDrained);
          this.#beatSooner = undefined;
          resolve(r);
        };
        const onDrained = () => done("sooner");
        const timer = setTimeout(() => done("timer"), wait);
        drained.addEventListener("abort", onDrained, { once: true });
        this.#beatSooner = () => done("sooner");
      });
      if (this.#drained.signal.aborted) break;
      if (woke === "sooner") continue;
      // Woken for progress alone, it sends only the jobs with new progress (and any already due).
      const failed = await this.#heartbeatCycle(beatsAt !== undefined && (progressAt === undefined || beatsAt <= progressAt));
      if (failed === undefined) {
        backoff.reset();
        retryAt = undefined;
      } else {
        // Try again soon: two more misses would cost the leases.
        retryAt = performance.now() + Math.min(backoff.next(), failed);
      }
    }
  }

  /**
   * Heartbeats the jobs with new progress and those due now or, when `beats` (it woke for a heartbeat, not
   * for progress alone), within the shortest interval among the held ones (batches of at most 1000);
   * answers the shortest interval of a batch that failed, if one did.
   */
  async #heartbeatCycle(beats: boolean): Promise<number | undefined> {
    // Whatever progress is reported from now on waits for the next cycle.
    this.#progressAt = undefined;
    const all = [...this.#inflight.values()].filter((fl) => !reporting(fl));
    if (all.length === 0) return undefined;
    const now = performance.now();
    const window = beats ? Math.min(...all.map(beatInterval)) : 0;
    const held = all.filter((fl) => fl.progress !== undefined || beatDue(fl) <= now + window);
    if (held.some((fl) => fl.progress !== undefined)) this.#progressSentAt = now;
    let failed: number | undefined;
    for (let i = 0; i < held.length; i += MAX_BATCH) {
      const chunk = held.slice(i, i + MAX_BATCH);
      const items = chunk.map((fl) => {
        const item: { id: string; lease_token: string; progress?: Json } = { id: fl.job.id, lease_token: fl.job.lease_token };
        if (fl.progress) item.progress = fl.progress.value;
        return item;
      });
      const sent = chunk.map((fl) => fl.progress);
      chunk.forEach((fl) => (fl.progress = undefined));
      const interval = Math.min(...chunk.map(beatInterval));
      const sentAt = performance.now();
      try {
        // Give up after a third of the lease, so a stuck round trip is retried while the leases hold.
        const call = this.client.heartbeatBatch(items, { timeoutMs: Math.max(Math.floor(interval), 1000) });
        this.#beatInFlight = call.catch(() => undefined);
        const results = await call;
        for (const fl of chunk) fl.lastBeat = sentAt;
        chunk.forEach((fl, j) => {
          const r = results[j];
          // Its report went out while the heartbeat was on its way: the report's answer decides, not this one.
          if (!r || reporting(fl)) return;
          if (r.ok) {
            if (r.cancel_requested) this.#cancelRequested(fl, "heartbeat");
            return;
          }
          this.#itemFailed("heartbeat", fl.job, r.error);
          if (r.error.code === "lease_lost" || r.error.code === "not_found") {
            if (!fl.lost) {
              fl.lost = true;
              this.log.warn("heartbeat: lease lost to another owner; stopping the handler", { job_id: fl.job.id });
              abort(fl, new JobAborted("lease_lost", "another owner has the job"));
            }
          } else {
            this.log.warn("heartbeat refused", { job_id: fl.job.id, error: r.error.message });
          }
        });
      } catch (e) {
        this.#requestFailed("heartbeat", e);
        failed = failed === undefined ? interval : Math.min(failed, interval);
        this.log.warn("heartbeat failed", { jobs: chunk.length, error: String(e) });
        // Keep the progress for the next cycle unless a newer one came.
        chunk.forEach((fl, j) => {
          if (!fl.progress && sent[j]) fl.progress = sent[j];
        });
      }
    }
    return failed;
  }
}

