//! Schedules (invariant 11): a cron timetable per tenant that enqueues one
//! job per fire instant, exactly once across replicas and crashes.
//!
//! The maintenance leader fires due schedules a pass at a time: the engine
//! works out each one's fire instant and next instant in Rust (the one place
//! the cron and DST rules live), and the store records the whole pass in one
//! transaction, set-based: it advances each `next_run_at` with a
//! compare-and-set and enqueues each job with the idempotency key
//! `schedule:<id>:<fire instant>`, so a crash can neither lose nor double a
//! fire, and a second (stale) leader's pass finds the timetables already
//! moved. Instants
//! missed by less than a catch-up window (one leader lease: a failover) are
//! each fired late, in order; after longer downtime the missed fires
//! collapse into one run stamped with the latest missed instant.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// What a schedule does while the job of its previous run is unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Enqueue anyway (the default).
    #[default]
    Allow,
    /// Enqueue nothing while the previous run's job is `queued` or
    /// `running`; the run is recorded as `skipped`.
    Skip,
}

impl Overlap {
    /// The wire and database name.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }

    /// Parses a wire or database name.
    pub fn parse(s: &str) -> Option<Overlap> {
        match s {
            "allow" => Some(Overlap::Allow),
            "skip" => Some(Overlap::Skip),
            _ => None,
        }
    }
}

/// A schedule's definition: what [`crate::Engine::create_schedule`] takes
/// and what a patch is resolved to.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSpec {
    /// Unique per tenant; follows the queue-name rules.
    pub name: String,
    /// 5 fields, or 6 with seconds first.
    pub cron: String,
    /// IANA time zone the expression is read in.
    pub timezone: String,
    /// Queue of the jobs it enqueues.
    pub queue: String,
    /// Kind of the jobs it enqueues.
    pub kind: String,
    /// Payload of the jobs it enqueues.
    pub payload: Value,
    /// Disabled schedules do not fire and have no `next_run_at`.
    pub enabled: bool,
    /// See [`Overlap`].
    pub overlap: Overlap,
}

impl ScheduleSpec {
    /// A schedule firing `cron` in UTC, enabled, overlap `allow`.
    pub fn new(
        name: impl Into<String>,
        cron: impl Into<String>,
        queue: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        ScheduleSpec {
            name: name.into(),
            cron: cron.into(),
            timezone: "UTC".to_owned(),
            queue: queue.into(),
            kind: kind.into(),
            payload: Value::Null,
            enabled: true,
            overlap: Overlap::Allow,
        }
    }

    /// Reads the expression in `timezone`.
    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = timezone.into();
        self
    }

    /// Sets the payload of the jobs.
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }

    /// Enables or disables it.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Sets the overlap policy.
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }
}

/// Changes to a schedule; `None` leaves a field as it is. Any patch
/// recomputes `next_run_at` from now (so re-enabling does not replay the
/// time it was disabled).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SchedulePatch {
    /// New name.
    pub name: Option<String>,
    /// New expression.
    pub cron: Option<String>,
    /// New time zone.
    pub timezone: Option<String>,
    /// New queue.
    pub queue: Option<String>,
    /// New kind.
    pub kind: Option<String>,
    /// New payload.
    pub payload: Option<Value>,
    /// Enable or disable.
    pub enabled: Option<bool>,
    /// New overlap policy.
    pub overlap: Option<Overlap>,
}

impl SchedulePatch {
    /// The definition after this patch.
    pub fn apply(&self, base: &ScheduleSpec) -> ScheduleSpec {
        ScheduleSpec {
            name: self.name.clone().unwrap_or_else(|| base.name.clone()),
            cron: self.cron.clone().unwrap_or_else(|| base.cron.clone()),
            timezone: self
                .timezone
                .clone()
                .unwrap_or_else(|| base.timezone.clone()),
            queue: self.queue.clone().unwrap_or_else(|| base.queue.clone()),
            kind: self.kind.clone().unwrap_or_else(|| base.kind.clone()),
            payload: self.payload.clone().unwrap_or_else(|| base.payload.clone()),
            enabled: self.enabled.unwrap_or(base.enabled),
            overlap: self.overlap.unwrap_or(base.overlap),
        }
    }
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Its id.
    pub id: Uuid,
    /// The tenant it belongs to.
    pub tenant: String,
    /// Its definition.
    pub spec: ScheduleSpec,
    /// The next fire instant; `None` when disabled.
    pub next_run_at: Option<DateTime<Utc>>,
    /// The fire instant of the last run (scheduled or triggered).
    pub last_run_at: Option<DateTime<Utc>>,
    /// The job of the last run that enqueued one.
    pub last_job_id: Option<Uuid>,
    /// When it was created (database clock).
    pub created_at: DateTime<Utc>,
    /// When it last changed (database clock).
    pub updated_at: DateTime<Utc>,
}

/// What `PUT /v1/schedules/{name}` (creating or replacing a schedule by
/// name) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PutOutcome {
    /// There was no schedule of that name: it was created.
    Created,
    /// Its definition was replaced (its id and runs kept).
    Updated,
    /// It already was exactly this: nothing was written.
    Unchanged,
}

impl PutOutcome {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PutOutcome::Created => "created",
            PutOutcome::Updated => "updated",
            PutOutcome::Unchanged => "unchanged",
        }
    }
}

/// What one run of a schedule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// A job was enqueued.
    Enqueued,
    /// Nothing was enqueued: overlap `skip` and the previous job was
    /// unfinished.
    Skipped,
}

impl RunOutcome {
    /// The wire and database name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Enqueued => "enqueued",
            RunOutcome::Skipped => "skipped",
        }
    }

    /// Parses a wire or database name.
    pub fn parse(s: &str) -> Option<RunOutcome> {
        match s {
            "enqueued" => Some(RunOutcome::Enqueued),
            "skipped" => Some(RunOutcome::Skipped),
            _ => None,
        }
    }
}

/// One run of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRun {
    /// The fire instant (for a triggered run, when it was triggered).
    pub fire_at: DateTime<Utc>,
    /// The job it enqueued, if any.
    pub job_id: Option<Uuid>,
    /// What it did.
    pub outcome: RunOutcome,
}

/// One fire the scheduler asks the store to record, atomically: advance the
/// timetable from `expected_next_run_at` to `next_run_at` (a compare-and-set
/// that fails if another node moved it first), then run.
#[derive(Debug, Clone, PartialEq)]
pub struct Fire {
    /// The schedule.
    pub schedule_id: Uuid,
    /// Its tenant.
    pub tenant: String,
    /// The `next_run_at` the scheduler read; the fire happens only if it is
    /// still the stored one.
    pub expected_next_run_at: DateTime<Utc>,
    /// The instant this run is stamped with (the latest missed one).
    pub fire_at: DateTime<Utc>,
    /// The new `next_run_at`: the first fire instant after now.
    pub next_run_at: Option<DateTime<Utc>>,
    /// The job to enqueue (its idempotency key is [`fire_key`]).
    pub job: crate::NewJob,
    /// Whether to skip while the previous run's job is unfinished.
    pub overlap: Overlap,
}

/// A [`Fire`] as the store receives it: the fire plus the id its job gets
/// if it is created (as [`crate::NewJobRef`] is to a [`crate::NewJob`]).
#[derive(Debug, Clone, Copy)]
pub struct FireRef<'a> {
    /// The fire.
    pub fire: &'a Fire,
    /// The id of its job, if the fire creates one.
    pub job_id: Uuid,
}

/// Refuses a pass that names one schedule twice (`invalid_argument`): a
/// pass fires each schedule at most once, and the stores match each fire
/// to its schedule by id.
pub fn distinct_schedules(fires: &[FireRef<'_>]) -> crate::Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(fires.len());
    match fires.iter().find(|f| !seen.insert(f.fire.schedule_id)) {
        Some(f) => Err(crate::Error::invalid(
            "fires",
            format!("schedule {} is named twice in one pass", f.fire.schedule_id),
        )),
        None => Ok(()),
    }
}

/// What a [`Fire`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireOutcome {
    /// The run was recorded (with this outcome and job).
    Ran(RunOutcome, Option<Uuid>),
    /// The timetable had moved (another node fired it, or it was patched,
    /// disabled or deleted): nothing was done.
    Raced,
}

/// What one scheduler pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FireReport {
    /// Runs that enqueued a job.
    pub enqueued: u64,
    /// Runs skipped by the overlap policy.
    pub skipped: u64,
    /// Schedules another node (or a patch) moved first.
    pub raced: u64,
    /// Schedules whose stored definition no longer parses (e.g. a time zone
    /// dropped from newer tz data); they are left as they are.
    pub failed: u64,
}

impl FireReport {
    /// Schedules handled in all.
    pub fn total(&self) -> u64 {
        self.enqueued + self.skipped + self.raced + self.failed
    }
}

/// The idempotency key of the job of a scheduled fire: the same schedule
/// and instant always give the same key, so a fire can never make two jobs.
pub fn fire_key(schedule_id: Uuid, fire_at: DateTime<Utc>) -> String {
    format!(
        "schedule:{schedule_id}:{}",
        fire_at.to_rfc3339_opts(SecondsFormat::Millis, true)
    )
}

/// The idempotency key of the job of a manual trigger (unique per trigger).
pub fn trigger_key(schedule_id: Uuid) -> String {
    format!("schedule:{schedule_id}:trigger:{}", Uuid::now_v7().simple())
}
