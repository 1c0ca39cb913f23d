//! The fetchers: claims for one queue as slots free up, each carrying the
//! reports waiting for it, and the task each claimed job gets.

use super::*;

/// Longest wait for more free slots before claiming into a partly busy
/// queue (see `fetch_loop`).
pub(super) const FETCH_COOLDOWN: Duration = Duration::from_millis(5);

/// Claims for one queue: as many jobs as there are free slots in `slots`
/// (which the queue's other fetchers share), then (when the queue had
/// fewer) waits for a wake-up hint or the poll interval. Each fetcher has
/// its own subscription, so a hint that arrives while it is claiming is
/// kept for its next wait.
pub(super) async fn fetch_loop(shared: Arc<Shared>, queue: QueueSpec, slots: Arc<Semaphore>) {
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
pub(super) async fn hand_back_unstarted(shared: &Shared, c: ClaimedJob) {
    let tenant = &shared.config.tenant;
    if let Err(e) = retrying("snooze", || {
        shared.source.snooze(tenant, c.job.id, c.lease_token, 0)
    })
    .await
    {
        warn!(job_id = %c.job.id, error = %e, "could not hand back a job claimed during shutdown; its lease will lapse");
    }
}

pub(super) fn spawn_job(
    shared: &Arc<Shared>,
    queue: &str,
    claimed: ClaimedJob,
    permit: OwnedSemaphorePermit,
) {
    let fl = Arc::new(InFlight::new(
        claimed,
        shared.config.lease_ttl,
        shared.beat_sooner.clone(),
    ));
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
        // The W3C trace context the job was enqueued with, for a
        // subscriber (or a `before` hook) that continues its trace.
        traceparent = tracing::field::Empty,
    );
    if let Some(parent) = fl.job.headers.get("traceparent") {
        span.record("traceparent", parent.as_str());
    }
    shared.jobs.spawn(killable(
        shared.kill.clone(),
        run_job(shared.clone(), fl, permit).instrument(span),
    ));
}
