//! The options of `tether serve`, which become a
//! [`tether_server::ServeConfig`] for [`tether_server::start`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tether_server::{ConnectionLimits, ServeConfig, ServerConfig};

use crate::duration;

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
    /// `postgres://…` to use PostgreSQL instead of the SQLite file. May name
    /// a primary and its standbys (`postgres://a:5432,b:5432/db`): tether
    /// uses the writable one and follows it after a failover.
    #[arg(long, env = "TETHER_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// PostgreSQL: most connections in the pool.
    #[arg(long, env = "TETHER_DATABASE_POOL_SIZE", default_value_t = tether::OpenOptions::default().pool_size,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub database_pool_size: u32,
    /// PostgreSQL: the database URL goes through a transaction-pooling proxy
    /// (PgBouncer with pool_mode = transaction): no named prepared
    /// statements, every statement in a transaction, no LISTEN through it.
    #[arg(long, env = "TETHER_TRANSACTION_POOLER")]
    pub transaction_pooler: bool,
    /// PostgreSQL: a URL straight to the database (not through a pooler) for
    /// the LISTEN connection that wakes workers when other processes
    /// enqueue. Behind a transaction pooler without it, workers poll.
    #[arg(long, env = "TETHER_LISTEN_DATABASE_URL", hide_env_values = true)]
    pub listen_database_url: Option<String>,
    /// Do not apply migrations at start: refuse to start unless the schema
    /// is exactly this build's (run `tether migrate` first, e.g. as a
    /// deployment step), and change nothing.
    #[arg(long, env = "TETHER_NO_MIGRATE")]
    pub no_migrate: bool,
    /// Largest request body in bytes; larger ones are refused with 413.
    #[arg(long, env = "TETHER_MAX_BODY_BYTES", default_value_t = ServerConfig::default().max_body_bytes,
          value_parser = clap::value_parser!(usize))]
    pub max_body_bytes: usize,
    /// Longest `wait_ms` a claim may ask for (a long-poll); more is refused
    /// with 400. Must be below --request-timeout.
    #[arg(long, env = "TETHER_MAX_CLAIM_WAIT", default_value = "30s", value_parser = duration::parse)]
    pub max_claim_wait: Duration,
    /// Most claims waiting at once; a claim that finds them all taken
    /// answers at once, as if it had asked for `wait_ms: 0`.
    #[arg(long, env = "TETHER_MAX_LONG_POLLS", default_value_t = ServerConfig::default().max_long_polls)]
    pub max_long_polls: usize,
    /// Most claims of one tenant waiting at once, so one tenant cannot take
    /// every waiting place; past it its claim answers at once.
    #[arg(long, env = "TETHER_MAX_LONG_POLLS_PER_TENANT", default_value_t = ServerConfig::default().max_long_polls_per_tenant)]
    pub max_long_polls_per_tenant: usize,
    /// Most event streams (`GET /v1/events`) one tenant holds open; past
    /// it a new one is refused with 429. Every worker of the SDKs and the
    /// Rust runtime over HTTP holds one (its cancellations), every open
    /// dashboard one: raise it for a tenant with more workers.
    #[arg(long, env = "TETHER_MAX_EVENT_STREAMS_PER_TENANT", default_value_t = ServerConfig::default().max_event_streams_per_tenant)]
    pub max_event_streams_per_tenant: usize,
    /// Longest any request may take, long-polls included; past it the
    /// answer is 503 `unavailable`.
    #[arg(long, env = "TETHER_REQUEST_TIMEOUT", default_value = "60s", value_parser = duration::parse)]
    pub request_timeout: Duration,
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
    #[arg(long, env = "TETHER_RETENTION", default_value = "7d", value_parser = duration::parse)]
    pub retention: Duration,
    /// Interval of the maintenance loop; the leader lease lasts three ticks.
    #[arg(long, env = "TETHER_MAINTENANCE_TICK", default_value = "1s", value_parser = duration::parse)]
    pub maintenance_tick: Duration,
    /// Take no part in maintenance (reaping, expiry, pruning); some other
    /// node must.
    #[arg(long, env = "TETHER_NO_MAINTENANCE")]
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

impl From<ServeArgs> for ServeConfig {
    fn from(args: ServeArgs) -> ServeConfig {
        ServeConfig {
            listen: args.listen,
            data_dir: args.data_dir,
            database_url: args.database_url,
            max_body_bytes: args.max_body_bytes,
            max_connections: args.max_connections,
            header_read_timeout: args.header_read_timeout,
            idle_timeout: args.idle_timeout,
            retention: args.retention,
            maintenance_tick: args.maintenance_tick,
            maintenance: !args.no_maintenance,
            max_queues_per_tenant: args.max_queues_per_tenant,
            max_schedules_per_tenant: args.max_schedules_per_tenant,
            metrics_max_queues: args.metrics_max_queues,
            max_claim_wait: args.max_claim_wait,
            max_long_polls: args.max_long_polls,
            max_long_polls_per_tenant: args.max_long_polls_per_tenant,
            max_event_streams_per_tenant: args.max_event_streams_per_tenant,
            request_timeout: args.request_timeout,
            database_options: tether::OpenOptions {
                migrate: !args.no_migrate,
                pool_size: args.database_pool_size,
                transaction_pooler: args.transaction_pooler,
                listen_url: args.listen_database_url,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting can come from the environment as well as a flag (so a
    /// container or unit file configures it without a command line), named
    /// after the flag, and `--help` shows each one's variable and default.
    #[test]
    fn every_serve_setting_has_an_environment_variable() {
        let command = <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"));
        let mut seen = 0;
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            seen += 1;
            let env = arg
                .get_env()
                .unwrap_or_else(|| panic!("--{id} has no environment variable"));
            let env = env.to_str().unwrap();
            assert_eq!(env, format!("TETHER_{}", id.to_uppercase()), "--{id}");
            // A value with no default is only an optional URL; the rest
            // show their default in --help.
            if arg.get_action().takes_values() && !id.ends_with("database_url") {
                assert!(
                    !arg.get_default_values().is_empty(),
                    "--{id} has no default"
                );
            }
        }
        assert!(seen >= 20, "only {seen} settings found");
    }

    #[test]
    fn the_defaults_are_the_servers() {
        assert_eq!(
            ServeConfig::from(ServeArgs::defaults()),
            ServeConfig::default()
        );
    }
}
