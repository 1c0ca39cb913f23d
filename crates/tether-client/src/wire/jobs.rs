//! Jobs: the body a new job is sent as, and the builders of the listing's
//! and the history's queries and of bulk replays.

use chrono::{DateTime, Utc};
use tether_api::{BulkReplayBody, EnqueueRequest, EventsQuery, ListQuery};
use tether_core::{JobState, NewJob};
use uuid::Uuid;

use super::sent_time;

/// The body of `POST /v1/jobs` (and of each entry of a batch): only the
/// fields the job sets, its times cut to what the server keeps.
pub(crate) fn enqueue_request(job: &NewJob) -> EnqueueRequest {
    let mut req = EnqueueRequest::from(job.clone());
    req.run_at = req.run_at.map(sent_time);
    req.expires_at = req.expires_at.map(sent_time);
    req
}

/// One page of `GET /v1/jobs/{id}/events` (oldest first). Unset fields are
/// not sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Page size, 1–1000 (server default 100).
    pub limit: Option<u32>,
    /// Continue after a previous page (its [`EventPage::next_cursor`](crate::EventPage)).
    pub cursor: Option<String>,
}

impl EventQuery {
    /// The query string.
    pub(crate) fn query(&self) -> EventsQuery {
        EventsQuery {
            limit: self.limit.map(|l| l.to_string()),
            cursor: self.cursor.clone(),
        }
    }
}

/// Filters and page of `GET /v1/jobs` (newest first). Unset fields are not
/// sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobQuery {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this state (`failed` = the dead-letter queue).
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only jobs carrying this tag.
    pub tag: Option<String>,
    /// Page size, 1–500 (server default 50).
    pub limit: Option<u32>,
    /// Continue after a previous page (its [`JobPage::next_cursor`](crate::JobPage)).
    pub cursor: Option<String>,
    /// Only jobs whose id starts with these hex digits (dashes ignored).
    pub id_prefix: Option<String>,
    /// Only jobs created at or after this instant.
    pub created_after: Option<DateTime<Utc>>,
    /// Only jobs created before this instant.
    pub created_before: Option<DateTime<Utc>>,
    /// Only the jobs that wait directly for this job.
    pub depends_on: Option<Uuid>,
    /// Only the jobs of this workflow.
    pub workflow_id: Option<Uuid>,
}

impl JobQuery {
    /// Every job, first page, default size.
    pub fn new() -> Self {
        JobQuery::default()
    }

    /// Only this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only this state.
    pub fn state(mut self, state: JobState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs carrying this tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// Page size, 1–500.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Continue after a previous page.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// Only jobs whose id starts with `prefix` (hex digits, dashes ignored).
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = Some(prefix.into());
        self
    }

    /// Only the jobs that wait directly for job `id`.
    pub fn depends_on(mut self, id: Uuid) -> Self {
        self.depends_on = Some(id);
        self
    }

    /// Only the jobs of workflow `id`.
    pub fn workflow_id(mut self, id: Uuid) -> Self {
        self.workflow_id = Some(id);
        self
    }

    /// The query string.
    pub(crate) fn query(&self) -> ListQuery {
        ListQuery {
            queue: self.queue.clone(),
            state: self.state.map(|s| s.as_str().to_owned()),
            kind: self.kind.clone(),
            tag: self.tag.clone(),
            limit: self.limit.map(|l| l.to_string()),
            cursor: self.cursor.clone(),
            id_prefix: self.id_prefix.clone(),
            created_after: self.created_after.as_ref().map(tether_api::time::format),
            created_before: self.created_before.as_ref().map(tether_api::time::format),
            depends_on: self.depends_on.map(|id| id.to_string()),
            workflow_id: self.workflow_id.map(|id| id.to_string()),
        }
    }
}

impl From<tether_core::JobFilter> for JobQuery {
    fn from(f: tether_core::JobFilter) -> Self {
        JobQuery {
            queue: f.queue,
            state: f.state,
            kind: f.kind,
            tag: f.tag,
            limit: f.limit,
            cursor: f.cursor.map(|c| c.to_string()),
            id_prefix: f.id_prefix.map(|p| p.as_str().to_owned()),
            created_after: f.created_after,
            created_before: f.created_before,
            depends_on: f.depends_on,
            workflow_id: f.workflow_id,
        }
    }
}

/// Selects the jobs of a bulk replay (`POST /v1/queues/{queue}/replay`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkReplay {
    /// `failed` (the server's default) or `cancelled`.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// At most this many jobs (the first ones by id after `cursor`).
    pub limit: Option<u32>,
    /// Continue after a previous round (its [`BulkReplayed::next_cursor`](crate::BulkReplayed)).
    pub cursor: Option<String>,
    /// The replayed jobs' new `expires_at`; `None` clears it.
    pub expires_at: Option<DateTime<Utc>>,
}

impl BulkReplay {
    /// The request's body: only what is set. A cursor that is not one a
    /// server answered is refused here, as the server would refuse it.
    pub(crate) fn body(&self) -> crate::Result<BulkReplayBody> {
        let cursor = self
            .cursor
            .as_deref()
            .map(|c| c.parse())
            .transpose()
            .map_err(|_| crate::Error::invalid("cursor", "not a cursor from a previous round"))?;
        Ok(BulkReplayBody {
            state: self.state,
            kind: self.kind.clone(),
            limit: self.limit,
            cursor,
            expires_at: self.expires_at.map(sent_time),
        })
    }
}
