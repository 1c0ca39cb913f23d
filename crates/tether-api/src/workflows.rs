//! `workflows`: jobs that wait for other jobs, and what a handler reads of
//! its dependencies.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::JobState;
use uuid::Uuid;

use crate::time;
#[cfg(feature = "openapi")]
use crate::{JobStateSchema, NameSchema};

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
