//! Claims and the reports of an attempt: heartbeats, completions,
//! failures, snoozes.

use super::*;

impl Engine {
    /// Claims up to `req.limit` ready jobs.
    pub async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        validate::name("tenant", tenant)?;
        validate::claim(req)?;
        self.seen(tenant, &req.worker_id).await;
        let jobs = self.store.claim(tenant, req).await?;
        counters::claimed(tenant, &req.queue, &jobs);
        Ok(jobs)
    }

    /// Applies the reports a claim carries (the last batch's completions,
    /// then its failures), then claims up to `req.limit` ready jobs: one
    /// round trip and, where the queue's rules allow, one transaction (see
    /// [`Store::report_and_claim`]). One answer per report, as the batch
    /// and fail routes answer it; a refused report never fails the claim.
    /// Nothing is applied when the request is bad as a whole.
    pub async fn report_and_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed> {
        if reports.is_empty() {
            let jobs = self.claim(tenant, req).await?;
            return Ok(ReportedAndClaimed {
                reports: Vec::new(),
                jobs,
            });
        }
        validate::name("tenant", tenant)?;
        validate::claim(req)?;
        validate::carried_reports(reports, &self.limits)?;
        self.seen(tenant, &req.worker_id).await;
        // Errors keep their tail, as `fail` keeps it (copied only then).
        let trimmed;
        let reports = match (reports.fail.iter())
            .all(|f| lifecycle::error_tail(&f.failure.error) == f.failure.error)
        {
            true => reports,
            false => {
                trimmed = CarriedReports {
                    complete: reports.complete.clone(),
                    fail: (reports.fail.iter())
                        .map(|f| FailureReport {
                            failure: Failure {
                                error: lifecycle::error_tail(&f.failure.error),
                                ..f.failure.clone()
                            },
                            ..f.clone()
                        })
                        .collect(),
                };
                &trimmed
            }
        };
        let jitters: Vec<f64> = reports.fail.iter().map(|_| lifecycle::jitter()).collect();
        let stored = self
            .store
            .report_and_claim(tenant, reports, &jitters, req)
            .await?;
        counters::completed_many(
            tenant,
            stored.completed.iter().filter_map(|r| r.as_ref().ok()),
        );
        for reported in stored.failed.iter().flatten() {
            if reported.now {
                counters::failed(tenant, &reported.job);
            }
        }
        counters::claimed(tenant, &req.queue, &stored.jobs);
        let answers = (stored.completed.into_iter().map(|r| r.map(|_| ())))
            .chain(stored.failed.into_iter().map(|r| r.map(|_| ())))
            .collect();
        Ok(ReportedAndClaimed {
            reports: answers,
            jobs: stored.jobs,
        })
    }

    /// Extends a lease and records progress.
    pub async fn heartbeat(&self, tenant: &str, hb: &Heartbeat) -> Result<HeartbeatAck> {
        validate::name("tenant", tenant)?;
        validate::heartbeat(hb, &self.limits)?;
        self.store.heartbeat(tenant, hb).await
    }

    /// Heartbeats 1–1000 jobs in one round trip; one answer per item.
    pub async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        validate::name("tenant", tenant)?;
        validate::batch_len("items", items.len(), validate::MAX_BATCH)?;
        for hb in items {
            validate::heartbeat(hb, &self.limits)?;
        }
        self.store.heartbeat_many(tenant, items).await
    }

    /// Subscribes to hints that `queue` may have ready jobs. Subscribe before
    /// claiming, then wait on it (with a poll timeout) when a claim is empty.
    /// The names are checked first, so a bad one costs no subscription.
    pub fn subscribe(&self, tenant: &str, queue: &str) -> Result<Wakeup> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        Ok(self.store.subscribe(tenant, queue))
    }

    /// Marks a job succeeded.
    pub async fn complete(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        result: Option<Value>,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        if let Some(r) = &result {
            validate::json_size("result", r, &self.limits)?;
        }
        let reported = self
            .store
            .complete(tenant, id, token, result.as_ref())
            .await?;
        if reported.now {
            counters::completed(tenant, &reported.job);
        }
        Ok(reported.job)
    }

    /// Completes 1–1000 jobs in one round trip; one answer per item.
    pub async fn complete_many(
        &self,
        tenant: &str,
        items: &[Completion],
    ) -> Result<Vec<Result<()>>> {
        validate::name("tenant", tenant)?;
        validate::completions(items, &self.limits)?;
        let out = self.store.complete_many(tenant, items).await?;
        counters::completed_many(tenant, out.iter().filter_map(|r| r.as_ref().ok()));
        Ok(out.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Ends an attempt with a failure; the error keeps its last 2 000 characters.
    pub async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: Failure,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        validate::failure(&failure)?;
        let failure = Failure {
            error: lifecycle::error_tail(&failure.error),
            ..failure
        };
        let reported = self
            .store
            .fail(tenant, id, token, &failure, lifecycle::jitter())
            .await?;
        if reported.now {
            counters::failed(tenant, &reported.job);
        }
        Ok(reported.job)
    }

    /// "Not now": back to the queue after `delay_ms`, the attempt given back.
    pub async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        validate::millis("delay_ms", delay_ms, 0..=validate::MAX_DURATION_MS)?;
        let reported = self.store.snooze(tenant, id, token, delay_ms).await?;
        if reported.now {
            counters::snoozed(tenant, &reported.job);
        }
        Ok(reported.job)
    }
}
