//! `workflows`: jobs that wait for other jobs, what a handler reads of its
//! dependencies, and workflows (named graphs read, cancelled and retried
//! whole).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::{JobState, RetryMode, WorkflowState};
use uuid::Uuid;

use crate::{time, StateCounts};
#[cfg(feature = "openapi")]
use crate::{JobStateSchema, NameSchema, RetryModeSchema, WorkflowStateSchema};

/// One dependency of a job, as its handler reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DependencyJob {
    /// The dependency's id.
    pub id: Uuid,
    /// Its handler name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub kind: String,
    /// Where it is now.
    #[cfg_attr(feature = "openapi", schema(value_type = JobStateSchema))]
    pub state: JobState,
    /// What its handler returned, once it succeeded.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub result: Option<Value>,
    /// The last 2 000 characters of its last error.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub last_error: Option<String>,
    /// When it ended.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<tether_core::DependencyJob> for DependencyJob {
    fn from(d: tether_core::DependencyJob) -> Self {
        DependencyJob {
            id: d.id,
            kind: d.kind,
            state: d.state,
            result: d.result,
            last_error: d.last_error,
            finished_at: d.finished_at,
        }
    }
}

/// The answer of `GET /v1/jobs/{id}/dependencies`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DependenciesResponse {
    /// The jobs it waits (or waited) for, in the order it names them;
    /// one removed by retention is left out.
    pub jobs: Vec<DependencyJob>,
}

/// `workflow` of a batch: the batch's jobs form one new workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewWorkflowBody {
    /// What it is.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
    /// A second batch with this key answers the existing workflow and its
    /// jobs, and writes nothing (1–255 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl From<NewWorkflowBody> for tether_core::NewWorkflow {
    fn from(w: NewWorkflowBody) -> Self {
        tether_core::NewWorkflow {
            name: w.name,
            idempotency_key: w.idempotency_key,
        }
    }
}

impl From<tether_core::NewWorkflow> for NewWorkflowBody {
    fn from(w: tether_core::NewWorkflow) -> Self {
        NewWorkflowBody {
            name: w.name,
            idempotency_key: w.idempotency_key,
        }
    }
}

/// A workflow as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Workflow {
    /// Server-made, time-ordered (UUID v7).
    pub id: Uuid,
    /// Its name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
    /// The key it was created with.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub idempotency_key: Option<String>,
    /// `running` while any job is unfinished, then `succeeded` if every job
    /// succeeded, `failed` if any failed, else `cancelled`.
    #[cfg_attr(feature = "openapi", schema(value_type = WorkflowStateSchema))]
    pub state: WorkflowState,
    /// When it was created.
    #[serde(serialize_with = "time::ser")]
    pub created_at: DateTime<Utc>,
    /// When its last job finished, once every job has.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub finished_at: Option<DateTime<Utc>>,
    /// Its jobs per state.
    pub counts: StateCounts,
}

impl From<tether_core::Workflow> for Workflow {
    fn from(w: tether_core::Workflow) -> Self {
        Workflow {
            id: w.id,
            name: w.name,
            idempotency_key: w.idempotency_key,
            state: w.state,
            created_at: w.created_at,
            finished_at: w.finished_at,
            counts: w.counts.into(),
        }
    }
}

/// One job of a workflow's graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowJob {
    /// The job's id.
    pub id: Uuid,
    /// Its handler name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub kind: String,
    /// Where it is.
    #[cfg_attr(feature = "openapi", schema(value_type = JobStateSchema))]
    pub state: JobState,
    /// What it waits (or waited) for.
    pub depends_on: Vec<Uuid>,
}

impl From<tether_core::WorkflowJob> for WorkflowJob {
    fn from(j: tether_core::WorkflowJob) -> Self {
        WorkflowJob {
            id: j.id,
            kind: j.kind,
            state: j.state,
            depends_on: j.depends_on,
        }
    }
}

/// `GET /v1/workflows/{id}`: the workflow's fields and its whole graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowResponse {
    /// The workflow.
    #[serde(flatten)]
    pub workflow: Workflow,
    /// Its jobs (at most 10 000), oldest first, with their edges.
    pub jobs: Vec<WorkflowJob>,
}

impl From<tether_core::WorkflowGraph> for WorkflowResponse {
    fn from(g: tether_core::WorkflowGraph) -> Self {
        WorkflowResponse {
            workflow: g.workflow.into(),
            jobs: g.jobs.into_iter().map(Into::into).collect(),
        }
    }
}

/// One page of `GET /v1/workflows`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowListResponse {
    /// The workflows, newest first.
    pub workflows: Vec<Workflow>,
    /// Pass as `cursor` for the next page; `null` at the end. With a
    /// `state` filter a page may hold fewer than `limit` and still have a
    /// next one.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub next_cursor: Option<String>,
}

/// `GET /v1/workflows` query. Empty parameters are unset; unknown ones are 400.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct WorkflowListQuery {
    /// Only workflows in this state.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<WorkflowStateSchema>))]
    pub state: Option<String>,
    /// Only workflows of this name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<NameSchema>))]
    pub name: Option<String>,
    /// Page size, 1–500 (default 50).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page (opaque).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// `POST /v1/workflows/{id}/cancel`: what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowCancelResponse {
    /// Jobs cancelled at once (waiting or queued).
    pub cancelled: u64,
    /// Running jobs asked to stop.
    pub cancel_requested: u64,
}

/// `POST /v1/workflows/{id}/retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkflowRetryBody {
    /// `failed`: the failed jobs; `failed_and_downstream`: also every
    /// finished job of the workflow downstream of them.
    #[cfg_attr(feature = "openapi", schema(value_type = RetryModeSchema))]
    pub mode: RetryMode,
}

/// `POST /v1/workflows/{id}/retry`: how many jobs went back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowRetryResponse {
    /// Jobs put back (`queued`, or `waiting` for their dependencies).
    pub replayed: u64,
}
