//! The request and response bodies of tether's HTTP API, field for field as
//! in `docs/API.md`, written once for both ends: `tether-server` decodes
//! requests and encodes answers with them, `tether-client` encodes requests
//! and decodes answers with them. One module per topic, named as the other
//! layers' files are; this one holds what the topics share (the backoff,
//! the error body). Conversions to and from `tether-core`'s model live here
//! too.
//!
//! One type serves both ends, so each holds both contracts:
//! - requests refuse unknown fields (`deny_unknown_fields`: bad input is a
//!   400) and are written with only their set fields;
//! - answers are read leniently: fields a newer server adds are ignored,
//!   and fields an older one lacks take their defaults.
//!
//! Times are written with milliseconds and read by the server's rule
//! ([`time`]). With the `openapi` feature the types also derive their
//! OpenAPI schemas (doc comments become the document's descriptions) and
//! [`bound`] sets the fields' bounds from the validators' constants.

/// A named schema the derives cannot make: a unit type `$ty` whose schema
/// is `$schema` and whose name in the document is `$name` (limits, enums
/// listed from the core's constants, the error codes).
#[cfg(feature = "openapi")]
macro_rules! schema_of {
    ($(#[$doc:meta])* $ty:ident as $name:literal => $schema:expr) => {
        $(#[$doc])*
        pub struct $ty;

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

mod attempts;
#[cfg(feature = "openapi")]
mod bounds;
mod feed;
mod jobs;
mod queues;
mod schedules;
mod service;
mod tenants;
pub mod time;
mod workflows;

pub use attempts::*;
pub use feed::*;
pub use jobs::*;
pub use queues::*;
pub use schedules::*;
pub use service::*;
pub use tenants::*;
pub use workflows::*;

use serde::{Deserialize, Serialize};

/// Sets the bounds of every module's fields on `doc` (see `bounds.rs`).
#[cfg(feature = "openapi")]
pub fn bound(doc: &mut utoipa::openapi::OpenApi) {
    use bounds::{field, range};
    use tether_core::validate::MAX_DURATION_MS;
    let shared = vec![
        (field!(Backoff.base_ms), range(0..=MAX_DURATION_MS)),
        (field!(Backoff.cap_ms), range(0..=MAX_DURATION_MS)),
    ];
    let all = [
        shared,
        jobs::field_bounds(),
        attempts::field_bounds(),
        queues::field_bounds(),
        schedules::field_bounds(),
        tenants::field_bounds(),
    ];
    bounds::apply(doc, all.into_iter().flatten());
}

/// Exponential retry backoff: the n-th retry waits
/// `min(base_ms * 2^(n-1), cap_ms)` times a jitter in [1.0, 1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    /// Delay before the first retry (default 1 000).
    pub base_ms: i64,
    /// Largest delay before jitter, at least `base_ms` (default 3 600 000).
    pub cap_ms: i64,
}

impl From<tether_core::Backoff> for Backoff {
    fn from(b: tether_core::Backoff) -> Self {
        Backoff {
            base_ms: b.base_ms,
            cap_ms: b.cap_ms,
        }
    }
}

impl From<Backoff> for tether_core::Backoff {
    fn from(b: Backoff) -> Self {
        tether_core::Backoff {
            base_ms: b.base_ms,
            cap_ms: b.cap_ms,
        }
    }
}

/// A backoff in an answer: requests refuse unknown fields, an answer may
/// carry more than this version knows.
pub(crate) fn lenient_backoff<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<tether_core::Backoff, D::Error> {
    #[derive(Deserialize)]
    struct Wire {
        base_ms: i64,
        cap_ms: i64,
    }
    let w = Wire::deserialize(d)?;
    Ok(tether_core::Backoff {
        base_ms: w.base_ms,
        cap_ms: w.cap_ms,
    })
}

/// The body of every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Error))]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// An error: a stable machine-readable code and a message for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// Machine-readable; the HTTP status follows from it.
    // A string, not a `tether_core::ErrorCode`: a code a newer server adds
    // still decodes.
    #[cfg_attr(feature = "openapi", schema(value_type = ErrorCodeSchema))]
    pub code: String,
    /// For humans; not stable.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub message: String,
}

#[cfg(feature = "openapi")]
pub use schemas::*;

/// Schemas the derive cannot make: of `tether-core`'s types, and of values
/// the core's tables list.
#[cfg(feature = "openapi")]
pub(crate) mod schemas {

    use tether_core::validate::MAX_NAME_LEN;
    use tether_core::{ErrorCode, EventKind, JobState};
    use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

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
        JobStateSchema as "JobState" =>
        string_enum(
            "Where a job is in its lifecycle: `waiting` (for its dependencies), `queued` \
             (ready, possibly not before `run_at`), `running` (claimed, under a lease), and \
             the terminal `succeeded`, `failed` (the dead-letter queue) and `cancelled`.",
            JobState::ALL.map(JobState::as_str),
        )
    );

    schema_of!(
        /// Schema of [`EventKind`], with the values the core knows.
        EventKindSchema as "EventKind" =>
        string_enum(
            "A transition in a job's history.",
            EventKind::ALL.map(EventKind::as_str),
        )
    );

    schema_of!(
        /// Schema of [`DependencyFailure`](tether_core::DependencyFailure).
        DependencyFailureSchema as "DependencyFailure" =>
        string_enum(
            "What a waiting job does when a dependency ends `failed` or `cancelled`: \
             `cancel` (it is cancelled, and so is everything that waits for it) or `run` \
             (it runs once every dependency has ended, whatever the outcome).",
            tether_core::DependencyFailure::ALL.map(tether_core::DependencyFailure::as_str),
        )
    );

    schema_of!(
        /// Schema of [`WorkflowState`](tether_core::WorkflowState).
        WorkflowStateSchema as "WorkflowState" =>
        string_enum(
            "Where a workflow is, derived from its jobs: `running` while any job is \
             unfinished, then `succeeded` if every job succeeded, `failed` if any failed, \
             else `cancelled`.",
            tether_core::WorkflowState::ALL.map(tether_core::WorkflowState::as_str),
        )
    );

    schema_of!(
        /// Schema of [`RetryMode`](tether_core::RetryMode).
        RetryModeSchema as "RetryMode" =>
        string_enum(
            "Which jobs a workflow retry puts back: `failed`, or `failed_and_downstream` \
             (also every finished job of the workflow downstream of them).",
            tether_core::RetryMode::ALL.map(tether_core::RetryMode::as_str),
        )
    );

    schema_of!(
        /// Schema of the names of queues, kinds, tags, tenants and schedules.
        NameSchema as "Name" =>
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_NAME_LEN))
            .pattern(Some("^[A-Za-z0-9._:-]+$"))
            .description(Some(format!(
                "A queue, kind, tag, tenant or schedule name: 1–{MAX_NAME_LEN} characters \
                 of `[A-Za-z0-9._:-]`."
            )))
    );

    schema_of!(
        /// Schema of the error codes (the `code` of [`ErrorDetail`](crate::ErrorDetail)),
        /// made from [`ErrorCode::ALL`] so the document lists exactly the codes the
        /// server knows.
        ErrorCodeSchema as "ErrorCode" => {
            let table: Vec<String> = ErrorCode::ALL
                .iter()
                .map(|code| format!("`{code}` ({})", code.status()))
                .collect();
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(ErrorCode::ALL.iter().map(|code| code.as_str())))
                .description(Some(format!(
                    "A machine-readable error code and the status it comes with: {}.",
                    table.join(", ")
                )))
        }
    );
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use serde_json::{json, Value};
    use tether_core::NewJob;

    use super::*;

    #[test]
    fn requests_refuse_unknown_fields_and_carry_only_set_ones() {
        let bad = json!({"queue": "q", "kind": "k", "bogus": 1});
        assert!(serde_json::from_value::<EnqueueRequest>(bad).is_err());
        let req = EnqueueRequest::from(NewJob::new("q", "k", Value::Null));
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"queue": "q", "kind": "k"})
        );
        // A patch tells "remove the limit" (null) from "keep it" (absent).
        let patch = QueueConfigBody {
            max_running: Some(None),
            ..QueueConfigBody::default()
        };
        let sent = serde_json::to_value(patch).unwrap();
        assert_eq!(sent, json!({"max_running": null}));
        assert_eq!(
            serde_json::from_value::<QueueConfigBody>(sent).unwrap(),
            patch
        );
    }

    #[test]
    fn answers_are_written_with_milliseconds_and_read_leniently() {
        let at: DateTime<Utc> = "2030-01-02T03:04:05.678Z".parse().unwrap();
        let run = ScheduleRun {
            fire_at: at,
            job_id: None,
            outcome: "enqueued".to_owned(),
        };
        let mut sent = serde_json::to_value(&run).unwrap();
        assert_eq!(sent["fire_at"], "2030-01-02T03:04:05.678Z");
        sent["added_later"] = json!(true);
        assert_eq!(serde_json::from_value::<ScheduleRun>(sent).unwrap(), run);
        // Fields an older server lacks take their defaults.
        let old = json!({
            "error": {"code": "teleported"},
        });
        let body: ErrorBody = serde_json::from_value(old).unwrap();
        assert_eq!(body.error.code, "teleported");
        assert_eq!(body.error.message, "");
    }
}
