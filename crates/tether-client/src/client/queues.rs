//! Queues: counts, throughput, pause and resume, settings, removal.

use super::*;

impl HttpClient {
    /// `GET /v1/queues`: every queue of the tenant with its stats.
    pub async fn list_queues(&self) -> Result<Vec<Queue>> {
        let env: QueueListResponse = self.get(&["v1", "queues"]).await?;
        Ok(env.queues)
    }

    /// `GET /v1/queues/{queue}`: one queue's stats and settings (any valid
    /// name; an unused queue shows zero counts).
    pub async fn get_queue(&self, queue: &str) -> Result<Queue> {
        let env: QueueResponse = self.get(&["v1", "queues", queue]).await?;
        Ok(env.queue)
    }

    /// `POST /v1/queues/{queue}/pause`: the queue hands out no claims
    /// (enqueues are still accepted).
    pub async fn pause(&self, queue: &str) -> Result<Queue> {
        let env: QueueResponse = self.post(&["v1", "queues", queue, "pause"], None).await?;
        Ok(env.queue)
    }

    /// `DELETE /v1/queues/{queue}`: removes an empty queue's row (its
    /// pause flag and settings); `invalid_state` while it holds jobs.
    pub async fn delete_queue(&self, queue: &str) -> Result<()> {
        let call = self.call(Method::DELETE, &["v1", "queues", queue])?;
        let req = self.request(&call, true);
        self.send(req).await?;
        Ok(())
    }

    /// `GET /v1/queues/{queue}/throughput?minutes=N`: per-minute outcome
    /// counts of the last `minutes` minutes (1–1440; `None`: the server's
    /// default, 60) and the wait and run percentiles of the jobs that
    /// finished in them.
    pub async fn throughput(&self, queue: &str, minutes: Option<u32>) -> Result<Throughput> {
        let call = self.call(Method::GET, &["v1", "queues", queue, "throughput"])?;
        let query = ThroughputQuery {
            minutes: minutes.map(|m| m.to_string()),
        };
        let req = self.request(&call, true).query(&query);
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// `POST /v1/queues/{queue}/resume`.
    pub async fn resume(&self, queue: &str) -> Result<Queue> {
        let env: QueueResponse = self.post(&["v1", "queues", queue, "resume"], None).await?;
        Ok(env.queue)
    }

    /// `PATCH /v1/queues/{queue}`: changes the settings later jobs copy and
    /// the queue's limits; unset fields stay as they are.
    pub async fn configure_queue(&self, queue: &str, patch: &QueueConfigPatch) -> Result<Queue> {
        let call = self.call(Method::PATCH, &["v1", "queues", queue])?;
        // `Some(None)` is sent as `null`, which removes the limit.
        let config = QueueConfigBody::from(*patch);
        let env: QueueResponse = self.json(call, Some(&body(&config))).await?;
        Ok(env.queue)
    }

    // ----- schedules --------------------------------------------------------
}
