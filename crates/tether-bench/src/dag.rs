//! Jobs in dependency graphs, end to end: what waiting for other jobs costs
//! a worker that runs them, next to as many independent jobs run the same
//! way in the same run.
//!
//! Each figure starts an idle worker (the worker runtime, 256 slots, no-op
//! handlers), then two tasks enqueue `n` jobs in batches of 1 000 entries
//! while it runs, and the clock stops when every job has succeeded. In the
//! graph run every batch holds 100 whole fan-out/fan-in graphs of
//! [`GRAPH`] jobs, written with `depends_on_entries`: a root, eight jobs
//! that wait for it, and a sink that waits for those eight (16 edges per
//! graph). Only the roots are claimable at enqueue; the rest are released
//! by their dependencies' completions (the store's trigger on PostgreSQL,
//! the same transaction's statements on SQLite). The independent run
//! enqueues the same number of jobs with no dependencies.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tether_core::{Engine, NewJob};
use tether_sqlite::SqliteStore;
use tether_worker::Worker;

use crate::report::Report;
use crate::workload::{rate, TENANT};

/// Jobs of one graph: a root, [`GRAPH`] − 2 jobs after it, a sink after those.
pub const GRAPH: usize = 10;
/// Entries per enqueue call: whole graphs.
const BATCH: usize = 1_000;
/// Enqueue calls in flight.
const PRODUCERS: usize = 2;
/// Handler slots of the worker (as `pg_runtime_e2e`).
const CONCURRENCY: usize = 256;
/// Rounds of an independent run and a graph run per backend.
const ROUNDS: usize = 3;

/// One batch of `size` entries (a multiple of [`GRAPH`]) on `queue`: whole
/// graphs when `graphs`, else independent jobs.
pub fn batch(queue: &str, size: usize, graphs: bool) -> Vec<NewJob> {
    (0..size)
        .map(|i| {
            let job = NewJob::new(queue, "noop", json!({ "i": i }));
            if !graphs {
                return job;
            }
            let root = i - i % GRAPH;
            match i % GRAPH {
                0 => job,
                k if k < GRAPH - 1 => job.after_entry(root),
                _ => (1..GRAPH - 1).fold(job, |job, m| job.after_entry(root + m)),
            }
        })
        .collect()
}

/// Runs `n` jobs (rounded down to whole graphs per producer) through one
/// worker on `queue`, enqueued while it runs; answers how many and the
/// time from the first enqueue until the last one succeeded.
pub async fn run(engine: &Engine, queue: &str, n: usize, graphs: bool) -> (usize, Duration) {
    let per_task = n / PRODUCERS / GRAPH * GRAPH;
    let n = per_task * PRODUCERS;
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let handle = Worker::builder(engine.clone())
        .tenant(TENANT)
        .queue(queue, CONCURRENCY)
        .handler("noop", move |_ctx| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
        })
        .maintenance(false)
        .poll_interval(Duration::from_millis(20))
        .build()
        .expect("worker configuration")
        .start();
    // Let the worker subscribe before the clock starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let engine = engine.clone();
            let queue = queue.to_owned();
            tokio::spawn(async move {
                let mut left = per_task;
                while left > 0 {
                    let size = left.min(BATCH);
                    engine
                        .enqueue_many(TENANT, &batch(&queue, size, graphs))
                        .await
                        .expect("enqueue batch");
                    left -= size;
                }
            })
        })
        .collect();
    for p in producers {
        p.await.expect("producer");
    }
    // Every handler ran; then until the store has every completion.
    while ran.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let stats = loop {
        let stats = engine.queue_stats(TENANT, queue).await.expect("stats");
        if stats.counts.succeeded as usize >= n {
            break stats;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let elapsed = started.elapsed();
    handle.shutdown();
    handle.join().await;
    let c = stats.counts;
    assert_eq!(
        (c.succeeded as usize, c.waiting, c.queued, c.running),
        (n, 0, 0, 0),
        "every job succeeded once ({queue})"
    );
    assert_eq!(ran.load(Ordering::Relaxed), n, "every handler ran once");
    (n, elapsed)
}

/// `pg_dag_e2e_jobs_per_s`, `pg_independent_e2e_jobs_per_s` and
/// `pg_dag_ratio`, on the benchmark's PostgreSQL database: [`ROUNDS`]
/// rounds of an independent run then a graph run, each figure the median
/// of its rounds and the ratio the median of the rounds' ratios (a single
/// pair moved with whatever else the machine did; see `Rounds`).
///
/// Each run starts from a table that holds `n` finished jobs of another
/// queue, analyzed: as a production table with its history would be. From
/// an empty table, PostgreSQL caches plans made while it is tiny (a scan
/// of the whole table is then the cheapest) and keeps them while it grows
/// to 100 000 jobs in seconds; autovacuum's analyze corrects them within a
/// minute, but a run is shorter, and both figures measured that instead.
pub async fn run_pg(engine: &Engine, pool: &sqlx::PgPool, n: usize, report: &mut Report) {
    let mut rounds = Rounds::default();
    for _ in 0..ROUNDS {
        history(pool, n).await;
        let (_, independent) = run(engine, "dag-independent", n, false).await;
        history(pool, n).await;
        let (done, dag) = run(engine, "dag", n, true).await;
        rounds.add(done, independent, dag);
    }
    rounds.report(
        [
            "pg_dag_e2e_jobs_per_s",
            "pg_independent_e2e_jobs_per_s",
            "pg_dag_ratio",
        ],
        "",
        report,
    );
}

/// Rounds of the same pair of runs: each figure's median and the median
/// of the rounds' ratios. Both runs of a round share the machine's state
/// of the moment (caches, checkpoints, whatever else runs), so their ratio
/// is steadier than either figure; one round alone moved by ±15 %.
#[derive(Default)]
struct Rounds {
    jobs: usize,
    independent: Vec<f64>,
    dag: Vec<f64>,
    ratios: Vec<f64>,
}

impl Rounds {
    /// One round: `jobs` jobs each way, in these times.
    fn add(&mut self, jobs: usize, independent: Duration, dag: Duration) {
        let (i, d) = (rate(jobs as u64, independent), rate(jobs as u64, dag));
        self.jobs = jobs;
        self.independent.push(i);
        self.dag.push(d);
        self.ratios.push(d / i);
        eprintln!(
            "  (round: {jobs} jobs, independent {i:.0}/s, graphs {d:.0}/s, ratio {:.2})",
            d / i
        );
    }

    /// The three figures, named `[dag, independent, ratio]`, their details
    /// led by `lead` (which backend, where the names do not say).
    fn report(mut self, names: [&'static str; 3], lead: &str, report: &mut Report) {
        let [dag, independent, ratio] = names;
        let n = self.ratios.len();
        let jobs = self.jobs;
        report.add(
            dag,
            median(&mut self.dag),
            "jobs/s",
            format!(
                "{lead}{jobs} jobs in graphs of {GRAPH} (root -> 8 -> sink), enqueued in \
                 batches of {BATCH} while one worker (256 slots, no-op) runs them, until all \
                 succeeded; median of {n} rounds"
            ),
        );
        report.add(
            independent,
            median(&mut self.independent),
            "jobs/s",
            format!("{lead}the same number of jobs without dependencies, the same way"),
        );
        report.add(
            ratio,
            median(&mut self.ratios),
            "ratio",
            format!("{lead}graphs / independent, median of {n} rounds' ratios"),
        );
    }
}

/// The middle value (of an odd count; the upper middle of an even one).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Empties the tables, then writes `n` succeeded jobs on queue
/// `dag-history` (plain SQL, not measured), analyzes and checkpoints.
async fn history(pool: &sqlx::PgPool, n: usize) {
    crate::pg::reset(pool).await;
    sqlx::query(
        "INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, priority, attempt, \
         max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at, \
         started_at, finished_at) \
         SELECT gen_random_uuid(), $1, 'dag-history', 'noop', '{}', 'succeeded', 0, 1, 5, \
         1000, 3600000, now(), now(), now(), now(), now() \
         FROM generate_series(1, $2) g",
    )
    .bind(TENANT)
    .bind(n as i64)
    .execute(pool)
    .await
    .expect("history");
    crate::pg::vacuum(pool).await;
}

/// `sqlite_dag_e2e_jobs_per_s`, `sqlite_independent_e2e_jobs_per_s` and
/// `sqlite_dag_ratio`: [`ROUNDS`] rounds as [`run_pg`]'s, each run on a
/// fresh SQLite file.
pub async fn run_sqlite(n: usize, report: &mut Report) {
    let dir = std::env::temp_dir().join(format!("tether-bench-dag-{}", std::process::id()));
    let mut rounds = Rounds::default();
    for _ in 0..ROUNDS {
        let mut times = Vec::new();
        for (graphs, file) in [(false, "independent.db"), (true, "dag.db")] {
            std::fs::create_dir_all(&dir).expect("bench directory");
            let store = SqliteStore::open(dir.join(file))
                .await
                .expect("open SQLite");
            let engine = Engine::new(Arc::new(store));
            let (done, elapsed) = run(&engine, "dag", n, graphs).await;
            times.push((done, elapsed));
            drop(engine);
            let _ = std::fs::remove_dir_all(&dir);
        }
        let [(_, independent), (done, dag)] = times[..] else {
            unreachable!("two runs")
        };
        rounds.add(done, independent, dag);
    }
    rounds.report(
        [
            "sqlite_dag_e2e_jobs_per_s",
            "sqlite_independent_e2e_jobs_per_s",
            "sqlite_dag_ratio",
        ],
        "SQLite: ",
        report,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::Dependency;

    #[test]
    fn a_batch_holds_whole_graphs() {
        let jobs = batch("q", 2 * GRAPH, true);
        assert!(jobs[0].depends_on.is_empty() && jobs[GRAPH].depends_on.is_empty());
        assert_eq!(jobs[1].depends_on, [Dependency::Entry(0)]);
        assert_eq!(jobs[GRAPH + 3].depends_on, [Dependency::Entry(GRAPH)]);
        let sink: Vec<_> = (GRAPH + 1..2 * GRAPH - 1).map(Dependency::Entry).collect();
        assert_eq!(jobs[2 * GRAPH - 1].depends_on, sink);
        let edges: usize = jobs.iter().map(|j| j.depends_on.len()).sum();
        assert_eq!(edges, 2 * 2 * (GRAPH - 2));
        assert!(batch("q", GRAPH, false)
            .iter()
            .all(|j| j.depends_on.is_empty()));
    }
}
