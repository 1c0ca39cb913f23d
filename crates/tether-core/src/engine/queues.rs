//! Queues: counts, throughput, pause and resume, settings, removal.

use super::*;

impl Engine {
    /// One queue's stats.
    pub async fn queue_stats(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store.queue_stats(tenant, queue).await
    }

    /// Every known queue's stats (an aggregate read: in the tenant's turn).
    pub async fn list_queues(&self, tenant: &str) -> Result<Vec<QueueStats>> {
        validate::name("tenant", tenant)?;
        let _turn = self.aggregates.take(tenant.to_owned()).await;
        self.store.list_queues(tenant).await
    }

    /// Removes an empty queue: its row, pause flag and settings go; a queue
    /// holding any job is `Conflict`, one without a row `NotFound`.
    pub async fn delete_queue(&self, tenant: &str, queue: &str) -> Result<()> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store.delete_queue(tenant, queue).await
    }

    /// A queue's last `minutes` minutes (see [`QueueThroughput`]); an
    /// aggregate read, run in the tenant's turn.
    pub async fn throughput(
        &self,
        tenant: &str,
        queue: &str,
        minutes: u32,
    ) -> Result<QueueThroughput> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        if !THROUGHPUT_MINUTES.contains(&minutes) {
            return Err(Error::invalid(
                "minutes",
                format!(
                    "must be between {} and {}, got {minutes}",
                    THROUGHPUT_MINUTES.start(),
                    THROUGHPUT_MINUTES.end()
                ),
            ));
        }
        let _turn = self.aggregates.take(tenant.to_owned()).await;
        self.store.throughput(tenant, queue, minutes).await
    }

    /// Pauses a queue: it accepts enqueues and hands out no claims.
    pub async fn pause(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store
            .set_paused(tenant, queue, true, self.limits.max_queues_per_tenant)
            .await
    }

    /// Resumes a paused queue.
    pub async fn resume(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store
            .set_paused(tenant, queue, false, self.limits.max_queues_per_tenant)
            .await
    }

    /// Changes a queue's settings for jobs enqueued from now on.
    pub async fn configure_queue(
        &self,
        tenant: &str,
        queue: &str,
        patch: &QueueConfigPatch,
    ) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        validate::queue_config(patch)?;
        self.store
            .configure_queue(tenant, queue, patch, self.limits.max_queues_per_tenant)
            .await
    }
}
