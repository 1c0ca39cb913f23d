//! A whole server, as `tether serve` runs it: makes the data directory private, opens the database
//! (applying migrations), checks the server secret, sets up the admin key,
//! takes part in the maintenance leader election, and serves the HTTP API
//! until told to stop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tether::Database;
use tether_worker::{Maintenance, MaintenanceHandle, Source};
use tracing::info;

use crate::admin_key::{self, AdminKey, AdminKeyError};
use crate::data_dir;
use crate::server_secret::{self, SecretSource, ServerSecretError};
use crate::{router, AppState, ConnectionLimits, Metrics, ServerConfig};

/// Name of the SQLite file inside the data directory.
pub const SQLITE_FILE: &str = "tether.db";

/// How [`start`] runs a server: the options of `tether serve`, whose
/// defaults these are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// Address to listen on (port 0 picks a free port); default
    /// `127.0.0.1:7070`.
    pub listen: SocketAddr,
    /// Directory of the SQLite file, `admin.key` and `server.secret` (mode
    /// 0700; the files in it 0600); default `./tether-data`.
    pub data_dir: PathBuf,
    /// `postgres://…` (or `sqlite:PATH`) to use instead of the SQLite file
    /// in the data directory; default none.
    pub database_url: Option<String>,
    /// Largest request body in bytes (default 1 MiB); larger ones are
    /// refused with 413.
    pub max_body_bytes: usize,
    /// Most HTTP connections open at once (default 2 048), lowered at start
    /// to fit the open-file limit.
    pub max_connections: usize,
    /// How long a new connection may take to send a complete request head
    /// (default 10 s).
    pub header_read_timeout: Duration,
    /// How long a connection may stay idle between requests (default 60 s).
    pub idle_timeout: Duration,
    /// How long finished jobs are kept before they are pruned (default 7
    /// days).
    pub retention: Duration,
    /// Interval of the maintenance loop (default 1 s); the leader lease
    /// lasts three ticks.
    pub maintenance_tick: Duration,
    /// Whether this node takes part in maintenance (reaping, expiry,
    /// pruning); default yes. Without, some other node must.
    pub maintenance: bool,
    /// Most queues one tenant may have (default 1 000; at least 1).
    pub max_queues_per_tenant: u32,
    /// Most schedules one tenant may have (default 10 000; at least 1).
    pub max_schedules_per_tenant: u32,
    /// Most queues the per-queue gauges of `/metrics` cover (default
    /// 1 000).
    pub metrics_max_queues: usize,
    /// Longest `wait_ms` a claim may ask for (default 30 s); below
    /// `request_timeout`.
    pub max_claim_wait: Duration,
    /// Most claims waiting at once (default 1 024); past it a claim answers
    /// at once.
    pub max_long_polls: usize,
    /// Most claims of one tenant waiting at once (default 256).
    pub max_long_polls_per_tenant: usize,
    /// Most event streams one tenant holds open (default 64); past it a new
    /// one is refused with 429.
    pub max_event_streams_per_tenant: usize,
    /// Longest any request may take, long-polls included (default 60 s);
    /// past it the answer is 503.
    pub request_timeout: Duration,
    /// How the database is opened: migrations, and for PostgreSQL the pool
    /// size, a transaction pooler in between, and a direct URL for LISTEN.
    pub database_options: tether::OpenOptions,
}

impl Default for ServeConfig {
    fn default() -> Self {
        let server = ServerConfig::default();
        let connections = ConnectionLimits::default();
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            data_dir: PathBuf::from("./tether-data"),
            database_url: None,
            max_body_bytes: server.max_body_bytes,
            max_connections: connections.max_connections,
            header_read_timeout: connections.header_read_timeout,
            idle_timeout: connections.idle_timeout,
            retention: Duration::from_secs(7 * 24 * 60 * 60),
            maintenance_tick: Duration::from_secs(1),
            maintenance: true,
            max_queues_per_tenant: 1_000,
            max_schedules_per_tenant: 10_000,
            metrics_max_queues: server.metrics_max_queues,
            max_claim_wait: Duration::from_millis(server.max_wait_ms as u64),
            max_long_polls: server.max_long_polls,
            max_long_polls_per_tenant: server.max_long_polls_per_tenant,
            max_event_streams_per_tenant: server.max_event_streams_per_tenant,
            request_timeout: server.request_timeout,
            database_options: tether::OpenOptions::default(),
        }
    }
}

impl ServeConfig {
    /// The database this configuration names: the one `database_url`
    /// names (which must have a scheme), else the SQLite file
    /// [`SQLITE_FILE`] in the data directory.
    pub fn database(&self) -> Result<Database, ServeError> {
        choose_database(self.database_url.as_deref(), &self.data_dir).map_err(ServeError::Config)
    }
}

/// The database of `tether serve` and `tether migrate`: the one
/// `database_url` names (`postgres://`, `postgresql://` or `sqlite:`; empty
/// is unset), else the SQLite file [`SQLITE_FILE`] under `data_dir`.
pub fn choose_database(database_url: Option<&str>, data_dir: &Path) -> Result<Database, String> {
    match database_url.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => match Database::from_url(url) {
            Some(Database::Sqlite(path)) if path.as_os_str().is_empty() => None,
            chosen => chosen,
        }
        .ok_or_else(|| {
            format!(
                "--database-url must start with postgres://, postgresql:// or sqlite:, got {:?}",
                tether::redact(url)
            )
        }),
        None => Ok(Database::Sqlite(data_dir.join(SQLITE_FILE))),
    }
}

/// What `tether serve` reads from the environment only, never from the
/// command line (where other users could see it in the process list). Its
/// `Debug` output shows neither value.
#[derive(Clone, Default)]
pub struct Secrets {
    /// `TETHER_ADMIN_KEY`: the operator's admin key.
    pub admin_key: Option<String>,
    /// `TETHER_SERVER_SECRET`: the server secret, 64 hex digits.
    pub server_secret: Option<String>,
}

impl Secrets {
    /// `TETHER_ADMIN_KEY` and `TETHER_SERVER_SECRET`; empty ones are unset.
    pub fn from_env() -> Secrets {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Secrets {
            admin_key: var("TETHER_ADMIN_KEY"),
            server_secret: var("TETHER_SERVER_SECRET"),
        }
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("admin_key", &self.admin_key.as_ref().map(|_| "<redacted>"))
            .field(
                "server_secret",
                &self.server_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Bad options.
    #[error("{0}")]
    Config(String),
    /// The data directory or a file in it could not be made private.
    #[error("cannot make the data directory {dir} private: {source}")]
    DataDir {
        /// The data directory.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The server secret could not be had.
    #[error("{0}")]
    ServerSecret(#[from] ServerSecretError),
    /// The server secret is not the one the database was first served with.
    #[error(
        "the server secret ({source_name}) is not the one this database was first served with; \
         every process serving one database needs the same secret (give each the same \
         TETHER_SERVER_SECRET, or the same server.secret file)"
    )]
    SecretMismatch {
        /// Where this process's secret came from.
        source_name: SecretSource,
    },
    /// The database could not be opened or migrated.
    #[error("cannot open the database {database}: {source}")]
    Database {
        /// Which database (without password).
        database: String,
        /// The cause.
        source: tether_core::Error,
    },
    /// The admin key could not be set up.
    #[error("cannot set up the admin key: {0}")]
    AdminKey(#[from] AdminKeyError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// A started server.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    database: Database,
    admin_key: AdminKey,
    state: AppState,
    maintenance: Option<MaintenanceHandle>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Makes the data directory private, opens the database, checks the server
/// secret, sets up the admin key, binds the address and starts serving and
/// maintaining; `/metrics` serves `metrics`. Returns once the server accepts
/// connections.
pub async fn start(
    args: &ServeConfig,
    secrets: &Secrets,
    metrics: Metrics,
) -> Result<Running, ServeError> {
    if args.max_queues_per_tenant == 0 || args.max_schedules_per_tenant == 0 {
        return Err(ServeError::Config(
            "the most queues and schedules per tenant must be at least 1".to_owned(),
        ));
    }
    if args.max_claim_wait >= args.request_timeout {
        return Err(ServeError::Config(format!(
            "the longest claim wait ({:?}) must be below the request timeout ({:?}), or every \
             long-poll that waits it out is cut off with 503",
            args.max_claim_wait, args.request_timeout
        )));
    }
    let database = args.database()?;
    let tightened =
        data_dir::secure(&args.data_dir, &database).map_err(|source| ServeError::DataDir {
            dir: args.data_dir.clone(),
            source,
        })?;
    if !tightened.is_empty() {
        info!(paths = ?tightened, "took group and other permissions away (the data is private)");
    }
    let (secret, secret_source) =
        server_secret::load(secrets.server_secret.as_deref(), &args.data_dir)?;
    let client = tether::Client::open_with(&database, &args.database_options)
        .await
        .map_err(|source| ServeError::Database {
            database: database.describe(),
            source,
        })?;
    let engine = client
        .engine()
        .clone()
        .with_limits(tether_core::Limits {
            max_queues_per_tenant: args.max_queues_per_tenant,
            max_schedules_per_tenant: args.max_schedules_per_tenant,
            ..*client.engine().limits()
        })
        .with_server_secret(secret);
    // Recorded by the first process that stores an operator key; until then
    // replicas that never use TETHER_ADMIN_KEY need not share a secret.
    let same_secret = engine
        .check_server_secret(secrets.admin_key.is_some())
        .await
        .map_err(|source| ServeError::Database {
            database: database.describe(),
            source,
        })?;
    if !same_secret {
        return Err(ServeError::SecretMismatch {
            source_name: secret_source,
        });
    }
    let admin_key =
        admin_key::bootstrap(&engine, secrets.admin_key.as_deref(), &args.data_dir).await?;

    let config = ServerConfig {
        max_body_bytes: args.max_body_bytes,
        metrics_max_queues: args.metrics_max_queues,
        max_wait_ms: i64::try_from(args.max_claim_wait.as_millis()).unwrap_or(i64::MAX),
        max_long_polls: args.max_long_polls,
        max_long_polls_per_tenant: args.max_long_polls_per_tenant,
        max_event_streams_per_tenant: args.max_event_streams_per_tenant,
        request_timeout: args.request_timeout,
    };
    let state = AppState::new(engine.clone(), config).with_metrics(metrics);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: args.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: args.listen,
        source,
    })?;
    let limits = ConnectionLimits {
        max_connections: fit_open_file_limit(args.max_connections),
        header_read_timeout: args.header_read_timeout,
        idle_timeout: args.idle_timeout,
    };
    let server = tokio::spawn(crate::serve(
        listener,
        router(state.clone()),
        limits,
        state.shutdown.clone(),
    ));

    let maintenance = args.maintenance.then(|| {
        let holder = format!(
            "serve:{}:{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let source: Arc<dyn Source> = Arc::new(engine);
        Maintenance::new(source, holder)
            .tick(args.maintenance_tick)
            .retention(args.retention)
            .start()
    });
    info!(%addr, database = %database.describe(), "tether serve started");
    Ok(Running {
        addr,
        database,
        admin_key,
        state,
        maintenance,
        server,
    })
}

/// Descriptors kept for everything but HTTP connections: the database pool,
/// the LISTEN connection, the SQLite files, logs.
const RESERVED_FILES: usize = 64;

/// `max_connections`, lowered to fit the soft open-file limit where the
/// system says what it is (Linux): a server out of descriptors cannot open
/// database connections either, which turns a flood of clients into an
/// outage.
fn fit_open_file_limit(max_connections: usize) -> usize {
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|soft| soft.parse::<usize>().ok())
        });
    match limit {
        Some(files) if max_connections + RESERVED_FILES > files => {
            let fitted = files.saturating_sub(RESERVED_FILES).max(1);
            tracing::warn!(
                max_connections,
                open_file_limit = files,
                "--max-connections lowered to {fitted} to fit the open-file limit; raise `ulimit -n` for more"
            );
            fitted
        }
        _ => max_connections,
    }
}

impl Running {
    /// Where the server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What start-up did about the admin key.
    pub fn admin_key(&self) -> &AdminKey {
        &self.admin_key
    }

    /// Whether this node currently leads maintenance.
    pub fn is_maintenance_leader(&self) -> bool {
        self.maintenance.as_ref().is_some_and(|m| m.is_leader())
    }

    /// The lines printed at start: where it listens, which backend, and a
    /// newly generated admin key (shown this once) or what became of
    /// `TETHER_ADMIN_KEY` (the earlier operator keys it revoked).
    pub fn banner(&self) -> String {
        // A wildcard address is not one a browser can open: the dashboard
        // line names this machine's loopback on the same port instead.
        let mut browsable = self.addr;
        if browsable.ip().is_unspecified() {
            browsable.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let mut out = format!(
            "tether serve: listening on http://{}\n  backend: {}\n  dashboard: http://{browsable}/\n",
            self.addr,
            self.database.describe()
        );
        match &self.admin_key {
            AdminKey::Generated { key, path } => out.push_str(&format!(
                "  admin key (shown once, saved to {}):\n    {key}\n",
                path.display()
            )),
            AdminKey::FromEnv {
                revoked: false,
                rotated,
            } if rotated.is_empty() => out.push_str("  admin key: from TETHER_ADMIN_KEY\n"),
            AdminKey::FromEnv {
                revoked: false,
                rotated,
            } => {
                let ids: Vec<String> = rotated.iter().map(|id| id.to_string()).collect();
                out.push_str(&format!(
                    "  admin key: from TETHER_ADMIN_KEY (new: revoked the earlier one{}: {})\n",
                    if ids.len() == 1 { "" } else { "s" },
                    ids.join(", ")
                ))
            }
            AdminKey::FromEnv { revoked: true, .. } => out
                .push_str("  admin key: TETHER_ADMIN_KEY was revoked and authenticates nothing\n"),
            AdminKey::Existing { path: Some(path) } => {
                out.push_str(&format!("  admin key: in {}\n", path.display()))
            }
            AdminKey::Existing { path: None } => {
                out.push_str("  admin key: created earlier (not stored here)\n")
            }
        }
        out
    }

    /// Stops gracefully: no new connections; requests in flight finish and
    /// waiting claims answer at once (empty); then the maintenance lease is
    /// released so another node takes over without waiting for it to lapse.
    pub async fn stop(self) -> std::io::Result<()> {
        self.state.shutdown.cancel();
        let served = match self.server.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        };
        if let Some(m) = self.maintenance {
            m.shutdown();
            m.join().await;
        }
        info!("tether serve stopped");
        served
    }
}
