//! Queues: counts, throughput, pause and resume, settings, removal.

use super::*;

impl HttpClient {
    /// `GET /v1/queues`: every queue of the tenant with its stats.
    pub async fn list_queues(&self) -> Result<Vec<Queue>> {
        let env: QueuesEnvelope = self.get(&["v1", "queues"]).await?;
        Ok(env.queues)
    }

    /// `GET /v1/queues/{queue}`: one queue's stats and settings (any valid
    /// name; an unused queue shows zero counts).
    pub async fn get_queue(&self, queue: &str) -> Result<Queue> {
        let env: QueueEnvelope = self.get(&["v1", "queues", queue]).await?;
        Ok(env.queue)
    }

    /// `POST /v1/queues/{queue}/pause`: the queue hands out no claims
    /// (enqueues are still accepted).
    pub async fn pause(&self, queue: &str) -> Result<Queue> {
        let env: QueueEnvelope = self.post(&["v1", "queues", queue, "pause"], None).await?;
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
        let query: Vec<(&str, String)> = minutes
            .map(|m| ("minutes", m.to_string()))
            .into_iter()
            .collect();
        let req = self.request(&call, true).query(&query);
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// `POST /v1/queues/{queue}/resume`.
    pub async fn resume(&self, queue: &str) -> Result<Queue> {
        let env: QueueEnvelope = self.post(&["v1", "queues", queue, "resume"], None).await?;
        Ok(env.queue)
    }

    /// `PATCH /v1/queues/{queue}`: changes the settings later jobs copy and
    /// the queue's limits; unset fields stay as they are.
    pub async fn configure_queue(&self, queue: &str, patch: &QueueConfigPatch) -> Result<Queue> {
        let mut body = Map::new();
        if let Some(n) = patch.max_attempts {
            body.insert("max_attempts".into(), n.into());
        }
        if let Some(b) = patch.backoff {
            body.insert(
                "backoff".into(),
                json!({ "base_ms": b.base_ms, "cap_ms": b.cap_ms }),
            );
        }
        if let Some(ms) = patch.default_lease_ttl_ms {
            body.insert("default_lease_ttl_ms".into(), ms.into());
        }
        // `Some(None)` is sent as `null`, which removes the limit.
        if let Some(limit) = patch.max_running {
            body.insert("max_running".into(), limit.into());
        }
        if let Some(rate) = patch.rate_limit {
            let rate = rate.map(|r| json!({ "count": r.count, "period_ms": r.period_ms }));
            body.insert("rate_limit".into(), rate.unwrap_or(Value::Null));
        }
        if let Some(limit) = patch.key_max_running {
            body.insert("key_max_running".into(), limit.into());
        }
        if let Some(fair) = patch.fair {
            body.insert("fair".into(), fair.into());
        }
        let call = self.call(Method::PATCH, &["v1", "queues", queue])?;
        let env: QueueEnvelope = self.json(call, Some(&Value::Object(body))).await?;
        Ok(env.queue)
    }

    // ----- schedules --------------------------------------------------------
}
