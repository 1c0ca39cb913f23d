//! One job from start to acknowledged outcome: its handler, run until it
//! answers, panics, times out or is cancelled.

use super::*;

/// How a handler run ended, before it is mapped to a report.
pub(super) enum Ended {
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
pub(super) async fn run_job(shared: Arc<Shared>, fl: Arc<InFlight>, permit: OwnedSemaphorePermit) {
    let handler = shared.handlers.get(&fl.job.kind).cloned();
    let started = Instant::now();
    let ended = match handler {
        Some(h) => execute(&fl, shared.source.clone(), h, &shared.hooks).await,
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
pub(super) async fn execute(
    fl: &Arc<InFlight>,
    source: Arc<dyn Source>,
    handler: Handler,
    hooks: &Hooks,
) -> Ended {
    let timeout_ms = fl.job.timeout_ms.filter(|ms| *ms > 0);
    let deadline = timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms as u64));
    let ctx = JobContext {
        inflight: fl.clone(),
        source,
    };
    let hook_ctx = ctx.clone();
    let before = hooks.before.clone();
    // Calling the hooks and the handler inside the future catches a panic
    // while they run or while the handler builds its future, as one while
    // it runs.
    let run = AssertUnwindSafe(async move {
        for hook in &before {
            hook(&ctx)?;
        }
        handler(ctx).await
    })
    .catch_unwind();
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
    let ended = tokio::select! {
        biased;
        _ = fl.abandon.cancelled() => return Ended::Abandoned,
        r = run => match r {
            Ok(a) => Ended::Returned(a),
            Err(panic) => Ended::Panicked(panic_message(panic.as_ref())),
        },
        _ = timeout => {
            fl.ctx_cancel.cancel();
            Ended::TimedOut(timeout_ms.unwrap_or_default())
        }
        _ = unanswered => Ended::Unanswered,
    };
    after_hooks(hooks, &hook_ctx, &ended);
    ended
}

/// Runs the `on_error` hooks (for a failure) and the `after` hooks with how
/// the handler ended. A hook's panic is logged and changes nothing.
fn after_hooks(hooks: &Hooks, ctx: &JobContext, ended: &Ended) {
    if hooks.after.is_empty() && hooks.on_error.is_empty() {
        return;
    }
    let outcome: JobResult = match ended {
        Ended::Returned(r) => r.clone(),
        Ended::Panicked(msg) => Err(JobError::Retry(format!("handler panicked: {msg}"))),
        Ended::TimedOut(ms) => Err(JobError::Retry(format!("timed out after {ms} ms"))),
        Ended::Unanswered => Err(JobError::Cancelled),
        Ended::NoHandler | Ended::Abandoned => return,
    };
    let guarded = |what: &str, call: &dyn Fn()| {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(call)) {
            error!(
                job_id = %ctx.id(),
                panic = %panic_message(panic.as_ref()),
                "a worker's {what} hook panicked; the job's outcome stands"
            );
        }
    };
    if let Err(e @ (JobError::Retry(_) | JobError::RetryAfter { .. } | JobError::Fatal(_))) =
        &outcome
    {
        for hook in &hooks.on_error {
            guarded("on_error", &|| hook(ctx, e));
        }
    }
    for hook in &hooks.after {
        guarded("after", &|| hook(ctx, &outcome));
    }
}

pub(super) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}
