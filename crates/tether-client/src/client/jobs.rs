//! Jobs: read, list, history, cancel and replay, one by one or in bulk.

use super::*;

impl HttpClient {
    /// `POST /v1/jobs/cancel`: cancels 1–500 jobs, each as
    /// [`HttpClient::cancel`] would; one answer per id, in order.
    pub async fn cancel_jobs(&self, ids: &[Uuid]) -> Result<Vec<ItemResult<Job>>> {
        let ids = JobIdsBody { ids: ids.to_vec() };
        self.bulk(&["v1", "jobs", "cancel"], body(&ids)).await
    }

    /// `POST /v1/jobs/replay`: replays 1–500 finished jobs, each as
    /// [`HttpClient::replay`] would; one answer per id, in order.
    pub async fn replay_jobs(&self, ids: &[Uuid]) -> Result<Vec<ItemResult<Job>>> {
        let ids = ReplayIdsBody {
            ids: ids.to_vec(),
            expires_at: None,
        };
        self.bulk(&["v1", "jobs", "replay"], body(&ids)).await
    }

    async fn bulk(&self, route: &[&str], body: Value) -> Result<Vec<ItemResult<Job>>> {
        let env: ResultsEnvelope<BatchItem> = self.post(route, Some(&body)).await?;
        Ok(env
            .results
            .into_iter()
            .map(|item| ItemResult {
                id: item.id,
                result: match (item.ok, item.job) {
                    (true, Some(job)) => Ok(*job),
                    _ => Err(item_error(item.error)),
                },
            })
            .collect())
    }

    /// `GET /v1/jobs/{id}`.
    pub async fn get_job(&self, id: Uuid) -> Result<Job> {
        let id = id.to_string();
        let env: JobResponse = self.get(&["v1", "jobs", &id]).await?;
        Ok(env.job)
    }

    /// `GET /v1/jobs?...`: one page of jobs, newest first. Follow
    /// [`JobPage::next_cursor`] for the next one.
    pub async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        let call = self.call(Method::GET, &["v1", "jobs"])?;
        let req = self.request(&call, true).query(&query.query());
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// `GET /v1/jobs/{id}/events?...`: one page of the job's history,
    /// oldest first. Follow [`EventPage::next_cursor`] for the next one.
    pub async fn events_page(&self, id: Uuid, query: &EventQuery) -> Result<EventPage> {
        let id = id.to_string();
        let call = self.call(Method::GET, &["v1", "jobs", &id, "events"])?;
        let req = self.request(&call, true).query(&query.query());
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// The job's whole history, oldest first, read page by page (1 000
    /// events a request).
    pub async fn events(&self, id: Uuid) -> Result<Vec<JobEvent>> {
        let mut query = EventQuery {
            limit: Some(1_000),
            cursor: None,
        };
        let mut events = Vec::new();
        loop {
            let page = self.events_page(id, &query).await?;
            events.extend(page.events);
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return Ok(events),
            }
        }
    }

    /// `POST /v1/jobs/{id}/cancel`: a queued job is cancelled at once, a
    /// running one gets `cancel_requested`; a finished one is 409
    /// `invalid_state`.
    pub async fn cancel(&self, id: Uuid) -> Result<Job> {
        let id = id.to_string();
        let env: JobResponse = self.post(&["v1", "jobs", &id, "cancel"], None).await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/{id}/replay`: a finished job (failed, cancelled or
    /// succeeded: it runs again) is queued again with a fresh attempt budget (same id) and no `expires_at`.
    pub async fn replay(&self, id: Uuid) -> Result<Job> {
        self.replay_with(id, None).await
    }

    /// `POST /v1/jobs/{id}/replay` with `expires_at` as the job's new
    /// expiry (`None`: none).
    pub async fn replay_with(&self, id: Uuid, expires_at: Option<DateTime<Utc>>) -> Result<Job> {
        let id = id.to_string();
        let replay = expires_at.map(|at| {
            body(&ReplayBody {
                expires_at: Some(wire::sent_time(at)),
            })
        });
        let env: JobResponse = self
            .post(&["v1", "jobs", &id, "replay"], replay.as_ref())
            .await?;
        Ok(env.job)
    }

    /// `POST /v1/queues/{queue}/replay`: one round of bulk replay of the
    /// dead-letter queue (or of cancelled jobs); answers how many were
    /// replayed.
    pub async fn replay_queue(&self, queue: &str, filter: &BulkReplay) -> Result<u64> {
        Ok(self.replay_queue_round(queue, filter).await?.replayed)
    }

    /// `POST /v1/queues/{queue}/replay`: one round of bulk replay, with
    /// where the next round starts. Pass [`BulkReplayed::next_cursor`] as
    /// [`BulkReplay::cursor`] until it is `None` to go through every
    /// matching job once.
    pub async fn replay_queue_round(
        &self,
        queue: &str,
        filter: &BulkReplay,
    ) -> Result<BulkReplayed> {
        let replay = filter.body()?;
        self.post(&["v1", "queues", queue, "replay"], Some(&body(&replay)))
            .await
    }
}
