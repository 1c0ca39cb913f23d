//! Workflows: the builder of the listing's query, and what a new
//! workflow's batch answered.

use tether_api::{EnqueueResponse, WorkflowListQuery};
use tether_core::WorkflowState;
use uuid::Uuid;

/// Filters and page of `GET /v1/workflows` (newest first). Unset fields are
/// not sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkflowQuery {
    /// Only workflows in this state.
    pub state: Option<WorkflowState>,
    /// Only workflows of this name.
    pub name: Option<String>,
    /// Page size, 1–500 (server default 50).
    pub limit: Option<u32>,
    /// Continue after a previous page (its
    /// [`WorkflowPage::next_cursor`](crate::WorkflowPage)).
    pub cursor: Option<String>,
}

impl WorkflowQuery {
    /// Every workflow, first page, default size.
    pub fn new() -> Self {
        WorkflowQuery::default()
    }

    /// Only workflows in this state. A state is derived from the jobs when
    /// read, so a filtered page may hold fewer than `limit` workflows and
    /// still have a next one.
    pub fn state(mut self, state: WorkflowState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only workflows of this name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
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

    /// The query string.
    pub(crate) fn query(&self) -> WorkflowListQuery {
        WorkflowListQuery {
            state: self.state.map(|s| s.as_str().to_owned()),
            name: self.name.clone(),
            limit: self.limit.map(|l| l.to_string()),
            cursor: self.cursor.clone(),
        }
    }
}

/// What [`HttpClient::enqueue_workflow`](crate::HttpClient::enqueue_workflow)
/// answered.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowEnqueued {
    /// The workflow the batch made, or the one its idempotency key led to.
    pub workflow_id: Uuid,
    /// Its jobs: the batch's, in request order; or, when the key led to an
    /// existing workflow, that workflow's jobs, oldest first.
    pub jobs: Vec<EnqueueResponse>,
    /// False when an existing workflow was answered (its idempotency key
    /// was used before) and nothing was written: then no job reads
    /// `created`.
    pub created: bool,
}
