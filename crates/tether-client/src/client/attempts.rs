//! The worker's side: claims (carrying reports), heartbeats,
//! completions, failures, snoozes; and the workers holding jobs.

use super::*;

impl HttpClient {
    /// `POST /v1/queues/{queue}/claim`: claims up to `limit` ready jobs. With
    /// `wait_ms`, an empty queue holds the request until a job becomes ready
    /// or the wait ends (then the answer is empty); this request's timeout
    /// is extended by the wait.
    pub async fn claim(&self, queue: &str, opts: &ClaimOptions) -> Result<Vec<ClaimedJob>> {
        let claimed = self
            .report_and_claim(queue, opts, &CarriedReports::default())
            .await?;
        Ok(claimed.jobs)
    }

    /// `POST /v1/queues/{queue}/claim` carrying the last batch's reports
    /// (completions, then failures; at most 1 000 together): the server
    /// applies them in the claim's transaction and answers each, as
    /// [`HttpClient::complete_batch`] does, beside the claimed jobs. A refused
    /// report never fails the claim. With `wait_ms`, the reports are applied
    /// at once but answered with the claim, after its wait.
    pub async fn report_and_claim(
        &self,
        queue: &str,
        opts: &ClaimOptions,
        reports: &CarriedReports,
    ) -> Result<Claimed> {
        let call = self.call(Method::POST, &["v1", "queues", queue, "claim"])?;
        let mut body = Map::new();
        body.insert("worker_id".into(), opts.worker_id.clone().into());
        if let Some(n) = opts.limit {
            body.insert("limit".into(), n.into());
        }
        if let Some(ms) = opts.lease_ttl_ms {
            body.insert("lease_ttl_ms".into(), ms.into());
        }
        let wait = opts.wait_ms.unwrap_or(0).max(0);
        if let Some(ms) = opts.wait_ms {
            body.insert("wait_ms".into(), ms.into());
        }
        if !reports.complete.is_empty() {
            let items = reports.complete.iter().map(completion_body).collect();
            body.insert("complete".into(), Value::Array(items));
        }
        if !reports.fail.is_empty() {
            let items = reports.fail.iter().map(|f| {
                let mut v = failure_body(f.lease_token, &f.failure);
                v["id"] = json!(f.id);
                v
            });
            body.insert("fail".into(), Value::Array(items.collect()));
        }
        let req = self
            .request(&call, true)
            .timeout(self.timeout + Duration::from_millis(wait as u64))
            .json(&Value::Object(body));
        let bytes = self.send(req).await?;
        let env: JobsEnvelope = decode(&call, &bytes)?;
        Ok(Claimed {
            jobs: env.jobs,
            reports: env.reports.into_iter().map(BatchItem::into_unit).collect(),
        })
    }

    /// `POST /v1/jobs/{id}/heartbeat`: extends the lease to now +
    /// `lease_ttl_ms` (or + the TTL given at claim) and stores the progress;
    /// the answer says whether a cancel was requested.
    pub async fn heartbeat(&self, hb: &Heartbeat) -> Result<HeartbeatAck> {
        let id = hb.id.to_string();
        self.post(
            &["v1", "jobs", &id, "heartbeat"],
            Some(&heartbeat_body(hb, false)),
        )
        .await
    }

    /// `POST /v1/jobs/heartbeat`: heartbeats 1–1000 jobs in one round trip
    /// (the batch route of `docs/http.md`); one answer per item, in order.
    pub async fn heartbeat_batch(
        &self,
        items: &[Heartbeat],
    ) -> Result<Vec<ItemResult<HeartbeatAck>>> {
        let items: Vec<Value> = items.iter().map(|h| heartbeat_body(h, true)).collect();
        let env: ResultsEnvelope<BatchItem> = self
            .post(
                &["v1", "jobs", "heartbeat"],
                Some(&json!({ "items": items })),
            )
            .await?;
        Ok(env
            .results
            .into_iter()
            .map(|item| {
                let result = match (item.ok, item.lease_expires_at) {
                    (true, Some(lease_expires_at)) => Ok(HeartbeatAck {
                        lease_expires_at,
                        cancel_requested: item.cancel_requested.unwrap_or(false),
                    }),
                    _ => Err(item_error(item.error)),
                };
                ItemResult {
                    id: item.id,
                    result,
                }
            })
            .collect())
    }

    /// `POST /v1/jobs/{id}/complete`: the job succeeded with `result`.
    pub async fn complete(
        &self,
        id: Uuid,
        lease_token: LeaseToken,
        result: Option<Value>,
    ) -> Result<Job> {
        let mut body = json!({ "lease_token": lease_token });
        if let Some(r) = result {
            body["result"] = r;
        }
        let id = id.to_string();
        let env: JobEnvelope = self
            .post(&["v1", "jobs", &id, "complete"], Some(&body))
            .await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/complete`: completes 1–1000 jobs; one answer per item,
    /// in order.
    pub async fn complete_batch(&self, items: &[Completion]) -> Result<Vec<ItemResult<()>>> {
        let items: Vec<Value> = items.iter().map(completion_body).collect();
        let env: ResultsEnvelope<BatchItem> = self
            .post(
                &["v1", "jobs", "complete"],
                Some(&json!({ "items": items })),
            )
            .await?;
        Ok(env.results.into_iter().map(BatchItem::into_unit).collect())
    }

    /// `POST /v1/jobs/{id}/fail`: the attempt failed. The job is queued
    /// again (after its jittered backoff, or exactly `retry_after_ms`), or
    /// `failed` when fatal or out of attempts, or `cancelled` when
    /// `failure.cancelled` acknowledges a cancel request.
    pub async fn fail(&self, id: Uuid, lease_token: LeaseToken, failure: &Failure) -> Result<Job> {
        let body = failure_body(lease_token, failure);
        let id = id.to_string();
        let env: JobEnvelope = self.post(&["v1", "jobs", &id, "fail"], Some(&body)).await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/{id}/snooze`: "not now" — back to `queued` at now +
    /// `delay_ms` with the attempt given back.
    pub async fn snooze(&self, id: Uuid, lease_token: LeaseToken, delay_ms: i64) -> Result<Job> {
        let body = json!({ "lease_token": lease_token, "delay_ms": delay_ms });
        let id = id.to_string();
        let env: JobEnvelope = self
            .post(&["v1", "jobs", &id, "snooze"], Some(&body))
            .await?;
        Ok(env.job)
    }

    // ----- managing ---------------------------------------------------------

    /// `GET /v1/workers`: who holds the tenant's running jobs now.
    pub async fn list_workers(&self) -> Result<Vec<WorkerInfo>> {
        let env: WorkersEnvelope = self.get(&["v1", "workers"]).await?;
        Ok(env.workers)
    }
}

/// The wire form of one heartbeat (`with_id` for the batch route).
fn heartbeat_body(hb: &Heartbeat, with_id: bool) -> Value {
    let mut v = json!({ "lease_token": hb.lease_token });
    if with_id {
        v["id"] = hb.id.to_string().into();
    }
    if let Some(ms) = hb.lease_ttl_ms {
        v["lease_ttl_ms"] = ms.into();
    }
    if let Some(p) = &hb.progress {
        v["progress"] = p.clone();
    }
    v
}

/// One completion as `POST /v1/jobs/complete` and a claim's `complete` take it.
fn completion_body(c: &Completion) -> Value {
    let mut v = json!({ "id": c.id, "lease_token": c.lease_token });
    if let Some(r) = &c.result {
        v["result"] = r.clone();
    }
    v
}

/// A failure as `POST /v1/jobs/{id}/fail` takes it (a claim's `fail` items
/// add the `id`).
fn failure_body(lease_token: LeaseToken, failure: &Failure) -> Value {
    let mut body = json!({ "lease_token": lease_token, "error": failure.error });
    if let Some(ms) = failure.retry_after_ms {
        body["retry_after_ms"] = ms.into();
    }
    if failure.fatal {
        body["fatal"] = true.into();
    }
    if failure.cancelled {
        body["cancelled"] = true.into();
    }
    body
}
