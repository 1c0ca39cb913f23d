//! Upgrading a PostgreSQL database that schema version 4 left behind to
//! the per-state indexes of migration 5: the indexes over every state go,
//! each state gets its own, a queue without a row (which an older tether
//! could leave) gets one, and listings and counts answer exactly as before
//! over the jobs that were there.

use tether_core::{JobFilter, JobState, StateCounts};
use uuid::Uuid;

/// Ids in creation order (UUIDv7 sorts by time), with their queue and state.
fn old_jobs() -> Vec<(Uuid, &'static str, JobState)> {
    let mut jobs = Vec::new();
    // Schema 4 knew no `waiting` (migration 13 added it).
    let old_states = JobState::ALL.iter().filter(|s| **s != JobState::Waiting);
    for (i, state) in old_states.cycle().take(23).enumerate() {
        let queue = if i % 3 == 0 { "rowless" } else { "mail" };
        jobs.push((Uuid::now_v7(), queue, *state));
    }
    jobs
}

fn seed(jobs: &[(Uuid, &'static str, JobState)]) -> String {
    let mut sql =
        String::from("INSERT INTO tether.queues (tenant, name) VALUES ('default', 'mail');\n");
    for (id, queue, state) in jobs {
        let finished = match state {
            JobState::Queued | JobState::Running => "NULL",
            _ => "now()",
        };
        let lease = match state {
            JobState::Running => "gen_random_uuid(), now() + interval '1 hour'",
            _ => "NULL, NULL",
        };
        sql.push_str(&format!(
            "INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, attempt, max_attempts,
                 backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at, finished_at,
                 lease_token, lease_expires_at)
             VALUES ('{id}', 'default', '{queue}', 'k', '{{}}', '{state}', 0, 5, 1000, 3600000,
                 now(), now(), now(), {finished}, {lease});\n",
            state = state.as_str(),
        ));
    }
    sql
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_4_gets_per_state_indexes() {
    let jobs = old_jobs();
    let db = tether_conformance::postgres_upgraded_from(4, &seed(&jobs)).await;
    let url = db.postgres_url().expect("postgres");
    let pool = sqlx::PgPool::connect(&url).await.expect("pool");
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = 'tether' AND tablename = 'jobs'
         ORDER BY indexname",
    )
    .fetch_all(&pool)
    .await
    .expect("indexes");
    for gone in ["jobs_list", "jobs_tenant_state"] {
        assert!(
            !indexes.iter().any(|i| i == gone),
            "{gone} dropped: {indexes:?}"
        );
    }
    for new in [
        "jobs_queued",
        "jobs_running",
        "jobs_done",
        "jobs_claim",
        "jobs_finished",
    ] {
        assert!(
            indexes.iter().any(|i| i == new),
            "{new} present: {indexes:?}"
        );
    }
    pool.close().await;

    let engine = &db.engine;
    let newest_first = |keep: &dyn Fn(&(Uuid, &'static str, JobState)) -> bool| -> Vec<Uuid> {
        jobs.iter().rev().filter(|j| keep(j)).map(|j| j.0).collect()
    };
    // Every combination of queue and state filter, paged by 4.
    for queue in [None, Some("mail"), Some("rowless")] {
        for state in [None].into_iter().chain(JobState::ALL.map(Some)) {
            let mut seen = Vec::new();
            let mut cursor = None;
            loop {
                let page = engine
                    .list(
                        "default",
                        &JobFilter {
                            queue: queue.map(str::to_owned),
                            state,
                            limit: Some(4),
                            cursor,
                            ..JobFilter::default()
                        },
                    )
                    .await
                    .expect("list");
                seen.extend(page.jobs.iter().map(|j| j.id));
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            let want = newest_first(&|(_, q, s)| {
                queue.is_none_or(|want| want == *q) && state.is_none_or(|want| want == *s)
            });
            assert_eq!(seen, want, "queue {queue:?}, state {state:?}");
        }
    }
    // Counts per state, and the queue without a row now has one.
    for queue in ["mail", "rowless"] {
        let stats = engine.queue_stats("default", queue).await.expect("stats");
        let mut want = StateCounts::default();
        for (_, q, s) in &jobs {
            if *q == queue {
                want.add(*s, 1);
            }
        }
        assert_eq!(stats.counts, want, "counts of {queue}");
    }
    let names: Vec<String> = engine
        .list_queues("default")
        .await
        .expect("queues")
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert_eq!(names, ["mail", "rowless"]);
    db.cleanup().await;
}
