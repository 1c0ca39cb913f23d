// The HTTP client of tether: one method per route of the v1 API, request
// fields named exactly as on the wire, answers typed, errors mapped to one
// class per API error code.

import { errorFromApi, TransportError, Unavailable } from "./errors.js";
import type { EnqueuedWorkflow, WorkflowBuilder } from "./workflow.js";
import type {
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
  FailBody,
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
  /** Per-request timeout in ms (a claim's long-poll is added to it). Default 30 000. */
  timeoutMs?: number;
  /** Retries of a safe request (reads, enqueues with an idempotency key) after a transport error or `unavailable`. Default 4. */
  retries?: number;
  /** The `fetch` to use. Default: the global one. */
  fetch?: typeof fetch;
}

/** Filters of `GET /v1/jobs`. */
export interface ListQuery {
  queue?: string;
  state?: JobState;
  kind?: string;
  tag?: string;
  limit?: number;
  cursor?: string;
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

interface RequestSpec {
  method: "GET" | "POST" | "PATCH" | "DELETE";
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

/**
 * A client of one tether server, acting as one API key (hence one tenant).
 * Cheap to create; it holds no connection of its own (global `fetch` pools them).
 */
export class Client {
  readonly url: string;
  readonly timeoutMs: number;
  readonly retries: number;
  #key: string | undefined;
  #fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    const url = options.url ?? process.env.TETHER_URL ?? DEFAULT_URL;
    this.url = url.replace(/\/+$/, "");
    this.#key = options.key ?? process.env.TETHER_KEY ?? undefined;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = options.retries ?? 4;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  // ---------------------------------------------------------------- transport

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
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#key) headers.authorization = `Bearer ${this.#key}`;
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
    throw errorFromApi(res.status, code, message);
  }

  /**
   * A request to any route (e.g. one newer than this client), answered as
   * parsed JSON; errors map as for every other method. Never retried.
   */
  request<T = unknown>(
    method: "GET" | "POST" | "PATCH" | "DELETE",
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
    // Only an idempotency key makes a resend harmless.
    return this.#request({ method: "POST", path: "/v1/jobs", body: req, retry: !!req.idempotency_key, opts });
  }

  /** `POST /v1/jobs/batch`: 1–1000 jobs in one transaction; answers `{job, created}` in request order. */
  async enqueueBatch(jobs: EnqueueRequest[], opts?: CallOptions): Promise<EnqueueResponse[]> {
    const retry = jobs.length > 0 && jobs.every((j) => !!j.idempotency_key);
    const r = await this.#request<{ results: EnqueueResponse[] }>({ method: "POST", path: "/v1/jobs/batch", body: { jobs }, retry, opts });
    return r.results;
  }

  /**
   * `POST /v1/jobs/batch` with `workflow`: enqueues a {@link WorkflowBuilder}'s jobs as one new workflow, all
   * or nothing, and answers an {@link EnqueuedWorkflow}: its `workflowId`, and `job(entry)` for the job each
   * entry became. With the builder's `idempotency_key` already used, answers that workflow (`created: false`)
   * and writes nothing; retried, then, like a read (or when every entry has an idempotency key).
   */
  async enqueueWorkflow(workflow: WorkflowBuilder, opts?: CallOptions): Promise<EnqueuedWorkflow> {
    const body = workflow.toRequest();
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

  /** `POST /v1/jobs/replay`: replays 1–500 finished jobs, each on its own; one result per id, in order. */
  async replayJobs(ids: string[], expiresAt?: string | null, opts?: CallOptions): Promise<JobResult[]> {
    const body: ReplayIdsBody = expiresAt === undefined ? { ids } : { ids, expires_at: expiresAt };
    return (await this.#request<JobResultsResponse>({ method: "POST", path: "/v1/jobs/replay", body, retry: false, opts })).results;
  }

  /** `GET /v1/workers`: who holds the tenant's running jobs now. */
  async workers(opts?: CallOptions): Promise<WorkerInfo[]> {
    return (await this.#request<WorkerListResponse>({ method: "GET", path: "/v1/workers", retry: true, opts })).workers;
  }

  /** `GET /v1/queues/{queue}/throughput`: per-minute outcomes and wait/run percentiles. */
  throughput(queue: string, minutes?: number, opts?: CallOptions): Promise<ThroughputResponse> {
    const q = minutes === undefined ? "" : `?minutes=${minutes}`;
    return this.#request({ method: "GET", path: `/v1/queues/${enc(queue)}/throughput${q}`, retry: true, opts });
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

  /** `GET /v1/schedules` (by name). */
  async listSchedules(opts?: CallOptions): Promise<Schedule[]> {
    return (await this.#request<{ schedules: Schedule[] }>({ method: "GET", path: "/v1/schedules", retry: true, opts })).schedules;
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

