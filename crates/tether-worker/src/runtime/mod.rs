//! The running worker: fetchers per queue (see `Source::fetchers_per_queue`),
//! one heartbeater, one batching completer, the maintenance loop, and one
//! task per claimed job.
//!
//! Ownership of a job's fate is simple on purpose: the job's own task decides
//! and reports its outcome; the heartbeater only extends leases and fires the
//! job's cancellation when the store says "cancel requested" or "lease lost"
//! (and the source's push of cancel requests, when it has one, fires it
//! sooner);
//! the completer only batches `complete` calls for job tasks that wait on it.
//! A job stays in the in-flight table (and keeps being heartbeated) until its
//! outcome is acknowledged, so a slow report never costs the lease.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::Value;
use tether_core::{
    validate, CarriedReports, ClaimRequest, ClaimedJob, Completion, Error, Failure, Heartbeat, Job,
    JobState, LeaseToken, WorkerAnnouncement,
};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument};
use uuid::Uuid;

use crate::builder::{Config, QueueSpec, WorkerBuilder, DEFAULT_LEASE_TTL};
use crate::handler::{Handler, Hooks, JobContext, JobError, JobResult};
use crate::maintenance::Maintenance;
use crate::outbox::Outbox;
use crate::signals::Signals;
use crate::source::{CancelPush, CancelRequests, Source};

mod fetch;
mod heartbeats;
mod reports;
mod run;

use fetch::*;
use heartbeats::*;
use reports::*;
use run::*;

/// Most items in one claim, heartbeat or completion batch (the store's limit).
const MAX_BATCH: usize = validate::MAX_BATCH;
/// First delay after a failed call to the source; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest delay between retries of a failing source.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often an outcome report (complete, fail, snooze) is tried before the
/// runtime gives up on it. Giving up is safe: the lease lapses and the reaper
/// requeues the job (the run then counts as an attempt).
const REPORT_TRIES: u32 = 8;

/// A configured worker, ready to start. Build one with [`Worker::builder`].
pub struct Worker {
    pub(crate) source: Arc<dyn Source>,
    pub(crate) config: Config,
    pub(crate) handlers: HashMap<String, Handler>,
    pub(crate) hooks: Hooks,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .field("kinds", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts configuring a worker that takes its jobs from `source` (an
    /// [`tether_core::Engine`] for an embedded worker).
    pub fn builder(source: impl Source) -> WorkerBuilder {
        WorkerBuilder::new(Arc::new(source))
    }

    /// Like [`Worker::builder`], for a source that is already shared.
    pub fn builder_shared(source: Arc<dyn Source>) -> WorkerBuilder {
        WorkerBuilder::new(source)
    }

    /// The id this worker claims jobs (and the maintenance lease) under.
    pub fn worker_id(&self) -> &str {
        &self.config.worker_id
    }

    /// Starts the worker on the current Tokio runtime and returns at once.
    ///
    /// The worker runs until [`WorkerHandle::shutdown`]; dropping the handle
    /// does not stop it.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn start(self) -> WorkerHandle {
        let outbox = Outbox::new(self.source.report_wait());
        let shared = Arc::new(Shared {
            source: self.source,
            config: self.config,
            handlers: self.handlers,
            hooks: self.hooks,
            inflight: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            drained: CancellationToken::new(),
            kill: CancellationToken::new(),
            jobs: TaskTracker::new(),
            outbox,
            leader: Arc::new(AtomicBool::new(false)),
            beat_at: Mutex::new(None),
            beat_sooner: Arc::new(Notify::new()),
        });
        let join = tokio::spawn(killable(shared.kill.clone(), supervise(shared.clone())));
        WorkerHandle { shared, join }
    }

    /// Runs the worker until SIGTERM or Ctrl-C (SIGINT), then shuts it down
    /// gracefully (see [`WorkerHandle::shutdown`]) and returns. A second
    /// signal during the shutdown aborts it (see [`WorkerHandle::abort`]).
    ///
    /// The signal handlers are installed before the first claim, so a signal
    /// can never find a job running without a handler for it.
    pub async fn run_until_signal(self) -> std::io::Result<()> {
        let mut signals = Signals::install()?;
        let handle = self.start();
        signals.next().await?;
        info!(worker_id = %handle.worker_id(), "signal received: shutting down");
        handle.shutdown();
        let WorkerHandle { shared, mut join } = handle;
        tokio::select! {
            r = &mut join => resume_panic(r),
            r = signals.next() => {
                r?;
                warn!(worker_id = %shared.config.worker_id, "second signal: aborting without handing jobs back");
                shared.kill.cancel();
                resume_panic(join.await);
            }
        }
        Ok(())
    }
}

/// Controls a started worker.
#[derive(Debug)]
pub struct WorkerHandle {
    shared: Arc<Shared>,
    join: tokio::task::JoinHandle<()>,
}

impl WorkerHandle {
    /// The id the worker claims jobs under.
    pub fn worker_id(&self) -> &str {
        &self.shared.config.worker_id
    }

    /// Begins a graceful shutdown and returns at once ([`Self::join`] waits
    /// for it): no more claims; running handlers get the shutdown grace to
    /// finish and their completions are flushed; handlers still running
    /// after it are cancelled and their jobs handed back to the queue with
    /// the attempt given back (a snooze of 0); the maintenance lease is
    /// released. Calling it again does nothing.
    pub fn shutdown(&self) {
        self.shared.stop.cancel();
    }

    /// Stops everything at once without reporting or handing back anything,
    /// as if the process had been killed: held jobs come back through the
    /// reaper once their leases lapse, and the maintenance lease lapses too.
    /// Meant for tests and for a second Ctrl-C.
    pub fn abort(&self) {
        self.shared.stop.cancel();
        self.shared.kill.cancel();
    }

    /// Waits until the worker has stopped (after [`Self::shutdown`] or
    /// [`Self::abort`]).
    pub async fn join(self) {
        resume_panic(self.join.await);
    }

    /// Whether this worker currently acts as the maintenance leader.
    pub fn is_maintenance_leader(&self) -> bool {
        // An aborted worker never got to clear the flag.
        self.shared.leader.load(Ordering::SeqCst) && !self.shared.kill.is_cancelled()
    }

    /// How many jobs the worker holds right now (running, or waiting for
    /// their outcome to be acknowledged).
    pub fn jobs_in_flight(&self) -> usize {
        lock(&self.shared.inflight).len()
    }
}

fn resume_panic(r: Result<(), tokio::task::JoinError>) {
    if let Err(e) = r {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// State shared by every task of one worker.
struct Shared {
    source: Arc<dyn Source>,
    config: Config,
    handlers: HashMap<String, Handler>,
    /// Run around every handler.
    hooks: Hooks,
    /// Every job this worker holds, by id.
    inflight: Mutex<HashMap<Uuid, Arc<InFlight>>>,
    /// Shutdown requested: claim nothing more.
    stop: CancellationToken,
    /// Every job task has ended: the heartbeater, completer and maintenance
    /// loop may stop.
    drained: CancellationToken,
    /// Abort: every task ends at its next await, reporting nothing.
    kill: CancellationToken,
    /// The job tasks.
    jobs: TaskTracker,
    /// Successes waiting to be reported (see `outbox`).
    outbox: Outbox<Reported>,
    /// Whether this worker's maintenance leadership is confirmed.
    leader: Arc<AtomicBool>,
    /// When the heartbeater wakes next (`None`: it holds nothing and waits
    /// for [`Shared::beat_sooner`]).
    beat_at: Mutex<Option<Instant>>,
    /// Wakes the heartbeater when a new job is due before [`Shared::beat_at`],
    /// or a handler set progress (each job holds a clone).
    beat_sooner: Arc<Notify>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("worker_id", &self.config.worker_id)
            .finish_non_exhaustive()
    }
}

/// One job this worker holds.
pub(crate) struct InFlight {
    pub(crate) job: Job,
    token: LeaseToken,
    /// The lease its claim granted (the queue's, unless the worker asked for
    /// one): it is heartbeated every third of it.
    lease_ttl: Duration,
    /// When its last heartbeat was sent (at first: when the claim answered).
    last_beat: Mutex<Instant>,
    /// Fired when the handler should stop; what [`JobContext::cancelled`] waits on.
    pub(crate) ctx_cancel: CancellationToken,
    /// Fired after the shutdown grace: the handler is dropped at once.
    abandon: CancellationToken,
    /// Progress waiting for the next heartbeat.
    progress: Mutex<Option<Value>>,
    /// The worker's [`Shared::beat_sooner`]: new progress wakes the
    /// heartbeater.
    beat_sooner: Arc<Notify>,
    /// A heartbeat (or the source's push) said someone asked for this job
    /// to be cancelled.
    cancel_requested: AtomicBool,
    /// A heartbeat said another owner has the job: its outcome is discarded.
    lost: AtomicBool,
    /// Set once the handler is done and the outcome is being reported.
    reporting_since: Mutex<Option<Instant>>,
}

impl InFlight {
    fn new(claimed: ClaimedJob, asked: Option<Duration>, beat_sooner: Arc<Notify>) -> Self {
        let lease_ttl = granted_lease(&claimed.job, asked);
        InFlight {
            job: claimed.job,
            token: claimed.lease_token,
            lease_ttl,
            last_beat: Mutex::new(Instant::now()),
            ctx_cancel: CancellationToken::new(),
            abandon: CancellationToken::new(),
            progress: Mutex::new(None),
            beat_sooner,
            cancel_requested: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            reporting_since: Mutex::new(None),
        }
    }

    fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    fn is_cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::SeqCst)
    }

    fn reporting_since(&self) -> Option<Instant> {
        *lock(&self.reporting_since)
    }

    /// Keeps `progress` for the next heartbeat (replacing a value not yet
    /// sent) and, when there was none waiting, wakes the heartbeater so
    /// that it goes out within [`PROGRESS_DELAY`]. Only the first value
    /// since the last heartbeat wakes it: a handler that sets progress in a
    /// tight loop does not spin the heartbeater.
    pub(crate) fn set_progress(&self, progress: Value) {
        let waiting = lock(&self.progress).replace(progress).is_some();
        if !waiting {
            self.beat_sooner.notify_one();
        }
    }

    /// Progress waits to be sent, and the handler is still running (once
    /// the outcome is being reported, the report is what counts).
    fn has_new_progress(&self) -> bool {
        self.reporting_since().is_none() && lock(&self.progress).is_some()
    }

    /// Someone asked for this job to be cancelled (a heartbeat's answer
    /// said so, or the source pushed the request): asks the handler to
    /// stop, once, and marks the job so that its outcome is reported as a
    /// cancellation.
    fn cancel_requested(&self) {
        if !self.cancel_requested.swap(true, Ordering::SeqCst) {
            info!(job_id = %self.job.id, "cancel requested: asking the handler to stop");
            self.ctx_cancel.cancel();
        }
    }

    /// Heartbeats run three times per lease, so one lost or slow heartbeat
    /// never costs it.
    fn heartbeat_interval(&self) -> Duration {
        self.lease_ttl / 3
    }

    /// When this job needs its next heartbeat. A job whose outcome is being
    /// reported is left alone for one interval (a heartbeat that races the
    /// report would only record a spurious `lease_lost`); if the report
    /// takes longer, its lease still needs extending.
    fn beat_due(&self) -> Instant {
        let interval = self.heartbeat_interval();
        let due = *lock(&self.last_beat) + interval;
        match self.reporting_since() {
            Some(since) => due.max(since + interval),
            None => due,
        }
    }
}

/// The lease a claim granted `job`: from the claim's answer
/// (`lease_expires_at − heartbeat_at`, both set by the claim on the store's
/// clock), else what the worker asked for, else the store's default.
fn granted_lease(job: &Job, asked: Option<Duration>) -> Duration {
    let shown = match (job.lease_expires_at, job.heartbeat_at.or(job.started_at)) {
        (Some(expires), Some(from)) => Some((expires - from).num_milliseconds()),
        _ => None,
    };
    match shown {
        Some(ms) if validate::LEASE_TTL_RANGE.contains(&ms) => Duration::from_millis(ms as u64),
        _ => asked.unwrap_or(DEFAULT_LEASE_TTL),
    }
}

/// Locks a mutex, ignoring poisoning: the data behind it stays consistent
/// (single assignments), and a panicking handler must not wedge the runtime.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` unless the worker is aborted first.
async fn killable<F: Future<Output = ()>>(kill: CancellationToken, f: F) {
    tokio::select! {
        biased;
        _ = kill.cancelled() => {}
        _ = f => {}
    }
}

/// Errors worth trying again: the database (or server) is not there right now.
fn is_transient(e: &Error) -> bool {
    matches!(e, Error::Unavailable(_) | Error::Storage(_))
}

/// The job belongs to someone else now (or is gone): our view of it is stale.
fn is_lost(e: &Error) -> bool {
    matches!(e, Error::LeaseLost(_) | Error::JobNotFound(_))
}

/// Doubling delays between retries of a failing source.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Backoff(MIN_BACKOFF)
    }

    fn next(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
        d
    }

    fn reset(&mut self) {
        self.0 = MIN_BACKOFF;
    }
}

/// Calls `f` until it succeeds, fails for good, or [`REPORT_TRIES`] tries
/// failed transiently.
pub(crate) async fn retrying<T, F, Fut>(what: &str, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut backoff = Backoff::new();
    let mut tries = 0;
    loop {
        tries += 1;
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if is_transient(&e) && tries < REPORT_TRIES => {
                let delay = backoff.next();
                warn!(error = %e, tries, "{what} failed; trying again in {} ms", delay.as_millis());
                sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn millis(d: Duration) -> i64 {
    (d.as_millis().min(validate::MAX_DURATION_MS as u128)) as i64
}

/// How often a worker announces itself (see [`Source::announce`]): well
/// inside the 5 minutes after which the server forgets a worker.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(60);

/// Announces the worker now and every [`ANNOUNCE_EVERY`] until it stops
/// claiming. A failed announcement is logged and tried again next time:
/// presence never holds up work.
async fn announce_loop(shared: Arc<Shared>) {
    let config = &shared.config;
    let announcement = WorkerAnnouncement {
        queues: config.queues.iter().map(|q| q.name.clone()).collect(),
        concurrency: config
            .queues
            .iter()
            .map(|q| q.concurrency as u32)
            .sum::<u32>()
            .min(100_000),
        sdk: Some("rust".to_owned()),
        version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        host: host_name(),
        pid: Some(std::process::id()),
    };
    loop {
        if let Err(e) = shared
            .source
            .announce(&config.tenant, &config.worker_id, &announcement)
            .await
        {
            debug!(worker_id = %config.worker_id, error = %e, "announcing the worker failed");
        }
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = tokio::time::sleep(ANNOUNCE_EVERY) => {}
        }
    }
}

/// This machine's name, where the system says it (Linux), else `$HOSTNAME`.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// The worker's main task: starts the loops, waits for the shutdown, then
/// drains in order (claims, handlers, reports, background loops).
async fn supervise(shared: Arc<Shared>) {
    let kill = &shared.kill;
    info!(
        worker_id = %shared.config.worker_id,
        tenant = %shared.config.tenant,
        queues = ?shared.config.queues.iter().map(|q| &q.name).collect::<Vec<_>>(),
        "worker started"
    );
    let heartbeater = tokio::spawn(killable(kill.clone(), heartbeat_loop(shared.clone())));
    let pushed = shared
        .source
        .cancel_requests(&shared.config.tenant)
        .map(|push| {
            tokio::spawn(killable(
                kill.clone(),
                cancel_push_loop(shared.clone(), push),
            ))
        });
    let completer = tokio::spawn(killable(kill.clone(), completer_loop(shared.clone())));
    let announcer = tokio::spawn(killable(kill.clone(), announce_loop(shared.clone())));
    let maintenance = shared.config.maintenance.then(|| {
        let maintenance = Maintenance::new(shared.source.clone(), &shared.config.worker_id)
            .tick(shared.config.maintenance_tick)
            .retention(shared.config.retention);
        tokio::spawn(killable(
            kill.clone(),
            maintenance.run(shared.leader.clone(), shared.drained.clone()),
        ))
    });
    let mut fetchers = Vec::new();
    for q in &shared.config.queues {
        // The queue's slots, shared by its fetchers.
        let slots = Arc::new(Semaphore::new(q.concurrency));
        for _ in 0..q.concurrency.min(shared.source.fetchers_per_queue()) {
            fetchers.push(tokio::spawn(killable(
                kill.clone(),
                fetch_loop(shared.clone(), q.clone(), slots.clone()),
            )));
        }
    }

    shared.stop.cancelled().await;
    info!(worker_id = %shared.config.worker_id, "shutting down: no more claims");
    let _ = announcer.await;
    for f in fetchers {
        let _ = f.await;
    }
    shared.jobs.close();
    if tokio::time::timeout(shared.config.shutdown_grace, shared.jobs.wait())
        .await
        .is_err()
    {
        let left: Vec<Arc<InFlight>> = lock(&shared.inflight).values().cloned().collect();
        warn!(
            worker_id = %shared.config.worker_id,
            jobs = left.len(),
            "handlers still running after the shutdown grace: cancelling them and handing their jobs back"
        );
        for fl in left {
            fl.ctx_cancel.cancel();
            fl.abandon.cancel();
        }
        shared.jobs.wait().await;
    }
    shared.drained.cancel();
    let _ = completer.await;
    let _ = heartbeater.await;
    if let Some(p) = pushed {
        let _ = p.await;
    }
    if let Some(m) = maintenance {
        let _ = m.await;
    }
    info!(worker_id = %shared.config.worker_id, "worker stopped");
}
