//! Where the time goes, counted in the write-ahead log: for each
//! transition (enqueue, claim, complete) of tether and of the physical
//! limit's minimal table, the WAL bytes, heap records and index entries
//! written per job. Read with `pg_walinspect` (PostgreSQL 15+) from the
//! records of the benchmark's own database only, so other databases on the
//! cluster do not count; one client, batches of 100, nothing else running
//! in the database. These are counts, not timings: they do not vary with
//! the machine's load.

use sqlx::{PgPool, Row};
use tether_core::{ClaimRequest, Engine, NewJob};
use uuid::Uuid;

use crate::report::Report;
use crate::workload::TENANT;

/// Jobs per pass.
const JOBS: usize = 2_000;
/// Jobs per statement.
const BATCH: usize = 100;

/// What one transition wrote, per job.
struct Written {
    wal_bytes: f64,
    heap_records: f64,
    index_entries: f64,
}

/// The WAL position now.
async fn lsn(pool: &PgPool) -> String {
    sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
        .fetch_one(pool)
        .await
        .expect("wal position")
}

/// What this database's records between `from` and now add up to, per job.
async fn written_since(pool: &PgPool, from: &str, jobs: usize) -> Written {
    // Up to what is flushed: every record of our committed statements.
    let to: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
        .fetch_one(pool)
        .await
        .expect("flushed wal position");
    let row = sqlx::query(
        "SELECT COALESCE(sum(record_length + fpi_length), 0)::float8 AS bytes,
                count(*) FILTER (WHERE resource_manager IN ('Heap', 'Heap2')
                                   AND record_type NOT IN ('LOCK', 'PRUNE', 'VACUUM', 'VISIBLE', 'FREEZE_PAGE'))::float8 AS heap,
                count(*) FILTER (WHERE resource_manager = 'Btree'
                                   AND record_type LIKE 'INSERT%')::float8 AS index
         FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
         WHERE block_ref LIKE '%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%'",
    )
    .bind(from)
    .bind(&to)
    .fetch_one(pool)
    .await
    .expect("pg_walinspect records");
    let per_job = |name: &str| row.get::<f64, _>(name) / jobs as f64;
    Written {
        wal_bytes: per_job("bytes"),
        heap_records: per_job("heap"),
        index_entries: per_job("index"),
    }
}

/// Prints, for one transition, where its WAL went: bytes and records per
/// job by relation and record type, largest first. The table is for
/// reading (docs/BENCHMARKS.md quotes it); the BENCH lines are the totals.
async fn print_breakdown(pool: &PgPool, what: &str, from: &str, jobs: usize) {
    let to: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
        .fetch_one(pool)
        .await
        .expect("flushed wal position");
    let rows = sqlx::query(
        "WITH r AS (
             SELECT resource_manager || ' ' || record_type AS record,
                    substring(block_ref FROM 'rel \\d+/\\d+/(\\d+)')::oid AS node,
                    record_length + fpi_length AS bytes
             FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
             WHERE block_ref LIKE '%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%')
         SELECT COALESCE(c.relname, '(other)') AS relation, r.record,
                count(*)::float8 AS records, sum(r.bytes)::float8 AS bytes
         FROM r LEFT JOIN pg_class c ON c.relfilenode = r.node
         GROUP BY 1, 2 ORDER BY 4 DESC",
    )
    .bind(from)
    .bind(&to)
    .fetch_all(pool)
    .await
    .expect("pg_walinspect breakdown");
    println!("\n{what}: WAL per job by relation and record");
    println!(
        "{:<28} {:<26} {:>9} {:>9}",
        "relation", "record", "records", "bytes"
    );
    for row in rows {
        println!(
            "{:<28} {:<26} {:>9.2} {:>9.1}",
            row.get::<String, _>("relation"),
            row.get::<String, _>("record"),
            row.get::<f64, _>("records") / jobs as f64,
            row.get::<f64, _>("bytes") / jobs as f64,
        );
    }
}

/// Records the three figures of one transition.
fn add(report: &mut Report, names: [&'static str; 3], what: &str, w: Written) {
    report.add(names[0], w.wal_bytes, "B/job", format!("{what}: WAL bytes"));
    report.add(
        names[1],
        w.heap_records,
        "rec/job",
        format!("{what}: heap records"),
    );
    report.add(
        names[2],
        w.index_entries,
        "ent/job",
        format!("{what}: index entries"),
    );
}

/// Measures every transition of tether (through `engine`) and of the
/// physical limit's table, in the benchmark database behind `pool`.
pub async fn run(engine: &Engine, pool: &PgPool, report: &mut Report) {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .execute(pool)
        .await
        .expect("pg_walinspect (PostgreSQL 15 or later, contrib installed)");
    crate::pg::reset(pool).await;

    let from = lsn(pool).await;
    for chunk in 0..JOBS / BATCH {
        let jobs: Vec<NewJob> = (0..BATCH)
            .map(|i| NewJob::new("wal", "noop", serde_json::json!({ "i": chunk * BATCH + i })))
            .collect();
        engine.enqueue_many(TENANT, &jobs).await.expect("enqueue");
    }
    let enqueue = written_since(pool, &from, JOBS).await;
    print_breakdown(pool, "tether enqueue (batches of 100)", &from, JOBS).await;

    let req = ClaimRequest {
        queue: "wal".into(),
        worker_id: "wal".into(),
        limit: BATCH as u32,
        lease_ttl_ms: None,
    };
    let from = lsn(pool).await;
    let mut claimed = Vec::new();
    loop {
        let batch = engine.claim(TENANT, &req).await.expect("claim");
        if batch.is_empty() {
            break;
        }
        claimed.extend(batch);
    }
    assert_eq!(claimed.len(), JOBS, "every job claimed");
    let claim = written_since(pool, &from, JOBS).await;
    print_breakdown(pool, "tether claim 100", &from, JOBS).await;

    let from = lsn(pool).await;
    for chunk in claimed.chunks(BATCH) {
        let items = crate::workload::completions(chunk);
        for answer in engine
            .complete_many(TENANT, &items)
            .await
            .expect("complete")
        {
            answer.expect("completion accepted");
        }
    }
    let complete = written_since(pool, &from, JOBS).await;
    print_breakdown(pool, "tether complete 100", &from, JOBS).await;

    crate::physical::create(pool).await;
    let from = lsn(pool).await;
    crate::physical::insert_batches(pool, JOBS, 1).await;
    let p_enqueue = written_since(pool, &from, JOBS).await;
    let from = lsn(pool).await;
    let mut ids: Vec<Vec<Uuid>> = Vec::new();
    loop {
        let batch = crate::physical::claim(pool, BATCH as i64).await;
        if batch.is_empty() {
            break;
        }
        ids.push(batch);
    }
    let p_claim = written_since(pool, &from, JOBS).await;
    let from = lsn(pool).await;
    for batch in &ids {
        sqlx::query(crate::physical::COMPLETE)
            .bind(batch)
            .execute(pool)
            .await
            .expect("physical complete");
    }
    let p_complete = written_since(pool, &from, JOBS).await;
    crate::physical::remove(pool).await;

    add(
        report,
        [
            "pg_enqueue_wal_bytes_per_job",
            "pg_enqueue_heap_records_per_job",
            "pg_enqueue_index_entries_per_job",
        ],
        "tether enqueue (batches of 100)",
        enqueue,
    );
    add(
        report,
        [
            "pg_claim_wal_bytes_per_job",
            "pg_claim_heap_records_per_job",
            "pg_claim_index_entries_per_job",
        ],
        "tether claim 100",
        claim,
    );
    add(
        report,
        [
            "pg_complete_wal_bytes_per_job",
            "pg_complete_heap_records_per_job",
            "pg_complete_index_entries_per_job",
        ],
        "tether complete 100",
        complete,
    );
    add(
        report,
        [
            "physical_enqueue_wal_bytes_per_job",
            "physical_enqueue_heap_records_per_job",
            "physical_enqueue_index_entries_per_job",
        ],
        "physical 100-row insert",
        p_enqueue,
    );
    add(
        report,
        [
            "physical_claim_wal_bytes_per_job",
            "physical_claim_heap_records_per_job",
            "physical_claim_index_entries_per_job",
        ],
        "physical claim 100",
        p_claim,
    );
    add(
        report,
        [
            "physical_complete_wal_bytes_per_job",
            "physical_complete_heap_records_per_job",
            "physical_complete_index_entries_per_job",
        ],
        "physical complete 100",
        p_complete,
    );
}
