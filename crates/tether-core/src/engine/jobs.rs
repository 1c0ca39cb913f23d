//! Reading, listing, cancelling and replaying jobs, and their history.

use super::*;

impl Engine {
    /// Cancels a queued job, or asks a running one to stop.
    pub async fn cancel(&self, tenant: &str, id: Uuid) -> Result<Job> {
        validate::name("tenant", tenant)?;
        self.store.cancel(tenant, id).await
    }

    /// Queues a failed or cancelled job again, attempt 0, without an
    /// `expires_at` (an expired job would otherwise expire again at once).
    pub async fn replay(&self, tenant: &str, id: Uuid) -> Result<Job> {
        self.replay_with(tenant, id, None).await
    }

    /// Queues a failed or cancelled job again, attempt 0, with
    /// `expires_at` as its new expiry (`None`: none).
    pub async fn replay_with(
        &self,
        tenant: &str,
        id: Uuid,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        if let Some(at) = &expires_at {
            validate::instant("expires_at", at)?;
        }
        let job = self.store.replay(tenant, id, expires_at).await?;
        counters::replayed(tenant, &job.queue, 1);
        Ok(job)
    }

    /// Replays many dead jobs of one queue; follow `next_cursor` (as the
    /// filter's `cursor`) to go through a selection larger than `limit`.
    pub async fn replay_many(&self, tenant: &str, filter: &ReplayFilter) -> Result<BulkReplayed> {
        validate::name("tenant", tenant)?;
        validate::replay_filter(filter)?;
        let out = self.store.replay_many(tenant, filter).await?;
        counters::replayed(tenant, &filter.queue, out.replayed);
        Ok(out)
    }

    /// One job.
    pub async fn get(&self, tenant: &str, id: Uuid) -> Result<Job> {
        validate::name("tenant", tenant)?;
        self.store.get(tenant, id).await
    }

    /// A page of jobs, newest first.
    pub async fn list(&self, tenant: &str, filter: &JobFilter) -> Result<JobPage> {
        validate::name("tenant", tenant)?;
        validate::job_filter(filter)?;
        self.store.list(tenant, filter).await
    }

    /// One page of a job's history, oldest first (default 100 events, at
    /// most 1 000); follow `next_cursor` for the rest.
    pub async fn events_page(
        &self,
        tenant: &str,
        id: Uuid,
        query: &EventQuery,
    ) -> Result<EventPage> {
        validate::name("tenant", tenant)?;
        validate::event_query(query)?;
        let limit = query.limit.unwrap_or(validate::DEFAULT_EVENT_PAGE);
        self.store.events(tenant, id, query.cursor, limit).await
    }

    /// A job's whole history, oldest first, read page by page. For callers
    /// in the process; the HTTP API hands it out one page at a time.
    pub async fn events(&self, tenant: &str, id: Uuid) -> Result<Vec<JobEvent>> {
        let mut query = EventQuery {
            limit: Some(validate::MAX_EVENT_PAGE),
            cursor: None,
        };
        let mut events = Vec::new();
        loop {
            let page = self.events_page(tenant, id, &query).await?;
            events.extend(page.events);
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return Ok(events),
            }
        }
    }
}
