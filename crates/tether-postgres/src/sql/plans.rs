//! The claims' plans: every claim statement, and the reports that follow
//! it, find their jobs through an index, whatever the planner guesses. After five executions a prepared
//! statement may run a generic plan, which cannot see its parameters'
//! values; a claim whose plan then scanned the whole jobs table cost a
//! read of every job ever kept, per claim. These tests force the generic
//! plan on a table the statistics know to be full of queued jobs (the
//! guess that led there) and read the plan.

use serde_json::json;
use tether_core::{NewJob, NewJobRef, Store, DEFAULT_TENANT};

use super::attempts::{
    CLAIM, CLAIM_BY_KEY, CLAIM_RESERVED, COMPLETE_MANY, HEARTBEAT_MANY, RESERVE,
};
use crate::PgStore;

/// The generic plan of `sql` run with `args` (SQL literals), as text.
async fn generic_plan(pool: &sqlx::PgPool, sql: &str, args: &str) -> String {
    let mut conn = pool.acquire().await.unwrap();
    for step in [
        "SET plan_cache_mode = force_generic_plan".to_owned(),
        format!("PREPARE claim_plan AS {sql}"),
    ] {
        sqlx::raw_sql(&step).execute(&mut *conn).await.unwrap();
    }
    let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE claim_plan({args})"))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("DEALLOCATE claim_plan; RESET plan_cache_mode")
        .execute(&mut *conn)
        .await
        .unwrap();
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_never_scan_the_whole_jobs_table() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().unwrap();
    let store = PgStore::connect(&url).await.unwrap();
    // 20 000 queued jobs over 50 keys in one queue.
    for chunk in 0..20 {
        let jobs: Vec<NewJob> = (0..1_000)
            .map(|i| {
                let mut job = NewJob::new("q", "k", json!({ "i": i }));
                job.concurrency_key = Some(format!("key-{}", (chunk * 1_000 + i) % 50));
                job
            })
            .collect();
        store
            .enqueue(DEFAULT_TENANT, &NewJobRef::mint(&jobs), 1_000)
            .await
            .unwrap();
    }
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::raw_sql("ANALYZE tether.jobs")
        .execute(&pool)
        .await
        .unwrap();

    let tenant = format!("'{DEFAULT_TENANT}'");
    let claims = [
        ("CLAIM", CLAIM, format!("{tenant}, 'q', 100, NULL, 'w'")),
        ("RESERVE", RESERVE, format!("{tenant}, 'q', 100, NULL")),
        (
            "CLAIM_RESERVED",
            CLAIM_RESERVED,
            format!("{tenant}, 'q', gen_random_uuid(), NULL, 'w'"),
        ),
        (
            "CLAIM_BY_KEY",
            CLAIM_BY_KEY,
            format!("{tenant}, 'q', 100, NULL, ARRAY['w'], '', 64, ARRAY[100::bigint]"),
        ),
        // And the reports that follow every claim.
        (
            "COMPLETE_MANY",
            COMPLETE_MANY,
            format!(
                "{tenant}, ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()], \
                 ARRAY['{{}}'::jsonb], ARRAY['d']"
            ),
        ),
        (
            "HEARTBEAT_MANY",
            HEARTBEAT_MANY,
            format!(
                "{tenant}, ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()], \
                 ARRAY[NULL::bigint], ARRAY[NULL::jsonb]"
            ),
        ),
    ];
    for (name, sql, args) in claims {
        let plan = generic_plan(&pool, sql, &args).await;
        assert!(
            !plan.contains("Seq Scan on jobs"),
            "{name} scans the whole jobs table:\n{plan}"
        );
    }
    pool.close().await;
    drop(store);
    db.cleanup().await;
}
