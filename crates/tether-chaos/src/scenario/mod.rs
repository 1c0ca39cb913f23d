//! One run: its own database, three replicas, the workers, the producers
//! and the fault injector; then the drain, the stop and the checks. With
//! `--partitions` the run also makes its own network ([`Net`]) and
//! PostgreSQL cluster ([`PgSolo`]) first, and removes both at the end.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::SeedableRng;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool, Row};
use tether_client::HttpClient;
use tether_core::QueueConfigPatch;
use tokio::time::Instant;

use crate::check::{self, Context, EventRow, Findings, JobRow};
use crate::cluster::{self, Cluster};
use crate::faults::{self, FaultStats, Injector};
use crate::graph;
use crate::leadership;
use crate::net::{self, LinkId, Net, Traffic};
use crate::obs::Obs;
use crate::pgpair::{self, PgPair, PgSolo};
use crate::plan;
use crate::procs;
use crate::produce::{self, Producer};
use crate::report::{self, Timings};
use crate::stream_reader::{self, StreamReader};

mod database;
mod run;

use database::*;
use run::*;

/// Replicas of `tether serve`.
pub const SERVERS: usize = 3;
/// Producer tasks.
const PRODUCERS: usize = 4;
/// The admin key every replica is started with (and every client uses).
const ADMIN_KEY: &str = "tether-chaos-admin-key-0123456789abcdef";

/// The options of a run.
#[derive(Debug, Clone)]
pub struct Opts {
    /// `--quick`.
    pub quick: bool,
    /// Jobs to enqueue.
    pub jobs: u64,
    /// Seconds of faults.
    pub seconds: u64,
    /// Seed of every random decision.
    pub seed: u64,
    /// Worker processes.
    pub workers: usize,
    /// `--worker-cmd`, split on whitespace: the worker program (another
    /// SDK's) and its first arguments; `None` runs the Rust worker.
    pub worker_cmd: Option<Vec<String>>,
    /// `--failover`: the run's own primary and synchronous standby
    /// ([`pgpair`]), and a failover instead of the PostgreSQL restart.
    pub failover: bool,
    /// `--partitions`: the run's own network ([`Net`]) and PostgreSQL
    /// ([`PgSolo`]), and the network's faults instead of the processes'.
    pub partitions: bool,
}

impl Opts {
    /// Which worker implementation the run uses, for the report.
    pub fn worker_label(&self) -> String {
        match &self.worker_cmd {
            Some(cmd) => format!("`{}`", cmd.join(" ")),
            None => "the Rust runtime (tether-client)".to_owned(),
        }
    }
}

impl Opts {
    /// The longest the drain may take before the run fails.
    fn drain_timeout(&self) -> Duration {
        Duration::from_secs(if self.quick { 120 } else { 900 })
    }
}

/// Aborts a task when dropped, so an interrupted or failed run leaves no
/// task (and so no child process) behind.
struct AbortOnDrop<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> AbortOnDrop<T> {
    fn spawn(f: impl std::future::Future<Output = T> + Send + 'static) -> Self
    where
        T: Send + 'static,
    {
        AbortOnDrop(Some(tokio::spawn(f)))
    }

    async fn join(mut self) -> Result<T, tokio::task::JoinError> {
        self.0.take().expect("joined once").await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.abort();
        }
    }
}

/// What a run produced.
struct Outcome {
    findings: Findings,
    faults: FaultStats,
    obs: Obs,
    timings: Timings,
    /// What went over each link (`--partitions`).
    traffic: Option<std::collections::BTreeMap<LinkId, Traffic>>,
}

/// The network of a `--partitions` run, and each replica's URL of the
/// database over its link.
#[derive(Clone)]
struct Partitions {
    net: Arc<Net>,
    replica_urls: Vec<String>,
}

/// Runs the whole program; the exit code says whether every promise held.
pub fn main(opts: Opts) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tether-chaos: FAIL: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(outer(opts))
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tether-chaos: FAIL: {message}");
    ExitCode::FAILURE
}

async fn outer(opts: Opts) -> ExitCode {
    // With --failover the run makes its own primary and standby, with
    // --partitions its own network and cluster, and neither touches the
    // PostgreSQL at TETHER_TEST_DATABASE_URL.
    let mut pair = None;
    let mut solo: Option<PgSolo> = None;
    let mut network: Option<Arc<Net>> = None;
    let (admin_url, pg_restart, pg_fault) = if opts.partitions {
        let made = Instant::now();
        let (n, s) = match start_partitions(&opts).await {
            Ok(made) => made,
            Err(e) => return fail(e),
        };
        let port = s.node.port;
        let fault = format!(
            "not restarted: the run's own cluster on 127.0.0.1:{port} and {} (made with the \
             network in {:.1} s, in {}); the network's faults instead",
            n.pg_hosts()
                .iter()
                .map(|h| format!("{h}:{port}"))
                .collect::<Vec<_>>()
                .join(", "),
            made.elapsed().as_secs_f64(),
            s.root().display(),
        );
        let admin_url = s.admin_url();
        network = Some(n);
        solo = Some(s);
        (admin_url, String::new(), fault)
    } else if opts.failover {
        let made = Instant::now();
        let p = match start_pair().await {
            Ok(p) => Arc::new(p),
            Err(e) => return fail(e),
        };
        let fault = format!(
            "failover from the primary on 127.0.0.1:{} to its synchronous standby on \
             127.0.0.1:{} (made in {:.1} s, in {})",
            p.primary.port,
            p.standby.port,
            made.elapsed().as_secs_f64(),
            p.root().display()
        );
        let admin_url = p.primary_admin_url();
        pair = Some(p);
        (admin_url, String::new(), fault)
    } else {
        let admin_url = std::env::var("TETHER_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        match faults::pg_restart_command(&admin_url) {
            Ok(c) => (admin_url, c.clone(), format!("restart: {c}")),
            Err(e) => return fail(e),
        }
    };
    let database = format!("tether_chaos_{}", std::process::id());
    let mut admin = match connect(&admin_url).await {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot connect to PostgreSQL at {admin_url}: {e}")),
    };
    if pair.is_none() && solo.is_none() {
        drop_stale_databases(&mut admin).await;
    }
    if let Err(e) = sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&mut admin)
        .await
    {
        return fail(format!("cannot create the database {database}: {e}"));
    }
    let _ = admin.close().await;
    let database_url = match &pair {
        // Primary, then standby: the replicas find the writable one.
        Some(p) => p.url(&database),
        None => tether_postgres::url_with_database(&admin_url, &database),
    };
    let partitions = match (&network, &solo) {
        (Some(n), Some(s)) => Some(Partitions {
            net: n.clone(),
            replica_urls: (0..SERVERS)
                .map(|r| {
                    format!(
                        "postgres://postgres@{}:{}/{database}",
                        n.pg_host(r),
                        s.node.port
                    )
                })
                .collect(),
        }),
        _ => None,
    };
    println!(
        "tether-chaos: {}{} run, seed {}, {} jobs, {} s of faults, {SERVERS} replicas, {} workers \
         ({}), database {database}, PostgreSQL {pg_fault}",
        if opts.quick { "quick" } else { "full" },
        if opts.partitions { " --partitions" } else { "" },
        opts.seed,
        opts.jobs,
        opts.seconds,
        opts.workers,
        opts.worker_label()
    );

    let mut task = tokio::spawn(run(
        opts.clone(),
        admin_url.clone(),
        database_url,
        pg_restart,
        pair.clone(),
        partitions,
    ));
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async {
        match terminate.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let result = tokio::select! {
        r = &mut task => r.map_err(|e| format!("the run panicked: {e}")).and_then(|r| r),
        _ = tokio::signal::ctrl_c() => {
            task.abort();
            let _ = task.await;
            Err("interrupted".to_owned())
        }
        _ = terminated => {
            task.abort();
            let _ = task.await;
            Err("terminated (SIGTERM)".to_owned())
        }
    };
    // The run's network goes first (its processes are gone with the task).
    drop(network);
    // Every child process is gone by now (dropping a process kills it).
    // `TETHER_CHAOS_KEEP_DATABASE=1` keeps it for a look at the history
    // (the next run drops it, its process being gone).
    let keep = std::env::var("TETHER_CHAOS_KEEP_DATABASE").is_ok_and(|v| v == "1");
    let dropped = match (pair, solo) {
        (_, Some(s)) => {
            if keep {
                s.keep();
                println!(
                    "tether-chaos: TETHER_CHAOS_KEEP_DATABASE=1: kept the database {database} on \
                     the run's cluster, postgres://postgres@127.0.0.1:{}/{database} (its files in \
                     {})",
                    s.node.port,
                    s.root().display()
                );
            }
            drop(s);
            Ok(())
        }
        // The clusters go with the pair (the run holds no clone any more).
        (Some(p), None) => {
            if keep {
                p.keep();
                println!(
                    "tether-chaos: TETHER_CHAOS_KEEP_DATABASE=1: kept the database {database} on \
                     the new primary, postgres://postgres@127.0.0.1:{}/{database} (its files in \
                     {})",
                    p.standby.port,
                    p.root().display()
                );
            }
            drop(p);
            Ok(())
        }
        (None, None) if keep => {
            println!("tether-chaos: TETHER_CHAOS_KEEP_DATABASE=1: kept the database {database}");
            Ok(())
        }
        (None, None) => drop_database(&admin_url, &database).await,
    };
    match result {
        Ok(outcome) => {
            let findings = outcome.findings;
            if let Err(e) = dropped {
                eprintln!("tether-chaos: warning: {e}");
            }
            report::print(
                &opts,
                &findings,
                &outcome.faults,
                &outcome.obs,
                &outcome.timings,
                outcome.traffic.as_ref(),
            );
            if findings.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => fail(e),
    }
}

/// The network and the cluster of a `--partitions` run, after those of
/// earlier runs whose process is gone are removed: first the namespaces
/// and links (PostgreSQL listens on their root-side ends), then the
/// cluster. On an error what was made is removed again.
async fn start_partitions(opts: &Opts) -> Result<(Arc<Net>, PgSolo), String> {
    let workers = opts.workers;
    let net = tokio::task::spawn_blocking(move || {
        net::sweep_stale();
        pgpair::sweep_stale();
        net::probe()?;
        let worker_replica = (0..workers)
            .map(|j| cluster::replica_of_slot(j, SERVERS))
            .collect();
        Net::create(SERVERS, worker_replica)
            .map_err(|e| format!("cannot make the run's network: {e}"))
    })
    .await
    .map_err(|e| format!("making the network panicked: {e}"))??;
    let net = Arc::new(net);
    let port = crate::cluster::free_port(0x5_0003).map_err(|e| format!("no port: {e}"))?;
    let solo = PgSolo::start(port, net.pg_hosts(), net.subnet())
        .await
        .map_err(|e| format!("cannot set up the run's PostgreSQL: {e}"))?;
    Ok((net, solo))
}

/// The primary and standby of a `--failover` run, on free ports, after the
/// clusters earlier runs left behind are removed.
async fn start_pair() -> Result<PgPair, String> {
    tokio::task::spawn_blocking(pgpair::sweep_stale)
        .await
        .map_err(|e| format!("removing stale clusters failed: {e}"))?;
    let primary = crate::cluster::free_port(0x5_0001).map_err(|e| format!("no port: {e}"))?;
    let mut salt = 0x5_0002;
    let standby = loop {
        let p = crate::cluster::free_port(salt).map_err(|e| format!("no port: {e}"))?;
        if p != primary {
            break p;
        }
        salt += 1;
    };
    PgPair::start((primary, standby))
        .await
        .map_err(|e| format!("cannot set up the primary and its standby: {e}"))
}

fn say(start: Instant, what: impl std::fmt::Display) {
    println!("[{:>6.1}s] {what}", start.elapsed().as_secs_f64());
}
