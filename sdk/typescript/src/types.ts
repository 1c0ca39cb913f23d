// Wire types of the tether HTTP API v1, field for field as they travel.
//
// Interface names follow the schema names of the server's OpenAPI document
// (docs/openapi.json in the repository); a test compares every interface
// listed there with the document, property names, required-ness and
// nullability, so these cannot drift from the server.

/** Any JSON value (payloads, results, progress). */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A job's state: `waiting` for its dependencies, `queued` (ready), `running`, then a final one. */
export type JobState = "waiting" | "queued" | "running" | "succeeded" | "failed" | "cancelled";

/**
 * What a waiting job does when a dependency ends `failed` or `cancelled`: `cancel` (it is cancelled, and so
 * is everything that waits for it with `cancel`) or `run` (it runs once every dependency has ended).
 */
export type DependencyFailure = "cancel" | "run";

/**
 * Where a workflow is, derived from its jobs when read: `running` while any job is unfinished, then
 * `succeeded` if every job succeeded, `failed` if any failed, else `cancelled`.
 */
export type WorkflowState = "running" | "succeeded" | "failed" | "cancelled";

/**
 * Which jobs a workflow retry puts back: `failed` (its failed jobs), or `failed_and_downstream` (also every
 * finished job of the workflow downstream of them: what their failure cancelled or ran anyway).
 */
export type RetryMode = "failed" | "failed_and_downstream";

/** A history event's name. */
export type EventKind =
  | "enqueued"
  | "claimed"
  | "retry_scheduled"
  | "snoozed"
  | "lease_expired"
  | "lease_lost"
  | "succeeded"
  | "failed"
  | "cancel_requested"
  | "cancelled"
  | "replayed"
  | "expired"
  | "released"
  | "workflow_created"
  | "workflow_finished";

/** Every error code an API error can carry. */
export type ErrorCode =
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "method_not_allowed"
  | "already_exists"
  | "lease_lost"
  | "invalid_state"
  | "payload_too_large"
  | "unsupported_media_type"
  | "too_many_requests"
  | "unavailable"
  | "internal";

/** What a schedule does while its previous run's job is unfinished. */
export type Overlap = "allow" | "skip";

/** What became of one fire of a schedule. */
export type RunOutcome = "enqueued" | "skipped";

/** Retry backoff: jittered exponential from `base_ms`, capped at `cap_ms`. */
export interface Backoff {
  base_ms: number;
  cap_ms: number;
}

/** The job object. Times are RFC 3339 strings in UTC. */
export interface Job {
  id: string;
  queue: string;
  kind: string;
  payload: Json;
  result: Json;
  state: JobState;
  priority: number;
  attempt: number;
  max_attempts: number;
  run_at: string;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  updated_at: string;
  last_error: string | null;
  unique_key: string | null;
  idempotency_key: string | null;
  tags: string[];
  expires_at: string | null;
  /** Groups the job for its queue's `key_max_running` and `fair` claims. */
  concurrency_key: string | null;
  timeout_ms: number | null;
  cancel_requested: boolean;
  worker_id: string | null;
  lease_expires_at: string | null;
  heartbeat_at: string | null;
  progress: Json;
  /** The jobs it waits (or waited) for, in the order given at enqueue. */
  depends_on: string[];
  /** What it does when a dependency fails or is cancelled. */
  dependency_failure: DependencyFailure;
  /** The workflow it belongs to, if any: a handler passes it on enqueue to add jobs to its own workflow. */
  workflow_id: string | null;
  /** The string headers it was enqueued with (`{}` when none): W3C trace context, say. */
  headers: Record<string, string>;
}

/** A claimed job: the job plus the lease token only its claimer sees. */
export interface ClaimedJob extends Job {
  lease_token: string;
}

/** One event of a job's history. */
export interface JobEvent {
  at: string;
  event: EventKind;
  attempt: number;
  worker_id: string | null;
  detail: string | null;
}

/** `POST /v1/jobs` and each entry of `POST /v1/jobs/batch`. */
export interface EnqueueRequest {
  queue: string;
  kind: string;
  payload?: Json;
  priority?: number | null;
  run_at?: string | null;
  delay_ms?: number | null;
  max_attempts?: number | null;
  timeout_ms?: number | null;
  idempotency_key?: string | null;
  unique_key?: string | null;
  tags?: string[] | null;
  expires_at?: string | null;
  backoff?: Backoff | null;
  /** Groups the job for its queue's `key_max_running` and `fair` claims. */
  concurrency_key?: string | null;
  /**
   * Existing jobs of the tenant this one waits for (at most 100 in all with `depends_on_entries`): it is
   * created `waiting` and queued once they all succeeded. An unknown id is `InvalidArgument`.
   */
  depends_on?: string[] | null;
  /** In a batch only: the earlier entries of the same batch (by index) this one waits for. */
  depends_on_entries?: number[] | null;
  /** What it does when a dependency ends `failed` or `cancelled` (default `cancel`). */
  dependency_failure?: DependencyFailure | null;
  /**
   * Joins this running workflow of the tenant (its `depends_on` may name any job). A finished workflow is
   * `InvalidState`, an unknown one `InvalidArgument`. Not in the entries of a batch that makes a workflow.
   */
  workflow_id?: string | null;
  /**
   * String headers carried unchanged with the job and returned by claim and get (W3C trace context, say): at
   * most 32, names of 1–64 characters of `A-Z a-z 0-9 _ . -`, values of at most 1 024 bytes.
   */
  headers?: Record<string, string> | null;
}

export interface EnqueueResponse {
  job: Job;
  created: boolean;
}

export interface BatchEnqueueRequest {
  jobs: EnqueueRequest[];
  /** Makes the batch's jobs one new workflow. */
  workflow?: NewWorkflowBody | null;
}

export interface BatchEnqueueResponse {
  /** In request order; when a `workflow` key led to an existing workflow, that workflow's jobs, oldest first. */
  results: EnqueueResponse[];
  /** The workflow the batch made (or its key led to), when it had one. */
  workflow_id?: string | null;
}

/** `workflow` of a batch: the batch's jobs form one new workflow. */
export interface NewWorkflowBody {
  name: string;
  /** A second batch with this key answers the existing workflow and its jobs, and writes nothing (1–255 characters). */
  idempotency_key?: string | null;
}

/** A workflow as listed: a named graph of jobs, its state derived from theirs. */
export interface Workflow {
  id: string;
  name: string;
  idempotency_key: string | null;
  state: WorkflowState;
  created_at: string;
  /** When its last job finished, once every job has. */
  finished_at: string | null;
  /** Its jobs per state. */
  counts: StateCounts;
}

/** One job of a workflow's graph. */
export interface WorkflowJob {
  id: string;
  kind: string;
  state: JobState;
  /** What it waits (or waited) for. */
  depends_on: string[];
}

/** `GET /v1/workflows/{id}`: the workflow's fields and its whole graph. */
export interface WorkflowResponse extends Workflow {
  /** Its jobs (at most 10 000), oldest first, with their edges; jobs added at run time included. */
  jobs: WorkflowJob[];
}

/** One page of `GET /v1/workflows`, newest first. */
export interface WorkflowListResponse {
  workflows: Workflow[];
  /** `null` at the end. With a `state` filter a page may hold fewer than `limit` (even none) and still have one. */
  next_cursor: string | null;
}

/** `POST /v1/workflows/{id}/cancel`: jobs cancelled at once (waiting or queued), and running jobs asked to stop. */
export interface WorkflowCancelResponse {
  cancelled: number;
  cancel_requested: number;
}

/** `POST /v1/workflows/{id}/retry`. */
export interface WorkflowRetryBody {
  mode: RetryMode;
}

/** `POST /v1/workflows/{id}/retry`: jobs put back (`queued`, or `waiting` for their dependencies). */
export interface WorkflowRetryResponse {
  replayed: number;
}

export interface JobResponse {
  job: Job;
}

export interface JobListResponse {
  jobs: Job[];
  next_cursor: string | null;
}

/** One dependency of a job, as its handler reads it (`GET /v1/jobs/{id}/dependencies`). */
export interface DependencyJob {
  id: string;
  kind: string;
  /** Where it is now. */
  state: JobState;
  /** What its handler returned, once it succeeded. */
  result: Json;
  /** The last 2 000 characters of its last error. */
  last_error: string | null;
  /** When it ended. */
  finished_at: string | null;
}

/** `GET /v1/jobs/{id}/dependencies`: the job's dependencies in the order it named them. */
export interface DependenciesResponse {
  jobs: DependencyJob[];
}

/**
 * The `data` of one message of `GET /v1/events`: a history event with its job's queue, kind and workflow,
 * and the state it left the job in.
 */
export interface FeedEventData {
  /** Where a client stands once it has this event (also the message's `id`; opaque). */
  cursor: string;
  job_id: string;
  /** The job's workflow, if any. */
  workflow_id: string | null;
  /** The job's queue. */
  queue: string;
  /** The job's kind. */
  kind: string;
  /** What happened (also the message's `event`). */
  event: EventKind;
  /** When it happened. */
  at: string;
  /** The job's attempt after the event. */
  attempt: number;
  /** The worker involved, if any. */
  worker_id: string | null;
  /** Context, e.g. the error message. */
  detail: string | null;
  /**
   * The job's state right after the event (for `enqueued`, `replayed` and `lease_lost`, which do not set
   * one, its state when the stream read the event).
   */
  state: JobState;
}

export interface EventListResponse {
  events: JobEvent[];
  next_cursor: string | null;
}

/**
 * `POST /v1/queues/{queue}/claim`. `complete` and `fail` (together at most 1000) carry the previous jobs'
 * reports: applied, completions first, in the claim's own transaction before it claims.
 */
export interface ClaimBody {
  worker_id: string;
  limit?: number | null;
  lease_ttl_ms?: number | null;
  wait_ms?: number | null;
  complete?: CompleteItem[] | null;
  fail?: FailItem[] | null;
}

/** The answer of a claim: `reports` (one per carried report, completions first, in request order) is absent when none was carried. */
export interface ClaimResponse {
  jobs: ClaimedJob[];
  reports?: CompleteResult[] | null;
}

/** `POST /v1/jobs/{id}/heartbeat`. */
export interface HeartbeatBody {
  lease_token: string;
  lease_ttl_ms?: number | null;
  progress?: Json;
}

export interface HeartbeatResponse {
  lease_expires_at: string;
  cancel_requested: boolean;
}

/** One entry of `POST /v1/jobs/heartbeat`. */
export interface HeartbeatItem {
  id: string;
  lease_token: string;
  lease_ttl_ms?: number | null;
  progress?: Json;
}

export interface HeartbeatManyBody {
  items: HeartbeatItem[];
}

/** A heartbeat of a batch that went through. */
export interface HeartbeatDone {
  id: string;
  ok: true;
  lease_expires_at: string;
  cancel_requested: boolean;
}

/** An error as the API reports it. */
export interface ErrorDetail {
  code: ErrorCode;
  message: string;
}

/** The error body of every non-2xx answer. */
export interface ErrorBody {
  error: ErrorDetail;
}

/** One item of a batch that failed, with the error it would have had alone. */
export interface ItemFailure {
  id: string;
  ok: false;
  error: ErrorDetail;
}

export type HeartbeatResult = HeartbeatDone | ItemFailure;

export interface HeartbeatManyResponse {
  results: HeartbeatResult[];
}

/** `POST /v1/jobs/{id}/complete`. */
export interface CompleteBody {
  lease_token: string;
  result?: Json;
}

/** One entry of `POST /v1/jobs/complete`. */
export interface CompleteItem {
  id: string;
  lease_token: string;
  result?: Json;
}

export interface CompleteManyBody {
  items: CompleteItem[];
}

/** A completion of a batch that went through. */
export interface CompleteDone {
  id: string;
  ok: true;
}

export type CompleteResult = CompleteDone | ItemFailure;

export interface CompleteManyResponse {
  results: CompleteResult[];
}

/** `POST /v1/jobs/{id}/fail`. */
export interface FailBody {
  lease_token: string;
  error: string;
  retry_after_ms?: number | null;
  fatal?: boolean | null;
  cancelled?: boolean | null;
}

/** A failure carried by a claim: the fields of `POST /v1/jobs/{id}/fail` and the job's id. */
export interface FailItem {
  id: string;
  lease_token: string;
  error: string;
  retry_after_ms?: number | null;
  fatal?: boolean | null;
  cancelled?: boolean | null;
}

/** The answer to one report a claim carried: the item shape of `POST /v1/jobs/complete`'s `results`. */
export type ReportResult = CompleteResult;

/** `POST /v1/jobs/{id}/snooze`. */
export interface SnoozeBody {
  lease_token: string;
  delay_ms: number;
}

/** `POST /v1/jobs/{id}/replay` (the body may be omitted). */
export interface ReplayBody {
  expires_at?: string | null;
}

/** `POST /v1/queues/{queue}/replay` (the body may be omitted). */
export interface BulkReplayBody {
  state?: JobState | null;
  kind?: string | null;
  limit?: number | null;
  cursor?: string | null;
  expires_at?: string | null;
}

export interface BulkReplayResponse {
  replayed: number;
  next_cursor: string | null;
}

/** Jobs of a queue (or a workflow) per state. */
export interface StateCounts {
  /** Waiting for their dependencies. */
  waiting: number;
  queued: number;
  running: number;
  succeeded: number;
  failed: number;
  cancelled: number;
}

/** A queue's health and settings. */
export interface Queue {
  name: string;
  paused: boolean;
  counts: StateCounts;
  ready: number;
  scheduled: number;
  oldest_ready_age_ms: number;
  expired_leases: number;
  max_attempts: number;
  backoff: Backoff;
  default_lease_ttl_ms: number;
  /** Claims never bring the queue's running jobs above this; `null`: no limit. */
  max_running: number | null;
  /** At most `count` jobs handed out in any `period_ms`; `null`: no limit. */
  rate_limit: RateLimit | null;
  /** At most this many running jobs per concurrency key; `null`: no limit. */
  key_max_running: number | null;
  /** Claims take jobs of one priority round-robin over concurrency keys. */
  fair: boolean;
}

/** A strict sliding window on the database clock. */
export interface RateLimit {
  count: number;
  period_ms: number;
}

export interface QueueResponse {
  queue: Queue;
}

export interface QueueListResponse {
  queues: Queue[];
}

/** `PATCH /v1/queues/{queue}`. */
export interface QueueConfigBody {
  max_attempts?: number | null;
  backoff?: Backoff | null;
  default_lease_ttl_ms?: number | null;
  /** At most this many running jobs; `null` removes the limit, absent keeps it. */
  max_running?: number | null;
  /** At most `count` jobs per `period_ms`; `null` removes it, absent keeps it. */
  rate_limit?: RateLimit | null;
  /** At most this many running jobs per concurrency key; `null` removes it. */
  key_max_running?: number | null;
  /** Round-robin over concurrency keys; `null` is false, absent keeps it. */
  fair?: boolean | null;
}

/** A cron schedule. */
export interface Schedule {
  id: string;
  name: string;
  cron: string;
  timezone: string;
  queue: string;
  kind: string;
  payload: Json;
  enabled: boolean;
  overlap: Overlap;
  next_run_at: string | null;
  last_run_at: string | null;
  created_at: string;
  updated_at: string;
  /** Its newest runs: only from `GET /v1/schedules?runs=N`. */
  recent_runs?: ScheduleRun[] | null;
  /** Its next fire instants: only from `GET /v1/schedules?next=N`. */
  next_runs?: string[] | null;
}

/** `POST /v1/schedules`. */
export interface CreateScheduleBody {
  name: string;
  cron: string;
  timezone?: string | null;
  queue: string;
  kind: string;
  payload?: Json;
  enabled?: boolean | null;
  overlap?: Overlap | null;
}

/**
 * `PUT /v1/schedules/{name}`: the body of `POST /v1/schedules` without `name` (the path names it). Fields
 * left out take their defaults, as at creation: the schedule becomes exactly this.
 */
export interface PutScheduleBody {
  cron: string;
  timezone?: string | null;
  queue: string;
  kind: string;
  payload?: Json;
  enabled?: boolean | null;
  overlap?: Overlap | null;
}

/** What `PUT /v1/schedules/{name}` did. */
export type PutOutcome = "created" | "updated" | "unchanged";

/** The answer of `PUT /v1/schedules/{name}`. */
export interface PutScheduleResponse {
  /** The schedule as it now stands. */
  schedule: Schedule;
  /** `created`, `updated` (its definition replaced, its id and runs kept) or `unchanged` (nothing written). */
  outcome: PutOutcome;
}

/** `PATCH /v1/schedules/{id}`: absent (or null) fields stay, except `payload`. */
export interface PatchScheduleBody {
  name?: string | null;
  cron?: string | null;
  timezone?: string | null;
  queue?: string | null;
  kind?: string | null;
  payload?: Json;
  enabled?: boolean | null;
  overlap?: Overlap | null;
}

export interface ScheduleResponse {
  schedule: Schedule;
}

export interface ScheduleListResponse {
  schedules: Schedule[];
}

/** One fire of a schedule. */
export interface ScheduleRun {
  fire_at: string;
  job_id: string | null;
  outcome: RunOutcome;
}

export interface ScheduleRunListResponse {
  runs: ScheduleRun[];
}

export interface CronPreviewResponse {
  times: string[];
}

export interface Tenant {
  id: string;
  name: string;
  created_at: string;
  /** When an admin suspended it; `null` while it is active (its keys are then refused with 403). */
  suspended_at: string | null;
}

export interface CreateTenantBody {
  name: string;
}

export interface CreateTenantResponse {
  tenant: Tenant;
  api_key: string;
}

export interface TenantListResponse {
  tenants: Tenant[];
}

/** `POST /v1/tenants/{tenant_id}/suspend` and `/resume`: the tenant after the operation. */
export interface TenantResponse {
  tenant: Tenant;
}

export interface CreateKeyBody {
  name?: string | null;
  admin?: boolean | null;
}

export interface CreateKeyResponse {
  key_id: string;
  api_key: string;
}

/** A key as listed (never its secret). */
export interface ApiKey {
  id: string;
  name: string | null;
  admin: boolean;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

export interface KeyListResponse {
  keys: ApiKey[];
}

/** A tenant named in another answer. */
export interface TenantRef {
  id: string;
  name: string;
}

/** `GET /v1/whoami`: the caller's tenant and key. */
export interface WhoamiResponse {
  tenant: TenantRef;
  key_id: string;
  admin: boolean;
}

export interface Health {
  status: string;
}

/** `POST /v1/jobs/cancel`: the jobs to cancel, each on its own (1–500). */
export interface JobIdsBody {
  ids: string[];
}

/** `POST /v1/jobs/replay`: the jobs to replay, each on its own (1–500). */
export interface ReplayIdsBody {
  ids: string[];
  expires_at?: string | null;
}

/** One job of a bulk cancel or replay that went through. */
export interface JobDone {
  id: string;
  ok: true;
  job: Job;
}

export type JobResult = JobDone | ItemFailure;

/** The answer of `POST /v1/jobs/cancel` and `POST /v1/jobs/replay`. */
export interface JobResultsResponse {
  results: JobResult[];
}

/** One minute of a queue's history. */
export interface ThroughputMinute {
  at: string;
  succeeded: number;
  failed: number;
  retried: number;
  cancelled: number;
}

/** p50, p95 and p99 of some durations, in milliseconds. */
export interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
}

/** `GET /v1/queues/{queue}/throughput`. */
export interface ThroughputResponse {
  minutes: ThroughputMinute[];
  wait_ms: Percentiles | null;
  run_ms: Percentiles | null;
}

/** A worker holding running jobs, or one that announced itself within the last 5 minutes (`GET /v1/workers`). */
export interface WorkerInfo {
  worker_id: string;
  /** The queues it announced and those of its running jobs. */
  queues: string[];
  /** How many jobs it holds (0 for an idle worker). */
  running: number;
  /** Its latest heartbeat on any job (its claim before the first). */
  last_heartbeat_at: string | null;
  /** Its last announcement or claim; `null` for a worker that never announced. */
  last_seen_at: string | null;
  /** As announced (`null` for a worker that never announced). */
  concurrency: number | null;
  sdk: string | null;
  version: string | null;
  host: string | null;
  pid: number | null;
}

/** `PUT /v1/workers/{worker_id}`: what a worker says of itself (announcing again replaces it). */
export interface AnnounceWorkerBody {
  /** The queues it serves (1–100 names). */
  queues: string[];
  /** How many jobs it runs at once, in all (1–100 000). */
  concurrency: number;
  /** Its SDK (`typescript`, `python`, `rust`, …). */
  sdk?: string | null;
  /** Its SDK's or application's version. */
  version?: string | null;
  host?: string | null;
  pid?: number | null;
}

/** `GET /v1/workers`. */
export interface WorkerListResponse {
  workers: WorkerInfo[];
}
