//! `tether serve`: makes the data directory private, opens the database
//! (applying migrations), checks the server secret, sets up the admin key,
//! takes part in the maintenance leader election, and serves the HTTP API
//! until told to stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tether_server::{router, AppState, ConnectionLimits, Metrics, ServerConfig};
use tether_worker::{Maintenance, MaintenanceHandle, Source};
use tracing::info;

use crate::admin_key::{self, AdminKey, AdminKeyError};
use crate::server_secret::{self, SecretSource, ServerSecretError};
use crate::store::Database;
use crate::{data_dir, duration};

/// Options of `tether serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "TETHER_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Directory of the SQLite file, `admin.key` and `server.secret` (mode
    /// 0700; the files in it 0600).
    #[arg(long, env = "TETHER_DATA_DIR", default_value = "./tether-data")]
    pub data_dir: PathBuf,
    /// `postgres://…` to use PostgreSQL instead of the SQLite file.
    #[arg(long, env = "TETHER_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Largest request body in bytes; larger ones are refused with 413.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Most HTTP connections open at once; more clients wait in the listen
    /// backlog. Lowered at start to fit the open-file limit (`ulimit -n`),
    /// which the database connections share.
    #[arg(long, env = "TETHER_MAX_CONNECTIONS", default_value_t = ConnectionLimits::default().max_connections)]
    pub max_connections: usize,
    /// How long a new connection may take to send a complete request head
    /// before it is closed.
    #[arg(long, env = "TETHER_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = duration::parse)]
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight after
    /// its last response (keep-alive) before it is closed.
    #[arg(long, env = "TETHER_IDLE_TIMEOUT", default_value = "60s", value_parser = duration::parse)]
    pub idle_timeout: Duration,
    /// How long finished jobs are kept before they are pruned.
    #[arg(long, default_value = "7d", value_parser = duration::parse)]
    pub retention: Duration,
    /// Interval of the maintenance loop; the leader lease lasts three ticks.
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    pub maintenance_tick: Duration,
    /// Take no part in maintenance (reaping, expiry, pruning); some other
    /// node must.
    #[arg(long)]
    pub no_maintenance: bool,
    /// Most queues one tenant may have (queues with jobs or settings); an
    /// enqueue, pause or configuration that would make another is refused
    /// with 409. Maintenance removes queues with no job and default settings.
    #[arg(long, env = "TETHER_MAX_QUEUES_PER_TENANT", default_value_t = 1_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_queues_per_tenant: u32,
    /// Most schedules one tenant may have; creating another is refused with
    /// 409.
    #[arg(long, env = "TETHER_MAX_SCHEDULES_PER_TENANT", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_schedules_per_tenant: u32,
    /// Most queues (of all tenants) the per-queue gauges of /metrics cover;
    /// past it the ones with the fewest unfinished and failed jobs are left
    /// out and counted in tether_queue_series_omitted.
    #[arg(long, env = "TETHER_METRICS_MAX_QUEUES", default_value_t = 1_000)]
    pub metrics_max_queues: usize,
}

impl ServeArgs {
    /// The defaults, as `tether serve` with no options.
    pub fn defaults() -> ServeArgs {
        <ServeArgs as clap::FromArgMatches>::from_arg_matches(
            &<ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"))
                .no_binary_name(true)
                .get_matches_from(Vec::<String>::new()),
        )
        .expect("the defaults parse")
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
    args: &ServeArgs,
    secrets: &Secrets,
    metrics: Metrics,
) -> Result<Running, ServeError> {
    let database = Database::choose(args.database_url.as_deref(), &args.data_dir)
        .map_err(ServeError::Config)?;
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
    let client = tether::Client::connect(&database.url())
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
        ..ServerConfig::default()
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
    let server = tokio::spawn(tether_server::serve(
        listener,
        router(state.clone()),
        limits,
        state.shutdown.clone(),
    ));

    let maintenance = (!args.no_maintenance).then(|| {
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
        let mut out = format!(
            "tether serve: listening on http://{}\n  backend: {}\n",
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
