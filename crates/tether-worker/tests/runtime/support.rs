//! Helpers shared by the runtime behaviours.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tether_conformance::TestDb;
use tether_core::{
    CarriedReports, ClaimRequest, ClaimedJob, Completion, DependencyJob, Engine, Error, EventKind,
    Failure, Heartbeat, HeartbeatAck, Job, JobFilter, JobState, Lease, LeaseToken, NewJob,
    ReapReport, ReportedAndClaimed, Result, Wakeup,
};
use tether_worker::{CancelRequests, Source, Worker, WorkerBuilder};
use tokio::sync::watch;
use uuid::Uuid;

/// The tenant of every behaviour.
pub const T: &str = "tenant-w";
/// The queue most behaviours use.
pub const Q: &str = "jobs";

/// A worker over the test database with short, test-friendly settings:
/// 1 s leases (heartbeats every 333 ms), 100 ms polling, maintenance off
/// (the behaviours that need it turn it on).
pub fn worker(db: &TestDb) -> WorkerBuilder {
    worker_on_queue_leases(db).lease_ttl(Duration::from_millis(1_000))
}

/// [`worker`] without a lease TTL of its own: its claims name none, so each
/// job gets the lease its queue is configured with.
pub fn worker_on_queue_leases(db: &TestDb) -> WorkerBuilder {
    Worker::builder(db.engine.clone())
        .tenant(T)
        .poll_interval(Duration::from_millis(100))
        .shutdown_grace(Duration::from_secs(2))
        .maintenance(false)
}

/// The lease a job's claim (or last heartbeat) granted, in milliseconds.
pub fn lease_ms(job: &Job) -> Option<i64> {
    Some(ms_between(job.lease_expires_at?, job.heartbeat_at?))
}

/// Enqueues a job, expecting a new one.
pub async fn enqueue(db: &TestDb, new: NewJob) -> Job {
    let e = db.engine.enqueue(T, new).await.expect("enqueue");
    assert!(e.created, "expected a new job");
    e.job
}

/// A job as stored now.
pub async fn get(db: &TestDb, id: Uuid) -> Job {
    db.engine.get(T, id).await.expect("get")
}

/// The kinds of a job's history events, in order.
pub async fn events(db: &TestDb, id: Uuid) -> Vec<EventKind> {
    db.engine
        .events(T, id)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// Every job of the tenant in `state`.
pub async fn jobs_in_state(db: &TestDb, state: JobState) -> Vec<Job> {
    db.engine
        .list(
            T,
            &JobFilter {
                state: Some(state),
                limit: Some(500),
                ..JobFilter::default()
            },
        )
        .await
        .expect("list")
        .jobs
}

pub use tether_conformance::eventually;

/// Waits until the stored job satisfies `pred` and returns it.
pub async fn job_where(
    db: &TestDb,
    id: Uuid,
    what: &str,
    within: Duration,
    pred: impl Fn(&Job) -> bool,
) -> Job {
    eventually(what, within, || async {
        let j = get(db, id).await;
        pred(&j).then_some(j)
    })
    .await
}

/// `a - b` in milliseconds.
pub fn ms_between(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    (a - b).num_milliseconds()
}

/// A latch: handlers wait on it, the test opens it.
#[derive(Clone)]
pub struct Gate(watch::Sender<bool>);

impl Gate {
    pub fn new() -> Self {
        Gate(watch::channel(false).0)
    }

    pub fn open(&self) {
        self.0.send_replace(true);
    }

    pub fn is_open(&self) -> bool {
        *self.0.borrow()
    }

    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }

    /// Waits until open, panicking after `within`.
    pub async fn wait_within(&self, what: &str, within: Duration) {
        if tokio::time::timeout(within, self.wait()).await.is_err() {
            panic!("gave up after {within:?} waiting for {what}");
        }
    }
}

/// Sets its flag when dropped: proves a handler future was dropped.
pub struct DropFlag(pub Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Counts handlers running at once and remembers the most.
#[derive(Default)]
pub struct Concurrency {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Concurrency {
    pub fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }

    pub fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

/// A source in front of the test engine that can simulate an outage (every
/// call answers `Unavailable` while `down` is set) and records the sizes of
/// the completion batches it forwards.
pub struct Probe {
    pub engine: Engine,
    pub down: AtomicBool,
    pub complete_batches: Mutex<Vec<usize>>,
    /// The completions each claim carried (claims that carried some).
    pub carried_batches: Mutex<Vec<usize>>,
    pub failed_calls: AtomicUsize,
    /// Delays each claim's answer (after the claim happened) by this much.
    pub claim_delay_ms: AtomicU64,
    /// `heartbeat_many` calls forwarded.
    pub heartbeat_calls: AtomicUsize,
    /// Offers no push of cancel requests (set before the worker starts):
    /// cancellations come with heartbeats alone.
    pub no_push: AtomicBool,
}

impl Probe {
    pub fn new(engine: Engine) -> Arc<Self> {
        Arc::new(Probe {
            engine,
            down: AtomicBool::new(false),
            complete_batches: Mutex::new(Vec::new()),
            carried_batches: Mutex::new(Vec::new()),
            failed_calls: AtomicUsize::new(0),
            claim_delay_ms: AtomicU64::new(0),
            heartbeat_calls: AtomicUsize::new(0),
            no_push: AtomicBool::new(false),
        })
    }

    fn check(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            self.failed_calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::Unavailable("simulated outage".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Source for Probe {
    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        self.check()?;
        let claimed = self.engine.claim(tenant, req).await;
        let delay = self.claim_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        claimed
    }

    async fn report_and_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed> {
        self.check()?;
        let out = self.engine.report_and_claim(tenant, req, reports).await;
        if out.is_ok() && !reports.complete.is_empty() {
            self.carried_batches
                .lock()
                .unwrap()
                .push(reports.complete.len());
        }
        let delay = self.claim_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        out
    }

    /// As a remote source's: so the runtime's carrying of completions on
    /// claims is exercised in process.
    fn report_wait(&self) -> Duration {
        Duration::from_millis(20)
    }

    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        self.check()?;
        self.heartbeat_calls.fetch_add(1, Ordering::SeqCst);
        self.engine.heartbeat_many(tenant, items).await
    }

    async fn complete_many(&self, tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>> {
        self.check()?;
        let r = self.engine.complete_many(tenant, items).await;
        if r.is_ok() {
            self.complete_batches.lock().unwrap().push(items.len());
        }
        r
    }

    async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: Failure,
    ) -> Result<JobState> {
        self.check()?;
        Source::fail(&self.engine, tenant, id, token, failure).await
    }

    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<JobState> {
        self.check()?;
        Source::snooze(&self.engine, tenant, id, token, delay_ms).await
    }

    async fn dependencies(&self, tenant: &str, id: Uuid) -> Result<Vec<DependencyJob>> {
        self.check()?;
        self.engine.dependencies(tenant, id).await
    }

    fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        Source::subscribe(&self.engine, tenant, queue)
    }

    /// The engine's push (unless `no_push`), untouched by a simulated
    /// outage (its reads are not calls the behaviours count).
    fn cancel_requests(&self, tenant: &str) -> Option<CancelRequests> {
        if self.no_push.load(Ordering::SeqCst) {
            return None;
        }
        Source::cancel_requests(&self.engine, tenant)
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>> {
        self.check()?;
        self.engine.acquire_lease(name, holder, ttl_ms).await
    }

    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        self.check()?;
        self.engine.renew_lease(name, token, ttl_ms).await
    }

    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        self.check()?;
        self.engine.release_lease(name, token).await
    }

    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        self.check()?;
        self.engine.reap_lapsed_leases(batch).await
    }

    async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        self.check()?;
        self.engine.expire_jobs(batch).await
    }

    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        self.check()?;
        self.engine.prune_finished(retention_ms, batch).await
    }

    async fn fire_due_schedules(
        &self,
        batch: u32,
        catch_up: std::time::Duration,
    ) -> Result<tether_core::FireReport> {
        self.check()?;
        self.engine.fire_due_schedules(batch, catch_up).await
    }

    async fn next_schedule_due(&self) -> Result<Option<std::time::Duration>> {
        self.check()?;
        self.engine.next_schedule_due().await
    }

    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        self.check()?;
        self.engine.prune_schedule_runs(retention_ms, batch).await
    }

    async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        self.check()?;
        self.engine.prune_empty_queues(batch).await
    }
}
