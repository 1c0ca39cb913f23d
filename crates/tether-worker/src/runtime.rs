//! The running worker: fetchers per queue (see `Source::fetchers_per_queue`),
//! one heartbeater, one batching completer, the maintenance loop, and one
//! task per claimed job.
//!
//! Ownership of a job's fate is simple on purpose: the job's own task decides
//! and reports its outcome; the heartbeater only extends leases and fires the
//! job's cancellation when the store says "cancel requested" or "lease lost";
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
    JobState, LeaseToken,
};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument};
use uuid::Uuid;

use crate::builder::{Config, QueueSpec, WorkerBuilder, DEFAULT_LEASE_TTL};
use crate::handler::{Handler, JobContext, JobError, JobResult};
use crate::maintenance::Maintenance;
use crate::outbox::Outbox;
use crate::signals::Signals;
use crate::source::Source;

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
            inflight: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            drained: CancellationToken::new(),
            kill: CancellationToken::new(),
            jobs: TaskTracker::new(),
            outbox,
            leader: Arc::new(AtomicBool::new(false)),
            beat_at: Mutex::new(None),
            beat_sooner: Notify::new(),
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
    /// Wakes the heartbeater when a new job is due before [`Shared::beat_at`].
    beat_sooner: Notify,
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
    pub(crate) progress: Mutex<Option<Value>>,
    /// A heartbeat said someone asked for this job to be cancelled.
    cancel_requested: AtomicBool,
    /// A heartbeat said another owner has the job: its outcome is discarded.
    lost: AtomicBool,
    /// Set once the handler is done and the outcome is being reported.
    reporting_since: Mutex<Option<Instant>>,
}

impl InFlight {
    fn new(claimed: ClaimedJob, asked: Option<Duration>) -> Self {
        let lease_ttl = granted_lease(&claimed.job, asked);
        InFlight {
            job: claimed.job,
            token: claimed.lease_token,
            lease_ttl,
            last_beat: Mutex::new(Instant::now()),
            ctx_cancel: CancellationToken::new(),
            abandon: CancellationToken::new(),
            progress: Mutex::new(None),
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
async fn retrying<T, F, Fut>(what: &str, mut f: F) -> Result<T, Error>
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
    let completer = tokio::spawn(killable(kill.clone(), completer_loop(shared.clone())));
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
    if let Some(m) = maintenance {
        let _ = m.await;
    }
    info!(worker_id = %shared.config.worker_id, "worker stopped");
}

/// Longest wait for more free slots before claiming into a partly busy
/// queue (see `fetch_loop`).
const FETCH_COOLDOWN: Duration = Duration::from_millis(5);

/// Claims for one queue: as many jobs as there are free slots in `slots`
/// (which the queue's other fetchers share), then (when the queue had
/// fewer) waits for a wake-up hint or the poll interval. Each fetcher has
/// its own subscription, so a hint that arrives while it is claiming is
/// kept for its next wait.
async fn fetch_loop(shared: Arc<Shared>, queue: QueueSpec, slots: Arc<Semaphore>) {
    let config = &shared.config;
    // This fetcher's share of the slots per claim: a claim that took every
    // free slot would leave the other fetcher nothing to claim with while
    // it is on its way.
    let fetchers = queue.concurrency.min(shared.source.fetchers_per_queue());
    let share = (queue.concurrency / fetchers).clamp(1, MAX_BATCH);
    // Subscribe before the first claim: a hint sent between an empty claim
    // and the wait is then kept, never missed.
    let mut wakeup = shared.source.subscribe(&config.tenant, &queue.name);
    let mut backoff = Backoff::new();
    loop {
        // Completions that come in from now on wait for this fetcher's next
        // claim (a job's completion goes into the outbox before its slot
        // frees, so the claim that slot lets out carries it).
        let claiming = shared.outbox.claiming();
        let first = tokio::select! {
            biased;
            _ = shared.stop.cancelled() => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let mut permits = vec![first];
        while permits.len() < share {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        // A busy worker would otherwise claim one job per freed slot, a round
        // trip each. Wait briefly for half a share to free up, so claims
        // come in batches; a worker with that much free (an idle one, or
        // one with a job or two running) claims at once, so a new job does
        // not wait out the cooldown.
        let target = (share / 2).max(1);
        if permits.len() < target {
            let deadline = tokio::time::Instant::now() + FETCH_COOLDOWN;
            while permits.len() < share {
                tokio::select! {
                    biased;
                    _ = shared.stop.cancelled() => break,
                    p = tokio::time::timeout_at(deadline, slots.clone().acquire_owned()) => match p {
                        Ok(Ok(p)) => permits.push(p),
                        _ => break,
                    },
                }
            }
        }
        let limit = permits.len();
        let req = ClaimRequest {
            queue: queue.name.clone(),
            worker_id: config.worker_id.clone(),
            limit: limit as u32,
            // Only a TTL the user set: otherwise the queue's applies.
            lease_ttl_ms: config.lease_ttl.map(millis),
        };
        // The claim carries the completions waiting in the outbox.
        let (items, answers): (Vec<Completion>, Vec<_>) =
            shared.outbox.take_for_claim(MAX_BATCH).into_iter().unzip();
        drop(claiming);
        let reports = CarriedReports {
            complete: items,
            fail: Vec::new(),
        };
        // A claim in flight is not interrupted by a shutdown: dropping it
        // halfway could leave jobs claimed that nobody knows about.
        let claimed = shared
            .source
            .report_and_claim(&config.tenant, &req, &reports)
            .await;
        let claimed = match claimed {
            Ok(out) => {
                for (done, r) in answers.into_iter().zip(out.reports) {
                    let _ = done.send(completion_answer(Some(r)));
                }
                Ok(out.jobs)
            }
            Err(e) => {
                // The completer sends them (resending is safe: a repeat is
                // answered like the first).
                shared
                    .outbox
                    .give_back(reports.complete.into_iter().zip(answers).collect());
                Err(e)
            }
        };
        match claimed {
            Ok(claimed) => {
                backoff.reset();
                let n = claimed.len();
                if shared.stop.is_cancelled() {
                    for c in claimed {
                        hand_back_unstarted(&shared, c).await;
                    }
                    break;
                }
                let mut permits = permits.into_iter();
                for c in claimed {
                    match permits.next() {
                        Some(permit) => spawn_job(&shared, &queue.name, c, permit),
                        None => {
                            warn!(job_id = %c.job.id, "the source returned more jobs than asked for; handing it back");
                            hand_back_unstarted(&shared, c).await;
                        }
                    }
                }
                drop(permits);
                if n < limit {
                    tokio::select! {
                        biased;
                        _ = shared.stop.cancelled() => break,
                        _ = wakeup.hinted() => {}
                        _ = sleep(config.poll_interval) => {}
                    }
                }
            }
            Err(e) => {
                drop(permits);
                let delay = backoff.next();
                warn!(queue = %queue.name, error = %e, "claim failed; trying again in {} ms", delay.as_millis());
                tokio::select! {
                    biased;
                    _ = shared.stop.cancelled() => break,
                    _ = sleep(delay) => {}
                }
            }
        }
    }
    debug!(queue = %queue.name, "fetcher stopped");
}

/// Gives back a job claimed while the worker was already stopping.
async fn hand_back_unstarted(shared: &Shared, c: ClaimedJob) {
    let tenant = &shared.config.tenant;
    if let Err(e) = retrying("snooze", || {
        shared.source.snooze(tenant, c.job.id, c.lease_token, 0)
    })
    .await
    {
        warn!(job_id = %c.job.id, error = %e, "could not hand back a job claimed during shutdown; its lease will lapse");
    }
}

fn spawn_job(shared: &Arc<Shared>, queue: &str, claimed: ClaimedJob, permit: OwnedSemaphorePermit) {
    let fl = Arc::new(InFlight::new(claimed, shared.config.lease_ttl));
    lock(&shared.inflight).insert(fl.job.id, fl.clone());
    // Wake the heartbeater if this job is due before it would wake (it
    // sleeps without end while it holds nothing). Locked after the insert:
    // the heartbeater reads the jobs and sets `beat_at` under this lock.
    {
        let due = fl.beat_due();
        let mut at = lock(&shared.beat_at);
        if at.is_none_or(|at| due < at) {
            *at = Some(due);
            shared.beat_sooner.notify_one();
        }
    }
    let span = tracing::info_span!(
        "job",
        job_id = %fl.job.id,
        tenant = %shared.config.tenant,
        queue = %queue,
        kind = %fl.job.kind,
        attempt = fl.job.attempt,
    );
    shared.jobs.spawn(killable(
        shared.kill.clone(),
        run_job(shared.clone(), fl, permit).instrument(span),
    ));
}

/// How a handler run ended, before it is mapped to a report.
enum Ended {
    /// The handler answered.
    Returned(JobResult),
    /// No handler is registered for the job's kind.
    NoHandler,
    /// The handler panicked with this message.
    Panicked(String),
    /// `timeout_ms` elapsed; the handler was dropped.
    TimedOut(i64),
    /// The handler was asked to stop and did not within one lease TTL.
    Unanswered,
    /// Shutdown grace over; the handler was dropped.
    Abandoned,
}

/// One job from start to acknowledged outcome.
async fn run_job(shared: Arc<Shared>, fl: Arc<InFlight>, permit: OwnedSemaphorePermit) {
    let handler = shared.handlers.get(&fl.job.kind).cloned();
    let started = Instant::now();
    let ended = match handler {
        Some(h) => execute(&fl, h).await,
        None => Ended::NoHandler,
    };
    let labels = [
        ("queue", fl.job.queue.clone()),
        ("kind", fl.job.kind.clone()),
    ];
    if !matches!(ended, Ended::NoHandler) {
        metrics::histogram!("tether_worker_handler_duration_seconds", &labels)
            .record(started.elapsed().as_secs_f64());
    }
    // The handler is done: its slot frees now, not after the report's round
    // trip (a success's once it is in the outbox, where the claim the slot
    // lets out finds it). The job stays in flight (heartbeated) until the
    // report lands.
    *lock(&fl.reporting_since) = Some(Instant::now());
    let outcome = report(&shared, &fl, ended, permit).await;
    if let Some(outcome) = outcome {
        metrics::counter!(
            "tether_worker_jobs_total",
            "queue" => fl.job.queue.clone(),
            "kind" => fl.job.kind.clone(),
            "outcome" => outcome
        )
        .increment(1);
    }
    lock(&shared.inflight).remove(&fl.job.id);
}

/// Runs the handler until it answers, panics, times out, ignores a
/// cancellation for a lease TTL, or is abandoned at shutdown. A snooze is
/// an answer like any other: it is reported, never slept here.
async fn execute(fl: &Arc<InFlight>, handler: Handler) -> Ended {
    let timeout_ms = fl.job.timeout_ms.filter(|ms| *ms > 0);
    let deadline = timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms as u64));
    let ctx = JobContext {
        inflight: fl.clone(),
    };
    // Calling the handler inside the future catches a panic while it builds
    // its future as well as one while it runs.
    let run = AssertUnwindSafe(async move { handler(ctx).await }).catch_unwind();
    let timeout = async {
        match deadline {
            Some(d) => sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    // A handler asked to stop gets one lease TTL to do so.
    let unanswered = async {
        fl.ctx_cancel.cancelled().await;
        sleep(fl.lease_ttl).await
    };
    let answer = tokio::select! {
        biased;
        _ = fl.abandon.cancelled() => return Ended::Abandoned,
        r = run => r,
        _ = timeout => {
            fl.ctx_cancel.cancel();
            return Ended::TimedOut(timeout_ms.unwrap_or_default());
        }
        _ = unanswered => return Ended::Unanswered,
    };
    match answer {
        Ok(a) => Ended::Returned(a),
        Err(panic) => Ended::Panicked(panic_message(panic.as_ref())),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// What became of a report.
enum Reported {
    /// The store took it; the job is now in this state.
    Done(JobState),
    /// The job belongs to someone else: nothing changed.
    LeaseLost,
    /// The store refused the report for good.
    Rejected(Error),
    /// The source stayed unavailable through every try.
    GaveUp(Error),
}

impl Reported {
    fn from_result(r: Result<JobState, Error>) -> Self {
        match r {
            Ok(state) => Reported::Done(state),
            Err(e) if is_lost(&e) => Reported::LeaseLost,
            Err(e) if is_transient(&e) => Reported::GaveUp(e),
            Err(e) => Reported::Rejected(e),
        }
    }
}

/// Reports how a run ended; answers the metric outcome to count (none when
/// the report could not be made).
async fn report(
    shared: &Shared,
    fl: &InFlight,
    ended: Ended,
    permit: OwnedSemaphorePermit,
) -> Option<&'static str> {
    let config = &shared.config;
    let success =
        matches!(ended, Ended::Returned(Ok(_))) && !fl.is_lost() && !fl.is_cancel_requested();
    // Any other outcome's slot frees now.
    let permit = success.then_some(permit);
    if fl.is_lost() {
        warn!("lease lost while the handler ran (another owner has the job): its outcome is discarded");
        return Some("lease_lost");
    }
    let (failure, fixed_outcome) = match ended {
        Ended::Abandoned => {
            let r = snooze(shared, fl, 0).await;
            return settle(r, |state| {
                info!(%state, "handed back at shutdown (attempt given back)");
                snooze_outcome(state)
            });
        }
        // Whatever the handler answers once a cancel was requested, the
        // worker acknowledges the cancellation.
        _ if fl.is_cancel_requested() => (
            Failure {
                error: "cancelled on request".to_owned(),
                cancelled: true,
                ..Failure::default()
            },
            Some("cancelled"),
        ),
        Ended::Unanswered => (
            Failure {
                error: "cancelled: the handler did not stop when asked".to_owned(),
                cancelled: true,
                ..Failure::default()
            },
            Some("cancelled"),
        ),
        Ended::NoHandler => (
            Failure {
                error: format!(
                    "no handler for kind {} on worker {}",
                    fl.job.kind, config.worker_id
                ),
                ..Failure::default()
            },
            None,
        ),
        Ended::Panicked(msg) => (
            Failure {
                error: format!("handler panicked: {msg}"),
                ..Failure::default()
            },
            Some("panicked"),
        ),
        Ended::TimedOut(ms) => (
            Failure {
                error: format!("timed out after {ms} ms"),
                ..Failure::default()
            },
            Some("timed_out"),
        ),
        Ended::Returned(Ok(result)) => return complete(shared, fl, result, permit).await,
        Ended::Returned(Err(JobError::Snooze(d))) => {
            let r = snooze(shared, fl, millis(d)).await;
            return settle(r, |state| {
                debug!(%state, delay_ms = millis(d), "snoozed");
                snooze_outcome(state)
            });
        }
        Ended::Returned(Err(JobError::Retry(error))) => (
            Failure {
                error,
                ..Failure::default()
            },
            None,
        ),
        Ended::Returned(Err(JobError::RetryAfter { error, after })) => (
            Failure {
                error,
                retry_after_ms: Some(millis(after)),
                ..Failure::default()
            },
            None,
        ),
        Ended::Returned(Err(JobError::Fatal(error))) => (
            Failure {
                error,
                fatal: true,
                ..Failure::default()
            },
            None,
        ),
        Ended::Returned(Err(JobError::Cancelled)) => (
            Failure {
                error: "cancelled by the handler".to_owned(),
                cancelled: true,
                ..Failure::default()
            },
            Some("cancelled"),
        ),
    };
    let error = failure.error.clone();
    let r = fail(shared, fl, failure).await;
    settle(r, |state| {
        match state {
            JobState::Queued => info!(%error, "attempt failed; retry scheduled"),
            state => warn!(%state, %error, "attempt failed"),
        }
        fixed_outcome.unwrap_or(match state {
            JobState::Queued => "retried",
            JobState::Cancelled => "cancelled",
            _ => "failed",
        })
    })
}

/// A snooze of a job whose cancel was requested ends it `cancelled`.
fn snooze_outcome(state: JobState) -> &'static str {
    match state {
        JobState::Cancelled => "cancelled",
        _ => "snoozed",
    }
}

/// Logs the fate of a report and picks the metric outcome (`on_done` logs a
/// report the store took and names its outcome).
fn settle(r: Reported, on_done: impl FnOnce(JobState) -> &'static str) -> Option<&'static str> {
    match r {
        Reported::Done(state) => Some(on_done(state)),
        Reported::LeaseLost => {
            warn!("lease lost (another owner has the job): the outcome is discarded");
            Some("lease_lost")
        }
        Reported::Rejected(e) => {
            error!(error = %e, "the outcome was refused; the lease will lapse and the reaper requeue the job");
            report_error();
            None
        }
        Reported::GaveUp(e) => {
            error!(error = %e, "could not report the outcome; the lease will lapse and the reaper requeue the job");
            report_error();
            None
        }
    }
}

fn report_error() {
    metrics::counter!("tether_worker_report_errors_total").increment(1);
}

async fn fail(shared: &Shared, fl: &InFlight, failure: Failure) -> Reported {
    let tenant = &shared.config.tenant;
    Reported::from_result(
        retrying("fail", || {
            shared
                .source
                .fail(tenant, fl.job.id, fl.token, failure.clone())
        })
        .await,
    )
}

async fn snooze(shared: &Shared, fl: &InFlight, delay_ms: i64) -> Reported {
    let tenant = &shared.config.tenant;
    Reported::from_result(
        retrying("snooze", || {
            shared.source.snooze(tenant, fl.job.id, fl.token, delay_ms)
        })
        .await,
    )
}

/// Hands a success to the completer and waits for its answer. A result the
/// store refuses (e.g. too large) fails the attempt instead, so the job does
/// not sit in `running` until its lease lapses.
async fn complete(
    shared: &Shared,
    fl: &InFlight,
    result: Option<Value>,
    permit: Option<OwnedSemaphorePermit>,
) -> Option<&'static str> {
    let (tx, rx) = oneshot::channel();
    let item = Completion {
        id: fl.job.id,
        lease_token: fl.token,
        result,
    };
    shared.outbox.push(item, tx);
    drop(permit);
    let answer = rx
        .await
        .unwrap_or_else(|_| Reported::GaveUp(Error::Storage("the completer stopped".into())));
    match answer {
        Reported::Rejected(e) => {
            warn!(error = %e, "the result was refused; failing the attempt");
            let failure = Failure {
                error: format!("the result could not be stored: {e}"),
                ..Failure::default()
            };
            let r = fail(shared, fl, failure).await;
            settle(r, |_| "failed")
        }
        other => settle(other, |_| {
            debug!("succeeded");
            "succeeded"
        }),
    }
}

/// A success waiting for the completer: its completion and who waits for
/// the answer.
type PendingCompletion = (Completion, oneshot::Sender<Reported>);

/// Most completions in one `complete_many`: small enough that several
/// batches can be in flight at once.
const COMPLETION_BATCH: usize = 250;
/// Most `complete_many` calls in flight at once.
const COMPLETIONS_IN_FLIGHT: usize = 4;

/// Sends the completions no claim carries: the ones that came in while no
/// fetcher was about to claim, the ones a claim left for the source's
/// [`report_wait`](Source::report_wait),
/// those of a claim that failed, and everything once the worker stops. Up
/// to [`COMPLETIONS_IN_FLIGHT`] batches of [`COMPLETION_BATCH`] in flight;
/// a batch gathers whatever is due when it goes. Batches never share a
/// job, so concurrent ones cannot conflict.
async fn completer_loop(shared: Arc<Shared>) {
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        let stopping = shared.stop.is_cancelled();
        let (batch, next_due) = shared.outbox.due(stopping, COMPLETION_BATCH);
        if !batch.is_empty() {
            while in_flight.len() >= COMPLETIONS_IN_FLIGHT {
                in_flight.join_next().await;
            }
            let shared = shared.clone();
            in_flight.spawn(async move { complete_batch(&shared, batch).await });
            continue;
        }
        // Every job task has ended (none can add to the outbox) and the
        // outbox is empty: done.
        if shared.drained.is_cancelled() && shared.outbox.is_empty() {
            break;
        }
        let falls_due = async {
            match next_due {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = shared.outbox.changed.notified() => {}
            _ = falls_due => {}
            _ = shared.stop.cancelled(), if !stopping => {}
            _ = shared.drained.cancelled() => {}
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
        }
    }
    while in_flight.join_next().await.is_some() {}
    debug!("completer stopped");
}

/// The answer a job task hears for its completion (`None`: none came).
fn completion_answer(answer: Option<Result<(), Error>>) -> Reported {
    match answer {
        Some(Ok(())) => Reported::Done(JobState::Succeeded),
        Some(Err(e)) if is_lost(&e) => Reported::LeaseLost,
        Some(Err(e)) if is_transient(&e) => Reported::GaveUp(e),
        Some(Err(e)) => Reported::Rejected(e),
        None => Reported::GaveUp(Error::Storage(
            "complete_many answered fewer items than it was given".into(),
        )),
    }
}

async fn complete_batch(shared: &Shared, batch: Vec<PendingCompletion>) {
    let tenant = &shared.config.tenant;
    let (items, waiting): (Vec<Completion>, Vec<_>) = batch.into_iter().unzip();
    match retrying("complete", || shared.source.complete_many(tenant, &items)).await {
        Ok(answers) => {
            let mut answers = answers.into_iter();
            for done in waiting {
                let _ = done.send(completion_answer(answers.next()));
            }
        }
        Err(e) if is_transient(&e) => {
            for done in waiting {
                let _ = done.send(Reported::GaveUp(clone_error(&e)));
            }
        }
        // The batch was refused whole (one oversize result refuses them all):
        // send each alone so only the culprit is refused.
        Err(e) if items.len() > 1 => {
            debug!(error = %e, "batch refused; completing one by one");
            for (item, done) in items.into_iter().zip(waiting) {
                let one = [item];
                let r = retrying("complete", || shared.source.complete_many(tenant, &one)).await;
                let answer = match r.map(|mut a| a.pop()) {
                    Ok(Some(Ok(()))) => Reported::Done(JobState::Succeeded),
                    Ok(Some(Err(e))) | Err(e) => Reported::from_result(Err(e)),
                    Ok(None) => {
                        Reported::GaveUp(Error::Storage("complete_many answered no item".into()))
                    }
                };
                let _ = done.send(answer);
            }
        }
        Err(e) => {
            let answer = Reported::from_result(Err(e));
            for done in waiting {
                let _ = done.send(match &answer {
                    Reported::Rejected(e) => Reported::Rejected(clone_error(e)),
                    Reported::LeaseLost => Reported::LeaseLost,
                    Reported::GaveUp(e) => Reported::GaveUp(clone_error(e)),
                    Reported::Done(s) => Reported::Done(*s),
                });
            }
        }
    }
}

/// tether's error is not `Clone` (it carries sources); keep its code and text.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Unavailable(_) => Error::Unavailable(e.to_string().into()),
        Error::LeaseLost(id) => Error::LeaseLost(*id),
        Error::JobNotFound(id) => Error::JobNotFound(*id),
        _ => Error::Storage(e.to_string().into()),
    }
}

/// Longest sleep of the heartbeater while it holds jobs (it is woken
/// sooner by a job due earlier).
const HEARTBEAT_IDLE: Duration = Duration::from_secs(3_600);

/// Heartbeats every held job every third of its own lease: wakes when the
/// first job is due, and takes along every job due within the shortest
/// interval among them, so jobs of one lease length share one batch.
async fn heartbeat_loop(shared: Arc<Shared>) {
    let mut backoff = Backoff::new();
    // After a failed cycle: when to try again (sooner than the jobs' due).
    let mut retry_at: Option<Instant> = None;
    loop {
        let wake = {
            // `beat_at` is set under its lock after reading the jobs, so a
            // job spawned meanwhile finds it and wakes us if due sooner.
            let mut at = lock(&shared.beat_at);
            let due = lock(&shared.inflight)
                .values()
                .map(|fl| fl.beat_due())
                .min();
            *at = match (retry_at, due) {
                (Some(r), Some(d)) => Some(r.min(d)),
                (_, d) => d,
            };
            *at
        };
        tokio::select! {
            biased;
            _ = shared.drained.cancelled() => break,
            _ = shared.beat_sooner.notified() => continue,
            _ = sleep_until(wake.unwrap_or_else(|| Instant::now() + HEARTBEAT_IDLE)) => {}
        }
        retry_at = match heartbeat_cycle(&shared).await {
            Ok(()) => {
                backoff.reset();
                None
            }
            // Try again soon: two more failures would cost the leases.
            Err(interval) => Some(Instant::now() + backoff.next().min(interval)),
        };
    }
    debug!("heartbeater stopped");
}

/// Heartbeats the held jobs that are due now or within the shortest
/// heartbeat interval among them, in batches of at most 1000; answers the
/// shortest interval of a batch that failed, if one did.
async fn heartbeat_cycle(shared: &Shared) -> Result<(), Duration> {
    let config = &shared.config;
    let now = Instant::now();
    let held: Vec<Arc<InFlight>> = lock(&shared.inflight).values().cloned().collect();
    let Some(window) = held.iter().map(|fl| fl.heartbeat_interval()).min() else {
        return Ok(());
    };
    let due: Vec<Arc<InFlight>> = held
        .into_iter()
        .filter(|fl| match fl.reporting_since() {
            // Reporting: only once the report has taken a whole interval.
            Some(since) => since + fl.heartbeat_interval() <= now,
            None => fl.beat_due() <= now + window,
        })
        .collect();
    let mut failed: Option<Duration> = None;
    for chunk in due.chunks(MAX_BATCH) {
        let items: Vec<Heartbeat> = chunk
            .iter()
            .map(|fl| Heartbeat {
                id: fl.job.id,
                lease_token: fl.token,
                // The claim's TTL: the lease the queue (or the worker) chose.
                lease_ttl_ms: None,
                progress: lock(&fl.progress).take(),
            })
            .collect();
        let sent = Instant::now();
        match shared.source.heartbeat_many(&config.tenant, &items).await {
            Ok(answers) => {
                for fl in chunk {
                    *lock(&fl.last_beat) = sent;
                }
                for (fl, answer) in chunk.iter().zip(answers) {
                    match answer {
                        Ok(ack) => {
                            if ack.cancel_requested
                                && !fl.cancel_requested.swap(true, Ordering::SeqCst)
                            {
                                info!(job_id = %fl.job.id, "cancel requested: asking the handler to stop");
                                fl.ctx_cancel.cancel();
                            }
                        }
                        Err(e) if is_lost(&e) => {
                            // While the outcome is being reported, the report
                            // itself learns (and logs) the loss.
                            if fl.reporting_since().is_none()
                                && !fl.lost.swap(true, Ordering::SeqCst)
                            {
                                warn!(job_id = %fl.job.id, "heartbeat: lease lost to another owner; stopping the handler");
                                fl.ctx_cancel.cancel();
                            }
                        }
                        Err(e) => warn!(job_id = %fl.job.id, error = %e, "heartbeat refused"),
                    }
                }
            }
            Err(e) => {
                let shortest = chunk
                    .iter()
                    .map(|fl| fl.heartbeat_interval())
                    .min()
                    .unwrap_or(window);
                failed = Some(failed.map_or(shortest, |f| f.min(shortest)));
                warn!(jobs = chunk.len(), error = %e, "heartbeat failed");
                // Keep the progress for the next cycle unless a newer one came.
                for (fl, item) in chunk.iter().zip(items) {
                    if let Some(p) = item.progress {
                        let mut slot = lock(&fl.progress);
                        if slot.is_none() {
                            *slot = Some(p);
                        }
                    }
                }
            }
        }
    }
    failed.map_or(Ok(()), Err)
}
