// The HTTP client of tether: one method per route of the v1 API, request
// fields named exactly as on the wire, answers typed, errors mapped to one
// class per API error code.

import { errorFromApi, JobNotSucceeded, type TetherError, TransportError, Unavailable } from "./errors.js";
import { SseParser, type SseMessage } from "./sse.js";
import type { EnqueuedWorkflow, WorkflowBuilder } from "./workflow.js";
import type { Task, TaskEnqueueOptions, TaskJob, TaskPayload, TaskResult } from "./task.js";
import { activeTraceHeaders, withTraceHeaders, type TracingApi } from "./tracing.js";
import type {
  AnnounceWorkerBody,
  ApiKey,
  BatchEnqueueResponse,
  BulkReplayBody,
  BulkReplayResponse,
  ClaimBody,
  ClaimedJob,
  ClaimResponse,
  CompleteItem,
  CompleteResult,
  CreateKeyBody,
  CreateKeyResponse,
  CreateScheduleBody,
  CreateTenantResponse,
  DependenciesResponse,
  DependencyJob,
  EnqueueRequest,
  EnqueueResponse,
  EventListResponse,
  EventKind,
  FailBody,
  FeedEventData,
  Health,
  HeartbeatBody,
  HeartbeatItem,
  HeartbeatResponse,
  HeartbeatResult,
  Job,
  JobResult,
  JobResultsResponse,
  ReplayIdsBody,
  ThroughputResponse,
  WorkerInfo,
  WorkerListResponse,
  JobEvent,
  JobListResponse,
  JobState,
  Json,
  PatchScheduleBody,
  PutScheduleBody,
  PutScheduleResponse,
  Queue,
  QueueConfigBody,
  ReplayBody,
  ReportResult,
  Schedule,
  ScheduleRun,
  SnoozeBody,
  Tenant,
  TenantResponse,
  WhoamiResponse,
  Workflow,
  WorkflowCancelResponse,
  WorkflowListResponse,
  WorkflowResponse,
  WorkflowRetryBody,
  WorkflowRetryResponse,
  WorkflowState,
} from "./types.js";

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** Base URL of the server, e.g. `http://127.0.0.1:7070`. Default: `TETHER_URL`, else `http://127.0.0.1:7070`. */
  url?: string;
  /** API key. Default: `TETHER_KEY`. */
  key?: string;
  /**
   * The tenant (name or id) an admin key acts for: sent as `X-Tether-Tenant` on every request, so the
   * client (and every worker built on it) reads and writes that tenant's jobs, queues and schedules as the
   * tenant's own key would. Any other key is refused (`PermissionDenied`); an unknown tenant is `NotFound`.
   * Default: `TETHER_TENANT`, else none (the key's own tenant).
   */
  tenant?: string;
  /** Per-request timeout in ms (a claim's long-poll is added to it). Default 30 000. */
  timeoutMs?: number;
  /** Retries of a safe request (reads, enqueues with an idempotency key) after a transport error or `unavailable`. Default 4. */
  retries?: number;
  /** The `fetch` to use. Default: the global one. */
  fetch?: typeof fetch;
  /**
   * OpenTelemetry's API (`import * as api from "@opentelemetry/api"`): every enqueue then carries the
   * active trace context (`traceparent`, and `tracestate`) in the job's headers, unless the request sets a
   * `traceparent` itself; and workers built on this client run each job in a span that continues it.
   */
  tracing?: TracingApi;
}

/** Filters of `GET /v1/jobs`. */
export interface ListQuery {
  queue?: string;
  state?: JobState;
  kind?: string;
  tag?: string;
  /** Page size, 1–500 (default 50). */
  limit?: number;
  cursor?: string;
  /** Only jobs whose id starts with these hex digits (1–32; dashes ignored), e.g. from a log line. */
  id_prefix?: string;
  /** Only jobs created at or after this instant (RFC 3339). */
  created_after?: string;
  /** Only jobs created before this instant (RFC 3339). */
  created_before?: string;
  /** Only the jobs that wait (or waited) directly for this job id. */
  depends_on?: string;
  /** Only the jobs of this workflow. */
  workflow_id?: string;
}

/** Filters of `GET /v1/workflows`. */
export interface WorkflowListQuery {
  state?: WorkflowState;
  name?: string;
  /** Page size, 1–500 (default 50). */
  limit?: number;
  cursor?: string;
}

/** What `GET /v1/schedules` adds to each schedule. */
export interface ScheduleListQuery {
  /** Its newest runs (`recent_runs`), this many (1–20). */
  runs?: number;
  /** Its next fire instants (`next_runs`), this many (1–20). */
  next?: number;
}

/** Parameters of `GET /v1/queues/{queue}/throughput`. */
export interface ThroughputQuery {
  /** How many minutes, ending with the current one (1–1440, default 60). */
  minutes?: number;
}

/** Paging of `GET /v1/jobs/{id}/events`. */
export interface EventsQuery {
  limit?: number;
  cursor?: string;
}

/** Parameters of `GET /v1/cron/preview`. */
export interface CronPreviewQuery {
  cron: string;
  timezone?: string;
  from?: string;
  count?: number;
}

/** A claim without reports: what {@link Client.claim} sends. */
export type ClaimRequest = Omit<ClaimBody, "complete" | "fail">;

/** The whole answer of a claim ({@link Client.claimDetailed}). */
export interface ClaimAnswer {
  /** The claimed jobs, with their lease tokens (empty when none was ready). */
  jobs: ClaimedJob[];
  /**
   * One answer per report the claim carried, completions first, then failures, each in request order:
   * `{ id, ok: true }` or `{ id, ok: false, error }` (e.g. `lease_lost`). Empty when it carried none.
   */
  reports: ReportResult[];
}

/** Per-call options. */
export interface CallOptions {
  /** Aborts the request. */
  signal?: AbortSignal;
  /** Overrides the client's timeout for this call (ms). */
  timeoutMs?: number;
}

/** Options of {@link Client.wait}, {@link Client.waitWorkflow} and {@link Client.enqueueAndWait}. */
export interface WaitOptions extends CallOptions {
  /**
   * How long to wait in all (ms), over as many reads as it takes (the server holds one read at most 30 s).
   * Default 300 000 (5 minutes); 0 reads once without waiting. Each read's own time limit is the client's
   * `timeoutMs` plus the wait it asks for.
   */
  timeoutMs?: number;
}

/** Filters of {@link Client.streamEvents} (`GET /v1/events`); all optional, all narrowing. */
export interface StreamFilter {
  /** Only the events of jobs of this queue. */
  queue?: string;
  /** Only this job's events. */
  jobId?: string;
  /** Only the events of this workflow's jobs. */
  workflowId?: string;
  /** Only these events (an empty list: every event). */
  events?: EventKind[];
  /**
   * Start right after this cursor (the `cursor` of an item seen before). Without it the stream starts live,
   * at about the moment it is open.
   */
  after?: string;
}

/** Options of {@link Client.streamEvents}. */
export interface StreamOptions extends CallOptions {
  /** Closes the stream: the iteration then rejects with the signal's reason (as every method of the client does). */
  signal?: AbortSignal;
  /** How long each connection may take to answer (ms; the stream itself has no end). Default: the client's `timeoutMs`. */
  timeoutMs?: number;
  /**
   * How long an open connection may stay silent before it is dropped and opened again (ms). The server
   * sends a comment at least every 15 s. Default 45 000.
   */
  idleTimeoutMs?: number;
  /**
   * Called each time a connection is open (the server answered): every event committed from then on is
   * delivered. A stream without a cursor starts at about that moment.
   */
  onOpen?: () => void;
  /**
   * Called before each reconnection with what ended the connection (a {@link TransportError}, an
   * `Unavailable`, or `undefined` when the server ended the stream), the how-many-th reconnection in a row
   * it is, and the pause before it (ms).
   */
  onReconnect?: (info: { error: unknown; attempt: number; delayMs: number }) => void;
}

/**
 * A message of the stream saying that events after the cursor were removed by retention before the stream
 * read them: what lay between is lost, and the stream goes on from `oldest`.
 */
export interface StreamGap {
  event: "gap";
  /** Where the stream goes on from. */
  oldest: string;
  /** The message's id: `oldest`, where a client stands once it has this message. */
  cursor: string;
}

/** One item of {@link Client.streamEvents}: a history event, or a {@link StreamGap}. Tell them apart by `event`. */
export type StreamEvent = FeedEventData | StreamGap;

interface RequestSpec {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Record<string, string | number | undefined | null>;
  body?: unknown;
  /** Whether a transport error or `unavailable` may be retried. */
  retry: boolean;
  /** Answer the body as text instead of parsing JSON. */
  text?: boolean;
  opts?: CallOptions;
}

const DEFAULT_URL = "http://127.0.0.1:7070";

/** Sleeps `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Whether an error is worth trying again (the request may not have been served). */
export function isTransient(e: unknown): boolean {
  return e instanceof TransportError || e instanceof Unavailable;
}

const enc = encodeURIComponent;

/** The error of a non-2xx answer whose body is `text`: the API's error code, else one chosen by status. */
function errorFromAnswer(res: Response, text: string): TetherError {
  let code: string | undefined;
  let message = text.slice(0, 500) || res.statusText;
  try {
    const parsed = JSON.parse(text) as { error?: { code?: string; message?: string } };
    code = parsed.error?.code;
    message = parsed.error?.message ?? message;
  } catch {
    // not the API's error shape (a proxy's page, say): classify by status
  }
  if (!code) {
    code = res.status === 502 || res.status === 503 || res.status === 504 ? "unavailable" : res.status >= 500 ? "internal" : "invalid_argument";
  }
  return errorFromApi(res.status, code, message);
}

/** A stream that cannot be read as one (not an event stream, a message that is not JSON): thrown, never retried. */
class StreamBroken extends TransportError {
  constructor(message: string, status: number, cause?: unknown) {
    super(message, "transport", status, { cause, reason: "decode" });
    this.name = "TransportError";
  }
}

/** The item of one message of `GET /v1/events`. */
function streamItem(m: SseMessage): StreamEvent {
  let data: unknown;
  try {
    data = JSON.parse(m.data);
  } catch (e) {
    throw new StreamBroken(`GET /v1/events: the data of a ${JSON.stringify(m.event)} message is not JSON`, 200, e);
  }
  if (m.event === "gap") {
    const oldest = (data as { oldest?: unknown } | null)?.oldest;
    if (typeof oldest !== "string") throw new StreamBroken("GET /v1/events: a gap message without `oldest`", 200);
    return { event: "gap", oldest, cursor: m.id ?? oldest };
  }
  return data as FeedEventData;
}

/** The longest `wait_ms` the server takes on a read. */
const MAX_WAIT_MS = 30_000;
/** How long {@link Client.wait} and {@link Client.waitWorkflow} wait in all unless told. */
const DEFAULT_WAIT_TIMEOUT_MS = 300_000;
/** How long an open event stream may stay silent (the server sends a comment every 15 s) before it is reopened. */
const DEFAULT_IDLE_TIMEOUT_MS = 45_000;

/** Whether a job's state is final. */
function jobFinished(state: JobState): boolean {
  return state === "succeeded" || state === "failed" || state === "cancelled";
}

/**
 * A client of one tether server, acting as one API key (hence one tenant).
 * Cheap to create; it holds no connection of its own (global `fetch` pools them).
 */
export class Client {
  readonly url: string;
  /** The tenant an admin key acts for (`X-Tether-Tenant`), if any. */
  readonly tenant: string | undefined;
  readonly timeoutMs: number;
  readonly retries: number;
  /** OpenTelemetry's API, when enqueues carry the trace context (see {@link ClientOptions.tracing}). */
  readonly tracing: TracingApi | undefined;
  #key: string | undefined;
  #fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    const url = options.url ?? process.env.TETHER_URL ?? DEFAULT_URL;
    this.url = url.replace(/\/+$/, "");
    this.#key = options.key ?? process.env.TETHER_KEY ?? undefined;
    // An empty value is the server's 400 on every request: treated as none, as an empty TETHER_KEY is.
    this.tenant = (options.tenant ?? process.env.TETHER_TENANT) || undefined;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = options.retries ?? 4;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.tracing = options.tracing;
  }

  /** The trace context of the active span, to put into enqueued jobs' headers (none without `tracing`). */
  #traceHeaders(): Record<string, string> | undefined {
    return this.tracing ? activeTraceHeaders(this.tracing) : undefined;
  }

  // ---------------------------------------------------------------- transport

  /** The headers of every request: what it accepts, the key, and the tenant it acts for. */
  #headers(accept: string): Record<string, string> {
    const headers: Record<string, string> = { accept };
    if (this.#key) headers.authorization = `Bearer ${this.#key}`;
    if (this.tenant) headers["x-tether-tenant"] = this.tenant;
    return headers;
  }

  async #request<T>(spec: RequestSpec): Promise<T> {
    let attempt = 0;
    for (;;) {
      try {
        return await this.#once<T>(spec);
      } catch (e) {
        if (!spec.retry || !isTransient(e) || attempt >= this.retries || spec.opts?.signal?.aborted) throw e;
        // Full jitter over an exponential step: 100 ms, 200 ms, … capped at 2 s.
        const step = Math.min(2_000, 100 * 2 ** attempt);
        attempt += 1;
        await sleep(Math.random() * step + step / 2, spec.opts?.signal);
      }
    }
  }

  async #once<T>(spec: RequestSpec): Promise<T> {
    let url = this.url + spec.path;
    if (spec.query) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(spec.query)) {
        if (v !== undefined && v !== null) params.append(k, String(v));
      }
      const qs = params.toString();
      if (qs) url += "?" + qs;
    }
    const headers = this.#headers("application/json");
    let body: string | undefined;
    if (spec.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(spec.body);
    }
    const timeout = AbortSignal.timeout(spec.opts?.timeoutMs ?? this.timeoutMs);
    const signal = spec.opts?.signal ? AbortSignal.any([spec.opts.signal, timeout]) : timeout;
    let res: Response;
    let text: string;
    try {
      res = await this.#fetch(url, { method: spec.method, headers, body, signal });
      text = await res.text();
    } catch (e) {
      if (spec.opts?.signal?.aborted) throw spec.opts.signal.reason ?? e;
      const why = timeout.aborted ? `no answer within ${spec.opts?.timeoutMs ?? this.timeoutMs} ms` : String((e as Error)?.cause ?? e);
      throw new TransportError(`${spec.method} ${spec.path}: ${why}`, "transport", 0, { cause: e, reason: timeout.aborted ? "timeout" : "network" });
    }
    if (res.ok) {
      if (spec.text) return text as T;
      if (res.status === 204 || text === "") return undefined as T;
      try {
        return JSON.parse(text) as T;
      } catch (e) {
        throw new TransportError(`${spec.method} ${spec.path}: the answer is not JSON`, "transport", res.status, { cause: e, reason: "decode" });
      }
    }
    throw errorFromAnswer(res, text);
  }

  /** Reads `path` with `wait_ms` until `finished` says so or the wait's time is up. */
  async #waitFor<T>(path: string, finished: (answer: T) => boolean, opts: WaitOptions): Promise<T> {
    const total = opts.timeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS;
    if (!(total >= 0)) throw new RangeError(`timeoutMs must be 0 or more, not ${total}`);
    const deadline = Date.now() + total;
    let early = 0;
    for (;;) {
      const waitMs = Math.floor(Math.max(0, Math.min(MAX_WAIT_MS, deadline - Date.now())));
      const started = Date.now();
      const answer = await this.#request<T>({
        method: "GET",
        path,
        query: { wait_ms: waitMs },
        retry: true,
        opts: { signal: opts.signal, timeoutMs: this.timeoutMs + waitMs },
      });
      if (finished(answer)) return answer;
      const left = deadline - Date.now();
      if (left <= 0) return answer;
      if (Date.now() - started < waitMs - 10) {
        // Answered before its wait ran out, unfinished: the tenant's waiting places were all taken.
        // Pause a little (100 ms, doubling up to 1.6 s) rather than ask again at once.
        await sleep(Math.min(left, 100 * 2 ** Math.min(early, 4)), opts.signal);
        early += 1;
        if (opts.signal?.aborted) throw opts.signal.reason;
      } else {
        early = 0;
      }
    }
  }

  /**
   * A request to any route (e.g. one newer than this client), answered as
   * parsed JSON; errors map as for every other method. Never retried.
   */
  request<T = unknown>(
    method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE",
    path: string,
    init: { query?: Record<string, string | number | undefined | null>; body?: unknown } = {},
    opts?: CallOptions,
  ): Promise<T> {
    return this.#request({ method, path, query: init.query, body: init.body, retry: false, opts });
  }

  // ---------------------------------------------------------------- producing

  /** `POST /v1/jobs`: enqueues a job and answers it (an existing one for a taken idempotency or unique key). */
  async enqueue(req: EnqueueRequest, opts?: CallOptions): Promise<Job> {
    return (await this.enqueueDetailed(req, opts)).job;
  }

  /** `POST /v1/jobs` answering `{job, created}`: `created` is false when an existing job answered. */
  enqueueDetailed(req: EnqueueRequest, opts?: CallOptions): Promise<EnqueueResponse> {
    const body = withTraceHeaders(req, this.#traceHeaders());
    // Only an idempotency key makes a resend harmless.
    return this.#request({ method: "POST", path: "/v1/jobs", body, retry: !!req.idempotency_key, opts });
  }

  /**
   * {@link Client.enqueue} then {@link Client.wait}: answers the job once it has finished, or as it is when
   * `timeoutMs` (default 5 minutes, counted from the enqueue's answer) has passed.
   */
  async enqueueAndWait(req: EnqueueRequest, opts: WaitOptions = {}): Promise<Job> {
    const job = await this.enqueue(req, { signal: opts.signal });
    return this.wait(job.id, opts);
  }

  /**
   * `POST /v1/jobs` for a task (see `defineTask`): its queue and defaults, each overridden by `options`, and
   * `payload`, which the compiler checks against the task's payload type. Answers the job, typed, for
   * {@link Client.waitResult}. Retried only with an `idempotencyKey`, as every enqueue.
   */
  async enqueueTask<T extends Task<unknown, unknown>>(
    task: T,
    payload: TaskPayload<T>,
    options?: TaskEnqueueOptions,
    opts?: CallOptions,
  ): Promise<TaskJob<TaskPayload<T>, TaskResult<T>>> {
    return (await this.enqueue(task.request(payload, options), opts)) as TaskJob<TaskPayload<T>, TaskResult<T>>;
  }

  /**
   * Waits until the job has finished (as {@link Client.wait}) and answers its result, typed as its task's
   * when it came from {@link Client.enqueueTask}. Throws {@link JobNotSucceeded} (with the job) when it
   * `failed`, was `cancelled`, or had not finished within `timeoutMs` (default 5 minutes).
   */
  async waitResult<In, Out>(job: TaskJob<In, Out>, opts: WaitOptions = {}): Promise<Out> {
    const done = await this.wait(job.id, opts);
    if (done.state !== "succeeded") throw new JobNotSucceeded(done, opts.timeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS);
    return done.result as Out;
  }

  /** `POST /v1/jobs/batch`: 1–1000 jobs in one transaction; answers `{job, created}` in request order. */
  async enqueueBatch(jobs: EnqueueRequest[], opts?: CallOptions): Promise<EnqueueResponse[]> {
    const retry = jobs.length > 0 && jobs.every((j) => !!j.idempotency_key);
    const found = this.#traceHeaders();
    const body = { jobs: found ? jobs.map((j) => withTraceHeaders(j, found)) : jobs };
    const r = await this.#request<{ results: EnqueueResponse[] }>({ method: "POST", path: "/v1/jobs/batch", body, retry, opts });
    return r.results;
  }

  /**
   * `POST /v1/jobs/batch` with `workflow`: enqueues a {@link WorkflowBuilder}'s jobs as one new workflow, all
   * or nothing, and answers an {@link EnqueuedWorkflow}: its `workflowId`, and `job(entry)` for the job each
   * entry became. With the builder's `idempotency_key` already used, answers that workflow (`created: false`)
   * and writes nothing; retried, then, like a read (or when every entry has an idempotency key).
   */
  async enqueueWorkflow(workflow: WorkflowBuilder, opts?: CallOptions): Promise<EnqueuedWorkflow> {
    const found = this.#traceHeaders();
    const request = workflow.toRequest();
    const body = found ? { ...request, jobs: request.jobs.map((j) => withTraceHeaders(j, found)) } : request;
    if (body.jobs.length === 0) throw new RangeError(`workflow ${JSON.stringify(workflow.name)} has no jobs: add() at least one`);
    const retry = !!body.workflow?.idempotency_key || body.jobs.every((j) => !!j.idempotency_key);
    const r = await this.#request<BatchEnqueueResponse>({ method: "POST", path: "/v1/jobs/batch", body, retry, opts });
    return workflow.resolve(r);
  }

  // ---------------------------------------------------------------- managing

  /** `GET /v1/jobs/{id}`. */
  async get(id: string, opts?: CallOptions): Promise<Job> {
    return (await this.#request<{ job: Job }>({ method: "GET", path: `/v1/jobs/${enc(id)}`, retry: true, opts })).job;
  }

  /**
   * Waits until the job has finished (`succeeded`, `failed` or `cancelled`) or `timeoutMs` (default 5
   * minutes) has passed, and answers the job as it is then: check its `state`, a timed-out wait answers it
   * unfinished. Asks `GET /v1/jobs/{id}?wait_ms=…` as often as it takes (each read waits at most 30 s on
   * the server); a read the server answers early without an end (no waiting place free) is followed by
   * a short pause. Reads are retried as reads are. `NotFound` for an unknown job.
   */
  async wait(id: string, opts: WaitOptions = {}): Promise<Job> {
    const r = await this.#waitFor<{ job: Job }>(`/v1/jobs/${enc(id)}`, (a) => jobFinished(a.job.state), opts);
    return r.job;
  }

  /** `GET /v1/jobs`: one page, newest first. */
  list(query: ListQuery = {}, opts?: CallOptions): Promise<JobListResponse> {
    return this.#request({ method: "GET", path: "/v1/jobs", query: { ...query }, retry: true, opts });
  }

  /** Every page of `GET /v1/jobs`, following `next_cursor`. */
  async *listPages(query: ListQuery = {}, opts?: CallOptions): AsyncGenerator<JobListResponse> {
    let cursor = query.cursor;
    for (;;) {
      const page = await this.list({ ...query, cursor }, opts);
      yield page;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** Every job matching `query`, page after page. */
  async *listAll(query: ListQuery = {}, opts?: CallOptions): AsyncGenerator<Job> {
    for await (const page of this.listPages(query, opts)) yield* page.jobs;
  }

  /**
   * `GET /v1/jobs/{id}/dependencies`: the jobs `id` waits (or waited) for, in the order it named them, with
   * their states and results (a handler has `ctx.dependencies()`). One removed by retention is left out.
   */
  async dependencies(id: string, opts?: CallOptions): Promise<DependencyJob[]> {
    return (await this.#request<DependenciesResponse>({ method: "GET", path: `/v1/jobs/${enc(id)}/dependencies`, retry: true, opts })).jobs;
  }

  /** `GET /v1/jobs/{id}/events`: one page of the history, oldest first. */
  events(id: string, query: EventsQuery = {}, opts?: CallOptions): Promise<EventListResponse> {
    return this.#request({ method: "GET", path: `/v1/jobs/${enc(id)}/events`, query: { ...query }, retry: true, opts });
  }

  /** A job's whole history, following `next_cursor`. */
  async *eventsAll(id: string, query: EventsQuery = {}, opts?: CallOptions): AsyncGenerator<JobEvent> {
    let cursor = query.cursor;
    for (;;) {
      const page = await this.events(id, { ...query, cursor }, opts);
      yield* page.events;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /**
   * `GET /v1/events`: the tenant's history as it is committed, as an async iterator. Each item is a
   * {@link FeedEventData} (`event` is the event's name, `cursor` where a client stands once it has it) or,
   * when retention removed events after the cursor before the stream read them, a {@link StreamGap}
   * (`event: "gap"`): what lay between is lost and the stream goes on from its `oldest`.
   *
   * Without `filter.after` the stream starts live, where the server's reader of the history stands when it
   * opens (see `opts.onOpen`): nothing committed after that is missed, and an event committed a moment
   * before may still come. With `filter.after`, right after that cursor. The iterator remembers the last cursor it handed out
   * and, when the connection drops, errs, goes silent past `idleTimeoutMs`, answers `unavailable` (503) or
   * is ended by the server, opens it again by itself with `Last-Event-ID` after a jittered backoff (100 ms
   * doubling up to 5 s, reset by an event), so the loop sees every committed event exactly once, each job's
   * in order. (A stream started without a cursor that drops before its first event starts live again.)
   * Other errors are thrown: `InvalidArgument` for a bad filter or cursor, `Unauthenticated`,
   * `PermissionDenied`, `TooManyRequests` when the tenant holds as many streams as the server allows.
   *
   * The stream never ends by itself: leaving the loop (`break`, `return`, a throw) closes the connection,
   * and so does `opts.signal`, after which the loop rejects with the signal's reason.
   */
  async *streamEvents(filter: StreamFilter = {}, opts: StreamOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    const { signal } = opts;
    const connectMs = opts.timeoutMs ?? this.timeoutMs;
    const idleMs = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    let cursor = filter.after;
    let first = true;
    let attempt = 0;
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      const conn = new AbortController();
      const abort = () => conn.abort(signal?.reason);
      signal?.addEventListener("abort", abort, { once: true });
      let timer: ReturnType<typeof setTimeout> | undefined;
      let silent = false;
      const watch = (ms: number) => {
        clearTimeout(timer);
        timer = setTimeout(() => {
          silent = true;
          conn.abort();
        }, ms);
      };
      let reader: { cancel(): Promise<void> } | undefined;
      let openedAt: number | undefined;
      let delivered = false;
      let ended: unknown;
      try {
        const params = new URLSearchParams();
        if (filter.queue !== undefined) params.set("queue", filter.queue);
        if (filter.jobId !== undefined) params.set("job_id", filter.jobId);
        if (filter.workflowId !== undefined) params.set("workflow_id", filter.workflowId);
        if (filter.events && filter.events.length > 0) params.set("event", filter.events.join(","));
        const headers = this.#headers("text/event-stream");
        if (cursor !== undefined && first) params.set("after", cursor);
        else if (cursor !== undefined) headers["last-event-id"] = cursor;
        first = false;
        const qs = params.toString();
        watch(connectMs);
        let res: Response;
        try {
          res = await this.#fetch(`${this.url}/v1/events${qs ? "?" + qs : ""}`, { method: "GET", headers, signal: conn.signal });
        } catch (e) {
          if (signal?.aborted) throw signal.reason;
          const why = silent ? `no answer within ${connectMs} ms` : String((e as Error)?.cause ?? e);
          throw new TransportError(`GET /v1/events: ${why}`, "transport", 0, { cause: e, reason: silent ? "timeout" : "network" });
        }
        if (!res.ok) {
          let text = "";
          try {
            text = await res.text();
          } catch {
            // the status says enough
          }
          if (signal?.aborted) throw signal.reason;
          throw errorFromAnswer(res, text);
        }
        if (!res.body || !(res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
          throw new StreamBroken(`GET /v1/events: the answer is not an event stream (content-type ${res.headers.get("content-type")})`, res.status);
        }
        const body = (res.body as ReadableStream<Uint8Array>).getReader();
        reader = body;
        openedAt = Date.now();
        opts.onOpen?.();
        const parser = new SseParser();
        const decoder = new TextDecoder();
        for (;;) {
          watch(idleMs);
          let chunk: Awaited<ReturnType<typeof body.read>>;
          try {
            chunk = await body.read();
          } catch (e) {
            if (signal?.aborted) throw signal.reason;
            const why = silent ? `nothing for ${idleMs} ms` : String((e as Error)?.cause ?? e);
            throw new TransportError(`GET /v1/events: ${why}`, "transport", 0, { cause: e, reason: silent ? "timeout" : "network" });
          }
          // Not watched while the loop holds an item: a slow consumer is no silent server.
          clearTimeout(timer);
          if (chunk.done) break;
          for (const m of parser.push(decoder.decode(chunk.value, { stream: true }))) {
            const item = streamItem(m);
            if (m.id !== undefined) cursor = m.id;
            delivered = true;
            yield item;
          }
        }
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        if (e instanceof StreamBroken || !isTransient(e)) throw e;
        ended = e;
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener("abort", abort);
        conn.abort();
        void reader?.cancel().catch(() => undefined);
      }
      // The connection ended (or could not open): open it again after a jittered, growing pause.
      if (delivered || (openedAt !== undefined && Date.now() - openedAt >= 30_000)) attempt = 0;
      const step = Math.min(5_000, 100 * 2 ** Math.min(attempt, 6));
      attempt += 1;
      const delayMs = Math.round(Math.random() * step + step / 2);
      opts.onReconnect?.({ error: ended, attempt, delayMs });
      await sleep(delayMs, signal);
    }
  }

  /** `POST /v1/jobs/{id}/cancel`: queued → cancelled now; running → `cancel_requested`. */
  async cancel(id: string, opts?: CallOptions): Promise<Job> {
    return (await this.#request<{ job: Job }>({ method: "POST", path: `/v1/jobs/${enc(id)}/cancel`, retry: false, opts })).job;
  }

  /** `POST /v1/jobs/{id}/replay`: a finished job (failed, cancelled or succeeded) back to queued, attempt 0. */
  async replay(id: string, body: ReplayBody = {}, opts?: CallOptions): Promise<Job> {
    return (await this.#request<{ job: Job }>({ method: "POST", path: `/v1/jobs/${enc(id)}/replay`, body, retry: false, opts })).job;
  }

  /** `POST /v1/jobs/cancel`: cancels 1–500 jobs, each on its own; one result per id, in order. */
  async cancelJobs(ids: string[], opts?: CallOptions): Promise<JobResult[]> {
    return (await this.#request<JobResultsResponse>({ method: "POST", path: "/v1/jobs/cancel", body: { ids }, retry: false, opts })).results;
  }

  /**
   * `POST /v1/jobs/replay`: replays 1–500 finished jobs, each on its own (with `expires_at`, a new expiry for
   * each); one result per id, in order.
   */
  async replayJobs(ids: string[], body: ReplayBody = {}, opts?: CallOptions): Promise<JobResult[]> {
    const request: ReplayIdsBody = { ...body, ids };
    return (await this.#request<JobResultsResponse>({ method: "POST", path: "/v1/jobs/replay", body: request, retry: false, opts })).results;
  }

  /**
   * `PUT /v1/workers/{worker_id}`: announces a worker (what a `Worker` does when it starts and every
   * minute), so that `GET /v1/workers` lists it while it is idle; forgotten when unseen for 5 minutes.
   */
  async announceWorker(workerId: string, body: AnnounceWorkerBody, opts?: CallOptions): Promise<void> {
    await this.#request<void>({ method: "PUT", path: `/v1/workers/${enc(workerId)}`, body, retry: true, opts });
  }

  /** `GET /v1/workers`: the workers holding the tenant's running jobs now, and those seen lately (announced). */
  async workers(opts?: CallOptions): Promise<WorkerInfo[]> {
    return (await this.#request<WorkerListResponse>({ method: "GET", path: "/v1/workers", retry: true, opts })).workers;
  }

  /**
   * `GET /v1/queues/{queue}/throughput`: the queue's outcomes per minute over the last `minutes` (default
   * 60), oldest first, and the percentiles of its jobs' waits and runs then (`null` when none finished).
   */
  throughput(queue: string, query: ThroughputQuery = {}, opts?: CallOptions): Promise<ThroughputResponse> {
    return this.#request({ method: "GET", path: `/v1/queues/${enc(queue)}/throughput`, query: { ...query }, retry: true, opts });
  }

  /** `DELETE /v1/queues/{queue}`: removes an empty queue (409 while it holds jobs). */
  async deleteQueue(queue: string, opts?: CallOptions): Promise<void> {
    await this.#request<void>({ method: "DELETE", path: `/v1/queues/${enc(queue)}`, retry: false, opts });
  }

  /** `POST /v1/queues/{queue}/replay`: bulk replay of dead (or cancelled) jobs, one round. */
  replayQueue(queue: string, body: BulkReplayBody = {}, opts?: CallOptions): Promise<BulkReplayResponse> {
    return this.#request({ method: "POST", path: `/v1/queues/${enc(queue)}/replay`, body, retry: false, opts });
  }

  /** `GET /v1/queues`. */
  async queues(opts?: CallOptions): Promise<Queue[]> {
    return (await this.#request<{ queues: Queue[] }>({ method: "GET", path: "/v1/queues", retry: true, opts })).queues;
  }

  /** `GET /v1/queues/{queue}` (any valid name; an unused one reads as zeros). */
  async getQueue(queue: string, opts?: CallOptions): Promise<Queue> {
    return (await this.#request<{ queue: Queue }>({ method: "GET", path: `/v1/queues/${enc(queue)}`, retry: true, opts })).queue;
  }

  /** `POST /v1/queues/{queue}/pause`. */
  async pause(queue: string, opts?: CallOptions): Promise<Queue> {
    return (await this.#request<{ queue: Queue }>({ method: "POST", path: `/v1/queues/${enc(queue)}/pause`, retry: true, opts })).queue;
  }

  /** `POST /v1/queues/{queue}/resume`. */
  async resume(queue: string, opts?: CallOptions): Promise<Queue> {
    return (await this.#request<{ queue: Queue }>({ method: "POST", path: `/v1/queues/${enc(queue)}/resume`, retry: true, opts })).queue;
  }

  /** `PATCH /v1/queues/{queue}`: settings that later jobs copy. */
  async configureQueue(queue: string, body: QueueConfigBody, opts?: CallOptions): Promise<Queue> {
    return (await this.#request<{ queue: Queue }>({ method: "PATCH", path: `/v1/queues/${enc(queue)}`, body, retry: true, opts })).queue;
  }

  // ---------------------------------------------------------------- workflows

  /** `GET /v1/workflows`: one page, newest first. With `state`, a page may be short (even empty) and still have a `next_cursor`. */
  listWorkflows(query: WorkflowListQuery = {}, opts?: CallOptions): Promise<WorkflowListResponse> {
    return this.#request({ method: "GET", path: "/v1/workflows", query: { ...query }, retry: true, opts });
  }

  /** Every workflow matching `query`, newest first, following `next_cursor`. */
  async *listWorkflowsAll(query: WorkflowListQuery = {}, opts?: CallOptions): AsyncGenerator<Workflow> {
    let cursor = query.cursor;
    for (;;) {
      const page = await this.listWorkflows({ ...query, cursor }, opts);
      yield* page.workflows;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** `GET /v1/workflows/{id}`: the workflow and its whole graph (`jobs`, oldest first, with `depends_on`; jobs added at run time included). */
  getWorkflow(id: string, opts?: CallOptions): Promise<WorkflowResponse> {
    return this.#request({ method: "GET", path: `/v1/workflows/${enc(id)}`, retry: true, opts });
  }

  /**
   * Waits until the workflow has finished (any state but `running`) or `timeoutMs` (default 5 minutes) has
   * passed, and answers it with its graph as it is then (still `running` after a timed-out wait). Asks
   * `GET /v1/workflows/{id}?wait_ms=…` as often as it takes, as {@link Client.wait} does.
   */
  waitWorkflow(id: string, opts: WaitOptions = {}): Promise<WorkflowResponse> {
    return this.#waitFor<WorkflowResponse>(`/v1/workflows/${enc(id)}`, (w) => w.state !== "running", opts);
  }

  /**
   * `POST /v1/workflows/{id}/cancel`: every unfinished job of the workflow, waiting and queued ones at once,
   * running ones cooperatively (`cancel_requested`). A finished workflow changes nothing, so it is retried.
   */
  cancelWorkflow(id: string, opts?: CallOptions): Promise<WorkflowCancelResponse> {
    return this.#request({ method: "POST", path: `/v1/workflows/${enc(id)}/cancel`, retry: true, opts });
  }

  /**
   * `POST /v1/workflows/{id}/retry`: replays the failed jobs (attempt 0, result cleared); with `mode:
   * "failed_and_downstream"` also every finished job downstream of them, which waits for them again.
   * Succeeded jobs not downstream are left alone; a unique key another active job holds is `InvalidState`
   * and nothing changes.
   */
  retryWorkflow(id: string, body: WorkflowRetryBody, opts?: CallOptions): Promise<WorkflowRetryResponse> {
    return this.#request({ method: "POST", path: `/v1/workflows/${enc(id)}/retry`, body, retry: false, opts });
  }

  // ---------------------------------------------------------------- working

  /**
   * `POST /v1/queues/{queue}/claim`: up to `limit` jobs with their lease
   * tokens; with `wait_ms` an empty queue holds the request that long.
   * Never retried (a lost answer's jobs come back when their lease lapses).
   * To carry reports with the claim, use {@link Client.claimDetailed}, which answers theirs.
   */
  async claim(queue: string, body: ClaimRequest, opts?: CallOptions): Promise<ClaimedJob[]> {
    const b = body as ClaimBody;
    if ((b.complete && b.complete.length > 0) || (b.fail && b.fail.length > 0)) {
      throw new TypeError("claim() answers only the jobs: carry reports with claimDetailed(), which answers them too");
    }
    return (await this.claimDetailed(queue, body, opts)).jobs;
  }

  /**
   * `POST /v1/queues/{queue}/claim` answering `{ jobs, reports }`. The body may carry the previous jobs'
   * reports — `complete: [{ id, lease_token, result? }]` and `fail: [{ id, lease_token, error,
   * retry_after_ms?, fatal?, cancelled? }]`, together at most 1000 — which the server applies
   * (completions, then failures, in order) in the claim's own transaction before it claims: one request
   * and one commit instead of two. Each report is answered on its own in `reports`, exactly as an item of
   * {@link Client.completeBatch} (a refused report never fails the claim); a body bad as a whole (over
   * 1000 reports, a malformed item) is `InvalidArgument` and changes nothing. The reports are applied at
   * once even with `wait_ms`, but answered only when the claim answers: a claim that carries reports
   * should send `wait_ms: 0`. Never retried; resending the same reports with the same tokens is safe
   * (each is answered as the first send was).
   */
  async claimDetailed(queue: string, body: ClaimBody, opts?: CallOptions): Promise<ClaimAnswer> {
    const timeoutMs = (opts?.timeoutMs ?? this.timeoutMs) + (body.wait_ms ?? 0);
    const r = await this.#request<ClaimResponse>({
      method: "POST",
      path: `/v1/queues/${enc(queue)}/claim`,
      body,
      retry: false,
      opts: { ...opts, timeoutMs },
    });
    return { jobs: r.jobs, reports: r.reports ?? [] };
  }

  /** `POST /v1/jobs/{id}/heartbeat`: extends the lease; answers whether a cancel was requested. */
  heartbeat(id: string, body: HeartbeatBody, opts?: CallOptions): Promise<HeartbeatResponse> {
    return this.#request({ method: "POST", path: `/v1/jobs/${enc(id)}/heartbeat`, body, retry: false, opts });
  }

  /** `POST /v1/jobs/heartbeat`: many heartbeats in one round trip, answered in request order. */
  async heartbeatBatch(items: HeartbeatItem[], opts?: CallOptions): Promise<HeartbeatResult[]> {
    return (await this.#request<{ results: HeartbeatResult[] }>({ method: "POST", path: "/v1/jobs/heartbeat", body: { items }, retry: false, opts })).results;
  }

  /** `POST /v1/jobs/{id}/complete`: the job succeeded with `result`. */
  async complete(id: string, body: { lease_token: string; result?: Json }, opts?: CallOptions): Promise<Job> {
    return (await this.#request<{ job: Job }>({ method: "POST", path: `/v1/jobs/${enc(id)}/complete`, body, retry: false, opts })).job;
  }

  /** `POST /v1/jobs/complete`: many completions in one round trip, answered in request order. */
  async completeBatch(items: CompleteItem[], opts?: CallOptions): Promise<CompleteResult[]> {
    return (await this.#request<{ results: CompleteResult[] }>({ method: "POST", path: "/v1/jobs/complete", body: { items }, retry: false, opts })).results;
  }

  /** `POST /v1/jobs/{id}/fail`: the attempt failed (retried with backoff, after `retry_after_ms`, or dead when `fatal`). */
  async fail(id: string, body: FailBody, opts?: CallOptions): Promise<Job> {
    return (await this.#request<{ job: Job }>({ method: "POST", path: `/v1/jobs/${enc(id)}/fail`, body, retry: false, opts })).job;
  }

  /** `POST /v1/jobs/{id}/snooze`: back to queued after `delay_ms`, the attempt given back. */
  async snooze(id: string, body: SnoozeBody, opts?: CallOptions): Promise<Job> {
    return (await this.#request<{ job: Job }>({ method: "POST", path: `/v1/jobs/${enc(id)}/snooze`, body, retry: false, opts })).job;
  }

  // ---------------------------------------------------------------- schedules

  /** `POST /v1/schedules`. */
  async createSchedule(body: CreateScheduleBody, opts?: CallOptions): Promise<Schedule> {
    return (await this.#request<{ schedule: Schedule }>({ method: "POST", path: "/v1/schedules", body, retry: false, opts })).schedule;
  }

  /** `GET /v1/schedules/{id}`. */
  async getSchedule(id: string, opts?: CallOptions): Promise<Schedule> {
    return (await this.#request<{ schedule: Schedule }>({ method: "GET", path: `/v1/schedules/${enc(id)}`, retry: true, opts })).schedule;
  }

  /** `GET /v1/schedules` (by name); `runs` and `next` add each one's `recent_runs` and `next_runs`. */
  async listSchedules(query: ScheduleListQuery = {}, opts?: CallOptions): Promise<Schedule[]> {
    return (await this.#request<{ schedules: Schedule[] }>({ method: "GET", path: "/v1/schedules", query: { ...query }, retry: true, opts })).schedules;
  }

  /**
   * `PUT /v1/schedules/{name}`: the way to declare schedules in code, run on every deploy. Makes the
   * schedule named `name` exactly `body` — creates it, replaces its definition (its id and runs kept) or,
   * when it already is exactly that, writes nothing — and answers it with the `outcome` (`created`,
   * `updated` or `unchanged`). Sending it again changes nothing, so it is retried like a read. The same
   * call as `ensure_schedule` of the Rust and Python SDKs.
   *
   * ```ts
   * await client.ensureSchedule("nightly-report", { cron: "0 3 * * *", timezone: "Europe/Paris", queue: "reports", kind: "nightly" });
   * ```
   */
  ensureSchedule(name: string, body: PutScheduleBody, opts?: CallOptions): Promise<PutScheduleResponse> {
    return this.#request({ method: "PUT", path: `/v1/schedules/${enc(name)}`, body, retry: true, opts });
  }

  /** `PATCH /v1/schedules/{id}`: absent fields stay; every patch recomputes `next_run_at`. */
  async patchSchedule(id: string, body: PatchScheduleBody, opts?: CallOptions): Promise<Schedule> {
    return (await this.#request<{ schedule: Schedule }>({ method: "PATCH", path: `/v1/schedules/${enc(id)}`, body, retry: false, opts })).schedule;
  }

  /** `DELETE /v1/schedules/{id}` (its jobs stay). */
  async deleteSchedule(id: string, opts?: CallOptions): Promise<void> {
    await this.#request<void>({ method: "DELETE", path: `/v1/schedules/${enc(id)}`, retry: false, opts });
  }

  /** `GET /v1/schedules/{id}/runs`: the newest runs, newest first. */
  async scheduleRuns(id: string, opts?: CallOptions): Promise<ScheduleRun[]> {
    return (await this.#request<{ runs: ScheduleRun[] }>({ method: "GET", path: `/v1/schedules/${enc(id)}/runs`, retry: true, opts })).runs;
  }

  /** `POST /v1/schedules/{id}/trigger`: a run now, outside the timetable. */
  async triggerSchedule(id: string, opts?: CallOptions): Promise<Job> {
    return (await this.#request<{ job: Job }>({ method: "POST", path: `/v1/schedules/${enc(id)}/trigger`, retry: false, opts })).job;
  }

  /** `GET /v1/cron/preview`: the next fire instants strictly after `from` (default now). */
  async cronPreview(query: CronPreviewQuery, opts?: CallOptions): Promise<string[]> {
    return (await this.#request<{ times: string[] }>({ method: "GET", path: "/v1/cron/preview", query: { ...query }, retry: true, opts })).times;
  }

  // ---------------------------------------------------------------- tenants and keys

  /** `POST /v1/tenants` (admin): a tenant and its first key. */
  createTenant(name: string, opts?: CallOptions): Promise<CreateTenantResponse> {
    return this.#request({ method: "POST", path: "/v1/tenants", body: { name }, retry: false, opts });
  }

  /** `GET /v1/tenants` (admin). */
  async listTenants(opts?: CallOptions): Promise<Tenant[]> {
    return (await this.#request<{ tenants: Tenant[] }>({ method: "GET", path: "/v1/tenants", retry: true, opts })).tenants;
  }

  /**
   * `POST /v1/tenants/{tenant_id}/suspend` (admin): its keys are refused (403
   * `permission_denied`) and its schedules stop until it is resumed; nothing is
   * deleted. Suspending a suspended tenant keeps its first `suspended_at`; the
   * `default` tenant cannot be suspended (`InvalidArgument`).
   */
  async suspendTenant(tenantId: string, opts?: CallOptions): Promise<Tenant> {
    return (await this.#request<TenantResponse>({ method: "POST", path: `/v1/tenants/${enc(tenantId)}/suspend`, retry: true, opts })).tenant;
  }

  /** `POST /v1/tenants/{tenant_id}/resume` (admin): its keys work again; resuming an active tenant changes nothing. */
  async resumeTenant(tenantId: string, opts?: CallOptions): Promise<Tenant> {
    return (await this.#request<TenantResponse>({ method: "POST", path: `/v1/tenants/${enc(tenantId)}/resume`, retry: true, opts })).tenant;
  }

  /** `POST /v1/tenants/{tenant_id}/keys` (admin): a new key; the secret is shown only here. */
  createKey(tenantId: string, body: CreateKeyBody = {}, opts?: CallOptions): Promise<CreateKeyResponse> {
    return this.#request({ method: "POST", path: `/v1/tenants/${enc(tenantId)}/keys`, body, retry: false, opts });
  }

  /** `GET /v1/tenants/{tenant_id}/keys` (admin): revoked ones included, oldest first. */
  async listKeys(tenantId: string, opts?: CallOptions): Promise<ApiKey[]> {
    return (await this.#request<{ keys: ApiKey[] }>({ method: "GET", path: `/v1/tenants/${enc(tenantId)}/keys`, retry: true, opts })).keys;
  }

  /** `DELETE /v1/keys/{key_id}` (admin): revoked at once. */
  async revokeKey(keyId: string, opts?: CallOptions): Promise<void> {
    await this.#request<void>({ method: "DELETE", path: `/v1/keys/${enc(keyId)}`, retry: false, opts });
  }

  /** `GET /v1/whoami`: the key's tenant and whether it is an admin key. */
  whoami(opts?: CallOptions): Promise<WhoamiResponse> {
    return this.#request({ method: "GET", path: "/v1/whoami", retry: true, opts });
  }

  // ---------------------------------------------------------------- outside /v1

  /** `GET /healthz`: the process is alive. */
  health(opts?: CallOptions): Promise<Health> {
    return this.#request({ method: "GET", path: "/healthz", retry: true, opts });
  }

  /** `GET /metrics` (admin key): the Prometheus text. */
  metrics(opts?: CallOptions): Promise<string> {
    return this.#request({ method: "GET", path: "/metrics", retry: true, text: true, opts });
  }

  /** `GET /openapi.json`: the server's OpenAPI document. */
  openapi(opts?: CallOptions): Promise<Record<string, unknown>> {
    return this.#request({ method: "GET", path: "/openapi.json", retry: true, opts });
  }

  /** `GET /readyz`: the database is reachable (503 `unavailable` when not). */
  ready(opts?: CallOptions): Promise<Health> {
    return this.#request({ method: "GET", path: "/readyz", retry: false, opts });
  }
}

