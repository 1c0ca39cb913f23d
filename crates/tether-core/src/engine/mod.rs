//! The engine: every public operation of tether, validated, in front of a
//! [`Store`]. One file per topic, named as the backends' files are; this
//! one holds the engine itself and its settings.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::counters;
use crate::cron::CronSchedule;
use crate::error::{Error, Result};
use crate::group_commit::{GroupCommit, GroupCommitStats};
use crate::keys::{
    ApiKeyInfo, ApiKeySecret, OperatorKeySetup, ServerSecret, Tenant, TenantStatus, DEFAULT_TENANT,
    KEY_USE_INTERVAL_MS,
};
use crate::lifecycle;
use crate::model::{
    BulkReplayed, CarriedReports, ClaimRequest, ClaimedJob, Completion, DependencyJob, Enqueued,
    EventPage, EventQuery, Failure, FailureReport, FeedCursor, FeedFilter, FeedPage, Heartbeat,
    HeartbeatAck, Job, JobEvent, JobFilter, JobPage, Lease, LeaseToken, NewJob, NewWorkflow,
    QueueConfigPatch, QueueStats, QueueThroughput, ReapReport, ReplayFilter, ReportedAndClaimed,
    RetryMode, WorkerSummary, WorkflowCancelled, WorkflowEnqueued, WorkflowFilter, WorkflowGraph,
    WorkflowPage, THROUGHPUT_MINUTES,
};
use crate::schedule::{
    self, Fire, FireOutcome, FireRef, FireReport, PutOutcome, RunOutcome, Schedule, SchedulePatch,
    ScheduleRun, ScheduleSpec,
};
use crate::store::{NewJobRef, Store};
use crate::validate::{self, Limits};
use crate::wakeup::Wakeup;

pub use feed::MAX_FEED_READ;

/// The validated front door to a [`Store`]: every public operation of tether
/// goes through here, so every backend sees the same checked input.
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    limits: Limits,
    /// The HMAC key of operator keys; without it, operator keys neither
    /// authenticate nor can be stored.
    server_secret: Option<Arc<ServerSecret>>,
    /// Turns of each tenant's aggregate reads (queue lists, throughput,
    /// workers): each reads a whole queue or a day of history, so a tenant
    /// runs [`AGGREGATE_READS`] at a time and the rest of its burst waits
    /// here instead of on connections other tenants need.
    aggregates: Arc<crate::turns::Turns>,
    /// Single enqueues, grouped into shared commits.
    group_commit: Arc<GroupCommit>,
    /// When each worker's claims last refreshed its presence.
    seen_workers: Arc<workers::SeenWorkers>,
}

/// How many aggregate reads (see [`Engine::throughput`]) one tenant runs
/// at once in a process.
pub const AGGREGATE_READS: usize = 2;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.store.backend())
            .field("limits", &self.limits)
            .field("server_secret", &self.server_secret.is_some())
            .finish()
    }
}

mod attempts;
mod enqueue;
mod feed;
mod jobs;
mod maintenance;
mod queues;
mod schedules;
mod tenants;
mod workers;
mod workflows;

impl Engine {
    /// An engine over `store` with default limits.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Engine {
            limits: Limits::default(),
            server_secret: None,
            aggregates: crate::turns::Turns::new(AGGREGATE_READS),
            group_commit: GroupCommit::new(store.clone()),
            seen_workers: Arc::default(),
            store,
        }
    }

    /// Replaces the size limits. The engine gets group commits of its own
    /// (see [`Engine::enqueue`]), so that no group mixes callers held to
    /// different limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self.group_commit = GroupCommit::new(self.store.clone());
        self
    }

    /// Sets the server secret, which operator keys (`TETHER_ADMIN_KEY`)
    /// need: their id and stored hash are HMACs under it. Every process
    /// serving one database must use the same one (see
    /// [`Engine::check_server_secret`]).
    pub fn with_server_secret(mut self, secret: ServerSecret) -> Self {
        self.server_secret = Some(Arc::new(secret));
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The size limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// How many runs [`Engine::schedule_runs`] shows, newest first.
pub const SCHEDULE_RUNS_SHOWN: u32 = 100;
/// Most instants one cron preview computes.
pub const MAX_PREVIEW: u32 = 100;

/// At most this many recent runs and next fire times per schedule in a
/// listing of schedules (`GET /v1/schedules?runs=&next=`).
pub const MAX_LISTED_RUNS: u32 = 20;
