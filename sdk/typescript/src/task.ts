// Typed tasks: a job kind declared once, with the types of its payload and
// of its result, its queue, its enqueue defaults and an optional runtime
// check of its payload. Producers enqueue it (`client.enqueueTask`) and
// wait for its result (`client.waitResult`), workers handle it
// (`worker.handle(task, …)`), and the compiler checks both sides against
// the one declaration.

import type { Backoff, DependencyFailure, EnqueueRequest, Job, Json } from "./types.js";
import type { JobContext } from "./handler.js";

/**
 * How to enqueue a task: each call's options, over the task's defaults. The names are the wire's in
 * camelCase (`maxAttempts` is `max_attempts`, `delayMs` is `delay_ms`); left out, the task's default
 * applies, else the queue's (attempts, backoff) or the server's.
 */
export interface TaskEnqueueOptions {
  /** Another queue than the task's. */
  queue?: string;
  priority?: number;
  /** Runs this long from now at the earliest (ms). Not with `runAt`. */
  delayMs?: number;
  /** Runs at this time at the earliest. Not with `delayMs`. */
  runAt?: string | Date;
  maxAttempts?: number;
  /** Each attempt's time limit (ms): the handler's `ctx.signal` aborts and the attempt fails past it. */
  timeoutMs?: number;
  backoff?: Backoff;
  tags?: string[];
  /** A second enqueue with this key answers the first job and writes nothing. */
  idempotencyKey?: string;
  /** At most one unfinished job of the queue holds this key. */
  uniqueKey?: string;
  /** Not run after this time. */
  expiresAt?: string | Date;
  /** Groups the job for its queue's `key_max_running` and `fair` claims. */
  concurrencyKey?: string;
  /** Jobs (ids, or the jobs) it waits for: it is created `waiting`. */
  dependsOn?: ReadonlyArray<string | { id: string }>;
  /** What it does when a dependency fails or is cancelled (default `cancel`). */
  dependencyFailure?: DependencyFailure;
  /** Joins this running workflow. */
  workflowId?: string;
  /** String headers carried with the job (W3C trace context, say). */
  headers?: Record<string, string>;
}

/** What a task's definition may set for every enqueue of it; each call may override it. */
export type TaskDefaults = Pick<
  TaskEnqueueOptions,
  "priority" | "delayMs" | "maxAttempts" | "timeoutMs" | "backoff" | "tags" | "concurrencyKey" | "dependencyFailure" | "headers"
>;

/** The definition of a task: its kind and queue, its enqueue defaults, and an optional check of its payload. */
export interface TaskDefinition<In> extends TaskDefaults {
  /** The job kind: a worker runs the task's handler for the jobs of this kind. */
  kind: string;
  /** The queue its jobs go to (an enqueue may name another). */
  queue: string;
  /**
   * Checks a claimed payload before the handler runs and answers it as the handler gets it (e.g. a zod
   * schema's `parse`); what it throws fails the job for good (`Fatal`) with its message: a payload it
   * refuses would be refused again at every attempt. Without it the payload is taken as it came.
   */
  validate?: (payload: unknown) => In;
}

/** A job of a task: a {@link Job} whose `payload` and `result` have the task's types. */
export type TaskJob<In, Out> = Omit<Job, "payload" | "result"> & {
  payload: In;
  /** What the handler returned, once the job succeeded (`null` until then). */
  result: Out | null;
};

/** The handler of a task: its payload (checked by `validate`, if the task has one) and the job's context. */
export type TaskHandler<In, Out> = (payload: In, ctx: JobContext) => Out | Promise<Out>;

/** The payload type of a task. */
export type TaskPayload<T> = T extends Task<infer In, unknown> ? In : never;
/** The result type of a task. */
export type TaskResult<T> = T extends Task<unknown, infer Out> ? Out : never;

/**
 * A task, as {@link defineTask} makes it: `In` is its payload's type, `Out` its result's. Give it to
 * `client.enqueueTask`, `worker.handle` and `client.waitResult`; `request` answers the untyped enqueue
 * request, for `enqueueBatch` and workflows.
 */
export class Task<In, Out> {
  readonly kind: string;
  readonly queue: string;
  readonly defaults: Readonly<TaskDefaults>;
  readonly validate: ((payload: unknown) => In) | undefined;
  /** The result type, for the compiler only (never set). */
  declare readonly resultType?: Out;

  constructor(definition: TaskDefinition<In>) {
    const { kind, queue, validate, ...defaults } = definition;
    if (typeof kind !== "string" || kind === "") throw new TypeError("a task needs a kind");
    if (typeof queue !== "string" || queue === "") throw new TypeError(`task ${kind} needs a queue`);
    this.kind = kind;
    this.queue = queue;
    this.validate = validate;
    this.defaults = Object.freeze(defined(defaults));
  }

  /**
   * The enqueue request (the wire's fields) of this task for `payload`: the task's queue and defaults, each
   * overridden by what `options` sets. What `client.enqueueTask` sends; also an entry of `enqueueBatch`, or
   * of a `WorkflowBuilder` (`add({ ...task.request(payload), after })`).
   */
  request(payload: In, options: TaskEnqueueOptions = {}): EnqueueRequest {
    const o: TaskEnqueueOptions = { ...this.defaults, ...defined(options) };
    const req: EnqueueRequest = { queue: o.queue ?? this.queue, kind: this.kind, payload: payload as Json };
    const time = (t: string | Date) => (t instanceof Date ? t.toISOString() : t);
    if (o.priority !== undefined) req.priority = o.priority;
    if (o.delayMs !== undefined) req.delay_ms = o.delayMs;
    if (o.runAt !== undefined) req.run_at = time(o.runAt);
    if (o.maxAttempts !== undefined) req.max_attempts = o.maxAttempts;
    if (o.timeoutMs !== undefined) req.timeout_ms = o.timeoutMs;
    if (o.backoff !== undefined) req.backoff = o.backoff;
    if (o.tags !== undefined) req.tags = [...o.tags];
    if (o.idempotencyKey !== undefined) req.idempotency_key = o.idempotencyKey;
    if (o.uniqueKey !== undefined) req.unique_key = o.uniqueKey;
    if (o.expiresAt !== undefined) req.expires_at = time(o.expiresAt);
    if (o.concurrencyKey !== undefined) req.concurrency_key = o.concurrencyKey;
    if (o.dependsOn !== undefined) req.depends_on = o.dependsOn.map((d) => (typeof d === "string" ? d : d.id));
    if (o.dependencyFailure !== undefined) req.dependency_failure = o.dependencyFailure;
    if (o.workflowId !== undefined) req.workflow_id = o.workflowId;
    if (o.headers !== undefined) req.headers = { ...o.headers };
    return req;
  }
}

/** `o` without its undefined fields: an option given as `undefined` is one not given (the default stays). */
function defined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * Declares a task: a job kind with the type of its payload (`In`) and of its result (`Out`), its queue and
 * its enqueue defaults, and optionally a runtime check of the payload a worker claims.
 *
 * ```ts
 * const sendEmail = defineTask<{ to: string }, { sent: boolean }>({ kind: "send-email", queue: "emails", maxAttempts: 5, timeoutMs: 60_000 });
 * worker.handle(sendEmail, async (payload, ctx) => ({ sent: true }));       // payload: { to: string }
 * const job = await client.enqueueTask(sendEmail, { to: "ada@example.com" }); // checked as { to: string }
 * const out = await client.waitResult(job);                                   // { sent: boolean }
 * ```
 */
export function defineTask<In = unknown, Out = unknown>(definition: TaskDefinition<In>): Task<In, Out> {
  return new Task<In, Out>(definition);
}
