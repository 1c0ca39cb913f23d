// What a handler sees (its job's context, and why its signal was aborted)
// and what a worker tells its observer and its logger. The worker that runs
// handlers is in worker.ts.

import type { RetryAfter, Snooze, TetherError } from "./errors.js";
import type { ClaimedJob, DependencyJob, ErrorCode, Job, Json } from "./types.js";

/** Why a handler's `ctx.signal` was aborted (its `reason`). */
export class JobAborted extends Error {
  readonly why: "cancel" | "timeout" | "shutdown" | "lease_lost";
  constructor(why: JobAborted["why"], message: string) {
    super(message);
    this.name = "JobAborted";
    this.why = why;
  }
}

/** What a handler gets besides its job. */
export interface JobContext {
  /**
   * Aborted when the handler should stop: a cancel was requested (pushed by
   * the worker's event stream within a second; a heartbeat notices it too),
   * the job's `timeout_ms` elapsed, its lease was lost, or the shutdown
   * grace ended. `signal.reason` is a {@link JobAborted} saying which.
   */
  readonly signal: AbortSignal;
  /** Aborted as soon as the worker starts shutting down (the grace period begins). */
  readonly shutdown: AbortSignal;
  /**
   * Records progress (any JSON); a heartbeat carries it to the server within about half a second
   * (coalesced: the last value counts, at most two such heartbeats a second per worker).
   */
  progress(value: Json): void;
  /**
   * The jobs this one waited for (`job.depends_on`), in that order, with their `state` and `result`
   * (`GET /v1/jobs/{id}/dependencies`): how a handler uses its parents' results. `[]` without a request
   * for a job without dependencies; retried like every read of the client.
   */
  dependencies(): Promise<DependencyJob[]>;
  /** This worker's id. */
  readonly workerId: string;
  /** The job (as the handler of a kind gets it first): how a task's handler, given the payload, reads its id or attempt. */
  readonly job: Job;
  /**
   * Values of this run of the job, empty at first: what a `worker.before` hook puts here, the handler and
   * the `after` and `onError` hooks read (a request id, a user, a timer). The context object itself is
   * the same for all of them too.
   */
  readonly locals: Record<string, unknown>;
}

/** A handler: resolves with the job's result (any JSON; `undefined` is none). */
export type Handler = (job: Job, ctx: JobContext) => Promise<Json | void> | Json | void;

/**
 * What a job's run came to, as the worker reports it (and `worker.after` hooks are told it):
 *
 * - `succeeded`: the handler returned `result` (`undefined`: none).
 * - `failed`: the attempt failed: `error` is what the handler (or a `before` hook) threw, or the
 *   {@link JobAborted} (`why: "timeout"`) of a job that ran past its `timeout_ms`. The job runs again after
 *   its queue's backoff, or has failed for good: it threw `Fatal`, or it was its last attempt
 *   (`ctx.job.attempt >= ctx.job.max_attempts`).
 * - `retryAfter`: it threw `RetryAfter` (`error`): the job runs again `delayMs` from now (or, on its last
 *   attempt, has failed for good).
 * - `snooze`: it threw `Snooze` (`error`): queued again `delayMs` from now, the attempt given back; or the
 *   worker handed it back at shutdown (`error` undefined, `delayMs` 0).
 * - `cancelled`: a cancel was requested while it ran; `error` is what it threw, if it threw.
 */
export type JobOutcome =
  | { status: "succeeded"; result: Json | undefined }
  | { status: "failed"; error: unknown }
  | { status: "retryAfter"; error: RetryAfter; delayMs: number }
  | { status: "snooze"; error: Snooze | undefined; delayMs: number }
  | { status: "cancelled"; error: unknown };

/**
 * A hook run before every handler of a worker (see `worker.before`), in the handler's own async context:
 * what it throws fails the job as if the handler had thrown it (and the handler does not run).
 */
export type BeforeHook = (ctx: JobContext) => void | Promise<void>;
/** A hook run once a handler ended, whatever it did, before the job is reported (see `worker.after`). */
export type AfterHook = (ctx: JobContext, outcome: JobOutcome) => void | Promise<void>;
/** A hook run when an attempt failed, with its error (see `worker.onError`): for error trackers. */
export type ErrorHook = (ctx: JobContext, error: unknown) => void | Promise<void>;

/**
 * Where the worker writes what it does: a message and structured fields. Each failed attempt is one
 * call: `warn("job failed; it will run again", …)` or `error("job failed for good (fatal)" | "job failed
 * for good (no attempts left)", …)`, with the fields `job_id`, `kind`, `queue`, `attempt`, `max_attempts`,
 * `error` (the message), `stack` (for a thrown Error: its stack without the SDK's frames) and, for a
 * `RetryAfter`, `retry_after_ms`.
 */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** A request the worker makes to the server. */
export type WorkerOp = "claim" | "heartbeat" | "complete" | "fail" | "snooze";

/**
 * Why a request failed: the API error code, or, when there was no usable
 * answer, `transport` (refused, reset, …), `timeout` (no answer in time) or
 * `decode` (an answer that could not be read).
 */
export type FailureCode = ErrorCode | "transport" | "timeout" | "decode";

/** A claim answer, as it arrived (before any of its handlers start). */
export interface ClaimEvent {
  workerId: string;
  queue: string;
  /** The claimed jobs, with their lease tokens. Empty when the long-poll ended without work. */
  jobs: readonly ClaimedJob[];
}

/** A failed request (each try of a retried one), or one failed item of a batch answer or of the reports a claim carried. */
export interface RequestErrorEvent {
  workerId: string;
  op: WorkerOp;
  code: FailureCode;
  error: TetherError;
  /** The job, for `fail`, `snooze` and an item of a batch; absent for a whole request (claim, batch). */
  jobId?: string;
}

/** A `lease_lost` answer: another owner has the job; the outcome presented with `leaseToken` was refused. */
export interface LeaseLostEvent {
  workerId: string;
  op: Exclude<WorkerOp, "claim">;
  jobId: string;
  /** The token the worker presented. */
  leaseToken: string;
}

/**
 * Sees what the worker sees, for metrics and logs. Every callback is
 * optional and called synchronously as the answer arrives; one that throws
 * is logged and ignored (it cannot break the worker). Keep them quick.
 */
export interface WorkerObserver {
  /** Every claim answer, as soon as it arrives. */
  onClaim?(event: ClaimEvent): void;
  /** Every failed request (every try), every failed item of a heartbeat or complete batch, and every refused report a claim carried. */
  onError?(event: RequestErrorEvent): void;
  /** Every `lease_lost` answer (per item for heartbeat and complete batches and a claim's reports); `onError` is called for it too. */
  onLeaseLost?(event: LeaseLostEvent): void;
}
