//! The Rust SDK of tether's HTTP API: a typed [`HttpClient`] for every `/v1`
//! route of a tether server (`tether serve`) — enqueue, claim, heartbeat,
//! complete, fail, snooze, cancel, replay, job and queue reads (a job's
//! dependencies included), workflows (enqueue a graph, read, list, cancel
//! and retry it whole), queue
//! settings, schedules and cron previews, tenants and keys — with typed
//! errors ([`Error`], [`ErrorCode`]), and a remote worker: the same worker
//! runtime as an embedded tether deployment ([`tether_worker`]), fed by the
//! server over HTTP ([`RemoteSource`], [`HttpClient::worker`]). Use it when your
//! Rust service talks to a shared tether server instead of owning the
//! database.
//!
//! Jobs to enqueue are [`NewJob`]s (or typed [`JobArgs`]), as for the
//! embedded `tether` crate; answers are the API's own wire types ([`Job`],
//! [`Queue`], ...), which convert to [`tether_core`]'s where the runtime
//! needs them ([`Job::into_core`]). Errors convert to
//! [`tether_core::Error`] too (see its `From` impl for the mapping).
//!
//! HTTPS needs the `rustls` feature (off by default: plain HTTP only, e.g.
//! to a server on localhost or behind a TLS-terminating proxy).
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use tether_client::{HttpClient, JobArgs, JobError};
//!
//! #[derive(Serialize, Deserialize)]
//! struct SendWelcome {
//!     to: String,
//! }
//!
//! impl JobArgs for SendWelcome {
//!     const KIND: &'static str = "send_welcome";
//!     const QUEUE: &'static str = "emails";
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = HttpClient::new("http://127.0.0.1:7070", "tth_...")?;
//!
//! // Produce.
//! let job = client
//!     .enqueue_args(&SendWelcome { to: "ada@example.com".into() })
//!     .await?
//!     .job;
//! println!("enqueued {} ({})", job.id, job.state);
//!
//! // Consume, exactly like an embedded worker: 4 handlers at a time,
//! // claims long-poll the server, maintenance stays in the server.
//! let worker = client
//!     .worker()
//!     .queue("emails", 4)
//!     .job(|args: SendWelcome, _ctx| async move {
//!         println!("welcome, {}", args.to);
//!         Ok::<_, JobError>(())
//!     })
//!     .build()?;
//! worker.run_until_signal().await?; // SIGTERM / Ctrl-C: drain, hand back, exit
//! # Ok(())
//! # }
//! ```

mod client;
mod error;
mod remote;
mod wire;

pub use client::{
    EventStream, HttpClient, HttpClientBuilder, StreamFilter, StreamItem, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
};
pub use error::{Error, ErrorCode, Result};
pub use remote::{RemoteSource, DEFAULT_CLAIM_WAIT, MAX_CLAIM_WAIT};
pub use wire::{
    BulkReplay, ClaimOptions, Claimed, CronPreview, EventQuery, ItemResult, JobQuery, NewKey,
    WorkflowEnqueued, WorkflowQuery,
};

/// The API's bodies, shared with the server (see [`api`]): answers under
/// the names this client has always given them.
pub use tether_api::{
    ApiKey, BulkReplayResponse as BulkReplayed, ClaimedJob, CreateKeyResponse as CreatedKey,
    CreateTenantResponse as CreatedTenant, DependencyJob, EnqueueResponse as Enqueued,
    EventListResponse as EventPage, FeedEventData, HeartbeatResponse as HeartbeatAck, Job,
    JobEvent, JobListResponse as JobPage, Percentiles, Queue, Schedule, ScheduleRun, StateCounts,
    Tenant, TenantRef, ThroughputMinute, ThroughputResponse as Throughput,
    WhoamiResponse as Whoami, WorkerInfo, Workflow, WorkflowCancelResponse as WorkflowCancelled,
    WorkflowJob, WorkflowListResponse as WorkflowPage, WorkflowResponse as WorkflowGraph,
};

/// Every request and response body of the API ([`tether_api`]), e.g. to
/// build a request by hand or to read an answer's raw form.
pub use tether_api as api;

/// Request types shared with the embedded library: what to enqueue, and the
/// shapes of heartbeats, completions, failures, queue settings and
/// schedules.
pub use tether_core::{
    Backoff, CarriedReports, Completion, DependencyFailure, EventKind, Failure, FailureReport,
    Heartbeat, JobArgs, JobState, LeaseToken, NewJob, NewWorkflow, Overlap, PutOutcome,
    QueueConfigPatch, RateLimit, RetryMode, RunAt, RunOutcome, SchedulePatch, ScheduleSpec,
    WorkflowState,
};

/// The worker runtime a remote worker runs on (see [`HttpClient::worker`]).
pub use tether_worker::{
    BuildError, JobContext, JobError, JobResult, Worker, WorkerBuilder, WorkerHandle,
};

/// The `reqwest` version this client is built on (for
/// [`HttpClientBuilder::http_client`] and [`Error::Transport`]).
pub use reqwest;
