//! Every client method against a real tether server on a loopback socket,
//! on PostgreSQL and SQLite: the answers' fields, the typed errors, and the
//! long-poll claim.

mod admin;
#[path = "../common/mod.rs"]
mod common;
mod errors;
mod feed;
mod flow;
mod jobs;
mod operators;
mod schedules;
mod workflows;

use std::time::{Duration, Instant};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tether_client::{
    Backoff, BulkReplay, ClaimOptions, Completion, CronPreview, DependencyFailure, Error,
    ErrorCode, EventKind, Failure, Heartbeat, HttpClient, JobArgs, JobQuery, JobState, LeaseToken,
    NewJob, NewKey, NewWorkflow, Overlap, QueueConfigPatch, RateLimit, RetryMode, RunAt,
    RunOutcome, SchedulePatch, ScheduleSpec, WorkflowGraph, WorkflowPage, WorkflowQuery,
    WorkflowState,
};
use tether_conformance::TestDb;
use uuid::Uuid;

use common::start;

/// |a - b| in milliseconds.
fn gap_ms(a: chrono::DateTime<Utc>, b: chrono::DateTime<Utc>) -> i64 {
    (a - b).num_milliseconds().abs()
}
