//! The worker runtime of tether: it claims jobs from a [`Source`] (an
//! in-process [`tether_core::Engine`] on PostgreSQL or SQLite, later a remote
//! tether server), runs the handler registered for each job's kind with
//! bounded concurrency per queue, keeps the jobs' leases alive with batched
//! heartbeats, enforces job timeouts and cancellation, maps each handler's
//! answer onto the job lifecycle, shuts down gracefully on SIGTERM, and —
//! unless told otherwise — takes part in electing the one maintenance leader
//! that reaps lapsed leases, expires and prunes jobs, so an embedded
//! deployment needs no other process.
//!
//! ```no_run
//! # async fn demo(engine: tether_core::Engine) -> std::io::Result<()> {
//! use std::time::Duration;
//! use tether_worker::{JobError, Worker};
//!
//! let worker = Worker::builder(engine)
//!     .tenant("acme")
//!     .queue("emails", 8)
//!     .handler("send_email", |ctx| async move {
//!         let to = ctx.job().payload["to"].as_str().unwrap_or_default().to_owned();
//!         if to.is_empty() {
//!             return Err(JobError::fatal("no recipient"));
//!         }
//!         // ... send it; a `?` on an ordinary error retries with backoff ...
//!         Ok(Some(serde_json::json!({ "sent_to": to })))
//!     })
//!     .build()
//!     .expect("valid worker configuration");
//! // Runs until SIGTERM or Ctrl-C, then hands back what it cannot finish.
//! worker.run_until_signal().await
//! # }
//! ```
//!
//! # What the runtime guarantees
//! - At most `concurrency` handlers of a queue run at once; each claim asks
//!   for exactly the free slots.
//! - A claim names a lease TTL only when the worker was given one
//!   ([`WorkerBuilder::lease_ttl`]); otherwise each job gets the lease its
//!   queue is configured with. Each job's lease is extended every third of
//!   the TTL its claim granted (one `heartbeat_many` for all the jobs due),
//!   so a long handler keeps its job; a worker that dies loses its jobs to
//!   the reaper about one TTL later.
//! - An outcome is reported under the claim's lease token; if another owner
//!   took the job meanwhile, the outcome is discarded (logged and counted as
//!   `lease_lost`), never retried blindly.
//! - A cancel requested for a running job reaches its handler
//!   ([`JobContext::cancelled`]) within about a second when the source
//!   pushes cancel requests ([`Source::cancel_requests`]: the engine's feed,
//!   or the server's event stream), and with the job's next heartbeat
//!   otherwise (the fallback either way). Progress a handler sets
//!   ([`JobContext::set_progress`]) is sent within half a second, every
//!   job's new progress in one heartbeat batch.
//! - Handler outcomes: `Ok` → succeeded (completions are batched);
//!   [`JobError::Retry`] → retried with backoff; [`JobError::RetryAfter`] →
//!   retried after exactly that delay; [`JobError::Fatal`] → failed;
//!   [`JobError::Snooze`] → queued again after the delay with the attempt
//!   given back, always reported to the store (whatever its length) so the
//!   history shows it; [`JobError::Cancelled`] → cancelled. A panic is
//!   a retryable failure naming the panic; a job's `timeout_ms` drops the
//!   handler and fails the attempt.
//! - A job that waited for others ([`tether_core::NewJob::after`]) reads
//!   them, with their states and results, through
//!   [`JobContext::dependencies`] (or one typed result with
//!   [`JobContext::dependency_result`]), from the same source it was
//!   claimed from: the engine, or the server for a remote worker.
//!
//! # Observability
//! Each attempt runs in a `tracing` span `job` with `job_id`, `tenant`,
//! `queue`, `kind` and `attempt`. Through the `metrics` facade (install any
//! exporter) the runtime records `tether_worker_jobs_total{queue, kind,
//! outcome}` with outcome one of `succeeded`, `retried`, `failed`,
//! `snoozed`, `cancelled`, `lease_lost`, `timed_out`, `panicked`; the
//! histogram `tether_worker_handler_duration_seconds{queue, kind}`; and
//! `tether_worker_report_errors_total` for outcomes that could not be
//! reported (the reaper then requeues those jobs).

mod builder;
mod handler;
mod maintenance;
mod outbox;
mod runtime;
mod signals;
mod source;

pub use builder::{
    BuildError, WorkerBuilder, DEFAULT_LEASE_TTL, DEFAULT_POLL_INTERVAL, DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_TENANT, MAX_CONCURRENCY,
};
pub use handler::{AfterHook, BeforeHook, ErrorHook, JobContext, JobError, JobResult};
pub use maintenance::{
    Maintenance, MaintenanceHandle, DEFAULT_MAINTENANCE_TICK, DEFAULT_RETENTION, MAINTENANCE_BATCH,
};
pub use runtime::{Worker, WorkerHandle};
pub use signals::Signals;
pub use source::{CancelPush, CancelRequests, Source, CANCEL_PUSH_CAPACITY};
