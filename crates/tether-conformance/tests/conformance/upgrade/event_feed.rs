//! Upgrading to the feed (PostgreSQL 18, SQLite 15), on both backends: a
//! job finished before the upgrade, with its history, is not read by a
//! reader that starts at the head after it; its removal by retention is no
//! gap for that reader; the events written after the upgrade are read.

use tether_conformance::TestDb;
use tether_core::{EventKind, FeedFilter};
use uuid::Uuid;

const OLD: &str = "0190e000-0000-7000-8000-000000000001";

fn pg_seed() -> String {
    format!(
        "INSERT INTO tether.queues (tenant, name) VALUES ('default', 'q');
        INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, attempt, max_attempts,
            backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at, finished_at)
        VALUES ('{OLD}', 'default', 'q', 'k', 'null', 'cancelled', 0, 5, 1000, 3600000,
            now(), now(), now(), now() - interval '1 hour');
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        VALUES ('{OLD}', 'default', now(), 'enqueued', 0),
               ('{OLD}', 'default', now(), 'cancelled', 0);"
    )
}

fn sqlite_seed() -> String {
    let now = chrono::Utc::now().timestamp_millis();
    let before = now - 3_600_000;
    format!(
        "INSERT INTO tether_queues (tenant, name, created_at, updated_at)
            VALUES ('default', 'q', {now}, {now});
        INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, attempt, max_attempts,
            backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at, finished_at)
        VALUES ('{OLD}', 'default', 'q', 'k', 'null', 'cancelled', 0, 5, 1000, 3600000,
            {now}, {now}, {now}, {before});
        INSERT INTO tether_job_events (job_id, tenant, at, event, attempt)
        VALUES ('{OLD}', 'default', {now}, 'enqueued', 0),
               ('{OLD}', 'default', {now}, 'cancelled', 0);"
    )
}

async fn old_history_is_behind_the_head(db: TestDb) {
    let e = &db.engine;
    let filter = FeedFilter {
        tenant: Some("default".into()),
        ..FeedFilter::default()
    };
    let head = e.feed_head().await.expect("head");
    let page = e.feed_read(&head, &filter, 100).await.expect("read");
    assert!(page.events.is_empty(), "{:?}", page.events);

    assert_eq!(e.prune_finished(60_000, 100).await.expect("prune"), 1);
    let new = e
        .enqueue(
            "default",
            tether_core::NewJob::new("q", "k", serde_json::json!(1)),
        )
        .await
        .expect("enqueue")
        .job;
    let page = e.feed_read(&head, &filter, 100).await.expect("read");
    assert!(
        page.gap.is_none(),
        "the old history went, but it was behind"
    );
    let read: Vec<(Uuid, EventKind)> = page
        .events
        .iter()
        .map(|f| (f.job_id, f.event.event))
        .collect();
    assert_eq!(read, [(new.id, EventKind::Enqueued)]);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_17_feeds_what_comes_after() {
    old_history_is_behind_the_head(
        tether_conformance::postgres_upgraded_from(17, &pg_seed()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_database_from_schema_14_feeds_what_comes_after() {
    old_history_is_behind_the_head(
        tether_conformance::sqlite_upgraded_from(14, &sqlite_seed()).await,
    )
    .await;
}
