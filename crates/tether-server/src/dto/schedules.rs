//! `schedules`: the schedule object, its runs and the cron preview.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use tether_core::{Overlap, RunOutcome, Schedule, SchedulePatch, ScheduleRun, ScheduleSpec};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use tether_core::cron::MAX_INPUT_LEN;
use tether_core::{MAX_LISTED_RUNS, MAX_PREVIEW};

use super::bounds::{count, field, length, FieldBound};
use super::{schema_of, ser_opt_time, ser_time, string_enum, time, NameSchema};

schema_of!(
    /// Schema of [`Overlap`], with the values the core knows.
    OverlapSchema as "Overlap" => string_enum(
        "What a schedule does while the job of its previous run is still `queued` or \
         `running`: `allow` enqueues anyway (the default), `skip` enqueues nothing and records \
         the run as `skipped`.",
        [Overlap::Allow, Overlap::Skip].map(Overlap::as_str),
    )
);

schema_of!(
    /// Schema of [`RunOutcome`], with the values the core knows.
    RunOutcomeSchema as "RunOutcome" => string_enum(
        "What a run of a schedule did: `enqueued` a job, or `skipped` (overlap `skip` while the \
         previous run's job was unfinished).",
        [RunOutcome::Enqueued, RunOutcome::Skipped].map(RunOutcome::as_str),
    )
);

/// A schedule: a cron timetable that enqueues one job per fire instant.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Schedule)]
pub struct ScheduleDto {
    /// Server-made id.
    pub id: Uuid,
    /// Unique in the tenant.
    #[schema(value_type = NameSchema)]
    pub name: String,
    /// The expression: 5 fields, or 6 with seconds first (Vixie/OCPS).
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The queue of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub queue: String,
    /// The kind of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub kind: String,
    /// The payload of the jobs it enqueues, any JSON.
    pub payload: Value,
    /// Disabled schedules do not fire.
    pub enabled: bool,
    /// What it does while the previous run's job is unfinished.
    #[schema(value_type = OverlapSchema)]
    pub overlap: Overlap,
    /// The next fire instant; `null` when disabled.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The fire instant of the last run (scheduled or triggered).
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub last_run_at: Option<DateTime<Utc>>,
    /// When it was created.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
    /// When its definition last changed.
    #[serde(serialize_with = "ser_time")]
    pub updated_at: DateTime<Utc>,
    /// Its newest runs, newest first: only in `GET /v1/schedules?runs=N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent_runs: Option<Vec<ScheduleRunDto>>,
    /// Its next fire instants (none while disabled): only in
    /// `GET /v1/schedules?next=N`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_times"
    )]
    pub next_runs: Option<Vec<DateTime<Utc>>>,
}

impl From<Schedule> for ScheduleDto {
    fn from(s: Schedule) -> Self {
        ScheduleDto {
            id: s.id,
            name: s.spec.name,
            cron: s.spec.cron,
            timezone: s.spec.timezone,
            queue: s.spec.queue,
            kind: s.spec.kind,
            payload: s.spec.payload,
            enabled: s.spec.enabled,
            overlap: s.spec.overlap,
            next_run_at: s.next_run_at,
            last_run_at: s.last_run_at,
            created_at: s.created_at,
            updated_at: s.updated_at,
            recent_runs: None,
            next_runs: None,
        }
    }
}

/// One run of a schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ScheduleRun)]
pub struct ScheduleRunDto {
    /// The fire instant (for a triggered run, when it was triggered).
    #[serde(serialize_with = "ser_time")]
    pub fire_at: DateTime<Utc>,
    /// The job it enqueued; `null` when it was skipped.
    #[schema(required)]
    pub job_id: Option<Uuid>,
    /// What it did.
    #[schema(value_type = RunOutcomeSchema)]
    pub outcome: RunOutcome,
}

impl From<ScheduleRun> for ScheduleRunDto {
    fn from(r: ScheduleRun) -> Self {
        ScheduleRunDto {
            fire_at: r.fire_at,
            job_id: r.job_id,
            outcome: r.outcome,
        }
    }
}

/// `POST /v1/schedules`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateScheduleBody {
    /// Unique in the tenant.
    #[schema(value_type = NameSchema)]
    pub name: String,
    /// 5 fields, or 6 with seconds first; Vixie/OCPS semantics
    /// (day-of-month and day-of-week OR-ed when both are restricted, 0 or 7
    /// = Sunday, names, `L`, `W`, `#`).
    pub cron: String,
    /// The IANA time zone the expression is read in (default `UTC`).
    #[schema(default = "UTC")]
    pub timezone: Option<String>,
    /// The queue of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub queue: String,
    /// The kind of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub kind: String,
    /// The payload of the jobs it enqueues, any JSON (default `null`).
    #[serde(default)]
    pub payload: Value,
    /// Whether it fires (default true).
    #[schema(default = true)]
    pub enabled: Option<bool>,
    /// What it does while the previous run's job is unfinished (default
    /// `allow`).
    #[schema(value_type = Option<OverlapSchema>)]
    pub overlap: Option<Overlap>,
}

impl From<CreateScheduleBody> for ScheduleSpec {
    fn from(b: CreateScheduleBody) -> Self {
        ScheduleSpec {
            name: b.name,
            cron: b.cron,
            timezone: b.timezone.unwrap_or_else(|| "UTC".to_owned()),
            queue: b.queue,
            kind: b.kind,
            payload: b.payload,
            enabled: b.enabled.unwrap_or(true),
            overlap: b.overlap.unwrap_or_default(),
        }
    }
}

/// A field that is set whenever it is present, even to JSON `null` (with
/// `#[serde(default)]`, absent stays `None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `PATCH /v1/schedules/{id}`: absent fields (and fields set to `null`,
/// except `payload`) stay as they are.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchScheduleBody {
    /// New name, unique in the tenant.
    #[schema(value_type = Option<NameSchema>)]
    pub name: Option<String>,
    /// New expression.
    pub cron: Option<String>,
    /// New IANA time zone.
    pub timezone: Option<String>,
    /// New queue.
    #[schema(value_type = Option<NameSchema>)]
    pub queue: Option<String>,
    /// New kind.
    #[schema(value_type = Option<NameSchema>)]
    pub kind: Option<String>,
    /// New payload, any JSON: an explicit `null` sets it to `null`; absent
    /// leaves it as it is.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Value)]
    pub payload: Option<Value>,
    /// Enable or disable.
    pub enabled: Option<bool>,
    /// New overlap policy.
    #[schema(value_type = Option<OverlapSchema>)]
    pub overlap: Option<Overlap>,
}

impl From<PatchScheduleBody> for SchedulePatch {
    fn from(b: PatchScheduleBody) -> Self {
        SchedulePatch {
            name: b.name,
            cron: b.cron,
            timezone: b.timezone,
            queue: b.queue,
            kind: b.kind,
            payload: b.payload,
            enabled: b.enabled,
            overlap: b.overlap,
        }
    }
}

/// `GET /v1/cron/preview` query. Empty parameters (but `cron`) are unset;
/// unknown ones are 400.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CronPreviewQuery {
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone it is read in.
    #[param(default = "UTC")]
    pub timezone: Option<String>,
    /// Fire instants strictly after this one (RFC 3339, between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z; default now).
    #[param(value_type = Option<DateTime<Utc>>)]
    pub from: Option<String>,
    /// How many instants.
    #[param(inline, value_type = Option<PreviewCount>)]
    pub count: Option<String>,
}

/// `{schedule}`: the answer of the routes that act on one schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleResponse {
    /// The schedule after the operation.
    pub schedule: ScheduleDto,
}

impl From<Schedule> for ScheduleResponse {
    fn from(s: Schedule) -> Self {
        ScheduleResponse { schedule: s.into() }
    }
}

/// The answer of `GET /v1/schedules`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleListResponse {
    /// The tenant's schedules, by name.
    pub schedules: Vec<ScheduleDto>,
}

/// The answer of `GET /v1/schedules/{id}/runs`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleRunListResponse {
    /// The newest runs (at most 100), newest first.
    pub runs: Vec<ScheduleRunDto>,
}

/// The answer of `GET /v1/cron/preview`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CronPreviewResponse {
    /// The next fire instants, earliest first.
    #[serde(serialize_with = "ser_times")]
    pub times: Vec<DateTime<Utc>>,
}

fn ser_times<S: Serializer>(ts: &[DateTime<Utc>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ts.iter().map(time))
}

fn ser_opt_times<S: Serializer>(ts: &Option<Vec<DateTime<Utc>>>, s: S) -> Result<S::Ok, S::Error> {
    match ts {
        Some(ts) => ser_times(ts, s),
        None => s.serialize_none(),
    }
}

/// `GET /v1/schedules` query. Empty parameters are unset; unknown ones are
/// 400.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScheduleListQuery {
    /// Include each schedule's newest runs (`recent_runs`), this many.
    #[param(inline, value_type = Option<ListedRuns>)]
    pub runs: Option<String>,
    /// Include each schedule's next fire instants (`next_runs`), this many.
    #[param(inline, value_type = Option<ListedRuns>)]
    pub next: Option<String>,
}

schema_of!(
    /// Schema of the `count` of `GET /v1/cron/preview`.
    PreviewCount as "PreviewCount" => count(MAX_PREVIEW, 5)
);

schema_of!(
    /// Schema of `runs` and `next` of `GET /v1/schedules`.
    ListedRuns as "ListedRuns" => count(MAX_LISTED_RUNS, 1)
);

/// The bounds of this module's fields (see `bounds.rs`).
pub(super) fn field_bounds() -> Vec<FieldBound> {
    vec![
        (field!(CreateScheduleBody.cron), length(1..=MAX_INPUT_LEN)),
        (
            field!(CreateScheduleBody.timezone),
            length(1..=MAX_INPUT_LEN),
        ),
        (field!(PatchScheduleBody.cron), length(1..=MAX_INPUT_LEN)),
        (
            field!(PatchScheduleBody.timezone),
            length(1..=MAX_INPUT_LEN),
        ),
    ]
}
