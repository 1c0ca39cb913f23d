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
        let mut claim = opts.body();
        if !reports.complete.is_empty() {
            let items = reports.complete.iter().cloned().map(CompleteItem::from);
            claim.complete = Some(items.collect());
        }
        if !reports.fail.is_empty() {
            let items = reports.fail.iter().cloned().map(FailItem::from);
            claim.fail = Some(items.collect());
        }
        let wait = opts.wait_ms.unwrap_or(0).max(0);
        let req = self
            .request(&call, true)
            .timeout(self.timeout + Duration::from_millis(wait as u64))
            .json(&claim);
        let bytes = self.send(req).await?;
        let env: ClaimAnswer = decode(&call, &bytes)?;
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
            Some(&body(&HeartbeatBody::from(hb.clone()))),
        )
        .await
    }

    /// `POST /v1/jobs/heartbeat`: heartbeats 1–1000 jobs in one round trip
    /// (the batch route of `docs/http.md`); one answer per item, in order.
    pub async fn heartbeat_batch(
        &self,
        items: &[Heartbeat],
    ) -> Result<Vec<ItemResult<HeartbeatAck>>> {
        let items = items.iter().cloned().map(HeartbeatItem::from).collect();
        let env: ResultsEnvelope<BatchItem> = self
            .post(
                &["v1", "jobs", "heartbeat"],
                Some(&body(&HeartbeatManyBody { items })),
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
        let complete = CompleteBody {
            lease_token,
            result,
        };
        let id = id.to_string();
        let env: JobResponse = self
            .post(&["v1", "jobs", &id, "complete"], Some(&body(&complete)))
            .await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/complete`: completes 1–1000 jobs; one answer per item,
    /// in order.
    pub async fn complete_batch(&self, items: &[Completion]) -> Result<Vec<ItemResult<()>>> {
        let items = items.iter().cloned().map(CompleteItem::from).collect();
        let env: ResultsEnvelope<BatchItem> = self
            .post(
                &["v1", "jobs", "complete"],
                Some(&body(&CompleteManyBody { items })),
            )
            .await?;
        Ok(env.results.into_iter().map(BatchItem::into_unit).collect())
    }

    /// `POST /v1/jobs/{id}/fail`: the attempt failed. The job is queued
    /// again (after its jittered backoff, or exactly `retry_after_ms`), or
    /// `failed` when fatal or out of attempts, or `cancelled` when
    /// `failure.cancelled` acknowledges a cancel request.
    pub async fn fail(&self, id: Uuid, lease_token: LeaseToken, failure: &Failure) -> Result<Job> {
        let fail = FailBody::new(lease_token, failure.clone());
        let id = id.to_string();
        let env: JobResponse = self
            .post(&["v1", "jobs", &id, "fail"], Some(&body(&fail)))
            .await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/{id}/snooze`: "not now" — back to `queued` at now +
    /// `delay_ms` with the attempt given back.
    pub async fn snooze(&self, id: Uuid, lease_token: LeaseToken, delay_ms: i64) -> Result<Job> {
        let snooze = SnoozeBody {
            lease_token,
            delay_ms,
        };
        let id = id.to_string();
        let env: JobResponse = self
            .post(&["v1", "jobs", &id, "snooze"], Some(&body(&snooze)))
            .await?;
        Ok(env.job)
    }

    // ----- managing ---------------------------------------------------------

    /// `GET /v1/workers`: who holds the tenant's running jobs now.
    pub async fn list_workers(&self) -> Result<Vec<WorkerInfo>> {
        let env: WorkerListResponse = self.get(&["v1", "workers"]).await?;
        Ok(env.workers)
    }

    /// `PUT /v1/workers/{worker_id}`: announces a worker (its queues,
    /// concurrency, SDK, version, host and pid), so that `GET /v1/workers`
    /// lists it while idle too; forgotten after 5 minutes without an
    /// announcement or a claim.
    pub async fn announce_worker(
        &self,
        worker_id: &str,
        announcement: &WorkerAnnouncement,
    ) -> Result<()> {
        let call = self.call(Method::PUT, &["v1", "workers", worker_id])?;
        let mut req = self.request(&call, true);
        req = req.json(&body(&AnnounceWorkerBody::from(announcement.clone())));
        self.send(req).await?;
        Ok(())
    }
}
