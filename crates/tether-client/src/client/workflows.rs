//! Workflows: jobs that wait for other jobs, what a job reads of its
//! dependencies, and workflows (named graphs of jobs read, cancelled and
//! retried whole).

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

    /// `POST /v1/jobs/batch` with `workflow`: enqueues 1–1000 jobs
    /// all-or-nothing as one new workflow. Their dependencies may name
    /// earlier entries ([`NewJob::after_entry`]) or existing jobs; the jobs
    /// must not name a workflow of their own. A second call with the same
    /// [`NewWorkflow::idempotency_key`] answers the existing workflow and its
    /// jobs ([`WorkflowEnqueued::created`] `false`) and writes nothing.
    ///
    /// Jobs join a workflow later (a handler fanning out at run time) with
    /// [`NewJob::workflow`] on an ordinary enqueue, while it is running.
    ///
    /// ```no_run
    /// use serde_json::{json, Value};
    /// use tether_client::{HttpClient, NewJob, NewWorkflow, RetryMode};
    ///
    /// # async fn demo(client: HttpClient) -> tether_client::Result<()> {
    /// let post = NewWorkflow {
    ///     name: "publish-post".into(),
    ///     idempotency_key: Some("post-7".into()),
    /// };
    /// let jobs = [
    ///     NewJob::new("media", "fetch", json!({"post": 7})),
    ///     NewJob::new("media", "resize", Value::Null).after_entry(0),
    ///     NewJob::new("media", "thumb", Value::Null).after_entry(0),
    ///     NewJob::new("media", "publish", Value::Null).after_entry(1).after_entry(2),
    /// ];
    /// let made = client.enqueue_workflow(&post, &jobs).await?;
    /// let graph = client.get_workflow(made.workflow_id).await?;
    /// println!("{} is {}", graph.workflow.name, graph.workflow.state);
    /// // Later: put the failed jobs back, and what their failure cancelled.
    /// client
    ///     .retry_workflow(made.workflow_id, RetryMode::FailedAndDownstream)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_workflow(
        &self,
        workflow: &NewWorkflow,
        jobs: &[NewJob],
    ) -> Result<WorkflowEnqueued> {
        let jobs = jobs.iter().map(wire::enqueue_request).collect();
        let env: BatchEnqueueResponse = self
            .post(
                &["v1", "jobs", "batch"],
                Some(&body(&BatchEnqueueRequest {
                    jobs,
                    workflow: Some(workflow.clone().into()),
                })),
            )
            .await?;
        let Some(workflow_id) = env.workflow_id else {
            return Err(Error::Decode {
                route: "POST /v1/jobs/batch".to_owned(),
                source: <serde_json::Error as serde::de::Error>::missing_field("workflow_id"),
            });
        };
        Ok(WorkflowEnqueued {
            workflow_id,
            created: env.results.iter().any(|r| r.created),
            jobs: env.results,
        })
    }

    /// `GET /v1/workflows/{id}`: the workflow's fields and its whole graph
    /// (every job, those added at run time included, oldest first, with
    /// what each waits for). Its jobs' other fields are
    /// [`JobQuery::workflow_id`] of [`HttpClient::list_jobs`].
    pub async fn get_workflow(&self, id: Uuid) -> Result<WorkflowGraph> {
        let id = id.to_string();
        self.get(&["v1", "workflows", &id]).await
    }

    /// `GET /v1/workflows?...`: one page of workflows, newest first. Follow
    /// [`WorkflowPage::next_cursor`] for the next one (with a state filter,
    /// a page may be short and still have a next one).
    pub async fn list_workflows(&self, query: &WorkflowQuery) -> Result<WorkflowPage> {
        let call = self.call(Method::GET, &["v1", "workflows"])?;
        let req = self.request(&call, true).query(&query.query());
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// `POST /v1/workflows/{id}/cancel`: cancels every unfinished job of the
    /// workflow (waiting and queued ones at once, running ones are asked to
    /// stop); answers how many of each. A finished workflow changes nothing.
    pub async fn cancel_workflow(&self, id: Uuid) -> Result<WorkflowCancelled> {
        let id = id.to_string();
        self.post(&["v1", "workflows", &id, "cancel"], None).await
    }

    /// `POST /v1/workflows/{id}/retry`: puts the workflow's failed jobs back
    /// ([`RetryMode::Failed`]), or those and every finished job downstream
    /// of them ([`RetryMode::FailedAndDownstream`]), each with a fresh
    /// attempt budget; answers how many jobs went back. A job whose unique
    /// key another active job holds makes the whole retry a 409
    /// `invalid_state`, changing nothing.
    pub async fn retry_workflow(&self, id: Uuid, mode: RetryMode) -> Result<u64> {
        let id = id.to_string();
        let env: WorkflowRetryResponse = self
            .post(
                &["v1", "workflows", &id, "retry"],
                Some(&body(&WorkflowRetryBody { mode })),
            )
            .await?;
        Ok(env.replayed)
    }
}
