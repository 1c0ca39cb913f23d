//! tether: durable background jobs whose system of record is the database
//! you already trust — PostgreSQL, or one embedded SQLite file — with no
//! broker beside it.
//!
//! [`Client`] is the embedded client: it talks to the database itself, in
//! your process. (To reach a shared `tether serve` over HTTP instead, use
//! the `tether-client` crate's `HttpClient`.) A client enqueues jobs (typed with [`JobArgs`], or raw [`NewJob`]s),
//! on PostgreSQL also inside your own transaction ([`Client::enqueue_in`]),
//! so a job exists if and only if your business write commits. A [`Worker`]
//! ([`Client::worker`]) runs handlers for them with leases, heartbeats,
//! retries with jittered backoff, timeouts, cancellation and graceful
//! shutdown, and elects one maintenance leader among all workers.
//!
//! Cargo features choose the backends compiled in: `postgres` and `sqlite`,
//! both on by default. A URL for a backend left out is refused by
//! [`Client::connect`] with an `invalid_argument` error.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tether::{Client, JobArgs};
//!
//! #[derive(Serialize, Deserialize)]
//! struct SendWelcome {
//!     to: String,
//! }
//!
//! impl JobArgs for SendWelcome {
//!     const KIND: &'static str = "send_welcome";
//!     const QUEUE: &'static str = "emails";
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tether::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("tether-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("jobs.db").display());
//! // "postgres://…" for PostgreSQL; a path or "sqlite://path" for SQLite.
//! let client = Client::connect(&url).await?;
//! let job = client
//!     .enqueue_args(&SendWelcome { to: "ada@example.com".into() })
//!     .await?
//!     .job;
//! assert_eq!(job.queue, "emails");
//!
//! // A worker for the "emails" queue, 4 handlers at a time.
//! let worker = client
//!     .worker()
//!     .queue("emails", 4)
//!     .job(|args: SendWelcome, _ctx| async move {
//!         println!("welcome, {}", args.to);
//!         Ok::<_, tether::JobError>(())
//!     })
//!     .build()
//!     .expect("valid worker");
//! let handle = worker.start(); // or `worker.run_until_signal().await` in a service
//! # let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
//! #     loop {
//! #         let done = client.engine().get(client.tenant(), job.id).await.unwrap();
//! #         if done.state == tether::JobState::Succeeded { break; }
//! #         tokio::time::sleep(std::time::Duration::from_millis(20)).await;
//! #     }
//! # }).await;
//! handle.shutdown();
//! handle.join().await;
//! # assert_eq!(client.engine().get(client.tenant(), job.id).await?.state, tether::JobState::Succeeded);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```

mod database;

use std::sync::Arc;

pub use database::{redact, Database};
/// The state of a database's schema ([`schema_status`]) and why one is
/// refused ([`migrations::SchemaError`], inside [`Error::Schema`]).
pub use tether_core::migrations;
use tether_core::migrations::SchemaStatus;
pub use tether_core::{
    lifecycle, validate, Backoff, ClaimRequest, ClaimedJob, Completion, DependencyFailure,
    DependencyJob, Engine, Enqueued, Error, EventKind, Failure, Heartbeat, HeartbeatAck, Job,
    JobArgs, JobEvent, JobFilter, JobPage, JobState, LeaseToken, Limits, NewJob, NewWorkflow,
    QueueConfig, QueueConfigPatch, QueueStats, ReplayFilter, Result, RetryMode, RunAt, StateCounts,
    Store, Workflow, WorkflowCancelled, WorkflowEnqueued, WorkflowFilter, WorkflowGraph,
    WorkflowJob, WorkflowPage, WorkflowState,
};
#[cfg(feature = "postgres")]
use tether_postgres::PgStore;
#[cfg(feature = "sqlite")]
use tether_sqlite::SqliteStore;
pub use tether_worker::{
    BuildError, JobContext, JobError, JobResult, Signals, Source, Worker, WorkerBuilder,
    WorkerHandle,
};

/// The tenant a client acts for unless told otherwise.
pub use tether_core::DEFAULT_TENANT;

/// The embedded client: a handle on a tether store in this process, acting
/// for one tenant. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    engine: Engine,
    tenant: String,
}

impl Client {
    /// Connects to the store a URL names and brings its schema up to date:
    /// `postgres://…` / `postgresql://…` for PostgreSQL; `sqlite://PATH`,
    /// `sqlite:PATH` or a plain file path for SQLite (the file is created if
    /// missing).
    pub async fn connect(url: &str) -> Result<Client> {
        Client::open(&Database::parse(url)?).await
    }

    /// Connects to `database` and brings its schema up to date (a SQLite
    /// file is created if missing).
    pub async fn open(database: &Database) -> Result<Client> {
        Client::open_with(database, &OpenOptions::default()).await
    }

    /// Connects to `database` as `options` say.
    pub async fn open_with(database: &Database, options: &OpenOptions) -> Result<Client> {
        Ok(Client::from_engine(Engine::new(
            open_store(database, options).await?,
        )))
    }

    /// A client over an engine you built yourself (e.g. with other limits).
    pub fn from_engine(engine: Engine) -> Client {
        Client {
            engine,
            tenant: DEFAULT_TENANT.to_owned(),
        }
    }

    /// The same store, acting for another tenant.
    pub fn with_tenant(&self, tenant: &str) -> Result<Client> {
        validate::name("tenant", tenant)?;
        Ok(Client {
            tenant: tenant.to_owned(),
            ..self.clone()
        })
    }

    /// The tenant this client acts for.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The engine underneath, for every other operation (claim, cancel,
    /// replay, list, history, queue stats and settings, ...).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A worker builder on this client's store and tenant: add queues and
    /// handlers, then `build()` and `start()` (or `run_until_signal()`).
    pub fn worker(&self) -> WorkerBuilder {
        Worker::builder(self.engine.clone()).tenant(self.tenant.clone())
    }

    /// Enqueues one job.
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.engine.enqueue(&self.tenant, job).await
    }

    /// Enqueues 1–1000 jobs all-or-nothing; answers in order.
    pub async fn enqueue_many(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        self.engine.enqueue_many(&self.tenant, jobs).await
    }

    /// Enqueues 1–1000 jobs all-or-nothing as one new workflow: a named
    /// graph (their `depends_on` may name earlier entries,
    /// [`NewJob::after_entry`]) read, cancelled and retried whole through
    /// the engine (`get_workflow`, `list_workflows`, `cancel_workflow`,
    /// `retry_workflow`). A second call with the same idempotency key
    /// answers the existing workflow and writes nothing. Jobs join it at
    /// run time with [`NewJob::workflow`].
    pub async fn enqueue_workflow(
        &self,
        workflow: &NewWorkflow,
        jobs: &[NewJob],
    ) -> Result<WorkflowEnqueued> {
        self.engine
            .enqueue_workflow(&self.tenant, workflow, jobs)
            .await
    }

    /// Enqueues a typed job on its kind's default queue. For other settings
    /// (priority, delay, keys, ...) build it with [`NewJob::for_args`] and
    /// call [`Client::enqueue`].
    pub async fn enqueue_args<J: JobArgs>(&self, args: &J) -> Result<Enqueued> {
        self.enqueue(NewJob::for_args(args)?).await
    }

    /// PostgreSQL only: enqueues on your own connection or transaction
    /// (`&mut *tx` for a `sqlx::Transaction<Postgres>`), so the jobs exist if
    /// and only if it commits. Workers are hinted at commit.
    #[cfg(feature = "postgres")]
    pub async fn enqueue_in(
        &self,
        conn: &mut sqlx::PgConnection,
        jobs: &[NewJob],
    ) -> Result<Vec<Enqueued>> {
        if self.engine.store().backend() != "postgres" {
            return Err(Error::invalid(
                "database_url",
                "enqueue_in needs PostgreSQL: this client is on SQLite",
            ));
        }
        tether_postgres::enqueue_in(conn, &self.tenant, jobs, self.engine.limits()).await
    }
}

/// How [`Client::open_with`] opens a store, beyond which database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
    /// Apply pending migrations when opening (the default). Without, opening
    /// fails unless the schema is exactly this build's: run `tether migrate`
    /// first (e.g. as a deployment step before the servers start).
    pub migrate: bool,
    /// PostgreSQL: most connections in the pool.
    pub pool_size: u32,
    /// PostgreSQL: the URL goes through a transaction-pooling proxy
    /// (PgBouncer `pool_mode = transaction`); see
    /// [`PgOptions`](tether_postgres::PgOptions).
    pub transaction_pooler: bool,
    /// PostgreSQL: a direct URL for the LISTEN connection of wake-up hints,
    /// when the main URL goes through a transaction pooler.
    pub listen_url: Option<String>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        #[cfg(feature = "postgres")]
        let pool_size = tether_postgres::PgOptions::default().max_connections;
        #[cfg(not(feature = "postgres"))]
        let pool_size = 16;
        OpenOptions {
            migrate: true,
            pool_size,
            transaction_pooler: false,
            listen_url: None,
        }
    }
}

/// The schema of `database` against the migrations this build knows (which
/// are applied or pending, their checksums, any newer version), read
/// without changing anything: what `tether migrate status` shows. Of
/// `options`, only `transaction_pooler` matters.
pub async fn schema_status(database: &Database, options: &OpenOptions) -> Result<SchemaStatus> {
    // Read only by the PostgreSQL arm.
    let _ = options;
    match database {
        #[cfg(feature = "postgres")]
        Database::Postgres(url) => {
            let pg = tether_postgres::PgOptions {
                transaction_pooler: options.transaction_pooler,
                ..tether_postgres::PgOptions::default()
            };
            PgStore::schema_status(url, &pg).await
        }
        #[cfg(feature = "sqlite")]
        Database::Sqlite(path) => {
            if path.as_os_str().is_empty() {
                return Err(Error::invalid("database_url", "no SQLite file path given"));
            }
            SqliteStore::schema_status(path).await
        }
        #[allow(unreachable_patterns)] // reachable when a backend feature is off
        other => Err(no_backend(other)),
    }
}

/// The error for a backend this build left out.
fn no_backend(database: &Database) -> Error {
    Error::invalid(
        "database_url",
        format!(
            "this build of tether has no {} backend (cargo feature `{}`)",
            database.backend(),
            database.backend()
        ),
    )
}

/// The store `database` names, opened as `options` say; a backend this
/// build left out is an `invalid_argument` error.
async fn open_store(database: &Database, options: &OpenOptions) -> Result<Arc<dyn Store>> {
    // Without either backend (the fuzz targets' build) nothing reads it.
    #[cfg(not(any(feature = "postgres", feature = "sqlite")))]
    let _ = options;
    match database {
        #[cfg(feature = "postgres")]
        Database::Postgres(url) => {
            let pg = tether_postgres::PgOptions {
                max_connections: options.pool_size,
                transaction_pooler: options.transaction_pooler,
                listen_url: options.listen_url.clone(),
                migrate: options.migrate,
            };
            Ok(Arc::new(PgStore::connect_with(url, &pg).await?))
        }
        #[cfg(feature = "sqlite")]
        Database::Sqlite(path) => {
            if path.as_os_str().is_empty() {
                return Err(Error::invalid("database_url", "no SQLite file path given"));
            }
            let sqlite = tether_sqlite::SqliteOptions {
                migrate: options.migrate,
            };
            Ok(Arc::new(SqliteStore::open_with(path, &sqlite).await?))
        }
        #[allow(unreachable_patterns)] // reachable when a backend feature is off
        other => Err(no_backend(other)),
    }
}
