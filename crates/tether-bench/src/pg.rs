//! The PostgreSQL figures: tether next to the raw SQL it runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection, PgPool, QueryBuilder, Row};
use tether_core::{ClaimRequest, Engine};
use tether_postgres::{reference_sql, PgStore};
use uuid::Uuid;

use crate::report::Report;
use crate::workload::{
    claim_complete, concurrently, enqueue_batches, enqueue_singles, median_ms, rate, TENANT,
};
use crate::{Only, Scale};

/// Concurrent producers for single enqueues.
const PRODUCERS: usize = 8;
/// Concurrent claimers end to end.
const CLAIMERS: usize = 4;

/// A database of the benchmark's own, dropped by [`BenchDb::drop_now`].
pub struct BenchDb {
    admin: PgConnection,
    name: String,
    /// Its URL.
    pub url: String,
    /// An engine over it (migrations applied).
    pub engine: Engine,
    /// Its pool.
    pub pool: PgPool,
}

impl BenchDb {
    /// Creates `tether_bench_<pid><suffix>` (replacing a leftover one).
    pub async fn create(admin_url: &str, suffix: &str) -> BenchDb {
        let name = format!("tether_bench_{}{suffix}", std::process::id());
        let mut admin = PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {admin_url}: {e}"));
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .expect("drop old bench database");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("create bench database");
        let url = tether_postgres::url_with_database(admin_url, &name);
        let store = PgStore::connect(&url)
            .await
            .expect("connect bench database");
        let pool = store.pool().clone();
        BenchDb {
            admin,
            name,
            url,
            engine: Engine::new(Arc::new(store)),
            pool,
        }
    }

    /// Closes the pool and drops the database.
    pub async fn drop_now(mut self) {
        self.pool.close().await;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut self.admin)
        .await
        .expect("drop bench database");
    }
}

/// Runs the PostgreSQL figures `only` names in a database of its own,
/// dropped at the end.
pub async fn run(admin_url: &str, scale: &Scale, only: &Only, report: &mut Report) {
    // Checked first, so a run fails before it measures anything.
    let sdks = only.runs("sdk").then(crate::sdk::programs);
    let db = BenchDb::create(admin_url, "").await;
    let (engine, pool, url) = (&db.engine, &db.pool, db.url.as_str());
    if only.runs("enqueue") {
        enqueue_figures(engine, pool, scale, report).await;
    }
    if only.runs("wal") {
        crate::wal::run(engine, pool, report).await;
    }
    if only.runs("physical") {
        crate::physical::run(
            pool,
            (scale.enqueue_single, PRODUCERS),
            (scale.enqueue_batch, 2),
            scale.e2e[2].1,
            CLAIMERS,
            report,
        )
        .await;
    }
    if only.runs("e2e") {
        e2e_figures(engine, pool, scale, report).await;
    }
    if only.runs("runtime") {
        runtime_figures(engine, url, pool, scale, report).await;
    }
    if only.runs("latency") {
        latency_figures(engine, pool, scale, report).await;
    }
    if only.runs("flow") {
        crate::flow::run(engine, pool, scale.rate_seconds, report).await;
    }
    if only.runs("dag") {
        crate::dag::run_pg(engine, pool, scale.dag_jobs, report).await;
    }
    if only.runs("http") {
        crate::http::run(engine, url, pool, scale, report).await;
    }
    if only.runs("neighbours") {
        reset(pool).await;
        let (keys, seconds) = (scale.neighbour_keys, scale.neighbour_seconds);
        crate::neighbours::run(url, "pg", keys, seconds, report).await;
    }
    if let Some(sdks) = &sdks {
        crate::sdk::run(sdks, engine, url, pool, scale, report).await;
    }
    if only.runs("cron") {
        crate::cron::run(engine, pool, scale, report).await;
    }
    crate::physical::ratios(report);
    db.drop_now().await;
}

/// Empties the job tables (and the dependency edges) between figures.
pub async fn reset(pool: &PgPool) {
    sqlx::query("TRUNCATE tether.jobs, tether.job_events, tether.job_dependencies")
        .execute(pool)
        .await
        .expect("truncate");
}

async fn enqueue_figures(engine: &Engine, pool: &PgPool, scale: &Scale, report: &mut Report) {
    let n = scale.enqueue_single;
    reset(pool).await;
    let tether = enqueue_singles(engine, "single", n, PRODUCERS).await;
    reset(pool).await;
    let raw = raw_single_inserts(pool, n, PRODUCERS).await;
    let (t, r) = (rate(n as u64, tether), rate(n as u64, raw));
    report.add(
        "pg_enqueue_single_jobs_per_s",
        t,
        "jobs/s",
        format!("enqueue 1 job per call, {PRODUCERS} in flight, {n} jobs"),
    );
    report.add(
        "pg_enqueue_single_raw_rows_per_s",
        r,
        "rows/s",
        "raw single-row INSERT, same clients",
    );
    report.add(
        "pg_enqueue_single_ratio",
        t / r,
        "ratio",
        "tether / raw (bar >= 0.5)",
    );

    let n = scale.enqueue_batch;
    reset(pool).await;
    let tether = enqueue_batches(engine, "batch", n, 2).await;
    reset(pool).await;
    let raw = raw_batch_inserts(pool, n, 2).await;
    let (t, r) = (rate(n as u64, tether), rate(n as u64, raw));
    report.add(
        "pg_enqueue_batch_jobs_per_s",
        t,
        "jobs/s",
        format!("enqueue in batches of 1000, 2 in flight, {n} jobs"),
    );
    report.add(
        "pg_enqueue_batch_raw_rows_per_s",
        r,
        "rows/s",
        "raw 100-row INSERTs, same clients",
    );
    report.add(
        "pg_enqueue_batch_ratio",
        t / r,
        "ratio",
        "tether / raw (bar >= 0.5)",
    );
}

const RAW_INSERT_COLUMNS: &str = "INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, \
    priority, attempt, max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at) ";

async fn raw_single_inserts(pool: &PgPool, n: usize, tasks: usize) -> Duration {
    let sql = format!(
        "{RAW_INSERT_COLUMNS} VALUES ($1, 'bench', 'raw-single', 'noop', $2, 'queued', 0, 0, 5, \
         1000, 3600000, now(), now(), now())"
    );
    concurrently(tasks, |t| {
        let pool = pool.clone();
        let sql = sql.clone();
        let count = n / tasks + usize::from(t < n % tasks);
        async move {
            for i in 0..count {
                sqlx::query(&sql)
                    .bind(Uuid::now_v7())
                    .bind(json!({ "i": i }))
                    .execute(&pool)
                    .await
                    .expect("raw insert");
            }
            count as u64
        }
    })
    .await
    .1
}

async fn raw_batch_inserts(pool: &PgPool, n: usize, tasks: usize) -> Duration {
    let per_task = n.div_ceil(tasks);
    concurrently(tasks, |t| {
        let pool = pool.clone();
        let count = per_task.min(n.saturating_sub(t * per_task));
        async move {
            let mut left = count;
            while left > 0 {
                let size = left.min(100);
                let mut q = QueryBuilder::new(RAW_INSERT_COLUMNS);
                q.push_values(0..size, |mut row, i| {
                    row.push_bind(Uuid::now_v7())
                        .push("'bench'")
                        .push("'raw-batch'")
                        .push("'noop'")
                        .push_bind(json!({ "i": i }))
                        .push("'queued'")
                        .push("0")
                        .push("0")
                        .push("5")
                        .push("1000")
                        .push("3600000")
                        .push("now()")
                        .push("now()")
                        .push("now()");
                });
                q.build().execute(&pool).await.expect("raw batch insert");
                left -= size;
            }
            count as u64
        }
    })
    .await
    .1
}

async fn e2e_figures(engine: &Engine, pool: &PgPool, scale: &Scale, report: &mut Report) {
    let names = [
        "pg_e2e_b1_jobs_per_s",
        "pg_e2e_b10_jobs_per_s",
        "pg_e2e_b100_jobs_per_s",
    ];
    for ((batch, n), name) in scale.e2e.into_iter().zip(names) {
        reset(pool).await;
        enqueue_batches(engine, "e2e", n, 2).await;
        vacuum(pool).await;
        let (done, elapsed) = claim_complete(engine, "e2e", batch as u32, CLAIMERS).await;
        assert_eq!(done, n as u64, "every job claimed once");
        report.add(
            name,
            rate(done, elapsed),
            "jobs/s",
            format!("claim {batch} + complete {batch}, {CLAIMERS} claimers, {n} no-op jobs"),
        );
    }
    workflow_figure(engine, pool, scale.e2e[0].1, report).await;
    let (_, n) = scale.e2e[2];
    // The same with a running-jobs limit that never binds (4 claimers hold
    // at most 400): what the limited claim path itself costs.
    let max_running = tether_core::QueueConfigPatch {
        max_running: Some(Some(10_000)),
        ..Default::default()
    };
    let rate_of = limited_e2e(engine, pool, &max_running, n, 0).await;
    report.add(
        "pg_e2e_b100_max_running_jobs_per_s",
        rate_of,
        "jobs/s",
        format!("as pg_e2e_b100, queue with max_running 10000, {n} no-op jobs"),
    );
    report.add(
        "pg_e2e_b100_max_running_ratio",
        report.get("pg_e2e_b100_max_running_jobs_per_s") / report.get("pg_e2e_b100_jobs_per_s"),
        "ratio",
        "max_running only / unlimited, same run",
    );
    // And with key_max_running over 100 keys as well (100 per key: like
    // max_running, a limit that does not bind, so the figure is the cost of
    // the per-key claim).
    let with_keys = tether_core::QueueConfigPatch {
        key_max_running: Some(Some(100)),
        ..max_running
    };
    let rate_of = limited_e2e(engine, pool, &with_keys, n, 100).await;
    report.add(
        "pg_e2e_b100_limited_jobs_per_s",
        rate_of,
        "jobs/s",
        format!(
            "as pg_e2e_b100, max_running 10000 and key_max_running 100 over 100 keys, {n} no-op jobs"
        ),
    );
    report.add(
        "pg_e2e_b100_limited_ratio",
        report.get("pg_e2e_b100_limited_jobs_per_s") / report.get("pg_e2e_b100_jobs_per_s"),
        "ratio",
        "limited / unlimited, same run (bar >= 0.8)",
    );
    reset(pool).await;
    enqueue_batches(engine, "e2e", n, 2).await;
    vacuum(pool).await;
    let (done, elapsed) = raw_claim_complete(pool, "e2e", 100, CLAIMERS).await;
    assert_eq!(done, n as u64, "every job claimed once (raw)");
    let raw = rate(done, elapsed);
    report.add(
        "pg_e2e_b100_raw_jobs_per_s",
        raw,
        "jobs/s",
        "the same claim and complete SQL, executed bare",
    );
    report.add(
        "pg_e2e_b100_ratio",
        report.get("pg_e2e_b100_jobs_per_s") / raw,
        "ratio",
        "tether / raw (bar >= 0.6)",
    );
}

async fn runtime_figures(
    engine: &Engine,
    url: &str,
    pool: &PgPool,
    scale: &Scale,
    report: &mut Report,
) {
    let (_, n) = scale.e2e[2];
    reset(pool).await;
    let jobs_per_s = crate::runtime::e2e(engine, pool, "runtime", n).await;
    report.add(
        "pg_runtime_e2e_jobs_per_s",
        jobs_per_s,
        "jobs/s",
        format!("through the worker runtime, no-op handlers, {n} jobs"),
    );
    report.add(
        "pg_runtime_ratio",
        jobs_per_s / report.get("pg_e2e_b100_raw_jobs_per_s"),
        "ratio",
        "runtime / raw claim+complete at batch 100 (bar >= 0.5)",
    );

    reset(pool).await;
    // The producer has its own pool, as another process would: the wake-up
    // crosses through LISTEN/NOTIFY, not the in-process shortcut.
    let producer = Engine::new(Arc::new(
        PgStore::connect(url).await.expect("producer store"),
    ));
    let n = scale.pickup_jobs;
    let (p50, p99) = crate::runtime::pickup(&producer, engine, "pickup", n, 50).await;
    report.add(
        "pg_pickup_p50_ms",
        p50,
        "ms",
        format!("enqueue returned -> handler started, idle worker, {n} jobs at ~50/s"),
    );
    report.add(
        "pg_pickup_p99_ms",
        p99,
        "ms",
        "the same, 99th percentile (bar <= 10)",
    );
}

async fn raw_claim_complete(
    pool: &PgPool,
    queue: &str,
    batch: i64,
    claimers: usize,
) -> (u64, Duration) {
    concurrently(claimers, |c| {
        let pool = pool.clone();
        let queue = queue.to_owned();
        let worker = format!("raw-{c}");
        async move {
            let mut done = 0u64;
            loop {
                let rows = sqlx::query(reference_sql::CLAIM)
                    .bind(TENANT)
                    .bind(&queue)
                    .bind(batch)
                    .bind(None::<i64>)
                    .bind(&worker)
                    .fetch_all(&pool)
                    .await
                    .expect("raw claim");
                // An empty claim answers one row of NULLs (see `CLAIM`).
                let rows: Vec<_> = rows
                    .into_iter()
                    .filter(|r| r.get::<Option<Uuid>, _>("id").is_some())
                    .collect();
                if rows.is_empty() {
                    return done;
                }
                let ids: Vec<Uuid> = rows.iter().map(|r| r.get("id")).collect();
                let tokens: Vec<Uuid> = rows.iter().map(|r| r.get("lease_token")).collect();
                let results: Vec<Option<Value>> = vec![None; ids.len()];
                // What each report is, as the store records it (invariant 20).
                let digest = tether_core::lifecycle::Report::Complete(None).digest();
                let digests: Vec<&str> = vec![digest.as_str(); ids.len()];
                sqlx::query(reference_sql::COMPLETE_MANY)
                    .bind(TENANT)
                    .bind(&ids)
                    .bind(&tokens)
                    .bind(&results)
                    .bind(&digests)
                    .fetch_all(&pool)
                    .await
                    .expect("raw complete");
                done += ids.len() as u64;
            }
        }
    })
    .await
}

/// `VACUUM ANALYZE` of the jobs table, then a checkpoint: every figure
/// starts from statistics that know the rows just written, as a live
/// database has, and from a fresh checkpoint (see [`checkpoint`]).
pub async fn vacuum(pool: &PgPool) {
    sqlx::query("VACUUM ANALYZE tether.jobs")
        .execute(pool)
        .await
        .expect("vacuum");
    checkpoint(pool).await;
}

/// A checkpoint before a timed figure. Each page's first change after a
/// checkpoint writes the whole page to the WAL, so a checkpoint that falls
/// inside one figure and not another (they come every 5 minutes or 1 GB
/// of WAL, wherever the run then is) moved figures by a third from run to
/// run; starting each from one puts every figure, tether's and the
/// physical limit's alike, in the same place.
pub async fn checkpoint(pool: &PgPool) {
    sqlx::query("CHECKPOINT")
        .execute(pool)
        .await
        .expect("checkpoint");
}

/// Fills the queue fast with plain SQL (setup, not measured); the jobs'
/// concurrency keys take `keys` values in turn (0: no key).
async fn fill(pool: &PgPool, queue: &str, n: usize, keys: usize) {
    sqlx::query(
        "INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, priority, attempt, \
         max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at, \
         concurrency_key) \
         SELECT gen_random_uuid(), 'bench', $1, 'noop', '{}', 'queued', (g % 3)::smallint, 0, 5, \
         1000, 3600000, now() - g * interval '1 millisecond', now(), now(), \
         CASE WHEN $3 > 0 THEN 'key-' || (g % $3) END \
         FROM generate_series(1, $2) g",
    )
    .bind(queue)
    .bind(n as i64)
    .bind(keys as i64)
    .execute(pool)
    .await
    .expect("fill");
}

/// As `pg_e2e_b100` on a queue with flow control `limits`, its `n` jobs'
/// keys taking `keys` values in turn (0: no key): jobs per second.
async fn limited_e2e(
    engine: &Engine,
    pool: &PgPool,
    limits: &tether_core::QueueConfigPatch,
    n: usize,
    keys: usize,
) -> f64 {
    reset(pool).await;
    engine
        .configure_queue(TENANT, "e2e-limited", limits)
        .await
        .expect("limits");
    crate::workload::enqueue_keyed(engine, "e2e-limited", n, 2, keys).await;
    vacuum(pool).await;
    let (done, elapsed) = claim_complete(engine, "e2e-limited", 100, CLAIMERS).await;
    assert_eq!(done, n as u64, "every job claimed once (limited)");
    rate(done, elapsed)
}

/// [`fill`] without keys, for other groups' figures.
pub async fn fill_queue(pool: &PgPool, queue: &str, n: usize) {
    fill(pool, queue, n, 0).await;
}

/// The median of `samples` claims of 100 from `queue`, each its own.
async fn median_claim_ms(engine: &Engine, queue: &str, samples: usize) -> f64 {
    let req = ClaimRequest {
        queue: queue.into(),
        worker_id: "latency".into(),
        limit: 100,
        lease_ttl_ms: None,
    };
    let mut times = Vec::new();
    for _ in 0..samples {
        let started = Instant::now();
        let claimed = engine.claim(TENANT, &req).await.expect("claim");
        times.push(started.elapsed());
        assert_eq!(claimed.len(), 100);
    }
    median_ms(times)
}

async fn latency_figures(engine: &Engine, pool: &PgPool, scale: &Scale, report: &mut Report) {
    let mut medians = Vec::new();
    for n in [scale.latency_small, scale.latency_large] {
        reset(pool).await;
        fill(pool, "latency", n, 0).await;
        vacuum(pool).await;
        medians.push(median_claim_ms(engine, "latency", scale.latency_samples).await);
    }
    // A fair claim of 100 over as many jobs spread over 10 000 keys: it
    // reads one index entry per key with queued jobs.
    reset(pool).await;
    fill(pool, "fair", scale.latency_large, 10_000).await;
    let fair = tether_core::QueueConfigPatch {
        fair: Some(true),
        ..Default::default()
    };
    engine
        .configure_queue(TENANT, "fair", &fair)
        .await
        .expect("fair");
    vacuum(pool).await;
    let fair_ms = median_claim_ms(engine, "fair", scale.latency_samples).await;
    report.add(
        "pg_claim_ms_10k",
        medians[0],
        "ms",
        format!("median claim of 100 with {} queued", scale.latency_small),
    );
    report.add(
        "pg_claim_ms_1m",
        medians[1],
        "ms",
        format!("median claim of 100 with {} queued", scale.latency_large),
    );
    report.add(
        "pg_claim_latency_growth",
        medians[1] / medians[0],
        "ratio",
        "1m / 10k (bar <= 2)",
    );
    report.add(
        "pg_fair_claim_ms_1m",
        fair_ms,
        "ms",
        format!(
            "median fair claim of 100 with {} queued over 10000 keys",
            scale.latency_large
        ),
    );
    report.add(
        "pg_fair_claim_ratio",
        fair_ms / medians[1],
        "ratio",
        "fair / plain claim over as many jobs (bar <= 2)",
    );
}

/// Rounds of [`workflow_figure`].
const WORKFLOW_ROUNDS: usize = 3;

/// `pg_workflow_e2e_b1_ratio`: the claim-one, complete-one end to end of
/// `n` jobs enqueued as one workflow (at most 10 000 jobs a workflow; more
/// are split) ÷ as many independent jobs, alternating, the median of the
/// rounds' ratios. Each end of a workflow's job locks the workflow's row
/// until its transaction commits (so that exactly one end sees none left:
/// migration 19): this is what that costs the worst case, one job per
/// transaction, four claimers on one workflow.
async fn workflow_figure(engine: &Engine, pool: &PgPool, n: usize, report: &mut Report) {
    let mut ratios = Vec::with_capacity(WORKFLOW_ROUNDS);
    for _ in 0..WORKFLOW_ROUNDS {
        reset(pool).await;
        enqueue_batches(engine, "wf-e2e", n, 2).await;
        vacuum(pool).await;
        let (done, elapsed) = claim_complete(engine, "wf-e2e", 1, CLAIMERS).await;
        assert_eq!(done, n as u64, "every job claimed once");
        let independent = rate(done, elapsed);

        reset(pool).await;
        // One batch creates the workflow; the rest join it (a batch holds
        // at most 1 000 jobs, a workflow 10 000).
        let mut workflow = None;
        for first in (0..n).step_by(tether_core::validate::MAX_BATCH) {
            if first % tether_core::MAX_WORKFLOW_JOBS == 0 {
                workflow = None;
            }
            let jobs: Vec<tether_core::NewJob> = (first
                ..n.min(first + tether_core::validate::MAX_BATCH))
                .map(|i| {
                    let job = tether_core::NewJob::new("wf-e2e", "noop", json!({ "i": i }));
                    match workflow {
                        Some(id) => job.workflow(id),
                        None => job,
                    }
                })
                .collect();
            match workflow {
                Some(_) => {
                    engine
                        .enqueue_many(TENANT, &jobs)
                        .await
                        .expect("append to the workflow");
                }
                None => {
                    let flow = tether_core::NewWorkflow {
                        name: "bench".into(),
                        idempotency_key: None,
                    };
                    let made = engine
                        .enqueue_workflow(TENANT, &flow, &jobs)
                        .await
                        .expect("enqueue a workflow");
                    workflow = Some(made.workflow.id);
                }
            }
        }
        vacuum(pool).await;
        let (done, elapsed) = claim_complete(engine, "wf-e2e", 1, CLAIMERS).await;
        assert_eq!(done, n as u64, "every workflow job claimed once");
        ratios.push(rate(done, elapsed) / independent);
    }
    report.add(
        "pg_workflow_e2e_b1_ratio",
        crate::cancel::p50_p99(&mut ratios).0,
        "ratio",
        format!(
            "claim 1 + complete 1, {CLAIMERS} claimers, {n} jobs in one workflow / independent, median of {WORKFLOW_ROUNDS} rounds"
        ),
    );
}
