// tether-client: the TypeScript SDK of tether, a durable background-job
// queue. `Client` speaks the server's HTTP/JSON API (one method per route);
// `Worker` claims jobs of one queue or several and runs their handlers with
// the same guarantees as tether's Rust worker runtime; `defineTask` declares
// a typed task both sides share; `enqueueInTransaction` enqueues with SQL
// in the caller's own PostgreSQL transaction. The `tether-worker` bin
// (bin.ts) runs a worker module; `tether-client/testing` (testing.ts) starts
// a server for tests and drains workers.

export { Client, isTransient } from "./client.js";
export type {
  CallOptions,
  ClaimAnswer,
  ClaimRequest,
  ClientOptions,
  CronPreviewQuery,
  EventsQuery,
  ListQuery,
  ScheduleListQuery,
  StreamEvent,
  StreamFilter,
  StreamGap,
  StreamOptions,
  ThroughputQuery,
  WaitOptions,
  WorkflowListQuery,
} from "./client.js";
export { EnqueuedWorkflow, MAX_WORKFLOW_ENTRIES, WorkflowBuilder, WorkflowEntry } from "./workflow.js";
export type { WorkflowDependency, WorkflowOptions, WorkflowStep } from "./workflow.js";
export { defineTask, Task } from "./task.js";
export type { TaskDefaults, TaskDefinition, TaskEnqueueOptions, TaskHandler, TaskJob, TaskPayload, TaskResult } from "./task.js";
export { enqueueInTransaction, enqueueManyInTransaction, enqueueTaskInTransaction } from "./transaction.js";
export type { InTransactionOptions, InTransactionResult, PgQueryable } from "./transaction.js";
export type { TracingApi, TracingContext, TracingSpan, TracingTracer } from "./tracing.js";
export { Worker } from "./worker.js";
export type { WorkerOptions, WorkerQueues } from "./worker.js";
export { JobAborted } from "./handler.js";
export type {
  AfterHook,
  BeforeHook,
  ClaimEvent,
  ErrorHook,
  FailureCode,
  Handler,
  JobContext,
  JobOutcome,
  LeaseLostEvent,
  Logger,
  RequestErrorEvent,
  WorkerObserver,
  WorkerOp,
} from "./handler.js";
export {
  AlreadyExists,
  ERROR_CLASSES,
  Fatal,
  Internal,
  InvalidArgument,
  InvalidState,
  JobNotSucceeded,
  LeaseLost,
  MethodNotAllowed,
  NotFound,
  PayloadTooLarge,
  PermissionDenied,
  Retry,
  RetryAfter,
  Snooze,
  TetherError,
  TooManyRequests,
  TransportError,
  Unauthenticated,
  Unavailable,
  UnsupportedMediaType,
  errorFromApi,
} from "./errors.js";
export type { TransportReason } from "./errors.js";
export type * from "./types.js";
