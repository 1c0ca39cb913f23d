//! `tether serve`: opens the database (applying migrations), sets up the
//! admin key, takes part in the maintenance leader election, and serves the
//! HTTP API until told to stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tether_server::{router, AppState, Metrics, ServerConfig};
use tether_worker::{Maintenance, MaintenanceHandle, Source};
use tracing::info;

use crate::admin_key::{self, AdminKey, AdminKeyError};
use crate::duration;
use crate::store::Database;

/// Options of `tether serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "TETHER_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Directory of the SQLite file and of `admin.key`.
    #[arg(long, env = "TETHER_DATA_DIR", default_value = "./tether-data")]
    pub data_dir: PathBuf,
    /// `postgres://…` to use PostgreSQL instead of the SQLite file.
    #[arg(long, env = "TETHER_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Largest request body in bytes; larger ones are refused with 413.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
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

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Bad options.
    #[error("{0}")]
    Config(String),
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

/// Opens the database, sets up the admin key (`env_admin_key` is the value
/// of `TETHER_ADMIN_KEY`), binds the address and starts serving and
/// maintaining; `/metrics` serves `metrics`. Returns once the server accepts
/// connections.
pub async fn start(
    args: &ServeArgs,
    env_admin_key: Option<&str>,
    metrics: Metrics,
) -> Result<Running, ServeError> {
    let database = Database::choose(args.database_url.as_deref(), &args.data_dir)
        .map_err(ServeError::Config)?;
    if let Database::Sqlite(path) = &database {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| ServeError::Config(format!("cannot create {}: {e}", dir.display())))?;
        }
    }
    let client = tether::Client::connect(&database.url())
        .await
        .map_err(|source| ServeError::Database {
            database: database.describe(),
            source,
        })?;
    let engine = client.engine().clone().with_limits(tether_core::Limits {
        max_queues_per_tenant: args.max_queues_per_tenant,
        max_schedules_per_tenant: args.max_schedules_per_tenant,
        ..*client.engine().limits()
    });
    let admin_key = admin_key::bootstrap(
        &engine,
        env_admin_key.filter(|k| !k.is_empty()),
        &args.data_dir,
    )
    .await?;

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
    let stopping = state.shutdown.clone();
    let app = router(state.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stopping.cancelled_owned())
            .await
    });

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
    /// newly generated admin key (shown this once).
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
            AdminKey::FromEnv { revoked: false } => {
                out.push_str("  admin key: from TETHER_ADMIN_KEY\n")
            }
            AdminKey::FromEnv { revoked: true } => out
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
