//! What a handler receives ([`JobContext`]) and what it answers
//! ([`JobResult`], [`JobError`]), and how handlers are stored by kind.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tether_core::{DependencyJob, Job, JobArgs, JobState};
use uuid::Uuid;

use crate::runtime::{retrying, InFlight};
use crate::source::Source;

/// A function run before every handler (see [`crate::WorkerBuilder::before`]):
/// an `Err` fails the attempt with it, and the handler does not run.
pub type BeforeHook = Arc<dyn Fn(&JobContext) -> Result<(), JobError> + Send + Sync>;

/// A function run after every handler with how it ended (see
/// [`crate::WorkerBuilder::after`]).
pub type AfterHook = Arc<dyn Fn(&JobContext, &JobResult) + Send + Sync>;

/// A function run when a handler failed (see
/// [`crate::WorkerBuilder::on_error`]).
pub type ErrorHook = Arc<dyn Fn(&JobContext, &JobError) + Send + Sync>;

/// The hooks of a worker, each list in registration order.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) before: Vec<BeforeHook>,
    pub(crate) after: Vec<AfterHook>,
    pub(crate) on_error: Vec<ErrorHook>,
}

/// What a handler answers: `Ok` with an optional result (stored on the job)
/// or a [`JobError`] saying what should happen to the job instead.
pub type JobResult = Result<Option<Value>, JobError>;

/// How a handler says an attempt did not succeed; each variant maps to one
/// lifecycle transition.
///
/// Any `std::error::Error` converts into [`JobError::Retry`] (with its chain
/// of causes in the message), so handlers can use `?` on ordinary errors.
/// That blanket conversion is also why `JobError` itself does not implement
/// `std::error::Error` (the two impls would overlap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// A transient failure: retried after the job's jittered exponential
    /// backoff (or failed for good when the attempts are used up).
    Retry(String),
    /// A failure that knows when to come back (an upstream's Retry-After):
    /// retried exactly `after` later. Counts as an attempt.
    RetryAfter {
        /// What went wrong.
        error: String,
        /// How long to wait before the next attempt.
        after: Duration,
    },
    /// Do not retry: the job fails for good (the dead-letter queue).
    Fatal(String),
    /// "Not now" (rate limit, busy resource): run again after the delay, the
    /// attempt given back. Every snooze, however short, hands the job back
    /// to the queue (`snoozed` in its history), so any worker may claim it
    /// when it is due.
    Snooze(Duration),
    /// The handler stopped because cancellation was requested
    /// ([`JobContext::cancelled`]): the job ends `cancelled`.
    Cancelled,
}

impl JobError {
    /// A retryable error with this message.
    pub fn retry(message: impl fmt::Display) -> Self {
        JobError::Retry(message.to_string())
    }

    /// A retryable error that comes back exactly `after` later.
    pub fn retry_after(message: impl fmt::Display, after: Duration) -> Self {
        JobError::RetryAfter {
            error: message.to_string(),
            after,
        }
    }

    /// A fatal error with this message.
    pub fn fatal(message: impl fmt::Display) -> Self {
        JobError::Fatal(message.to_string())
    }

    /// A snooze of `delay`.
    pub fn snooze(delay: Duration) -> Self {
        JobError::Snooze(delay)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retry(e) => write!(f, "{e}"),
            JobError::RetryAfter { error, after } => {
                write!(f, "{error} (retry after {} ms)", after.as_millis())
            }
            JobError::Fatal(e) => write!(f, "{e}"),
            JobError::Snooze(d) => write!(f, "snoozed for {} ms", d.as_millis()),
            JobError::Cancelled => f.write_str("cancelled"),
        }
    }
}

impl<E: std::error::Error> From<E> for JobError {
    fn from(err: E) -> Self {
        // Keep the whole chain: the cause is usually at the end of it, and
        // the stored error keeps the tail.
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        JobError::Retry(message)
    }
}

/// What a handler gets besides its arguments: the claimed job, cooperative
/// cancellation, a way to report progress and its dependencies' results.
/// Cheap to clone.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) inflight: Arc<InFlight>,
    /// Where the job came from: what [`JobContext::dependencies`] reads.
    pub(crate) source: Arc<dyn Source>,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.inflight.job.id)
            .field("kind", &self.inflight.job.kind)
            .field("attempt", &self.inflight.job.attempt)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// The job as it was claimed (state `running`).
    pub fn job(&self) -> &Job {
        &self.inflight.job
    }

    /// The job's id.
    pub fn id(&self) -> Uuid {
        self.inflight.job.id
    }

    /// This attempt's number (1 on the first run).
    pub fn attempt(&self) -> i32 {
        self.inflight.job.attempt
    }

    /// Resolves once the handler is asked to stop: a cancel was requested for
    /// the job, its lease was lost to another owner, its timeout elapsed, or
    /// the worker is shutting down after its grace period. A cancel request
    /// arrives within about a second where the worker's source pushes them
    /// (the engine, a tether server's event stream), else with the job's
    /// next heartbeat (every third of its lease). Stop soon after;
    /// a handler that keeps running after a cancel request is dropped one
    /// lease TTL later.
    pub async fn cancelled(&self) {
        self.inflight.ctx_cancel.cancelled().await
    }

    /// Whether the handler has been asked to stop (see [`Self::cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.inflight.ctx_cancel.is_cancelled()
    }

    /// Records progress; it is stored on the job (readable through the API)
    /// within about half a second: the worker sends the job's heartbeat
    /// early to carry it, every job's new progress in one batch, at most
    /// about two batches a second however often handlers set it (a later
    /// value replaces an earlier one not yet sent).
    pub fn set_progress(&self, progress: Value) {
        self.inflight.set_progress(progress);
    }

    /// The jobs this one waited for ([`Job::depends_on`]), in the order it
    /// named them, with their states and results: how a handler uses its
    /// parents' results. Read from where the worker takes its jobs (the
    /// engine, or the server's `GET /v1/jobs/{id}/dependencies` for a
    /// remote worker) at each call, retried a few times while that source
    /// is unavailable; `[]` without a read for a job without dependencies.
    /// A dependency removed by retention is left out.
    ///
    /// A job waiting with the `cancel` rule (the default) runs only once
    /// every dependency succeeded; with `run`, a dependency may have ended
    /// `failed` or `cancelled` (its `last_error` says why).
    pub async fn dependencies(&self) -> tether_core::Result<Vec<DependencyJob>> {
        let job = &self.inflight.job;
        if job.depends_on.is_empty() {
            return Ok(Vec::new());
        }
        retrying("reading the job's dependencies", || {
            self.source.dependencies(&job.tenant, job.id)
        })
        .await
    }

    /// The result of dependency `id`, decoded into `T`; `None` when it has
    /// none (it did not succeed, returned nothing, or was removed by
    /// retention). Reads every dependency (see [`Self::dependencies`]); to
    /// use several, read them once with that method instead.
    ///
    /// A job that does not depend on `id`, or a result that does not decode
    /// into `T`, is a [`JobError::Fatal`] (no retry can change it); a read
    /// that fails is a [`JobError::Retry`].
    pub async fn dependency_result<T: DeserializeOwned>(
        &self,
        id: Uuid,
    ) -> Result<Option<T>, JobError> {
        let job = &self.inflight.job;
        if !job.depends_on.contains(&id) {
            return Err(JobError::Fatal(format!(
                "job {} does not depend on job {id}",
                job.id
            )));
        }
        let found = self.dependencies().await?.into_iter().find(|d| d.id == id);
        let Some(DependencyJob {
            result: Some(result),
            state: JobState::Succeeded,
            kind,
            ..
        }) = found
        else {
            return Ok(None);
        };
        T::deserialize(result).map(Some).map_err(|e| {
            JobError::Fatal(format!(
                "result of dependency {id} (kind {kind:?}) does not decode into {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }
}

/// The future a handler returns, boxed so handlers of any type share a map.
pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = JobResult> + Send>>;

/// A registered handler, type-erased.
pub(crate) type Handler = Arc<dyn Fn(JobContext) -> HandlerFuture + Send + Sync>;

/// Erases a raw handler.
pub(crate) fn raw<F, Fut>(f: F) -> Handler
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = JobResult> + Send + 'static,
{
    Arc::new(move |ctx| Box::pin(f(ctx)))
}

/// Erases a typed handler: decodes the payload into `T` (a payload that does
/// not fit can never succeed, so that is fatal) and serializes the result.
pub(crate) fn typed<T, F, Fut, R>(f: F) -> Handler
where
    T: JobArgs,
    F: Fn(T, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, JobError>> + Send + 'static,
    R: Serialize,
{
    let f = Arc::new(f);
    Arc::new(move |ctx: JobContext| {
        let f = f.clone();
        Box::pin(async move {
            let args = T::deserialize(&ctx.job().payload).map_err(|e| {
                JobError::Fatal(format!(
                    "payload of job {} does not decode into {} (kind {:?}): {e}",
                    ctx.id(),
                    std::any::type_name::<T>(),
                    T::KIND
                ))
            })?;
            let out = f(args, ctx).await?;
            let value = serde_json::to_value(&out).map_err(|e| {
                JobError::Fatal(format!(
                    "result of kind {:?} does not serialize to JSON: {e}",
                    T::KIND
                ))
            })?;
            // `()` serializes to null: no result rather than a JSON null.
            Ok((!value.is_null()).then_some(value))
        })
    })
}
