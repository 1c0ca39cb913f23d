//! Request and response bodies, field for field as in `docs/API.md`, with
//! their OpenAPI schemas: doc comments become the document's descriptions.
//! One module per OpenAPI tag; this one holds what several tags share.
//! The bounds of fields come from the validators' constants (`bounds.rs`).

mod attempts;
mod bounds;
mod jobs;
mod queues;
mod schedules;
mod service;
mod tenants;

pub use attempts::*;
pub use jobs::*;
pub use queues::*;
pub use schedules::*;
pub use service::*;
pub use tenants::*;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use tether_core::validate::{MAX_DURATION_MS, MAX_NAME_LEN};
use tether_core::{Backoff, EventKind, JobState};
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::openapi::OpenApi;
use utoipa::ToSchema;

use bounds::{field, range, FieldBound};

/// Sets the bounds of every module's fields on `doc` (see `bounds.rs`).
pub(crate) fn bound(doc: &mut OpenApi) {
    let all = [
        field_bounds(),
        jobs::field_bounds(),
        attempts::field_bounds(),
        queues::field_bounds(),
        schedules::field_bounds(),
        tenants::field_bounds(),
    ];
    bounds::apply(doc, all.into_iter().flatten());
}

/// The bounds of this module's fields.
fn field_bounds() -> Vec<FieldBound> {
    vec![
        (field!(BackoffDto.base_ms), range(0..=MAX_DURATION_MS)),
        (field!(BackoffDto.cap_ms), range(0..=MAX_DURATION_MS)),
    ]
}

/// RFC 3339 in UTC with milliseconds: `2026-11-29T23:00:00.123Z`.
pub fn time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(crate) fn ser_time<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&time(t))
}

/// Reads an input time of a body by the one rule of every input time
/// ([`tether_core::validate::parse_instant`], also the query strings').
/// With `#[serde(default)]`: absent and `null` are `None`.
pub(crate) fn de_opt_time<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|text| tether_core::validate::parse_instant(&text).map_err(serde::de::Error::custom))
        .transpose()
}

pub(crate) fn ser_opt_time<S: Serializer>(
    t: &Option<DateTime<Utc>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&time(t)),
        None => s.serialize_none(),
    }
}

/// Declares a unit type that stands for a schema the derive cannot make: a
/// type of `tether-core`, or a body written outside this module.
macro_rules! schema_of {
    ($(#[$doc:meta])* $ty:ident as $name:literal => $schema:expr) => {
        $(#[$doc])*
        pub(crate) struct $ty;

        impl utoipa::PartialSchema for $ty {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                $schema.into()
            }
        }

        impl utoipa::ToSchema for $ty {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed($name)
            }
        }
    };
}
pub(crate) use schema_of;

/// A string schema with these values only.
pub(crate) fn string_enum<'a>(
    description: &str,
    values: impl IntoIterator<Item = &'a str>,
) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
        .description(Some(description))
        .build()
}

schema_of!(
    /// Schema of [`JobState`], with the values the core knows.
    JobStateSchema as "JobState" => string_enum(
        "Where a job is in its lifecycle: `queued` (waiting, possibly not before `run_at`), \
         `running` (claimed, under a lease), and the terminal `succeeded`, `failed` (the \
         dead-letter queue) and `cancelled`.",
        JobState::ALL.map(JobState::as_str),
    )
);

schema_of!(
    /// Schema of [`EventKind`], with the values the core knows.
    EventKindSchema as "EventKind" => string_enum(
        "A transition in a job's history.",
        EventKind::ALL.map(EventKind::as_str),
    )
);

schema_of!(
    /// Schema of the names of queues, kinds, tags, tenants and schedules.
    NameSchema as "Name" => ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_LEN))
        .pattern(Some("^[A-Za-z0-9._:-]+$"))
        .description(Some(format!(
            "A queue, kind, tag, tenant or schedule name: 1–{MAX_NAME_LEN} characters of \
             `[A-Za-z0-9._:-]`."
        )))
);

/// Exponential retry backoff: the n-th retry waits
/// `min(base_ms * 2^(n-1), cap_ms)` times a jitter in [1.0, 1.5).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Backoff)]
pub struct BackoffDto {
    /// Delay before the first retry (default 1 000).
    pub base_ms: i64,
    /// Largest delay before jitter, at least `base_ms` (default 3 600 000).
    pub cap_ms: i64,
}

impl From<Backoff> for BackoffDto {
    fn from(b: Backoff) -> Self {
        BackoffDto {
            base_ms: b.base_ms,
            cap_ms: b.cap_ms,
        }
    }
}

impl From<BackoffDto> for Backoff {
    fn from(b: BackoffDto) -> Self {
        Backoff {
            base_ms: b.base_ms,
            cap_ms: b.cap_ms,
        }
    }
}
