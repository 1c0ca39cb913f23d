//! Reporting how a run ended: completions (carried by a claim or batched
//! by the completer), failures and snoozes, retried until answered.

use super::*;

/// What became of a report.
pub(super) enum Reported {
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
pub(super) async fn report(
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
pub(super) fn snooze_outcome(state: JobState) -> &'static str {
    match state {
        JobState::Cancelled => "cancelled",
        _ => "snoozed",
    }
}

/// Logs the fate of a report and picks the metric outcome (`on_done` logs a
/// report the store took and names its outcome).
pub(super) fn settle(
    r: Reported,
    on_done: impl FnOnce(JobState) -> &'static str,
) -> Option<&'static str> {
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

pub(super) fn report_error() {
    metrics::counter!("tether_worker_report_errors_total").increment(1);
}

pub(super) async fn fail(shared: &Shared, fl: &InFlight, failure: Failure) -> Reported {
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

pub(super) async fn snooze(shared: &Shared, fl: &InFlight, delay_ms: i64) -> Reported {
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
pub(super) async fn complete(
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
pub(super) type PendingCompletion = (Completion, oneshot::Sender<Reported>);

/// Most completions in one `complete_many`: small enough that several
/// batches can be in flight at once.
pub(super) const COMPLETION_BATCH: usize = 250;
/// Most `complete_many` calls in flight at once.
pub(super) const COMPLETIONS_IN_FLIGHT: usize = 4;

/// Sends the completions no claim carries: the ones that came in while no
/// fetcher was about to claim, the ones a claim left for the source's
/// [`report_wait`](Source::report_wait),
/// those of a claim that failed, and everything once the worker stops. Up
/// to [`COMPLETIONS_IN_FLIGHT`] batches of [`COMPLETION_BATCH`] in flight;
/// a batch gathers whatever is due when it goes. Batches never share a
/// job, so concurrent ones cannot conflict.
pub(super) async fn completer_loop(shared: Arc<Shared>) {
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
pub(super) fn completion_answer(answer: Option<Result<(), Error>>) -> Reported {
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

pub(super) async fn complete_batch(shared: &Shared, batch: Vec<PendingCompletion>) {
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
pub(super) fn clone_error(e: &Error) -> Error {
    match e {
        Error::Unavailable(_) => Error::Unavailable(e.to_string().into()),
        Error::LeaseLost(id) => Error::LeaseLost(*id),
        Error::JobNotFound(id) => Error::JobNotFound(*id),
        _ => Error::Storage(e.to_string().into()),
    }
}
