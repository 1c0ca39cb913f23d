//! Configuration of a worker and its validation.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tether_core::{validate, JobArgs};

use crate::handler::{self, Handler, Hooks, JobContext, JobError, JobResult};
use crate::maintenance::{DEFAULT_MAINTENANCE_TICK, DEFAULT_RETENTION};
use crate::source::Source;
use crate::Worker;

/// Default tenant of a worker.
pub const DEFAULT_TENANT: &str = "default";
/// The lease a claimed job gets when neither the worker
/// ([`WorkerBuilder::lease_ttl`]) nor its queue (`default_lease_ttl_ms`) sets
/// one: the store's default, [`tether_core::lifecycle::DEFAULT_LEASE_TTL_MS`].
/// The runtime assumes it only for a claimed job that does not show its lease.
pub const DEFAULT_LEASE_TTL: Duration =
    Duration::from_millis(tether_core::lifecycle::DEFAULT_LEASE_TTL_MS as u64);
/// Default poll interval: how long an idle queue waits when no hint arrives.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default time running handlers get to finish at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Most handlers one queue may run at once (a claim takes at most 1000 jobs).
pub const MAX_CONCURRENCY: usize = 1_000;

/// Why a worker could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// No queue was configured: the worker would never claim anything.
    #[error("no queue configured: call .queue(name, concurrency) at least once")]
    NoQueues,
    /// No handler was registered: every job would fail.
    #[error("no handler registered: call .handler(kind, ..) or .job::<T>(..) at least once")]
    NoHandlers,
    /// A tenant, queue, kind or worker id is not a valid name.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        /// `tenant`, `queue`, `kind` or `worker_id`.
        what: &'static str,
        /// The rejected value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The same queue was configured twice.
    #[error("queue {0:?} configured twice")]
    DuplicateQueue(String),
    /// Two handlers were registered for one kind.
    #[error("two handlers registered for kind {0:?}")]
    DuplicateHandler(String),
    /// A queue's concurrency is 0 or above [`MAX_CONCURRENCY`].
    #[error("concurrency of queue {queue:?} must be 1 to {MAX_CONCURRENCY}, got {concurrency}")]
    InvalidConcurrency {
        /// The queue.
        queue: String,
        /// The rejected value.
        concurrency: usize,
    },
    /// A duration setting is out of its range.
    #[error("{setting} must be {range}, got {value:?}")]
    InvalidDuration {
        /// The setting, e.g. `lease_ttl`.
        setting: &'static str,
        /// Its allowed range, for humans.
        range: &'static str,
        /// The rejected value.
        value: Duration,
    },
}

/// One queue a worker serves.
#[derive(Debug, Clone)]
pub(crate) struct QueueSpec {
    pub(crate) name: String,
    pub(crate) concurrency: usize,
}

/// Every setting of a built worker.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) tenant: String,
    pub(crate) worker_id: String,
    pub(crate) queues: Vec<QueueSpec>,
    /// The lease asked for at claim; `None`: the queue's (invariant 21).
    pub(crate) lease_ttl: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) shutdown_grace: Duration,
    pub(crate) maintenance: bool,
    pub(crate) retention: Duration,
    pub(crate) maintenance_tick: Duration,
}

/// Builds a [`Worker`]; start from [`Worker::builder`].
pub struct WorkerBuilder {
    source: Arc<dyn Source>,
    tenant: String,
    worker_id: Option<String>,
    queues: Vec<QueueSpec>,
    handlers: Vec<(String, Handler)>,
    hooks: Hooks,
    lease_ttl: Option<Duration>,
    poll_interval: Duration,
    shutdown_grace: Duration,
    maintenance: bool,
    retention: Duration,
    maintenance_tick: Duration,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("tenant", &self.tenant)
            .field("worker_id", &self.worker_id)
            .field("queues", &self.queues)
            .field(
                "kinds",
                &self.handlers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    pub(crate) fn new(source: Arc<dyn Source>) -> Self {
        WorkerBuilder {
            source,
            tenant: DEFAULT_TENANT.to_owned(),
            worker_id: None,
            queues: Vec::new(),
            handlers: Vec::new(),
            hooks: Hooks::default(),
            lease_ttl: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            maintenance: true,
            retention: DEFAULT_RETENTION,
            maintenance_tick: DEFAULT_MAINTENANCE_TICK,
        }
    }

    /// The tenant whose jobs this worker runs (default `"default"`).
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// How this worker names itself on claimed jobs, in their history and as
    /// maintenance leader (default `<hostname>-<pid>-<random>`). Give every
    /// running worker a distinct id.
    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.worker_id = Some(worker_id.into());
        self
    }

    /// Serves `queue`, running at most `concurrency` handlers of it at once.
    /// Call once per queue.
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.queues.push(QueueSpec {
            name: queue.into(),
            concurrency,
        });
        self
    }

    /// Asks for this lease length on every claim (1 s to 1 h), overriding
    /// the queue's `default_lease_ttl_ms`. Without it (the default) the
    /// claim names no TTL and each job gets its queue's lease (30 s unless
    /// the operator set another): the worker never overrides what was
    /// configured on the queue. Either way, each job is heartbeated every
    /// third of the lease its claim actually granted, and a worker that dies
    /// loses its jobs to the reaper about one TTL later.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// How long an idle queue waits for work when no wake-up hint arrives
    /// (default 1 s). Hints make pickup near-instant; polling covers lost
    /// hints and jobs that become due by time (delays, backoff).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Has no effect; kept so that existing callers still build.
    ///
    /// Snoozes used to be slept in-process up to this length, hidden from
    /// the job's history. Every [`JobError::Snooze`] is now reported to the
    /// store, whatever its length: the history shows `snoozed` and any
    /// worker may claim the job when it is due (invariant 21 of
    /// docs/DESIGN.md).
    pub fn max_in_process_snooze(self, _max: Duration) -> Self {
        self
    }

    /// How long running handlers may take to finish at shutdown before they
    /// are cancelled and their jobs handed back (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Whether this worker takes part in the election of the maintenance
    /// leader, which reaps lapsed leases, expires and prunes jobs (default
    /// on). Turn it off when another process (e.g. `tether serve`) maintains
    /// the database, or when the source cannot offer maintenance.
    pub fn maintenance(mut self, on: bool) -> Self {
        self.maintenance = on;
        self
    }

    /// How long finished jobs are kept before the maintenance leader prunes
    /// them (default 7 days).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Interval of the maintenance loop (default 1 s). The leader lease lasts
    /// three ticks (at least 1 s), so a dead leader is replaced that fast.
    pub fn maintenance_tick(mut self, tick: Duration) -> Self {
        self.maintenance_tick = tick;
        self
    }

    /// Runs `f` before every handler, in the handler's task, with its
    /// context (hooks run in the order registered): to open a database
    /// session, set a log context, or continue the trace whose W3C context
    /// the job carries in `ctx.job().headers` (`traceparent`). An `Err`
    /// fails the attempt exactly as the handler returning it would; the
    /// handler then does not run (the `on_error` and `after` hooks do). A
    /// panic counts as the handler's.
    pub fn before<F>(mut self, f: F) -> Self
    where
        F: Fn(&JobContext) -> Result<(), JobError> + Send + Sync + 'static,
    {
        self.hooks.before.push(Arc::new(f));
        self
    }

    /// Runs `f` after every handler with how it ended: its answer, or the
    /// error a panic, a timeout or an ignored cancel became (not for a job
    /// handed back at shutdown, which did not end). A panic in `f` is
    /// logged and changes nothing.
    pub fn after<F>(mut self, f: F) -> Self
    where
        F: Fn(&JobContext, &JobResult) + Send + Sync + 'static,
    {
        self.hooks.after.push(Arc::new(f));
        self
    }

    /// Runs `f` when a handler (or a `before` hook) failed — a retryable,
    /// retry-after or fatal error, a panic or a timeout; not a snooze or a
    /// cancellation — before the `after` hooks: where an error tracker
    /// reports it. A panic in `f` is logged and changes nothing.
    pub fn on_error<F>(mut self, f: F) -> Self
    where
        F: Fn(&JobContext, &JobError) + Send + Sync + 'static,
    {
        self.hooks.on_error.push(Arc::new(f));
        self
    }

    /// Registers a handler for jobs of `kind` that takes the raw job.
    ///
    /// ```no_run
    /// # fn demo(b: tether_worker::WorkerBuilder) -> tether_worker::WorkerBuilder {
    /// b.handler("resize_image", |ctx| async move {
    ///     let url = ctx.job().payload["url"].as_str().unwrap_or_default().to_owned();
    ///     Ok(Some(serde_json::json!({ "resized": url })))
    /// })
    /// # }
    /// ```
    pub fn handler<F, Fut>(mut self, kind: impl Into<String>, f: F) -> Self
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        self.handlers.push((kind.into(), handler::raw(f)));
        self
    }

    /// Registers a typed handler for jobs of kind `T::KIND`: the payload is
    /// decoded into `T` (a payload that does not decode fails the job as
    /// fatal) and the handler's `R` is stored as the result (`()` stores
    /// none).
    ///
    /// ```no_run
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize)]
    /// struct SendWelcome { to: String }
    /// impl tether_core::JobArgs for SendWelcome {
    ///     const KIND: &'static str = "send_welcome";
    /// }
    /// # fn demo(b: tether_worker::WorkerBuilder) -> tether_worker::WorkerBuilder {
    /// b.job(|args: SendWelcome, _ctx| async move {
    ///     println!("hello {}", args.to);
    ///     Ok::<_, tether_worker::JobError>(())
    /// })
    /// # }
    /// ```
    pub fn job<T, F, Fut, R>(mut self, f: F) -> Self
    where
        T: JobArgs,
        F: Fn(T, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, JobError>> + Send + 'static,
        R: Serialize,
    {
        self.handlers
            .push((T::KIND.to_owned(), handler::typed::<T, F, Fut, R>(f)));
        self
    }

    /// Checks the configuration and builds the worker (nothing runs until
    /// [`Worker::start`] or [`Worker::run_until_signal`]).
    pub fn build(self) -> Result<Worker, BuildError> {
        check_name("tenant", &self.tenant)?;
        let worker_id = match self.worker_id {
            Some(id) => {
                validate::worker_id("worker_id", &id).map_err(|e| BuildError::InvalidName {
                    what: "worker_id",
                    value: id.clone(),
                    reason: reason(e),
                })?;
                id
            }
            None => default_worker_id(),
        };
        if self.queues.is_empty() {
            return Err(BuildError::NoQueues);
        }
        let mut seen = std::collections::HashSet::new();
        for q in &self.queues {
            check_name("queue", &q.name)?;
            if !seen.insert(q.name.as_str()) {
                return Err(BuildError::DuplicateQueue(q.name.clone()));
            }
            if q.concurrency == 0 || q.concurrency > MAX_CONCURRENCY {
                return Err(BuildError::InvalidConcurrency {
                    queue: q.name.clone(),
                    concurrency: q.concurrency,
                });
            }
        }
        if self.handlers.is_empty() {
            return Err(BuildError::NoHandlers);
        }
        let mut handlers = HashMap::new();
        for (kind, h) in self.handlers {
            check_name("kind", &kind)?;
            if handlers.insert(kind.clone(), h).is_some() {
                return Err(BuildError::DuplicateHandler(kind));
            }
        }
        if let Some(ttl) = self.lease_ttl {
            if !(1_000..=3_600_000).contains(&ttl.as_millis()) {
                return Err(BuildError::InvalidDuration {
                    setting: "lease_ttl",
                    range: "1 s to 1 h",
                    value: ttl,
                });
            }
        }
        // A zero interval would turn an idle queue into a busy loop of claims.
        if self.poll_interval < Duration::from_millis(10) {
            return Err(BuildError::InvalidDuration {
                setting: "poll_interval",
                range: "at least 10 ms",
                value: self.poll_interval,
            });
        }
        if self.maintenance_tick < Duration::from_millis(10) {
            return Err(BuildError::InvalidDuration {
                setting: "maintenance_tick",
                range: "at least 10 ms",
                value: self.maintenance_tick,
            });
        }
        if self.retention.as_millis() > i64::MAX as u128 {
            return Err(BuildError::InvalidDuration {
                setting: "retention",
                range: "representable in milliseconds as i64",
                value: self.retention,
            });
        }
        let config = Config {
            tenant: self.tenant,
            worker_id,
            queues: self.queues,
            lease_ttl: self.lease_ttl,
            poll_interval: self.poll_interval,
            shutdown_grace: self.shutdown_grace,
            maintenance: self.maintenance,
            retention: self.retention,
            maintenance_tick: self.maintenance_tick,
        };
        Ok(Worker {
            source: self.source,
            config,
            handlers,
            hooks: self.hooks,
        })
    }
}

fn check_name(what: &'static str, value: &str) -> Result<(), BuildError> {
    validate::name(what, value).map_err(|e| BuildError::InvalidName {
        what,
        value: value.to_owned(),
        reason: reason(e),
    })
}

/// The human part of a validation error.
fn reason(e: tether_core::Error) -> String {
    match e {
        tether_core::Error::Invalid { message, .. } => message,
        other => other.to_string(),
    }
}

/// `<hostname>-<pid>-<6 random hex>`: readable in the dashboard, and unique
/// even for two workers in one process.
fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let host: String = host.chars().filter(|c| !c.is_control()).take(96).collect();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &random[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_worker_ids_are_distinct_and_valid() {
        let a = default_worker_id();
        let b = default_worker_id();
        assert_ne!(a, b);
        assert!(validate::worker_id("w", &a).is_ok(), "{a}");
        assert!(
            a.contains(&format!("-{}-", std::process::id())),
            "{a} names the pid"
        );
    }
}
