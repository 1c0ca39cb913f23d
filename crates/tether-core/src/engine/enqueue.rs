//! Enqueues: one job (grouped into shared commits) or a batch.

use super::*;

impl Engine {
    /// Enqueues one job. Jobs enqueued one per call while others are
    /// being written share their commit (group commit, see
    /// [`Engine::group_commit_stats`]); each still gets its own answer,
    /// and only once its job is durable.
    pub async fn enqueue(&self, tenant: &str, job: NewJob) -> Result<Enqueued> {
        validate::name("tenant", tenant)?;
        // Validated on its own so that errors name `queue`, not `jobs[0].queue`.
        validate::new_job("", &job, &self.limits)?;
        if !job.depends_on.is_empty() || job.workflow_id.is_some() {
            // Alone: an unknown dependency or workflow fails this job, not
            // a group.
            let out = self
                .store_enqueue(tenant, std::slice::from_ref(&job))
                .await
                .map_err(Error::of_single_job)?;
            return Ok(out.into_iter().next().expect("one answer per job"));
        }
        let out = self
            .group_commit
            .enqueue(tenant, job, self.limits.max_queues_per_tenant)
            .await?;
        counters::enqueued(tenant, std::slice::from_ref(&out));
        Ok(out)
    }

    /// How many group commits single enqueues made in this engine, and
    /// how many enqueues they carried.
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        self.group_commit.stats()
    }

    /// Enqueues 1–1000 jobs all-or-nothing; answers in request order.
    pub async fn enqueue_many(&self, tenant: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        validate::name("tenant", tenant)?;
        validate::new_jobs(jobs, &self.limits)?;
        self.store_enqueue(tenant, jobs).await
    }

    /// Hands validated jobs to the store and counts the ones created.
    async fn store_enqueue(&self, tenant: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let out = self
            .store
            .enqueue(
                tenant,
                &NewJobRef::mint(jobs),
                self.limits.max_queues_per_tenant,
            )
            .await?;
        counters::enqueued(tenant, &out);
        Ok(out)
    }
}
