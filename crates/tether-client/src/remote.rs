//! The remote worker: [`tether_worker::Source`] over the HTTP API, so the
//! same worker runtime that runs embedded (over an in-process engine) runs
//! jobs claimed from a tether server.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tether_core::{
    CarriedReports, ClaimRequest, ClaimedJob, Completion, DependencyJob, Error, Failure,
    FireReport, Heartbeat, HeartbeatAck, JobState, Lease, LeaseToken, ReapReport,
    ReportedAndClaimed, Result, Wakeup, WorkerAnnouncement,
};
use tether_worker::{
    CancelPush, CancelRequests, Source, Worker, WorkerBuilder, CANCEL_PUSH_CAPACITY,
};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::{ClaimOptions, HttpClient, StreamFilter, StreamItem};

/// Default long-poll of a remote worker's claims.
pub const DEFAULT_CLAIM_WAIT: Duration = Duration::from_secs(5);

/// Longest long-poll the API allows.
pub const MAX_CLAIM_WAIT: Duration = Duration::from_secs(30);

/// An empty claim answered this much before its wait ended was not held.
const EARLY_SLACK: Duration = Duration::from_millis(250);
/// Longest pause after an empty claim the server did not hold.
const EARLY_PAUSE: Duration = Duration::from_secs(1);
/// Longest wait of a success for a claim to carry it (a fetcher's
/// gathering of slots and a claim's round trip).
const REPORT_WAIT: Duration = Duration::from_millis(20);
/// First pause after the server refused the stream of cancel requests (a
/// tenant's streams are capped: 429); doubled up to [`REFUSED_PAUSE_MAX`].
const REFUSED_PAUSE: Duration = Duration::from_secs(5);
/// Longest pause between tries of a refused stream.
const REFUSED_PAUSE_MAX: Duration = Duration::from_secs(120);

/// A [`Source`] that takes jobs from a tether server: what a remote worker
/// runs on. Build workers with [`RemoteSource::worker`] (or
/// [`HttpClient::worker`]), which turns maintenance off.
///
/// - **Claims** are `POST /v1/queues/{queue}/claim` long-polls of up to
///   [`RemoteSource::claim_wait`] (default 5 s), and
///   [`subscribe`](Source::subscribe) answers [`Wakeup::always`] (for a
///   non-zero wait), so an idle
///   worker goes straight back to the long-poll instead of sleeping its poll
///   interval: a new job reaches it as fast as the server sees it. The
///   runtime never interrupts a claim in flight (that could lose the jobs it
///   took), so a **shutdown may wait up to the claim wait** before it starts
///   draining.
/// - **Heartbeats** of all held jobs go in one `POST /v1/jobs/heartbeat`
///   (given up after a third of the lease TTL, so a stuck round trip is
///   retried while the leases still hold), **completions** in one
///   `POST /v1/jobs/complete`; **fail** and
///   **snooze** use their per-job routes and answer the job's new state.
///   A handler's [`JobContext::dependencies`](tether_worker::JobContext::dependencies)
///   is `GET /v1/jobs/{id}/dependencies`.
/// - **Cancel requests** are pushed: each worker holds one
///   `GET /v1/events?event=cancel_requested` stream (see
///   [`Source::cancel_requests`]), so a cancel reaches its handler within
///   about a second; heartbeats still deliver any the stream missed. A
///   server that refuses the stream (429 when the tenant has
///   `max_event_streams_per_tenant` open, default 64) leaves the worker on
///   heartbeats alone, logged once, and it tries again with a growing pause
///   (5 s up to 2 min); the worker never fails for it.
/// - **Tenants:** the API key decides the tenant. The runtime's tenant
///   setting ([`WorkerBuilder::tenant`]) is not sent anywhere; it only labels
///   the worker's logs and fills [`tether_core::Job::tenant`] of the jobs
///   handed to handlers, so set it to the key's tenant name if handlers read
///   it.
/// - **Maintenance** (reaping lapsed leases, expiry, pruning, electing the
///   leader) runs in the server: the maintenance methods of this source
///   answer [`Error::Invalid`], and workers built from it run with
///   `maintenance(false)`.
/// - Errors map as [`crate::Error`]'s conversion says: transport failures and
///   `unavailable` become [`Error::Unavailable`], which the runtime retries
///   with backoff; `lease_lost`/`not_found` drop the job.
#[derive(Debug, Clone)]
pub struct RemoteSource {
    client: HttpClient,
    wait: Duration,
    /// The shortest lease TTL claimed with so far (ms; `i64::MAX` before the
    /// first claim): a heartbeat round trip must end well within it.
    shortest_lease_ms: Arc<AtomicI64>,
    /// The server refused a claim's `complete` field as unknown (a server
    /// from before claims carried reports): send reports on their own.
    carry_refused: Arc<AtomicBool>,
}

impl RemoteSource {
    /// A source over `client`, long-polling [`DEFAULT_CLAIM_WAIT`].
    pub fn new(client: HttpClient) -> Self {
        RemoteSource {
            client,
            wait: DEFAULT_CLAIM_WAIT,
            shortest_lease_ms: Arc::new(AtomicI64::new(i64::MAX)),
            carry_refused: Arc::new(AtomicBool::new(false)),
        }
    }

    /// How long one claim waits on the server for work when the queue is
    /// empty (0 to [`MAX_CLAIM_WAIT`]; longer values are capped). Longer
    /// means fewer idle round trips but a slower start of a shutdown; 0
    /// turns long-polling off (then [`subscribe`](Source::subscribe) never
    /// hints, and the worker's poll interval paces idle claims).
    pub fn claim_wait(mut self, wait: Duration) -> Self {
        self.wait = wait.min(MAX_CLAIM_WAIT);
        self
    }

    /// The client underneath.
    pub fn client(&self) -> &HttpClient {
        &self.client
    }

    /// A worker builder on this source with maintenance off: add queues and
    /// handlers, then `build()` and `start()` (or `run_until_signal()`),
    /// exactly as for an embedded worker.
    pub fn worker(self) -> WorkerBuilder {
        Worker::builder(self).maintenance(false)
    }

    /// Without a TTL of the worker's own, each job carries the lease its
    /// queue grants (both ends stamped by the server's clock): the shortest
    /// bounds the heartbeat's time limit.
    fn note_leases(&self, jobs: &[crate::ClaimedJob]) {
        for c in jobs {
            if let Some(expires) = c.job.lease_expires_at {
                let granted = (expires - c.job.heartbeat_at.unwrap_or(expires)).num_milliseconds();
                if granted > 0 {
                    self.shortest_lease_ms.fetch_min(granted, Ordering::Relaxed);
                }
            }
        }
    }

    /// A claim's reports sent on their own routes, then the claim: for a
    /// server that does not take reports on claims.
    async fn report_then_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed> {
        let mut answers = Vec::with_capacity(reports.len());
        if !reports.complete.is_empty() {
            answers.extend(self.complete_many(tenant, &reports.complete).await?);
        }
        for f in &reports.fail {
            let r = self
                .fail(tenant, f.id, f.lease_token, f.failure.clone())
                .await;
            answers.push(r.map(drop));
        }
        let jobs = self.claim(tenant, req).await?;
        Ok(ReportedAndClaimed {
            reports: answers,
            jobs,
        })
    }

    fn claim_options(&self, req: &ClaimRequest) -> ClaimOptions {
        ClaimOptions {
            worker_id: req.worker_id.clone(),
            limit: Some(req.limit),
            lease_ttl_ms: req.lease_ttl_ms,
            wait_ms: Some(self.wait.as_millis() as i64),
        }
    }
}

impl HttpClient {
    /// A remote worker builder over this client (long-polling
    /// [`DEFAULT_CLAIM_WAIT`], maintenance off): add queues and handlers,
    /// then `build()` and `start()` (or `run_until_signal()`), exactly as for
    /// an embedded worker. For another claim wait, use
    /// [`RemoteSource::new`]`(client).claim_wait(..).worker()`.
    pub fn worker(&self) -> WorkerBuilder {
        RemoteSource::new(self.clone()).worker()
    }
}

fn maintenance_elsewhere(what: &str) -> Error {
    Error::invalid(
        "maintenance",
        format!(
            "{what} runs in the tether server, not in remote workers: \
             build remote workers with .maintenance(false) (RemoteSource::worker does)"
        ),
    )
}

#[async_trait]
impl Source for RemoteSource {
    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        if let Some(ttl) = req.lease_ttl_ms {
            self.shortest_lease_ms.fetch_min(ttl, Ordering::Relaxed);
        }
        let started = tokio::time::Instant::now();
        let jobs = self
            .client
            .claim(&req.queue, &self.claim_options(req))
            .await?;
        // An empty answer long before the wait ended means the server did
        // not hold the request (every long-poll place taken, or a server
        // without long-polls). `subscribe` says "go again at once", so pause
        // here instead of spinning.
        let elapsed = started.elapsed();
        if jobs.is_empty() && elapsed + EARLY_SLACK < self.wait {
            tokio::time::sleep((self.wait - elapsed).min(EARLY_PAUSE)).await;
        }
        self.note_leases(&jobs);
        Ok(jobs.into_iter().map(|c| c.into_core(tenant)).collect())
    }

    async fn report_and_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed> {
        if reports.is_empty() || self.carry_refused.load(Ordering::Relaxed) {
            return self.report_then_claim(tenant, req, reports).await;
        }
        // No long-poll with reports: their answers come with the claim's,
        // and a worker waits for them (an empty answer sends the runtime
        // straight back to a long-polling claim without reports).
        let opts = ClaimOptions {
            wait_ms: Some(0),
            ..self.claim_options(req)
        };
        let claimed = match self
            .client
            .report_and_claim(&req.queue, &opts, reports)
            .await
        {
            Ok(claimed) => claimed,
            Err(e) => {
                if is_unknown_field(&e) {
                    self.carry_refused.store(true, Ordering::Relaxed);
                }
                return Err(e.into());
            }
        };
        self.note_leases(&claimed.jobs);
        Ok(ReportedAndClaimed {
            reports: (claimed.reports.into_iter())
                .map(|a| a.result.map_err(|e| e.into_core_for_job(a.id)))
                .collect(),
            jobs: (claimed.jobs.into_iter())
                .map(|c| c.into_core(tenant))
                .collect(),
        })
    }

    /// A claim's round trip: worth a moment's wait for a success to ride it.
    fn report_wait(&self) -> Duration {
        REPORT_WAIT
    }

    /// Two: each fetcher of an idle worker holds one of its tenant's
    /// long-poll places (`max_long_polls_per_tenant`) while it waits.
    fn fetchers_per_queue(&self) -> usize {
        2
    }

    async fn heartbeat_many(
        &self,
        _tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        // The client's timeout may exceed the lease: a heartbeat stuck that
        // long would cost every lease it carries. Give up after a third of
        // the shortest lease (the runtime's heartbeat interval) instead, so
        // the runtime tries again while the leases still hold.
        let shortest = self.shortest_lease_ms.load(Ordering::Relaxed);
        let limit =
            Duration::from_millis((shortest / 3).max(1_000) as u64).min(self.client.timeout());
        let answers = tokio::time::timeout(limit, self.client.heartbeat_batch(items))
            .await
            .map_err(|_| {
                Error::Unavailable(
                    format!("heartbeat got no answer within {} ms", limit.as_millis()).into(),
                )
            })??;
        Ok(answers
            .into_iter()
            .map(|a| {
                a.result
                    .map(Into::into)
                    .map_err(|e| e.into_core_for_job(a.id))
            })
            .collect())
    }

    async fn complete_many(&self, _tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>> {
        let answers = self.client.complete_batch(items).await?;
        Ok(answers
            .into_iter()
            .map(|a| a.result.map_err(|e| e.into_core_for_job(a.id)))
            .collect())
    }

    async fn fail(
        &self,
        _tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: Failure,
    ) -> Result<JobState> {
        match self.client.fail(id, token, &failure).await {
            Ok(job) => Ok(job.state),
            Err(e) => Err(e.into_core_for_job(id)),
        }
    }

    async fn snooze(
        &self,
        _tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<JobState> {
        match self.client.snooze(id, token, delay_ms).await {
            Ok(job) => Ok(job.state),
            Err(e) => Err(e.into_core_for_job(id)),
        }
    }

    async fn announce(
        &self,
        _tenant: &str,
        worker_id: &str,
        announcement: &WorkerAnnouncement,
    ) -> Result<()> {
        self.client
            .announce_worker(worker_id, announcement)
            .await
            .map_err(Into::into)
    }

    async fn dependencies(&self, _tenant: &str, id: Uuid) -> Result<Vec<DependencyJob>> {
        match self.client.dependencies(id).await {
            Ok(jobs) => Ok(jobs.into_iter().map(dependency_into_core).collect()),
            Err(e) => Err(e.into_core_for_job(id)),
        }
    }

    fn cancel_requests(&self, _tenant: &str) -> Option<CancelRequests> {
        let (tx, rx) = mpsc::channel(CANCEL_PUSH_CAPACITY);
        tokio::spawn(stream_cancel_requests(self.client.clone(), tx));
        Some(rx)
    }

    fn subscribe(&self, _tenant: &str, _queue: &str) -> Wakeup {
        if self.wait.is_zero() {
            // No long-poll: a wake-up that never comes, so the runtime's
            // poll interval paces idle claims.
            return Wakeup::never();
        }
        // The claim itself long-polls: go straight back to it.
        Wakeup::always()
    }

    async fn acquire_lease(
        &self,
        _name: &str,
        _holder: &str,
        _ttl_ms: i64,
    ) -> Result<Option<Lease>> {
        Err(maintenance_elsewhere("leader election"))
    }

    async fn renew_lease(&self, _name: &str, _token: LeaseToken, _ttl_ms: i64) -> Result<Lease> {
        Err(maintenance_elsewhere("leader election"))
    }

    async fn release_lease(&self, _name: &str, _token: LeaseToken) -> Result<()> {
        Err(maintenance_elsewhere("leader election"))
    }

    async fn reap_lapsed_leases(&self, _batch: u32) -> Result<ReapReport> {
        Err(maintenance_elsewhere("reaping lapsed leases"))
    }

    async fn expire_jobs(&self, _batch: u32) -> Result<u64> {
        Err(maintenance_elsewhere("expiring jobs"))
    }

    async fn prune_finished(&self, _retention_ms: i64, _batch: u32) -> Result<u64> {
        Err(maintenance_elsewhere("pruning finished jobs"))
    }

    async fn fire_due_schedules(&self, _batch: u32, _catch_up: Duration) -> Result<FireReport> {
        Err(maintenance_elsewhere("firing schedules"))
    }

    async fn next_schedule_due(&self) -> Result<Option<Duration>> {
        Err(maintenance_elsewhere("firing schedules"))
    }

    async fn prune_schedule_runs(&self, _retention_ms: i64, _batch: u32) -> Result<u64> {
        Err(maintenance_elsewhere("pruning schedule runs"))
    }

    async fn prune_empty_queues(&self, _batch: u32) -> Result<u64> {
        Err(maintenance_elsewhere("removing empty queues"))
    }
}

/// The remote push of cancel requests: one event stream of the key's
/// tenant's `cancel_requested` events, from now on, until the runtime drops
/// the receiver. The stream reconnects by itself after a dropped
/// connection; a refusal it cannot cure (429 `too_many_requests`, or a
/// server without the stream) is told to the runtime once per outage, and
/// a new stream is tried after a growing pause. A new stream starts from
/// now on: requests made meanwhile came with heartbeats, and an old cursor
/// would only replay them late.
async fn stream_cancel_requests(client: HttpClient, tx: mpsc::Sender<CancelPush>) {
    let filter = StreamFilter {
        events: vec!["cancel_requested".to_owned()],
        ..StreamFilter::default()
    };
    let mut pause = REFUSED_PAUSE;
    let mut told = false;
    loop {
        let mut stream = client.stream_events(&filter);
        let refused = loop {
            let item = tokio::select! {
                _ = tx.closed() => return,
                item = stream.next() => item,
            };
            match item {
                Ok(StreamItem::Event(e)) => {
                    (pause, told) = (REFUSED_PAUSE, false);
                    if e.event != "cancel_requested" {
                        continue;
                    }
                    let push = CancelPush::Requested {
                        job_id: e.job_id,
                        attempt: e.attempt,
                    };
                    if tx.send(push).await.is_err() {
                        return;
                    }
                }
                // Lost to retention: heartbeats deliver what it held.
                Ok(StreamItem::Gap { .. }) => {}
                Err(e) => break e,
            }
        };
        if !told {
            told = true;
            let reason = format!(
                "the server refused the stream of cancel requests ({refused}); trying again in {} s, then less often",
                pause.as_secs()
            );
            if tx.send(CancelPush::Unavailable(reason)).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(REFUSED_PAUSE_MAX);
    }
}

/// A dependency as the worker runtime's handlers read it.
fn dependency_into_core(d: crate::DependencyJob) -> DependencyJob {
    DependencyJob {
        id: d.id,
        kind: d.kind,
        state: d.state,
        result: d.result,
        last_error: d.last_error,
        finished_at: d.finished_at,
    }
}

/// A 400 naming an unknown field of a claim carrying reports: the server
/// predates carried reports (its request types refuse unknown fields).
fn is_unknown_field(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Api { code: crate::ErrorCode::InvalidArgument, message, .. }
        if message.contains("unknown field"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_unknown_field_stops_the_carrying() {
        let api = |code, message: &str| crate::Error::Api {
            status: 400,
            code,
            message: message.to_owned(),
        };
        // What a server from before carried reports answers (serde's
        // deny_unknown_fields wording).
        let old = api(
            crate::ErrorCode::InvalidArgument,
            "invalid request body: unknown field `complete`, expected one of `worker_id`, `limit`",
        );
        assert!(is_unknown_field(&old));
        let bad_report = api(
            crate::ErrorCode::InvalidArgument,
            "invalid fail[0].cancelled: a failure is either fatal or a cancel acknowledgement",
        );
        assert!(!is_unknown_field(&bad_report));
        assert!(!is_unknown_field(&api(
            crate::ErrorCode::PayloadTooLarge,
            "unknown field"
        )));
    }
}
