//! Workflows: jobs that wait for other jobs, and what a job reads of its
//! dependencies.

use super::*;

impl HttpClient {
    /// `GET /v1/jobs/{id}/dependencies`: the jobs job `id` waits (or
    /// waited) for, in the order it named them, with their states and
    /// results; a dependency removed by retention is left out. The jobs
    /// that wait for `id` are [`JobQuery::depends_on`] of
    /// [`HttpClient::list_jobs`].
    pub async fn dependencies(&self, id: Uuid) -> Result<Vec<DependencyJob>> {
        let id = id.to_string();
        let env: DependenciesResponse = self.get(&["v1", "jobs", &id, "dependencies"]).await?;
        Ok(env.jobs)
    }
}
