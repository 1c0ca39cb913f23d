//! The heart of tether with no I/O in it: the job model and its states, the
//! lifecycle rules (backoff, error truncation, defaults), validation of
//! everything that crosses the library edge, and the [`Store`] trait that each
//! storage backend (PostgreSQL, SQLite) implements with the same semantics.
//!
//! Callers use [`Engine`], which validates input, applies the rules that need
//! no database (jitter, error tails), and then delegates to a [`Store`]. A
//! backend therefore never sees invalid input, and bad input never reaches the
//! database: nothing is written when validation fails.

pub mod counters;
pub mod cron;
mod engine;
mod error;
mod fence;
pub mod flow;
mod forward;
mod graph;
mod group_commit;
pub mod keys;
pub mod lifecycle;
pub mod migrations;
mod model;
pub mod schedule;
mod store;
pub mod turns;
pub mod validate;
mod wakeup;

pub use engine::{
    Engine, AGGREGATE_READS, MAX_FEED_READ, MAX_LISTED_RUNS, MAX_PREVIEW, SCHEDULE_RUNS_SHOWN,
};
pub use error::{Error, ErrorCode, Result};
pub use fence::MaintenanceFence;
#[doc(hidden)]
pub use forward::__forward;
pub use graph::{
    appended_workflows, check_appends, check_found, AppendTarget, GraphPlan, PlannedEdge,
    PlannedJob, Verdict,
};
pub use group_commit::{GroupCommitStats, MAX_GROUP, WRITERS};
pub use keys::{
    ApiKeyInfo, ApiKeySecret, OperatorKeySetup, ServerSecret, StoredKey, Tenant, TenantStatus,
    DEFAULT_TENANT,
};
pub use model::*;
pub use schedule::{
    FireReport, Overlap, PutOutcome, RunOutcome, Schedule, SchedulePatch, ScheduleRun, ScheduleSpec,
};
pub use store::{NewJobRef, Store};
pub use validate::Limits;
pub use wakeup::{created_by_queue, when_due, LimitedQueues, Wakeup, WakeupHub};
