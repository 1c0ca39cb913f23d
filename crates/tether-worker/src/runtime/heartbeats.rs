//! The heartbeater: extends every held lease before it lapses, and fires
//! a job's cancellation when the store asks for it or the lease is lost.

use super::*;

/// Longest sleep of the heartbeater while it holds jobs (it is woken
/// sooner by a job due earlier).
pub(super) const HEARTBEAT_IDLE: Duration = Duration::from_secs(3_600);

/// Heartbeats every held job every third of its own lease: wakes when the
/// first job is due, and takes along every job due within the shortest
/// interval among them, so jobs of one lease length share one batch.
pub(super) async fn heartbeat_loop(shared: Arc<Shared>) {
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
            // After a failure, the retry's time alone: the jobs it failed
            // for are overdue (their last beat did not move), and waking
            // for them at once would try again as fast as the errors came
            // back. The retry comes within the shortest interval anyway.
            *at = match retry_at {
                Some(r) => Some(r),
                None => due,
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
pub(super) async fn heartbeat_cycle(shared: &Shared) -> Result<(), Duration> {
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
