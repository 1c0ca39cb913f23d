//! What an enqueue takes and answers, and typed payloads.

use super::*;

/// When a new job becomes claimable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAt {
    /// Right away.
    #[default]
    Now,
    /// Not before this instant.
    At(DateTime<Utc>),
    /// This many milliseconds after the database's `now()`.
    Delay(i64),
}

/// A job to enqueue. Build one with [`NewJob::new`] and the setters.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Queue name.
    pub queue: String,
    /// Handler name.
    pub kind: String,
    /// Handler arguments.
    pub payload: Value,
    /// −100..=100, higher first.
    pub priority: i16,
    /// When it becomes claimable.
    pub run_at: RunAt,
    /// Unset: the queue's setting.
    pub max_attempts: Option<i32>,
    /// Unset: the queue's setting.
    pub backoff: Option<Backoff>,
    /// Per-attempt time limit.
    pub timeout_ms: Option<i64>,
    /// Returns the existing job for this key instead of a second one.
    pub idempotency_key: Option<String>,
    /// Returns the active job for this key instead of a second one.
    pub unique_key: Option<String>,
    /// Labels.
    pub tags: Vec<String>,
    /// Fails with reason `expired` if not claimed by then.
    pub expires_at: Option<DateTime<Utc>>,
    /// Groups jobs for the queue's `key_max_running` and `fair` claims.
    pub concurrency_key: Option<String>,
    /// The jobs it waits for (at most [`MAX_DEPENDENCIES`]).
    pub depends_on: Vec<Dependency>,
    /// What it does when a dependency fails.
    pub dependency_failure: DependencyFailure,
    /// The unfinished workflow it joins (an append), if any.
    pub workflow_id: Option<Uuid>,
    /// String headers carried unchanged with the job and handed to its
    /// worker with each claim (W3C trace context, say); bounded by
    /// [`crate::validate::MAX_HEADERS`] and its neighbours.
    pub headers: BTreeMap<String, String>,
}

impl NewJob {
    /// A job of `kind` on `queue` with `payload` and every other field default.
    pub fn new(queue: impl Into<String>, kind: impl Into<String>, payload: Value) -> Self {
        NewJob {
            queue: queue.into(),
            kind: kind.into(),
            payload,
            priority: 0,
            run_at: RunAt::Now,
            max_attempts: None,
            backoff: None,
            timeout_ms: None,
            idempotency_key: None,
            unique_key: None,
            tags: Vec::new(),
            expires_at: None,
            concurrency_key: None,
            depends_on: Vec::new(),
            dependency_failure: DependencyFailure::Cancel,
            workflow_id: None,
            headers: BTreeMap::new(),
        }
    }

    /// A job carrying typed arguments, on their kind's default queue.
    pub fn for_args<J: JobArgs>(args: &J) -> crate::Result<Self> {
        args.to_new_job()
            .map_err(|e| crate::Error::invalid("payload", format!("cannot serialize: {e}")))
    }

    /// Sets the queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Sets when the job becomes claimable.
    pub fn run_at(mut self, run_at: RunAt) -> Self {
        self.run_at = run_at;
        self
    }

    /// Sets the attempt budget.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Sets the retry backoff.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Sets the per-attempt time limit.
    pub fn timeout_ms(mut self, timeout_ms: i64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the unique key.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Sets the tags.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the expiry instant.
    pub fn expires_at(mut self, at: DateTime<Utc>) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// Adds a header (replacing one of the same name).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Sets the concurrency key (see `key_max_running` and `fair`).
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }

    /// Waits for the existing job `id`: created `waiting`, queued once its
    /// dependencies succeeded.
    pub fn after(mut self, id: Uuid) -> Self {
        self.depends_on.push(Dependency::Job(id));
        self
    }

    /// Waits for the `index`-th job of the same batch (an earlier one).
    pub fn after_entry(mut self, index: usize) -> Self {
        self.depends_on.push(Dependency::Entry(index));
        self
    }

    /// Joins the unfinished workflow `id` (a graph that grows at run time).
    pub fn workflow(mut self, id: Uuid) -> Self {
        self.workflow_id = Some(id);
        self
    }

    /// Sets what the job does when a dependency fails.
    pub fn dependency_failure(mut self, rule: DependencyFailure) -> Self {
        self.dependency_failure = rule;
        self
    }
}

/// The answer to one enqueued job.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueued {
    /// The new job, or the existing one its idempotency/unique key led to.
    pub job: Job,
    /// False when an existing job was returned instead of creating one.
    pub created: bool,
}

/// Arguments of a typed job: the kind names the handler, the value is the
/// payload. Producers enqueue values of this type; the worker runtime hands
/// handlers the decoded value instead of raw JSON.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tether_core::JobArgs;
///
/// #[derive(Serialize, Deserialize)]
/// struct SendWelcome {
///     to: String,
/// }
///
/// impl JobArgs for SendWelcome {
///     const KIND: &'static str = "send_welcome";
///     const QUEUE: &'static str = "emails";
/// }
/// ```
pub trait JobArgs: Serialize + serde::de::DeserializeOwned + Send + Sync + 'static {
    /// The handler name (1–128 characters of `[A-Za-z0-9._:-]`).
    const KIND: &'static str;
    /// The queue jobs of this kind go to unless the caller says otherwise.
    const QUEUE: &'static str = "default";

    /// A [`NewJob`] carrying these arguments, ready for more settings.
    fn to_new_job(&self) -> Result<NewJob, serde_json::Error> {
        Ok(NewJob::new(
            Self::QUEUE,
            Self::KIND,
            serde_json::to_value(self)?,
        ))
    }
}
