//! Where the runtime gets its jobs from and reports their outcomes to.

use async_trait::async_trait;
use std::time::Duration;

use tether_core::{
    CarriedReports, ClaimRequest, ClaimedJob, Completion, DependencyJob, Engine, Error, EventKind,
    Failure, FeedCursor, FeedFilter, FeedPage, FireReport, Heartbeat, HeartbeatAck, JobState,
    Lease, LeaseToken, ReapReport, ReportedAndClaimed, Result, Wakeup, WorkerAnnouncement,
    MAX_FEED_READ,
};
use tokio::sync::mpsc;
use tracing::debug;
use uuid::Uuid;

/// What a source's push of cancellation requests carries (see
/// [`Source::cancel_requests`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelPush {
    /// A cancel was requested for this run of a job: the job's
    /// `cancel_requested` history event. It names the attempt, so that a
    /// request that arrives late does not reach a later attempt's run.
    Requested {
        /// The job.
        job_id: Uuid,
        /// The attempt that was running when the cancel was requested.
        attempt: i32,
    },
    /// The push is down for now (the reason, for the worker's log): until
    /// requests arrive again, cancellations reach handlers with the next
    /// heartbeat only. Sent once per outage, not per retry.
    Unavailable(String),
}

/// The receiving end of a push of cancellation requests (see
/// [`Source::cancel_requests`]). The source's task that fills it stops once
/// this end is dropped.
pub type CancelRequests = mpsc::Receiver<CancelPush>;

/// Room in a cancellation push's channel: the runtime takes each request at
/// once, so this only absorbs a burst (a workflow cancelled whole).
pub const CANCEL_PUSH_CAPACITY: usize = 1_024;

/// How often an embedded worker reads the feed for cancel requests: one
/// query per worker every 250 ms (not one per held job), so a cancel
/// reaches its handler within about a quarter of a second.
const CANCEL_POLL: Duration = Duration::from_millis(250);
/// Longest pause between reads of the feed while they fail.
const CANCEL_POLL_MAX: Duration = Duration::from_secs(5);

/// Exactly the operations the worker runtime performs, so that the same
/// runtime can drive jobs from an in-process [`Engine`] (embedded mode) or,
/// later, from a remote tether server over HTTP.
///
/// Errors follow [`tether_core::Error`]: `Unavailable` and `Storage` are
/// treated as transient (the runtime backs off and tries again); `LeaseLost`
/// means the job (or the named lease) belongs to someone else now and the
/// runtime's view of it must be dropped; anything else is reported and not
/// retried.
///
/// The maintenance methods (`acquire_lease` through the schedule ones) are only
/// called when the worker runs with maintenance on (the default; see
/// [`crate::WorkerBuilder::maintenance`]). A source that cannot offer them
/// (e.g. a remote client whose server runs maintenance itself) may answer them
/// with an error and be used with maintenance off.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// Claims up to `req.limit` ready jobs of one queue.
    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>>;

    /// Applies the last batch's reports, then claims up to `req.limit` ready
    /// jobs of one queue, in one round trip; one answer per report
    /// (completions first, each list in order). A refused report never
    /// fails the claim; an error of the whole call leaves the reports to be
    /// sent again (a repeat is answered like the first).
    async fn report_and_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed>;

    /// How long a success may wait for a claim to carry it (see
    /// [`Source::report_and_claim`]) before it is sent on its own: worth a
    /// moment where each request is a network round trip, not in process,
    /// where a completion's own statement runs beside the claims.
    fn report_wait(&self) -> Duration {
        Duration::ZERO
    }

    /// Fetchers per queue (fewer when the queue has fewer slots): claims of
    /// one queue in flight at once, sharing its slots, so that while one
    /// claim is on its way the slots that free up go out in another. In
    /// process, four kept the database busiest (`pg_runtime_e2e_jobs_per_s`
    /// on two cores: medians of five paired runs 17 976 with two and
    /// 20 809 with four; 16 399 and 16 655 in two runs with eight).
    fn fetchers_per_queue(&self) -> usize {
        4
    }

    /// Extends the leases of 1–1000 running jobs (carrying their progress);
    /// one answer per item, in order.
    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>>;

    /// Completes 1–1000 jobs; one answer per item, in order.
    async fn complete_many(&self, tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>>;

    /// Ends an attempt with a failure; answers the state the job went to.
    async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: Failure,
    ) -> Result<JobState>;

    /// "Not now": back to the queue after `delay_ms`, the attempt given back;
    /// answers the state the job went to (`cancelled` if a cancel was pending).
    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<JobState>;

    /// Announces the worker (`PUT /v1/workers/{worker_id}`), so that it is
    /// listed while idle too. Presence is advisory: the default does
    /// nothing (a source of its own that wraps another should forward it);
    /// the engine's and the HTTP client's sources record it.
    async fn announce(
        &self,
        tenant: &str,
        worker_id: &str,
        announcement: &WorkerAnnouncement,
    ) -> Result<()> {
        let _ = (tenant, worker_id, announcement);
        Ok(())
    }

    /// The jobs job `id` waits (or waited) for, in the order it names them,
    /// with their states and results: what
    /// [`JobContext::dependencies`](crate::JobContext::dependencies) reads.
    /// The default answers `invalid_argument` (a source of its own that
    /// wraps another should forward it); the engine's and the HTTP client's
    /// sources read them.
    async fn dependencies(&self, tenant: &str, id: Uuid) -> Result<Vec<DependencyJob>> {
        let _ = (tenant, id);
        Err(Error::invalid(
            "dependencies",
            "this worker's source does not read dependencies",
        ))
    }

    /// Hints that `queue` may have ready jobs. The runtime subscribes before
    /// its first claim and treats hints as hints: it polls as well.
    fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup;

    /// A push of the tenant's cancellation requests, so that a cancel of a
    /// running job reaches its handler within about a second instead of
    /// with the job's next heartbeat (every third of its lease).
    ///
    /// The runtime calls it once per started worker, inside its Tokio
    /// runtime; the source starts the task that fills the channel, and that
    /// task ends once the runtime drops the receiver (when the worker has
    /// drained or was aborted). The push may carry every cancel request of
    /// the tenant: the runtime ignores those for runs it does not hold. It
    /// need not be lossless: heartbeats still answer `cancel_requested`, so
    /// a request the push missed (while it reconnects, or while it is
    /// refused) arrives with the next heartbeat. A source that cannot push
    /// should say so once with [`CancelPush::Unavailable`] rather than fail.
    ///
    /// The default, `None`, leaves cancellation to heartbeats alone; a
    /// source that wraps another should forward it. The engine reads its
    /// feed (one query per worker every 250 ms); the HTTP client's source
    /// holds one `GET /v1/events` stream per worker.
    fn cancel_requests(&self, tenant: &str) -> Option<CancelRequests> {
        let _ = tenant;
        None
    }

    /// Tries to take a named lease; `None` while another holder has it.
    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>>;

    /// Extends a held named lease; `NamedLeaseLost` once another took it.
    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease>;

    /// Gives a named lease up so another node can take it at once.
    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()>;

    /// Runs the passes below under the named lease `lease` (name, token)
    /// from now on: the database refuses a pass once that lease has lapsed
    /// or moved (see [`Engine::fence_maintenance`]). A source that does not
    /// run maintenance ignores it.
    fn fence_maintenance(&self, _lease: Option<(&str, LeaseToken)>) {}

    /// One reaper pass over at most `batch` jobs with lapsed leases.
    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport>;

    /// One expiry pass over at most `batch` queued jobs past `expires_at`.
    async fn expire_jobs(&self, batch: u32) -> Result<u64>;

    /// Deletes at most `batch` jobs finished more than `retention_ms` ago.
    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64>;

    /// One scheduler pass: fires at most `batch` due schedules, each
    /// instant missed by at most `catch_up` on its own, older ones collapsed
    /// (see [`Engine::fire_due_schedules`]).
    async fn fire_due_schedules(&self, batch: u32, catch_up: Duration) -> Result<FireReport>;

    /// How long until the earliest enabled schedule is due (zero if one
    /// is); `None` without enabled schedules.
    async fn next_schedule_due(&self) -> Result<Option<Duration>>;

    /// Deletes at most `batch` schedule runs older than `retention_ms`.
    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64>;

    /// Deletes at most `batch` queue rows that hold nothing (no job, not
    /// paused, default settings), giving their tenants room under the
    /// queue limit back.
    async fn prune_empty_queues(&self, batch: u32) -> Result<u64>;
}

#[async_trait]
impl Source for Engine {
    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        Engine::claim(self, tenant, req).await
    }

    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        Engine::heartbeat_many(self, tenant, items).await
    }

    async fn report_and_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed> {
        Engine::report_and_claim(self, tenant, req, reports).await
    }

    async fn complete_many(&self, tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>> {
        Engine::complete_many(self, tenant, items).await
    }

    async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: Failure,
    ) -> Result<JobState> {
        Ok(Engine::fail(self, tenant, id, token, failure).await?.state)
    }

    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<JobState> {
        Ok(Engine::snooze(self, tenant, id, token, delay_ms)
            .await?
            .state)
    }

    async fn dependencies(&self, tenant: &str, id: Uuid) -> Result<Vec<DependencyJob>> {
        Engine::dependencies(self, tenant, id).await
    }

    async fn announce(
        &self,
        tenant: &str,
        worker_id: &str,
        announcement: &WorkerAnnouncement,
    ) -> Result<()> {
        Engine::announce_worker(self, tenant, worker_id, announcement).await?;
        Ok(())
    }

    fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        // A bad name gets no hints; the claim itself reports it.
        Engine::subscribe(self, tenant, queue).unwrap_or_else(|_| Wakeup::never())
    }

    fn cancel_requests(&self, tenant: &str) -> Option<CancelRequests> {
        let (tx, rx) = mpsc::channel(CANCEL_PUSH_CAPACITY);
        tokio::spawn(read_cancel_requests(self.clone(), tenant.to_owned(), tx));
        Some(rx)
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>> {
        Engine::acquire_lease(self, name, holder, ttl_ms).await
    }

    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        Engine::renew_lease(self, name, token, ttl_ms).await
    }

    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        Engine::release_lease(self, name, token).await
    }

    fn fence_maintenance(&self, lease: Option<(&str, LeaseToken)>) {
        Engine::fence_maintenance(self, lease)
    }

    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        Engine::reap_lapsed_leases(self, batch).await
    }

    async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        Engine::expire_jobs(self, batch).await
    }

    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        Engine::prune_finished(self, retention_ms, batch).await
    }

    async fn fire_due_schedules(&self, batch: u32, catch_up: Duration) -> Result<FireReport> {
        Engine::fire_due_schedules(self, batch, catch_up).await
    }

    async fn next_schedule_due(&self) -> Result<Option<Duration>> {
        Engine::next_schedule_due(self).await
    }

    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        Engine::prune_schedule_runs(self, retention_ms, batch).await
    }

    async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        Engine::prune_empty_queues(self, batch).await
    }
}

/// The engine's push of cancellation requests: reads the feed's
/// `cancel_requested` events of `tenant` from its head on, every
/// [`CANCEL_POLL`] (at once while a read says more are ready), until the
/// runtime drops the receiver. A failed read is tried again with a growing
/// pause and only logged at debug: the worker's other calls to the same
/// store report the outage, and heartbeats deliver cancellations meanwhile.
async fn read_cancel_requests(engine: Engine, tenant: String, tx: mpsc::Sender<CancelPush>) {
    let filter = FeedFilter {
        tenant: Some(tenant),
        events: vec![EventKind::CancelRequested],
        ..FeedFilter::default()
    };
    let mut cursor: Option<FeedCursor> = None;
    let mut failing = CANCEL_POLL;
    loop {
        let read = match &cursor {
            // The first read finds where the feed stands: requests from now on.
            None => engine.feed_head().await.map(|head| FeedPage {
                gap: None,
                events: Vec::new(),
                next: head,
                more: false,
            }),
            Some(after) => engine.feed_read(after, &filter, MAX_FEED_READ).await,
        };
        let pause = match read {
            Ok(page) => {
                failing = CANCEL_POLL;
                for e in page.events {
                    let push = CancelPush::Requested {
                        job_id: e.job_id,
                        attempt: e.event.attempt,
                    };
                    if tx.send(push).await.is_err() {
                        return;
                    }
                }
                cursor = Some(page.next);
                if page.more {
                    Duration::ZERO
                } else {
                    CANCEL_POLL
                }
            }
            Err(e) => {
                debug!(error = %e, "reading cancel requests failed; trying again");
                let pause = failing;
                failing = (failing * 2).min(CANCEL_POLL_MAX);
                pause
            }
        };
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
