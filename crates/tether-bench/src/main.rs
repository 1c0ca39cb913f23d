//! tether's benchmark program. It measures tether against the raw SQL it
//! runs, in one run on one machine, and prints a table followed by one
//! `BENCH <name> <value>` line per figure named in `docs/BENCHMARKS.md`.
//!
//! ```text
//! cargo run --release -p tether-bench            # full run
//! cargo run --release -p tether-bench -- --quick # smaller, under two minutes
//! cargo run --release -p tether-bench -- --wal   # only the WAL written per transition
//! cargo run --release -p tether-bench -- --quick --only physical,e2e,runtime
//! cargo run --release -p tether-bench -- --quick --only dag --dag-jobs 20000
//! cargo run --release -p tether-bench -- --quick --only cancel
//! ```
//!
//! `--only` runs some groups of figures (see [`GROUPS`]); the ratios whose
//! two figures were both measured are still printed.
//!
//! PostgreSQL comes from `TETHER_BENCH_DATABASE_URL` (else
//! `TETHER_TEST_DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/postgres`);
//! the program creates its own database and drops it at the end.

mod cancel;
mod cron;
mod dag;
mod flow;
mod http;
mod neighbours;
mod pg;
mod physical;
mod report;
mod runtime;
mod sdk;
mod soak;
mod sqlite;
mod wal;
mod workload;

use std::time::Duration;

use report::Report;

/// The groups of figures `--only` can pick, in the order a run measures them.
pub const GROUPS: [&str; 15] = [
    "enqueue",
    "wal",
    "physical",
    "e2e",
    "runtime",
    "latency",
    "flow",
    "dag",
    "http",
    "neighbours",
    "sdk",
    "cron",
    "cancel",
    "sqlite",
    "soak",
];

/// Which groups a run measures (all unless `--only` named some).
#[derive(Debug, Clone, Default)]
pub struct Only(Option<Vec<String>>);

impl Only {
    /// Whether the group `name` (one of [`GROUPS`]) is measured.
    pub fn runs(&self, name: &str) -> bool {
        debug_assert!(GROUPS.contains(&name), "unknown group {name}");
        self.0
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }
}

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Jobs enqueued one per call (8 in flight).
    pub enqueue_single: usize,
    /// Jobs enqueued in batches of 1 000.
    pub enqueue_batch: usize,
    /// Jobs claimed and completed at batch 1, 10 and 100.
    pub e2e: [(usize, usize); 3],
    /// Queued jobs for the "small table" claim latency.
    pub latency_small: usize,
    /// Queued jobs for the "large table" claim latency.
    pub latency_large: usize,
    /// Claims timed per latency figure.
    pub latency_samples: usize,
    /// Jobs timed from enqueue to handler start (at about 50 per second).
    pub pickup_jobs: usize,
    /// Seconds a per-second schedule runs for the lateness figure.
    pub cron_seconds: u64,
    /// Seconds the rate limit's accuracy is measured over.
    pub rate_seconds: u64,
    /// Jobs of the shorter soak (`--soak` runs 1 000 000 on its own).
    pub soak_jobs: u64,
    /// Retention of finished jobs in the shorter soak.
    pub soak_retention: Duration,
    /// Keys of one job each behind the noisy neighbour's hot key.
    pub neighbour_keys: usize,
    /// Seconds another tenant is timed under the noisy neighbour's load.
    pub neighbour_seconds: u64,
    /// Jobs of each dependency-graph figure and of its independent
    /// counterpart (each backend).
    pub dag_jobs: usize,
    /// Jobs cancelled while running, per cancellation figure.
    pub cancel_jobs: usize,
}

impl Scale {
    fn full() -> Self {
        Scale {
            enqueue_single: 20_000,
            enqueue_batch: 200_000,
            e2e: [(1, 10_000), (10, 30_000), (100, 100_000)],
            latency_small: 10_000,
            latency_large: 1_000_000,
            latency_samples: 40,
            pickup_jobs: 500,
            cron_seconds: 60,
            rate_seconds: 30,
            soak_jobs: 300_000,
            soak_retention: soak::RETENTION,
            neighbour_keys: 50_000,
            neighbour_seconds: 20,
            dag_jobs: 100_000,
            cancel_jobs: 200,
        }
    }

    fn quick() -> Self {
        Scale {
            enqueue_single: 4_000,
            enqueue_batch: 50_000,
            e2e: [(1, 2_000), (10, 5_000), (100, 20_000)],
            latency_small: 10_000,
            latency_large: 200_000,
            latency_samples: 25,
            pickup_jobs: 100,
            cron_seconds: 15,
            rate_seconds: 10,
            // Several retentions long, so pruning reaches its steady state.
            soak_jobs: 250_000,
            soak_retention: Duration::from_secs(5),
            neighbour_keys: 30_000,
            neighbour_seconds: 8,
            dag_jobs: 2_000,
            cancel_jobs: 50,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd, url] = args.as_slice() {
        if cmd == "__serve" {
            // The HTTP figures' server process (see `http`).
            http::serve_child(url);
            return;
        }
    }
    const USAGE: &str =
        "usage: tether-bench [--quick] [--only GROUP,...] [--dag-jobs N] | --wal | --soak [--soak-jobs N]";
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    let mut soak_jobs: Option<u64> = None;
    let mut dag_jobs: Option<usize> = None;
    let mut quick = false;
    let mut wal_only = false;
    let mut only = Only::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--wal" => wal_only = true,
            "--only" => {
                let names: Vec<String> = rest
                    .next()
                    .map(|list| list.split(',').map(str::to_owned).collect())
                    .unwrap_or_default();
                if names.is_empty() || names.iter().any(|n| !GROUPS.contains(&n.as_str())) {
                    eprintln!("--only takes a list of {}; {USAGE}", GROUPS.join(","));
                    std::process::exit(2);
                }
                only = Only(Some(names));
            }
            "--soak" => soak_jobs = soak_jobs.or(Some(1_000_000)),
            "--dag-jobs" => {
                let n = rest.next().and_then(|n| n.parse().ok()).unwrap_or_else(|| {
                    eprintln!("--dag-jobs needs a number; {USAGE}");
                    std::process::exit(2);
                });
                dag_jobs = Some(n);
            }
            "--soak-jobs" => {
                let n = rest.next().and_then(|n| n.parse().ok()).unwrap_or_else(|| {
                    eprintln!("--soak-jobs needs a number; {USAGE}");
                    std::process::exit(2);
                });
                soak_jobs = Some(n);
            }
            bad => {
                eprintln!("unknown argument {bad:?}; {USAGE}");
                std::process::exit(2);
            }
        }
    }
    let mut scale = if quick { Scale::quick() } else { Scale::full() };
    if let Some(n) = dag_jobs {
        scale.dag_jobs = n;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut report = Report::default();
    runtime.block_on(async {
        let url = std::env::var("TETHER_BENCH_DATABASE_URL")
            .or_else(|_| std::env::var("TETHER_TEST_DATABASE_URL"))
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        if let Some(jobs) = soak_jobs {
            soak::run(&url, jobs, soak::RETENTION, &mut report).await;
            return;
        }
        if wal_only {
            // Counts only (WAL per transition), which do not depend on load.
            let db = pg::BenchDb::create(&url, "").await;
            wal::run(&db.engine, &db.pool, &mut report).await;
            db.drop_now().await;
            return;
        }
        pg::run(&url, &scale, &only, &mut report).await;
        if only.runs("cancel") {
            cancel::run(&url, &scale, &mut report).await;
        }
        if only.runs("sqlite") {
            sqlite::run(&scale, &mut report).await;
        }
        if only.runs("dag") {
            dag::run_sqlite(scale.dag_jobs, &mut report).await;
        }
        if only.runs("neighbours") {
            let dir = std::env::temp_dir().join(format!("tether-bench-nb-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("bench directory");
            let url = format!("sqlite://{}", dir.join("neighbours.db").display());
            let (keys, seconds) = (scale.neighbour_keys, scale.neighbour_seconds);
            neighbours::run(&url, "sqlite", keys, seconds, &mut report).await;
            let _ = std::fs::remove_dir_all(&dir);
        }
        if only.runs("soak") {
            soak::run(&url, scale.soak_jobs, scale.soak_retention, &mut report).await;
        }
    });
    let mode = match (soak_jobs, quick, wal_only) {
        (Some(_), _, _) => "soak",
        (None, _, true) => "WAL-only",
        (None, true, false) => "quick",
        (None, false, false) => "full",
    };
    report.print(mode);
}
