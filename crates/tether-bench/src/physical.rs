//! The physical limit: what PostgreSQL does for a job queue with nothing
//! of tether's on top — a minimal jobs table (id, state, run_at, payload;
//! one partial claim index; no history, no tenants, no leases) and the
//! least SQL a claim, a completion and an enqueue can be. Measured in the
//! same run, by the same client code and concurrency as tether's figures,
//! so that every tether figure can be read as a share of it
//! (`*_physical_ratio`).

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::{PgPool, QueryBuilder};
use uuid::Uuid;

use crate::report::Report;
use crate::workload::{concurrently, rate};

/// The minimal schema, in a schema of its own beside tether's.
const SCHEMA: &str = "DROP SCHEMA IF EXISTS physical CASCADE;
    CREATE SCHEMA physical;
    CREATE TABLE physical.jobs (
        id      uuid        PRIMARY KEY,
        state   text        NOT NULL,
        run_at  timestamptz NOT NULL,
        payload jsonb       NOT NULL
    );
    CREATE INDEX physical_claim ON physical.jobs (run_at, id) WHERE state = 'queued';";

/// Claims up to `$1` ready jobs, oldest first, with what a worker needs to
/// run them (a claim that did not hand out the payload would be no claim).
const CLAIM: &str = "UPDATE physical.jobs SET state = 'running'
    WHERE id IN (SELECT id FROM physical.jobs WHERE state = 'queued' AND run_at <= now()
                 ORDER BY run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING id, payload";

/// Claims a batch ([`CLAIM`]), decoding the payloads as tether's claim
/// does; answers the ids.
pub(crate) async fn claim(pool: &PgPool, batch: i64) -> Vec<Uuid> {
    let rows: Vec<(Uuid, Value)> = sqlx::query_as(CLAIM)
        .bind(batch)
        .fetch_all(pool)
        .await
        .expect("physical claim");
    rows.into_iter().map(|(id, _payload)| id).collect()
}

/// Completes the jobs `$1`.
pub(crate) const COMPLETE: &str =
    "UPDATE physical.jobs SET state = 'succeeded' WHERE id = ANY($1) AND state = 'running'";

/// Runs of the physical end-to-end figure; the median is reported.
const E2E_RUNS: usize = 3;

/// Rows per minimal batch insert.
const INSERT_BATCH: usize = 100;

/// Creates the minimal table (and drops an earlier one).
pub(crate) async fn create(pool: &PgPool) {
    sqlx::raw_sql(SCHEMA)
        .execute(pool)
        .await
        .expect("physical schema");
}

async fn truncate(pool: &PgPool) {
    sqlx::query("TRUNCATE physical.jobs")
        .execute(pool)
        .await
        .expect("truncate physical.jobs");
}

/// Minimal single-row inserts, `tasks` in flight.
async fn insert_singles(pool: &PgPool, n: usize, tasks: usize) -> Duration {
    concurrently(tasks, |t| {
        let pool = pool.clone();
        let count = n / tasks + usize::from(t < n % tasks);
        async move {
            for i in 0..count {
                sqlx::query(
                    "INSERT INTO physical.jobs (id, state, run_at, payload) \
                     VALUES ($1, 'queued', now(), $2)",
                )
                .bind(Uuid::now_v7())
                .bind(json!({ "i": i }))
                .execute(&pool)
                .await
                .expect("physical insert");
            }
            count as u64
        }
    })
    .await
    .1
}

/// Minimal 100-row inserts, `tasks` in flight.
pub(crate) async fn insert_batches(pool: &PgPool, n: usize, tasks: usize) -> Duration {
    let per_task = n.div_ceil(tasks);
    concurrently(tasks, |t| {
        let pool = pool.clone();
        let count = per_task.min(n.saturating_sub(t * per_task));
        async move {
            let mut left = count;
            while left > 0 {
                let size = left.min(INSERT_BATCH);
                let mut q =
                    QueryBuilder::new("INSERT INTO physical.jobs (id, state, run_at, payload) ");
                q.push_values(0..size, |mut row, i| {
                    row.push_bind(Uuid::now_v7())
                        .push("'queued'")
                        .push("now()")
                        .push_bind(json!({ "i": i }));
                });
                q.build()
                    .execute(&pool)
                    .await
                    .expect("physical batch insert");
                left -= size;
            }
            count as u64
        }
    })
    .await
    .1
}

/// Fills the table with `n` ready jobs (setup, not measured).
async fn fill(pool: &PgPool, n: usize) {
    sqlx::query(
        "INSERT INTO physical.jobs (id, state, run_at, payload)
         SELECT gen_random_uuid(), 'queued', now() - g * interval '1 microsecond', '{\"i\": 1}'
         FROM generate_series(1, $1) g",
    )
    .bind(n as i64)
    .execute(pool)
    .await
    .expect("physical fill");
    sqlx::query("VACUUM ANALYZE physical.jobs")
        .execute(pool)
        .await
        .expect("physical vacuum");
    crate::pg::checkpoint(pool).await;
}

/// `claimers` tasks each claim `batch` and complete them until none is left.
async fn claim_complete(pool: &PgPool, batch: i64, claimers: usize) -> (u64, Duration) {
    concurrently(claimers, |_| {
        let pool = pool.clone();
        async move {
            let mut done = 0u64;
            loop {
                let ids = claim(&pool, batch).await;
                if ids.is_empty() {
                    return done;
                }
                sqlx::query(COMPLETE)
                    .bind(&ids)
                    .execute(&pool)
                    .await
                    .expect("physical complete");
                done += ids.len() as u64;
            }
        }
    })
    .await
}

/// Measures the physical figures: single and 100-row inserts with the
/// producers tether's enqueue figures use, and claim 100 + complete 100
/// with `claimers` tasks over `e2e_jobs` ready jobs.
pub async fn run(
    pool: &PgPool,
    singles: (usize, usize),
    batches: (usize, usize),
    e2e_jobs: usize,
    claimers: usize,
    report: &mut Report,
) {
    create(pool).await;
    let (n, tasks) = singles;
    let elapsed = insert_singles(pool, n, tasks).await;
    report.add(
        "physical_insert_single_rows_per_s",
        rate(n as u64, elapsed),
        "rows/s",
        format!("physical limit: minimal 1-row INSERT, {tasks} in flight, {n} rows"),
    );
    truncate(pool).await;
    let (n, tasks) = batches;
    let elapsed = insert_batches(pool, n, tasks).await;
    report.add(
        "physical_insert_batch_rows_per_s",
        rate(n as u64, elapsed),
        "rows/s",
        format!("physical limit: minimal {INSERT_BATCH}-row INSERTs, {tasks} in flight, {n} rows"),
    );
    truncate(pool).await;
    // The denominator of every end-to-end ratio: the median of three runs,
    // so one unlucky second on a shared machine does not move them all.
    let mut rates = Vec::new();
    for _ in 0..E2E_RUNS {
        truncate(pool).await;
        fill(pool, e2e_jobs).await;
        let (done, elapsed) = claim_complete(pool, 100, claimers).await;
        assert_eq!(done, e2e_jobs as u64, "every physical job claimed once");
        rates.push(rate(done, elapsed));
    }
    rates.sort_by(f64::total_cmp);
    report.add(
        "physical_e2e_b100_jobs_per_s",
        rates[E2E_RUNS / 2],
        "jobs/s",
        format!(
            "physical limit: minimal claim 100 + complete 100, {claimers} claimers, {e2e_jobs} jobs (median of {E2E_RUNS})"
        ),
    );
    remove(pool).await;
}

/// Drops the minimal table.
pub(crate) async fn remove(pool: &PgPool) {
    sqlx::query("DROP SCHEMA physical CASCADE")
        .execute(pool)
        .await
        .expect("drop physical schema");
}

/// Every tether figure of this run as a share of its physical limit, each
/// printed as `<figure>_physical_ratio` (figures not measured are skipped).
pub fn ratios(report: &mut Report) {
    // (ratio, tether figure, physical figure, bar)
    const PAIRS: [(&str, &str, &str, &str); 11] = [
        (
            "pg_enqueue_single_physical_ratio",
            "pg_enqueue_single_jobs_per_s",
            "physical_insert_single_rows_per_s",
            " (bar >= 1.5)",
        ),
        (
            "pg_enqueue_batch_physical_ratio",
            "pg_enqueue_batch_jobs_per_s",
            "physical_insert_batch_rows_per_s",
            " (bar >= 0.35)",
        ),
        (
            "pg_e2e_b1_physical_ratio",
            "pg_e2e_b1_jobs_per_s",
            "physical_e2e_b100_jobs_per_s",
            "",
        ),
        (
            "pg_e2e_b10_physical_ratio",
            "pg_e2e_b10_jobs_per_s",
            "physical_e2e_b100_jobs_per_s",
            "",
        ),
        (
            "pg_e2e_b100_physical_ratio",
            "pg_e2e_b100_jobs_per_s",
            "physical_e2e_b100_jobs_per_s",
            " (bar >= 0.55)",
        ),
        (
            "pg_runtime_physical_ratio",
            "pg_runtime_e2e_jobs_per_s",
            "physical_e2e_b100_jobs_per_s",
            " (bar >= 0.5)",
        ),
        (
            "http_enqueue_single_physical_ratio",
            "http_pg_enqueue_single_jobs_per_s",
            "physical_insert_single_rows_per_s",
            " (bar >= 1.5)",
        ),
        (
            "http_pg_enqueue_batch_physical_ratio",
            "http_pg_enqueue_batch_jobs_per_s",
            "physical_insert_batch_rows_per_s",
            "",
        ),
        (
            "http_pg_e2e_physical_ratio",
            "http_pg_e2e_jobs_per_s",
            "physical_e2e_b100_jobs_per_s",
            "",
        ),
        (
            "py_worker_physical_ratio",
            "py_worker_jobs_per_s",
            "physical_e2e_b100_jobs_per_s",
            "",
        ),
        (
            "ts_worker_physical_ratio",
            "ts_worker_jobs_per_s",
            "physical_e2e_b100_jobs_per_s",
            "",
        ),
    ];
    for (name, figure, limit, bar) in PAIRS {
        let (value, physical) = (report.get(figure), report.get(limit));
        if value.is_nan() || physical.is_nan() {
            continue;
        }
        report.add(
            name,
            value / physical,
            "ratio",
            format!("{figure} / {limit}{bar}"),
        );
    }
}
