//! `schedules`: the schedule object, its runs and the cron preview.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::{Overlap, PutOutcome, RunOutcome, SchedulePatch, ScheduleSpec};
use uuid::Uuid;

use crate::time;
#[cfg(feature = "openapi")]
use crate::NameSchema;

/// A schedule: a cron timetable that enqueues one job per fire instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedule {
    /// Server-made id.
    pub id: Uuid,
    /// Unique in the tenant.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
    /// The expression: 5 fields, or 6 with seconds first (Vixie/OCPS).
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The queue of the jobs it enqueues.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub queue: String,
    /// The kind of the jobs it enqueues.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub kind: String,
    /// The payload of the jobs it enqueues, any JSON.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub payload: Value,
    /// Disabled schedules do not fire.
    pub enabled: bool,
    /// What it does while the previous run's job is unfinished.
    #[cfg_attr(feature = "openapi", schema(value_type = OverlapSchema))]
    pub overlap: Overlap,
    /// The next fire instant; `null` when disabled.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The fire instant of the last run (scheduled or triggered).
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub last_run_at: Option<DateTime<Utc>>,
    /// When it was created.
    #[serde(serialize_with = "time::ser")]
    pub created_at: DateTime<Utc>,
    /// When its definition last changed.
    #[serde(serialize_with = "time::ser")]
    pub updated_at: DateTime<Utc>,
    /// Its newest runs, newest first: only in `GET /v1/schedules?runs=N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_runs: Option<Vec<ScheduleRun>>,
    /// Its next fire instants (none while disabled): only in
    /// `GET /v1/schedules?next=N`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "time::ser_opt_vec"
    )]
    pub next_runs: Option<Vec<DateTime<Utc>>>,
}

impl From<tether_core::Schedule> for Schedule {
    fn from(s: tether_core::Schedule) -> Self {
        Schedule {
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

impl Schedule {
    /// Its definition, e.g. to create a copy under another name.
    pub fn spec(&self) -> ScheduleSpec {
        ScheduleSpec {
            name: self.name.clone(),
            cron: self.cron.clone(),
            timezone: self.timezone.clone(),
            queue: self.queue.clone(),
            kind: self.kind.clone(),
            payload: self.payload.clone(),
            enabled: self.enabled,
            overlap: self.overlap,
        }
    }
}

/// One run of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleRun {
    /// The fire instant (for a triggered run, when it was triggered).
    #[serde(serialize_with = "time::ser")]
    pub fire_at: DateTime<Utc>,
    /// The job it enqueued; `null` when it was skipped.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub job_id: Option<Uuid>,
    /// What it did.
    // A string, not a `RunOutcome`, so that outcomes a newer server adds
    // still decode; `run_outcome()` parses it.
    #[cfg_attr(feature = "openapi", schema(value_type = RunOutcomeSchema))]
    pub outcome: String,
}

impl ScheduleRun {
    /// The outcome as a known one (`None` for one this version does not
    /// know).
    pub fn run_outcome(&self) -> Option<RunOutcome> {
        RunOutcome::parse(&self.outcome)
    }
}

impl From<tether_core::ScheduleRun> for ScheduleRun {
    fn from(r: tether_core::ScheduleRun) -> Self {
        ScheduleRun {
            fire_at: r.fire_at,
            job_id: r.job_id,
            outcome: r.outcome.as_str().to_owned(),
        }
    }
}

/// `POST /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateScheduleBody {
    /// Unique in the tenant.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
    /// 5 fields, or 6 with seconds first; Vixie/OCPS semantics
    /// (day-of-month and day-of-week OR-ed when both are restricted, 0 or 7
    /// = Sunday, names, `L`, `W`, `#`).
    pub cron: String,
    /// The IANA time zone the expression is read in (default `UTC`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = "UTC"))]
    pub timezone: Option<String>,
    /// The queue of the jobs it enqueues.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub queue: String,
    /// The kind of the jobs it enqueues.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub kind: String,
    /// The payload of the jobs it enqueues, any JSON (default `null`).
    #[serde(default)]
    pub payload: Value,
    /// Whether it fires (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = true))]
    pub enabled: Option<bool>,
    /// What it does while the previous run's job is unfinished (default
    /// `allow`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<OverlapSchema>))]
    pub overlap: Option<Overlap>,
}

impl From<CreateScheduleBody> for ScheduleSpec {
    fn from(b: CreateScheduleBody) -> Self {
        PutScheduleBody {
            cron: b.cron,
            timezone: b.timezone,
            queue: b.queue,
            kind: b.kind,
            payload: b.payload,
            enabled: b.enabled,
            overlap: b.overlap,
        }
        .into_spec(b.name)
    }
}

/// `PUT /v1/schedules/{name}`: the body of `POST /v1/schedules` without
/// `name` (the path names the schedule). Fields left out take their
/// defaults, as at creation: the schedule becomes exactly this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PutScheduleBody {
    /// As at creation.
    pub cron: String,
    /// As at creation (default `UTC`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = "UTC"))]
    pub timezone: Option<String>,
    /// As at creation.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub queue: String,
    /// As at creation.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub kind: String,
    /// As at creation (default `null`).
    #[serde(default)]
    pub payload: Value,
    /// As at creation (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = true))]
    pub enabled: Option<bool>,
    /// As at creation (default `allow`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<OverlapSchema>))]
    pub overlap: Option<Overlap>,
}

impl PutScheduleBody {
    /// The definition it gives the schedule `name`, with the server's
    /// defaults for what it leaves out.
    pub fn into_spec(self, name: String) -> ScheduleSpec {
        ScheduleSpec {
            name,
            cron: self.cron,
            timezone: self.timezone.unwrap_or_else(|| "UTC".to_owned()),
            queue: self.queue,
            kind: self.kind,
            payload: self.payload,
            enabled: self.enabled.unwrap_or(true),
            overlap: self.overlap.unwrap_or_default(),
        }
    }
}

impl From<ScheduleSpec> for PutScheduleBody {
    /// Every field of the definition but its name.
    fn from(s: ScheduleSpec) -> Self {
        PutScheduleBody {
            cron: s.cron,
            timezone: Some(s.timezone),
            queue: s.queue,
            kind: s.kind,
            payload: s.payload,
            enabled: Some(s.enabled),
            overlap: Some(s.overlap),
        }
    }
}

/// The answer of `PUT /v1/schedules/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PutScheduleResponse {
    /// The schedule as it now stands.
    pub schedule: Schedule,
    /// `created`, `updated` (its definition replaced, its id and runs kept)
    /// or `unchanged` (it already was exactly this; nothing written).
    #[cfg_attr(feature = "openapi", schema(value_type = PutOutcomeSchema))]
    pub outcome: PutOutcome,
}

impl From<ScheduleSpec> for CreateScheduleBody {
    /// Every field of the definition (the defaults of [`ScheduleSpec::new`]
    /// are the server's).
    fn from(s: ScheduleSpec) -> Self {
        CreateScheduleBody {
            name: s.name,
            cron: s.cron,
            timezone: Some(s.timezone),
            queue: s.queue,
            kind: s.kind,
            payload: s.payload,
            enabled: Some(s.enabled),
            overlap: Some(s.overlap),
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchScheduleBody {
    /// New name, unique in the tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<NameSchema>))]
    pub name: Option<String>,
    /// New expression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// New IANA time zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// New queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<NameSchema>))]
    pub queue: Option<String>,
    /// New kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<NameSchema>))]
    pub kind: Option<String>,
    /// New payload, any JSON: an explicit `null` sets it to `null`; absent
    /// leaves it as it is.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: Option<Value>,
    /// Enable or disable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// New overlap policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<OverlapSchema>))]
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

impl From<SchedulePatch> for PatchScheduleBody {
    fn from(p: SchedulePatch) -> Self {
        PatchScheduleBody {
            name: p.name,
            cron: p.cron,
            timezone: p.timezone,
            queue: p.queue,
            kind: p.kind,
            payload: p.payload,
            enabled: p.enabled,
            overlap: p.overlap,
        }
    }
}

/// `GET /v1/cron/preview` query. Empty parameters (but `cron`) are unset;
/// unknown ones are 400.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct CronPreviewQuery {
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone it is read in.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(default = "UTC"))]
    pub timezone: Option<String>,
    /// Fire instants strictly after this one (RFC 3339, between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z; default now).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<DateTime<Utc>>))]
    pub from: Option<String>,
    /// How many instants.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(inline, value_type = Option<PreviewCount>))]
    pub count: Option<String>,
}

/// `{schedule}`: the answer of the routes that act on one schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleResponse {
    /// The schedule after the operation.
    pub schedule: Schedule,
}

impl From<tether_core::Schedule> for ScheduleResponse {
    fn from(s: tether_core::Schedule) -> Self {
        ScheduleResponse { schedule: s.into() }
    }
}

/// The answer of `GET /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleListResponse {
    /// The tenant's schedules, by name.
    pub schedules: Vec<Schedule>,
}

/// The answer of `GET /v1/schedules/{id}/runs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleRunListResponse {
    /// The newest runs (at most 100), newest first.
    pub runs: Vec<ScheduleRun>,
}

/// The answer of `GET /v1/cron/preview`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CronPreviewResponse {
    /// The next fire instants, earliest first.
    #[serde(serialize_with = "time::ser_vec")]
    pub times: Vec<DateTime<Utc>>,
}

/// `GET /v1/schedules` query. Empty parameters are unset; unknown ones are
/// 400.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ScheduleListQuery {
    /// Include each schedule's newest runs (`recent_runs`), this many.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(inline, value_type = Option<ListedRuns>))]
    pub runs: Option<String>,
    /// Include each schedule's next fire instants (`next_runs`), this many.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(inline, value_type = Option<ListedRuns>))]
    pub next: Option<String>,
}

#[cfg(feature = "openapi")]
pub(crate) use self::openapi::field_bounds;
#[cfg(feature = "openapi")]
pub use self::openapi::{
    ListedRuns, OverlapSchema, PreviewCount, PutOutcomeSchema, RunOutcomeSchema,
};

/// This topic's schemas that the derive cannot make, and its field bounds.
#[cfg(feature = "openapi")]
mod openapi {
    use tether_core::cron::MAX_INPUT_LEN;
    use tether_core::{MAX_LISTED_RUNS, MAX_PREVIEW};

    use super::*;
    use crate::bounds::{count, field, length, FieldBound};
    use crate::schemas::string_enum;

    schema_of!(
        /// Schema of [`Overlap`], with the values the core knows.
        OverlapSchema as "Overlap" =>
        string_enum(
            "What a schedule does while the job of its previous run is still `queued` or \
             `running`: `allow` enqueues anyway (the default), `skip` enqueues nothing and \
             records the run as `skipped`.",
            [Overlap::Allow, Overlap::Skip].map(Overlap::as_str),
        )
    );

    schema_of!(
        /// Schema of [`RunOutcome`], with the values the core knows.
        RunOutcomeSchema as "RunOutcome" =>
        string_enum(
            "What a run of a schedule did: `enqueued` a job, or `skipped` (overlap `skip` \
             while the previous run's job was unfinished).",
            [RunOutcome::Enqueued, RunOutcome::Skipped].map(RunOutcome::as_str),
        )
    );

    schema_of!(
        /// Schema of [`PutOutcome`], with the values the core knows.
        PutOutcomeSchema as "PutOutcome" =>
        string_enum(
            "What `PUT /v1/schedules/{name}` did: `created` the schedule, `updated` its \
             definition (keeping its id and runs), or nothing, as it already was exactly this \
             (`unchanged`).",
            [PutOutcome::Created, PutOutcome::Updated, PutOutcome::Unchanged]
                .map(PutOutcome::as_str),
        )
    );

    schema_of!(
        /// Schema of the `count` of `GET /v1/cron/preview`.
        PreviewCount as "PreviewCount" =>
        count(MAX_PREVIEW, 5)
    );

    schema_of!(
        /// Schema of `runs` and `next` of `GET /v1/schedules`.
        ListedRuns as "ListedRuns" =>
        count(MAX_LISTED_RUNS, 1)
    );

    /// The bounds of this topic's fields (see `bounds.rs`).
    pub(crate) fn field_bounds() -> Vec<FieldBound> {
        vec![
            (field!(CreateScheduleBody.cron), length(1..=MAX_INPUT_LEN)),
            (
                field!(CreateScheduleBody.timezone),
                length(1..=MAX_INPUT_LEN),
            ),
            (field!(PutScheduleBody.cron), length(1..=MAX_INPUT_LEN)),
            (field!(PutScheduleBody.timezone), length(1..=MAX_INPUT_LEN)),
            (field!(PatchScheduleBody.cron), length(1..=MAX_INPUT_LEN)),
            (
                field!(PatchScheduleBody.timezone),
                length(1..=MAX_INPUT_LEN),
            ),
        ]
    }
}
