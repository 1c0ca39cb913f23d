//! The verdict: every promise checked from the database (`tether.jobs`), the
//! history (`tether.job_events`) and what the clients observed. Pure logic
//! over rows, so it is tested on crafted histories.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::Value;
use tether_core::{DependencyFailure, ErrorCode};
use uuid::Uuid;

use crate::graph::Wait;
use crate::leadership;

mod failover;
#[cfg(test)]
mod graph_tests;
mod graphs;
mod jobs;
mod limits;
mod stream;
#[cfg(test)]
mod tests;

use crate::obs::{Obs, Side};
use crate::plan::{self, Limits};
use failover::*;
use graphs::*;
use jobs::*;
use limits::*;
use stream::check_stream;
pub use stream::{StreamRun, StreamStats, StreamedEvent, STREAM_CHECK};

/// One row of `tether.jobs` (the columns the checks need).
#[derive(Debug, Clone)]
pub struct JobRow {
    /// Job id.
    pub id: Uuid,
    /// Idempotency key.
    pub key: Option<String>,
    /// Queue.
    pub queue: String,
    /// Concurrency key.
    pub concurrency_key: Option<String>,
    /// State.
    pub state: String,
    /// Attempt counter.
    pub attempt: i32,
    /// Attempt budget.
    pub max_attempts: i32,
    /// `payload.n`.
    pub n: Option<i64>,
    /// Not-before.
    pub run_at: DateTime<Utc>,
    /// Result of the accepted completion.
    pub result: Option<Value>,
    /// The jobs it waits (or waited) for, in the order given.
    pub depends_on: Vec<Uuid>,
    /// What it does when one of them fails.
    pub dependency_failure: DependencyFailure,
}

/// One row of `tether.job_events`.
#[derive(Debug, Clone)]
pub struct EventRow {
    /// The job.
    pub job_id: Uuid,
    /// Order within the history.
    pub seq: i64,
    /// When (database clock).
    pub at: DateTime<Utc>,
    /// What.
    pub event: String,
    /// The job's attempt after the transition.
    pub attempt: i32,
    /// Who.
    pub worker_id: Option<String>,
    /// Detail (error message, lease_lost operation, reaper outcome, ...).
    pub detail: Option<String>,
}

/// Every check, by name, with the promise it guards (the report lists them).
pub const CHECKS: [(&str, &str); 36] = [
    (
        "lost",
        "every acknowledged job exists under its key (nothing lost)",
    ),
    (
        "not_acknowledged",
        "every submitted job was acknowledged to its producer",
    ),
    (
        "unacknowledged_job",
        "no job exists that no producer was told about",
    ),
    ("key_two_jobs", "no idempotency key produced two jobs"),
    (
        "not_terminal",
        "every job is terminal or legitimately still queued (nothing stuck)",
    ),
    (
        "double_completion",
        "no job has more than one accepted completion",
    ),
    (
        "too_many_claims",
        "no job claimed more than max_attempts times (claims − snoozes)",
    ),
    (
        "history_mismatch",
        "row and history agree (one enqueued, attempt = claims − snoozes, state)",
    ),
    (
        "lease_lost_not_superseded",
        "every lease_lost in the history follows a superseded claim",
    ),
    (
        "lease_lost_client",
        "every lease_lost a worker heard refers to a claim already ended then",
    ),
    (
        "claim_not_in_history",
        "every claim a worker received is in the history",
    ),
    (
        "outcome_vs_handler",
        "every outcome is one the handler answered or the reaper decided",
    ),
    ("internal_errors", "no client saw `internal`"),
    (
        "undocumented_errors",
        "clients saw only documented error codes",
    ),
    (
        "unexpected_errors",
        "clients saw only `unavailable`, `lease_lost` and transport failures",
    ),
    (
        "limit_max_running",
        "the limited queue never ran more jobs at once than its max_running",
    ),
    (
        "limit_key_max_running",
        "no concurrency key ran more jobs at once than key_max_running",
    ),
    (
        "limit_rate",
        "no window of the rate limit's period held more claims than its count",
    ),
    (
        "limited_jobs",
        "the limited queue holds exactly the jobs sent to it (with their keys), each ended",
    ),
    (
        "limits_not_exercised",
        "every limit was reached during the run (each one bound the claims)",
    ),
    (
        "dependency_graph",
        "every job waits for exactly the jobs, with the rule, its producer sent",
    ),
    (
        "dependency_order",
        "no job was released or claimed before every dependency succeeded (with `run`: ended)",
    ),
    (
        "dependency_left_waiting",
        "no job was left waiting whose dependencies had all ended",
    ),
    (
        "dependency_cancel",
        "every job downstream of a failure with `cancel` ended cancelled and never ran; no other job was cancelled by a dependency",
    ),
    (
        "dependencies_not_exercised",
        "jobs were released, cancelled by a failed dependency, and run after one (`run`)",
    ),
    (
        "fencing_not_exercised",
        "a SIGSTOPped or cut-off worker's late reports were fenced (lease_lost)",
    ),
    (
        FAILOVER_CHECK,
        "after the failover, the workers of every replica claimed and completed jobs on the new primary",
    ),
    (
        leadership::AFTER_LEASE,
        "no maintenance leader reaped, expired or fired anything after its lease could have lapsed",
    ),
    (
        leadership::LEADERSHIP,
        "the maintenance lease never had two holders, and every leader cut off was replaced meanwhile",
    ),
    (
        leadership::DOUBLE_FIRE,
        "no schedule instant fired twice (and the schedule fired)",
    ),
    (
        RECOVERY_CHECK,
        "every replica cut off from PostgreSQL took writes again after the link came back",
    ),
    (
        STREAM_CHECK,
        "a live event stream read through the whole run saw every history event exactly once, each job's in order",
    ),
    (
        "producer_problems",
        "producers got every submission acknowledged",
    ),
    (
        "fault_failures",
        "every fault was injected and every process came back",
    ),
    ("crashes", "no replica or worker process exited on its own"),
    (
        "graceful_stop",
        "workers and replicas exited on SIGTERM at the end",
    ),
];

/// The check that only a `--failover` run makes.
pub const FAILOVER_CHECK: &str = "failover_not_exercised";
/// A check that only a `--partitions` run makes (besides
/// [`leadership::CHECKS`]).
pub const RECOVERY_CHECK: &str = "partition_recovery";

/// Whether check `name` is made in a run with these options.
pub fn made(name: &str, failover: bool, partitions: bool) -> bool {
    if name == FAILOVER_CHECK {
        return failover;
    }
    if name == RECOVERY_CHECK || leadership::CHECKS.contains(&name) {
        return partitions;
    }
    true
}

/// Events that end an attempt (the one its `claimed` event started); a
/// `lease_lost` or `cancel_requested` does not. (`expired` ends a job that
/// was never claimed; it is here so that an attempt list stays closed.)
const ATTEMPT_ENDS: [&str; 7] = [
    "succeeded",
    "failed",
    "retry_scheduled",
    "snoozed",
    "lease_expired",
    "cancelled",
    "expired",
];

/// Whether an event ends the ownership of the latest claim: an attempt's
/// end other than `expired`, or the next claim.
fn ends_ownership(event: &str) -> bool {
    event == "claimed" || (event != "expired" && ATTEMPT_ENDS.contains(&event))
}

/// The limits are judged as exercised only when the limited queue saw at
/// least this many times the rate limit's count of claims (a tiny run may
/// never fill a window).
const EXERCISED_AFTER_WINDOWS: u64 = 10;

/// Failures that carry no API code: the request got no answer
/// (`transport`), or the worker's own heartbeat time limit (`timeout`).
pub const NO_ANSWER: [&str; 2] = ["transport", "timeout"];

/// What this scenario may legitimately show a client: outages and fencing.
const EXPECTED: [ErrorCode; 2] = [ErrorCode::Unavailable, ErrorCode::LeaseLost];

/// How far the worker's and the database's readings of the one host clock
/// may disagree (rounding, and nothing else on one machine).
const CLOCK_SLACK_US: i64 = 20_000;

/// One violated promise: how often, and a few examples.
#[derive(Debug, Default, Clone)]
pub struct Violation {
    /// Occurrences.
    pub count: u64,
    /// Up to five, for the report.
    pub examples: Vec<String>,
}

/// Counts taken from the history.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Jobs in the database.
    pub jobs: u64,
    /// By final state.
    pub states: BTreeMap<String, u64>,
    /// Queued with a `run_at` in the future (legitimately waiting).
    pub queued_later: u64,
    /// `claimed` events.
    pub claims: u64,
    /// `retry_scheduled` events.
    pub retries: u64,
    /// `snoozed` events.
    pub snoozes: u64,
    /// `lease_expired` events (the reaper), by outcome.
    pub lease_expired: BTreeMap<String, u64>,
    /// `lease_lost` events, by operation.
    pub lease_lost: BTreeMap<String, u64>,
    /// `lease_lost` answers workers printed.
    pub client_lease_lost: u64,
    /// Claims workers printed.
    pub client_claims: u64,
    /// Most claims of one job.
    pub max_claims: u64,
    /// Failed jobs: fatal, attempts exhausted by the handler, by the reaper.
    pub failed_by: BTreeMap<&'static str, u64>,
    /// Keys acknowledged more than once (duplicate submissions, retries).
    pub keys_acked_repeatedly: u64,
    /// The limited queue.
    pub limited: LimitedStats,
    /// Jobs that waited for others.
    pub graphs: GraphStats,
    /// What happened on the new primary (`--failover`).
    pub after_failover: Option<AfterFailover>,
    /// What the leadership audit shows (`--partitions`).
    pub leadership: Option<leadership::Stats>,
    /// How far (µs) the wall clock was stepped back during the run.
    pub clock_back_us: i64,
    /// What the live event stream's reader saw, against the history.
    pub stream: Option<StreamStats>,
}

/// The history written on the new primary: the events at or after the
/// instant the promoted standby first took writes.
#[derive(Debug, Default, Clone)]
pub struct AfterFailover {
    /// Every such event.
    pub events: u64,
    /// `claimed` events, by the replica the claiming worker talks to.
    pub claims: Vec<u64>,
    /// `succeeded` events, by the replica the completing worker talks to.
    pub successes: Vec<u64>,
    /// `lease_expired` events (the maintenance leader reaping there).
    pub reaped: u64,
}

/// What the history shows of the limited queue.
#[derive(Debug, Default, Clone)]
pub struct LimitedStats {
    /// Its jobs.
    pub jobs: u64,
    /// ... of them without a concurrency key.
    pub unkeyed: u64,
    /// Distinct concurrency keys.
    pub keys: u64,
    /// Its jobs by final state.
    pub states: BTreeMap<String, u64>,
    /// Its `claimed` events.
    pub claims: u64,
    /// Most jobs running at one instant.
    pub max_running: u64,
    /// Microseconds during which `max_running` (the limit) jobs ran.
    pub at_max_running_us: i64,
    /// Times the running jobs rose to `max_running`.
    pub max_running_reached: u64,
    /// Most jobs of one key running at one instant, and that key.
    pub max_key_running: u64,
    /// The key that reached [`LimitedStats::max_key_running`] first.
    pub max_key: Option<String>,
    /// Microseconds during which some key ran `key_max_running` jobs.
    pub at_key_max_us: i64,
    /// Times a key's running jobs rose to `key_max_running`.
    pub key_max_reached: u64,
    /// Most claims in one window of the rate limit's period.
    pub max_window_claims: u64,
    /// Claims that filled a window to the rate limit's count (the windows
    /// starting at them held exactly `count` claims).
    pub full_windows: u64,
}

/// What the history shows of jobs that waited for others.
#[derive(Debug, Default, Clone)]
pub struct GraphStats {
    /// Jobs the producers sent with dependencies.
    pub waits_sent: u64,
    /// Jobs with dependencies in the database.
    pub jobs: u64,
    /// Their edges.
    pub edges: u64,
    /// Those jobs by rule (`cancel`, `run`).
    pub rules: BTreeMap<&'static str, u64>,
    /// `released` events.
    pub released: u64,
    /// Jobs cancelled by a dependency (through the graph included).
    pub cancelled_by_dependency: u64,
    /// ... of them at enqueue (the dependency had already failed).
    pub cancelled_at_enqueue: u64,
    /// Jobs with `cancel` downstream of a failed or cancelled dependency.
    pub downstream_of_failure_cancel: u64,
    /// Jobs with `run` that ran after a dependency failed or was cancelled.
    pub ran_after_failure: u64,
}

/// The outcome of the checks.
#[derive(Debug, Default, Clone)]
pub struct Findings {
    /// Violations by check.
    pub violations: BTreeMap<&'static str, Violation>,
    /// Counts.
    pub stats: Stats,
}

impl Findings {
    /// Records one violation of `check` (one of [`CHECKS`]).
    pub fn flag(&mut self, check: &'static str, example: impl FnOnce() -> String) {
        let v = self.violations.entry(check).or_default();
        v.count += 1;
        if v.examples.len() < 5 {
            v.examples.push(example());
        }
    }

    /// Whether every promise held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// What the run knows besides the rows.
#[derive(Debug, Clone)]
pub struct Context {
    /// The run's seed (decides every handler's plan).
    pub seed: u64,
    /// Jobs the producers were to enqueue (`n` in `0..jobs`).
    pub jobs: u64,
    /// The database's `now()` when the rows were read.
    pub now: DateTime<Utc>,
    /// SIGSTOPs of a worker that held running jobs.
    pub stops_with_jobs: u64,
    /// Cuts of a worker's link (past its lease) while it held running jobs.
    pub cuts_with_jobs: u64,
    /// The share of the jobs (per mille) the producers sent to the limited
    /// queue ([`plan::queue`]).
    pub limited_per_mille: u64,
    /// The limited queue's limits.
    pub limits: Limits,
    /// With `--failover`: the new primary's clock when it first took
    /// writes, and the number of replicas.
    pub failover: Option<(DateTime<Utc>, usize)>,
    /// With `--partitions`: the leadership audit and the network's faults.
    pub partitions: Option<leadership::Facts>,
    /// How far (µs) the wall clock, which stamps the history, was stepped
    /// back during the run ([`crate::clock::ClockWatch`]): an event stamped
    /// up to this much before the claim it ends is the clock's doing.
    pub clock_back_us: i64,
    /// What each job the producers sent with dependencies waits for, by job
    /// number ([`crate::graph::waits`]).
    pub waits: HashMap<u64, Wait>,
    /// What the live event stream's reader saw; `None`: no reader ran
    /// (the check is not made).
    pub stream: Option<StreamRun>,
}

fn us(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// Runs every check. `events` must be ordered by job and `seq`.
pub fn check(jobs: &[JobRow], events: &[EventRow], obs: &Obs, cx: &Context) -> Findings {
    let mut f = Findings::default();
    let by_id: HashMap<Uuid, &JobRow> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut history: HashMap<Uuid, Vec<&EventRow>> = HashMap::new();
    for e in events {
        history.entry(e.job_id).or_default().push(e);
    }
    f.stats.jobs = jobs.len() as u64;
    f.stats.clock_back_us = cx.clock_back_us;

    check_keys(&mut f, jobs, &by_id, obs, cx);
    for job in jobs {
        let empty = Vec::new();
        let h = history.get(&job.id).unwrap_or(&empty);
        check_job(&mut f, job, h, cx);
    }
    for id in history.keys() {
        if !by_id.contains_key(id) {
            f.flag("history_mismatch", || {
                format!("events of job {id}, which does not exist")
            });
        }
    }
    check_client_fencing(&mut f, &history, obs);
    check_limits(&mut f, jobs, &history, cx);
    check_graphs(&mut f, jobs, &history, obs, cx);
    check_errors(&mut f, obs);
    check_failover(&mut f, events, cx);
    check_stream(&mut f, events, cx);
    if let Some(facts) = &cx.partitions {
        leadership::check(&mut f, events, facts);
    }
    let lost_events: u64 = f.stats.lease_lost.values().sum();
    if cx.stops_with_jobs + cx.cuts_with_jobs > 0 && lost_events == 0 {
        f.flag("fencing_not_exercised", || {
            format!(
                "{} SIGSTOPs and {} cuts of workers holding jobs, yet no lease_lost in the history",
                cx.stops_with_jobs, cx.cuts_with_jobs
            )
        });
    }
    f
}
