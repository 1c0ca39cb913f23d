//! The maintenance duty: every node takes part in electing one leader under
//! the named lease [`MAINTENANCE_LEASE`], and only the leader reaps lapsed
//! job leases, expires queued jobs past `expires_at`, prunes finished jobs
//! and old schedule runs, removes queue rows that hold nothing (no job, no
//! settings), and fires due schedules. The same lease-and-fencing mechanism that guards jobs guards the
//! leadership: a leader that cannot renew stops acting, and a dead leader is
//! replaced once its lease (three ticks) lapses.
//!
//! A [`crate::Worker`] runs this loop itself unless told otherwise; a
//! process with no worker (`tether serve`) starts a [`Maintenance`] directly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tether_core::lifecycle::MAINTENANCE_LEASE;
use tether_core::{validate, Error, LeaseToken};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::source::Source;

/// Default retention of finished jobs before the maintenance leader prunes them.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default interval of the maintenance loop.
pub const DEFAULT_MAINTENANCE_TICK: Duration = Duration::from_secs(1);
/// Most jobs (or schedules) one maintenance pass touches; pruning starts
/// here and adapts to the backlog.
pub const MAINTENANCE_BATCH: u32 = 1_000;
/// A maintenance pass that came back full runs again, at most this many
/// times per tick, so a huge backlog cannot starve the lease renewal.
const MAINTENANCE_ROUNDS: usize = 10;
/// Fewest finished jobs one prune pass deletes.
pub(crate) const PRUNE_BATCH_MIN: u32 = 500;
/// Most finished jobs one prune pass deletes: the most a maintenance call
/// takes (the engine refuses a larger batch).
pub(crate) const PRUNE_BATCH_MAX: u32 = validate::MAX_REPLAY;
/// How long one prune pass may take: a slower one halves the batch, so a
/// delete never holds its row locks (on SQLite, the write lock) for long.
/// A full pass in under half of it doubles the batch. Generous, because a
/// pass has a fixed cost (finding the oldest rows, the commit) that a
/// loaded server makes large: too small a batch would prune fewer rows per
/// second than it finishes.
pub(crate) const PRUNE_PASS_TARGET: Duration = Duration::from_millis(250);

/// One node's part in maintenance: configure it, then [`Maintenance::start`].
#[derive(Clone)]
pub struct Maintenance {
    source: Arc<dyn Source>,
    holder: String,
    tick: Duration,
    retention: Duration,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("holder", &self.holder)
            .field("tick", &self.tick)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl Maintenance {
    /// Maintenance over `source`, electing under the holder id `holder`
    /// (shown as the lease's holder; use something that names the node).
    pub fn new(source: Arc<dyn Source>, holder: impl Into<String>) -> Self {
        Maintenance {
            source,
            holder: holder.into(),
            tick: DEFAULT_MAINTENANCE_TICK,
            retention: DEFAULT_RETENTION,
        }
    }

    /// Interval of the loop (default 1 s). The leader lease lasts three
    /// ticks (at least 1 s), so a dead leader is replaced that fast.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// How long finished jobs are kept before they are pruned (default 7 days).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The leader lease's length: three ticks, within the lease TTL range.
    pub fn lease_ttl_ms(&self) -> i64 {
        (self.tick.as_millis().min(i64::MAX as u128) as i64)
            .saturating_mul(3)
            .clamp(
                *validate::LEASE_TTL_RANGE.start(),
                *validate::LEASE_TTL_RANGE.end(),
            )
    }

    /// Starts the loop on the current Tokio runtime.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn start(self) -> MaintenanceHandle {
        let leader = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let kill = CancellationToken::new();
        let run = self.run(leader.clone(), stop.clone());
        let killed = kill.clone();
        let join = tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = killed.cancelled() => {}
                _ = run => {}
            }
        });
        MaintenanceHandle {
            leader,
            stop,
            kill,
            join,
        }
    }

    /// Takes part in the election every tick and, while leading, maintains;
    /// on `stop` releases the lease so another node takes over at once.
    /// `leader` tells whether this node's leadership is confirmed.
    pub(crate) async fn run(self, leader: Arc<AtomicBool>, stop: CancellationToken) {
        let ttl_ms = self.lease_ttl_ms();
        let mut held: Option<LeaseToken> = None;
        let mut prune_batch = MAINTENANCE_BATCH;
        loop {
            let mut confirmed = false;
            held = match held {
                Some(token) => match self
                    .source
                    .renew_lease(MAINTENANCE_LEASE, token, ttl_ms)
                    .await
                {
                    Ok(lease) => {
                        confirmed = true;
                        Some(lease.token)
                    }
                    Err(Error::NamedLeaseLost(_) | Error::LeaseLost(_)) => {
                        info!(holder = %self.holder, "maintenance leadership lost to another node");
                        None
                    }
                    Err(e) => {
                        // Unsure: keep the token (a lapsed lease nobody took
                        // is still ours to renew) but do not act until
                        // confirmed.
                        warn!(error = %e, "renewing the maintenance lease failed");
                        Some(token)
                    }
                },
                None => match self
                    .source
                    .acquire_lease(MAINTENANCE_LEASE, &self.holder, ttl_ms)
                    .await
                {
                    Ok(Some(lease)) => {
                        info!(holder = %self.holder, "became the maintenance leader");
                        confirmed = true;
                        Some(lease.token)
                    }
                    Ok(None) => None,
                    Err(e) => {
                        warn!(error = %e, "acquiring the maintenance lease failed");
                        None
                    }
                },
            };
            leader.store(confirmed, Ordering::SeqCst);
            let tick_end = Instant::now() + self.tick;
            if let (true, Some(token)) = (confirmed, held) {
                // Every pass of this tick is fenced by the lease in the
                // database: a statement that arrives after the lease lapsed
                // (a slow or cut link) changes nothing.
                self.source
                    .fence_maintenance(Some((MAINTENANCE_LEASE, token)));
                self.maintain(&mut prune_batch).await;
                self.fire_schedules_until(tick_end, &stop).await;
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = sleep_until(tick_end) => {}
            }
        }
        leader.store(false, Ordering::SeqCst);
        // Passes run by hand after this (tests, tools) are not this loop's.
        self.source.fence_maintenance(None);
        if let Some(token) = held {
            match self.source.release_lease(MAINTENANCE_LEASE, token).await {
                Ok(()) => info!(holder = %self.holder, "maintenance lease released"),
                Err(e) => {
                    warn!(error = %e, "releasing the maintenance lease failed; it will lapse")
                }
            }
        }
    }

    /// Fires schedules as they come due until `end` (the next election):
    /// sleeps until the earliest `next_run_at` rather than a whole tick, so
    /// a per-second schedule fires on time. The leader lease outlasts the
    /// tick, so this never runs on a node whose leadership has lapsed
    /// unnoticed; and a fire is a compare-and-set, so even then it could not
    /// double one.
    async fn fire_schedules_until(&self, end: Instant, stop: &CancellationToken) {
        // Instants missed by up to two lease TTLs (a leader failover: the
        // old lease lapses, then a follower's next tick takes it) are each
        // fired late; a longer outage collapses into one run.
        let catch_up = Duration::from_millis(2 * self.lease_ttl_ms() as u64);
        let mut idle_passes = 0;
        loop {
            let report = match self
                .source
                .fire_due_schedules(MAINTENANCE_BATCH, catch_up)
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    warn!(error = %e, "scheduler pass failed");
                    return;
                }
            };
            if report.enqueued + report.skipped > 0 {
                debug!(
                    enqueued = report.enqueued,
                    skipped = report.skipped,
                    raced = report.raced,
                    "fired schedules"
                );
            }
            if report.failed > 0 {
                warn!(
                    schedules = report.failed,
                    "schedules whose definition no longer parses were not fired"
                );
            }
            if report.total() >= u64::from(MAINTENANCE_BATCH) {
                continue;
            }
            let wait = match self.source.next_schedule_due().await {
                Ok(Some(wait)) => wait,
                Ok(None) => return,
                Err(e) => {
                    warn!(error = %e, "reading the next schedule due failed");
                    return;
                }
            };
            if wait.is_zero() {
                if report.enqueued + report.skipped > 0 {
                    // Catching up, one instant per pass: go on at once.
                    idle_passes = 0;
                    continue;
                }
                // Due, yet the pass fired nothing. Once, that is an instant
                // that came due between the pass and this read: go again.
                // Twice in a row, only unfireable schedules are left: try
                // again next tick instead of spinning.
                idle_passes += 1;
                if idle_passes == 1 {
                    continue;
                }
                return;
            }
            idle_passes = 0;
            let wake = Instant::now() + wait;
            if wake >= end {
                return;
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = sleep_until(wake) => {}
            }
        }
    }

    /// One round of maintenance: each pass repeats while it came back full;
    /// pruning within its time budget, with the adapted `prune_batch`.
    async fn maintain(&self, prune_batch: &mut u32) {
        let source = &self.source;
        let full = u64::from(MAINTENANCE_BATCH);
        for _ in 0..MAINTENANCE_ROUNDS {
            match source.reap_lapsed_leases(MAINTENANCE_BATCH).await {
                Ok(r) => {
                    if r.total() > 0 {
                        info!(
                            requeued = r.requeued,
                            failed = r.failed,
                            cancelled = r.cancelled,
                            "reaped jobs with lapsed leases"
                        );
                    }
                    if r.total() < full {
                        break;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "reaper pass failed");
                    break;
                }
            }
        }
        for _ in 0..MAINTENANCE_ROUNDS {
            match source.expire_jobs(MAINTENANCE_BATCH).await {
                Ok(n) => {
                    if n > 0 {
                        info!(expired = n, "expired queued jobs");
                    }
                    if n < full {
                        break;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "expiry pass failed");
                    break;
                }
            }
        }
        let retention_ms = self.retention.as_millis().min(i64::MAX as u128) as i64;
        self.prune_finished(retention_ms, prune_batch).await;
        match source
            .prune_schedule_runs(retention_ms, MAINTENANCE_BATCH)
            .await
        {
            Ok(n) if n > 0 => debug!(pruned = n, "pruned schedule runs"),
            Ok(_) => {}
            Err(e) => warn!(error = %e, "pruning schedule runs failed"),
        }
        // Queue rows with no job and default settings: each one counts
        // against its tenant's queue limit and is a set of /metrics series.
        match source.prune_empty_queues(MAINTENANCE_BATCH).await {
            Ok(n) if n > 0 => debug!(removed = n, "removed empty queues"),
            Ok(_) => {}
            Err(e) => warn!(error = %e, "removing empty queues failed"),
        }
    }
}

impl Maintenance {
    /// Prunes finished jobs while passes come back full, for at most three
    /// quarters of a tick (the reaper and expiry ran before it): the rest
    /// stays for the schedules, and the next election (the lease lasts
    /// three ticks) is never late. The batch
    /// carries over from tick to tick, so it settles where a pass takes
    /// about [`PRUNE_PASS_TARGET`] and a backlog drains at the rate the
    /// database can delete.
    async fn prune_finished(&self, retention_ms: i64, batch: &mut u32) {
        let budget_end = Instant::now() + self.tick * 3 / 4;
        loop {
            let started = Instant::now();
            let pruned = match self.source.prune_finished(retention_ms, *batch).await {
                Ok(n) => n,
                Err(e) => {
                    // Smaller next time: a pass that failed may have been
                    // too big to finish.
                    warn!(error = %e, batch = *batch, "pruning pass failed");
                    *batch = (*batch / 2).max(PRUNE_BATCH_MIN);
                    return;
                }
            };
            let took = started.elapsed();
            if pruned > 0 {
                debug!(
                    pruned,
                    batch = *batch,
                    took_ms = took.as_millis() as u64,
                    "pruned finished jobs"
                );
            }
            let full = pruned >= u64::from(*batch);
            *batch = next_prune_batch(*batch, pruned, took);
            if !full || Instant::now() >= budget_end {
                return;
            }
        }
    }
}

/// The prune batch after a pass of `batch` that deleted `pruned` jobs in
/// `took`: halved when the pass was slower than [`PRUNE_PASS_TARGET`],
/// doubled when it came back full in under half of it (a backlog, and room
/// to take it faster), else unchanged; always within [`PRUNE_BATCH_MIN`]
/// and [`PRUNE_BATCH_MAX`].
pub(crate) fn next_prune_batch(batch: u32, pruned: u64, took: Duration) -> u32 {
    let next = if took > PRUNE_PASS_TARGET {
        batch / 2
    } else if pruned >= u64::from(batch) && took < PRUNE_PASS_TARGET / 2 {
        batch.saturating_mul(2)
    } else {
        batch
    };
    next.clamp(PRUNE_BATCH_MIN, PRUNE_BATCH_MAX)
}

/// Controls a started [`Maintenance`].
#[derive(Debug)]
pub struct MaintenanceHandle {
    leader: Arc<AtomicBool>,
    stop: CancellationToken,
    kill: CancellationToken,
    join: tokio::task::JoinHandle<()>,
}

impl MaintenanceHandle {
    /// Whether this node currently acts as the maintenance leader.
    pub fn is_leader(&self) -> bool {
        // An aborted loop never got to clear the flag.
        self.leader.load(Ordering::SeqCst) && !self.kill.is_cancelled()
    }

    /// Stops after the current round and releases the lease, so another
    /// node takes over at once; [`Self::join`] waits for it.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// Stops at once without releasing the lease, as if the process had
    /// died: another node takes over when the lease lapses. For tests.
    pub fn abort(&self) {
        self.stop.cancel();
        self.kill.cancel();
    }

    /// Waits until the loop has stopped.
    pub async fn join(self) {
        if let Err(e) = self.join.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_millis(10);
    const SLOW: Duration = Duration::from_millis(400);

    #[test]
    fn a_full_fast_pass_doubles_the_batch_up_to_the_cap() {
        assert_eq!(next_prune_batch(1_000, 1_000, FAST), 2_000);
        assert_eq!(next_prune_batch(8_000, 8_000, FAST), PRUNE_BATCH_MAX);
        assert_eq!(
            next_prune_batch(PRUNE_BATCH_MAX, u64::from(PRUNE_BATCH_MAX), FAST),
            PRUNE_BATCH_MAX
        );
    }

    #[test]
    fn a_slow_pass_halves_the_batch_down_to_the_floor() {
        assert_eq!(next_prune_batch(8_000, 8_000, SLOW), 4_000);
        assert_eq!(next_prune_batch(8_000, 10, SLOW), 4_000);
        assert_eq!(next_prune_batch(700, 700, SLOW), PRUNE_BATCH_MIN);
    }

    #[test]
    fn a_partial_or_middling_pass_keeps_the_batch() {
        // Not full: no backlog to take faster.
        assert_eq!(next_prune_batch(4_000, 3_999, FAST), 4_000);
        // Full, within the target but not well under it: settled.
        assert_eq!(next_prune_batch(4_000, 4_000, PRUNE_PASS_TARGET), 4_000);
        assert_eq!(next_prune_batch(4_000, 4_000, PRUNE_PASS_TARGET / 2), 4_000);
    }

    #[test]
    fn the_batch_always_lands_within_its_bounds() {
        assert_eq!(next_prune_batch(0, 0, FAST), PRUNE_BATCH_MIN);
        assert_eq!(next_prune_batch(u32::MAX, u64::MAX, FAST), PRUNE_BATCH_MAX);
        assert_eq!(next_prune_batch(u32::MAX, 0, SLOW), PRUNE_BATCH_MAX);
    }
}
