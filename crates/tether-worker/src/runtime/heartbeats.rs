//! The heartbeater: extends every held lease before it lapses, carries
//! handlers' progress promptly, and fires a job's cancellation when the
//! store asks for it or the lease is lost; and the consumer of the source's
//! push of cancel requests.

use super::*;

/// Longest sleep of the heartbeater while it holds jobs (it is woken
/// sooner by a job due earlier).
pub(super) const HEARTBEAT_IDLE: Duration = Duration::from_secs(3_600);

/// New progress goes out at most this long after the previous heartbeat
/// cycle ended (at once if that was longer ago): progress is visible within
/// about half a second, and handlers that set it constantly cost the worker
/// at most about two heartbeat requests a second.
pub(super) const PROGRESS_DELAY: Duration = Duration::from_millis(500);

/// Heartbeats every held job every third of its own lease: wakes when the
/// first job is due, and takes along every job due within the shortest
/// interval among them, so jobs of one lease length share one batch. New
/// progress wakes it sooner (see [`PROGRESS_DELAY`]).
pub(super) async fn heartbeat_loop(shared: Arc<Shared>) {
    let mut backoff = Backoff::new();
    // After a failed cycle: when to try again (sooner than the jobs' due).
    let mut retry_at: Option<Instant> = None;
    // When the last cycle ended: new progress waits for PROGRESS_DELAY after it.
    let mut last_cycle: Option<Instant> = None;
    loop {
        let wake = {
            // `beat_at` is set under its lock after reading the jobs, so a
            // job spawned meanwhile finds it and wakes us if due sooner.
            let mut at = lock(&shared.beat_at);
            let (due, progress) = {
                let held = lock(&shared.inflight);
                let due = held.values().map(|fl| fl.beat_due()).min();
                (due, held.values().any(|fl| fl.has_new_progress()))
            };
            let progress_due = progress.then(|| match last_cycle {
                Some(t) => t + PROGRESS_DELAY,
                None => Instant::now(),
            });
            // After a failure, the retry's time alone: the jobs it failed
            // for are overdue (their last beat did not move), and waking
            // for them at once would try again as fast as the errors came
            // back. The retry comes within the shortest interval anyway.
            *at = match retry_at {
                Some(r) => Some(r),
                None => due.into_iter().chain(progress_due).min(),
            };
            *at
        };
        tokio::select! {
            biased;
            _ = shared.drained.cancelled() => break,
            _ = shared.beat_sooner.notified() => continue,
            _ = sleep_until(wake.unwrap_or_else(|| Instant::now() + HEARTBEAT_IDLE)) => {}
        }
        let cycle = heartbeat_cycle(&shared).await;
        last_cycle = Some(Instant::now());
        retry_at = match cycle {
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

/// Heartbeats the held jobs with new progress and, when a job is due now,
/// every job due within the shortest heartbeat interval among them, in
/// batches of at most 1000; answers the shortest interval of a batch that
/// failed, if one did.
pub(super) async fn heartbeat_cycle(shared: &Shared) -> Result<(), Duration> {
    let config = &shared.config;
    let now = Instant::now();
    let held: Vec<Arc<InFlight>> = lock(&shared.inflight).values().cloned().collect();
    let Some(window) = held.iter().map(|fl| fl.heartbeat_interval()).min() else {
        return Ok(());
    };
    // A cycle woken only by new progress carries just that progress: it
    // does not extend every lease twice a second.
    let any_due = held.iter().any(|fl| fl.beat_due() <= now);
    let due: Vec<Arc<InFlight>> = held
        .into_iter()
        .filter(|fl| match fl.reporting_since() {
            // Reporting: only once the report has taken a whole interval.
            Some(since) => since + fl.heartbeat_interval() <= now,
            None => fl.has_new_progress() || (any_due && fl.beat_due() <= now + window),
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
                            if ack.cancel_requested {
                                fl.cancel_requested();
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

/// Takes the source's push of cancel requests (see
/// [`Source::cancel_requests`]) until the worker has drained (handlers
/// running in the shutdown grace still get their requests): a request for a
/// run this worker holds does what a heartbeat's `cancel_requested` answer
/// does, at once. Requests for other jobs (other workers', finished ones)
/// are ignored.
pub(super) async fn cancel_push_loop(shared: Arc<Shared>, mut push: CancelRequests) {
    loop {
        let next = tokio::select! {
            biased;
            _ = shared.drained.cancelled() => break,
            next = push.recv() => next,
        };
        match next {
            Some(CancelPush::Requested { job_id, attempt }) => {
                let held = lock(&shared.inflight).get(&job_id).cloned();
                // The attempt tells this run from a later one, which a
                // request that arrives late must not reach.
                if let Some(fl) = held.filter(|fl| fl.job.attempt == attempt) {
                    fl.cancel_requested();
                }
            }
            Some(CancelPush::Unavailable(reason)) => warn!(
                worker_id = %shared.config.worker_id,
                %reason,
                "cancel requests are not pushed for now: they reach handlers with the next heartbeat"
            ),
            None => {
                debug!("the source's push of cancel requests ended: heartbeats alone deliver them");
                break;
            }
        }
    }
}
