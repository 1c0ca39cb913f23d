//! `feed`: the live stream of history events (`GET /v1/events`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_core::JobState;
use uuid::Uuid;

use crate::time;
#[cfg(feature = "openapi")]
use crate::{EventKindSchema, JobStateSchema};

/// Query of `GET /v1/events`. Every filter narrows the stream; `event` may
/// repeat (or list names separated by commas).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct FeedQuery {
    /// Only the events of jobs of this queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Only this job's events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<Uuid>,
    /// Only the events of this workflow's jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<Uuid>,
    /// Only these events.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<EventKindSchema>))]
    pub event: Option<String>,
    /// Start right after this cursor (an event's `id`); without it (and
    /// without `Last-Event-ID`) the stream starts with what is committed
    /// from now on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// The `data` of one message of `GET /v1/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FeedEventData {
    /// Where a client stands once it has this event (also the message's
    /// `id`; opaque).
    pub cursor: String,
    /// The job.
    pub job_id: Uuid,
    /// The job's workflow, if any.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub workflow_id: Option<Uuid>,
    /// The job's queue.
    pub queue: String,
    /// The job's kind.
    pub kind: String,
    /// What happened (also the message's `event`).
    #[cfg_attr(feature = "openapi", schema(value_type = EventKindSchema))]
    pub event: String,
    /// When it happened.
    #[serde(serialize_with = "time::ser")]
    pub at: DateTime<Utc>,
    /// The job's attempt after the event.
    pub attempt: i32,
    /// The worker involved, if any.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub worker_id: Option<String>,
    /// Context, e.g. the error message.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub detail: Option<String>,
    /// The job's state right after the event (for `lease_lost`, and for
    /// `enqueued` and `replayed` of a job with dependencies, which do not
    /// say, its state when read).
    #[cfg_attr(feature = "openapi", schema(value_type = JobStateSchema))]
    pub state: JobState,
}

impl From<&tether_core::FeedEvent> for FeedEventData {
    fn from(e: &tether_core::FeedEvent) -> Self {
        FeedEventData {
            cursor: e.cursor.to_string(),
            job_id: e.job_id,
            workflow_id: e.workflow_id,
            queue: e.queue.clone(),
            kind: e.kind.clone(),
            event: e.event.event.as_str().to_owned(),
            at: e.event.at,
            attempt: e.event.attempt,
            worker_id: e.event.worker_id.clone(),
            detail: e.event.detail.clone(),
            state: e.state,
        }
    }
}
