//! Jobs that wait for other jobs, and workflows: named graphs of jobs
//! enqueued as one batch, read, cancelled and retried whole.

use super::*;

impl Engine {
    /// The jobs job `id` waits (or waited) for, in the order it names
    /// them, with their states and results (see [`Store::dependencies`]).
    pub async fn dependencies(&self, tenant: &str, id: Uuid) -> Result<Vec<DependencyJob>> {
        validate::name("tenant", tenant)?;
        self.store.dependencies(tenant, id).await
    }

    /// Enqueues `jobs` (1–1000, all or nothing) as a new workflow; their
    /// `depends_on` may name earlier entries, so the whole graph is written
    /// at once. With an idempotency key the tenant already used, answers
    /// that workflow and its jobs and writes nothing.
    pub async fn enqueue_workflow(
        &self,
        tenant: &str,
        workflow: &NewWorkflow,
        jobs: &[NewJob],
    ) -> Result<WorkflowEnqueued> {
        validate::name("tenant", tenant)?;
        validate::new_workflow(workflow, jobs, &self.limits)?;
        let id = Uuid::now_v7();
        let jobs: Vec<NewJob> = jobs.iter().cloned().map(|j| j.workflow(id)).collect();
        let out = self
            .store
            .enqueue_workflow(
                tenant,
                id,
                workflow,
                &NewJobRef::mint(&jobs),
                self.limits.max_queues_per_tenant,
            )
            .await?;
        if out.created {
            counters::enqueued(tenant, &out.jobs);
        }
        Ok(out)
    }

    /// One workflow with its whole graph.
    pub async fn get_workflow(&self, tenant: &str, id: Uuid) -> Result<WorkflowGraph> {
        validate::name("tenant", tenant)?;
        self.store.get_workflow(tenant, id).await
    }

    /// A page of workflows, newest first.
    pub async fn list_workflows(
        &self,
        tenant: &str,
        filter: &WorkflowFilter,
    ) -> Result<WorkflowPage> {
        validate::name("tenant", tenant)?;
        validate::workflow_filter(filter)?;
        self.store.list_workflows(tenant, filter).await
    }

    /// Cancels every unfinished job of a workflow.
    pub async fn cancel_workflow(&self, tenant: &str, id: Uuid) -> Result<WorkflowCancelled> {
        validate::name("tenant", tenant)?;
        self.store.cancel_workflow(tenant, id).await
    }

    /// Replays a workflow's failed jobs (and, with
    /// [`RetryMode::FailedAndDownstream`], what their failure cancelled or
    /// ran anyway); answers how many jobs were put back.
    pub async fn retry_workflow(&self, tenant: &str, id: Uuid, mode: RetryMode) -> Result<u64> {
        validate::name("tenant", tenant)?;
        self.store.retry_workflow(tenant, id, mode).await
    }
}
