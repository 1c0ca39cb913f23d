//! Jobs that wait for other jobs, where SQLite differs from PostgreSQL:
//! the cascade by trigger recursion, the wake-ups of released jobs, the
//! migration that rebuilt `tether_jobs`; and workflows: a cancel against
//! the trigger that runs row by row, the wake-ups of a cancel and a retry,
//! the migration that added them. (The behaviour itself is proven by
//! `tether-conformance`.)

use tether_core::{
    DependencyFailure, JobEvent, NewWorkflow, RetryMode, WorkflowCancelled, WorkflowEnqueued,
    WorkflowFilter, WorkflowState,
};

use super::*;

const FATAL: Failure = Failure {
    error: String::new(),
    retry_after_ms: None,
    fatal: true,
    cancelled: false,
};

async fn events_of(store: &SqliteStore, id: Uuid) -> Vec<JobEvent> {
    store.events("t", id, None, 1000).await.unwrap().events
}

fn count(events: &[JobEvent], kind: EventKind) -> usize {
    events.iter().filter(|e| e.event == kind).count()
}

/// Claims the only ready job of `q` and fails it for good.
async fn claim_and_fail(store: &SqliteStore, queue: &str) -> Uuid {
    let c = store
        .claim("t", &claim_req(queue, 1))
        .await
        .unwrap()
        .remove(0);
    store
        .fail("t", c.job.id, c.lease_token, &FATAL, 1.0)
        .await
        .unwrap();
    c.job.id
}

async fn claim_and_complete(store: &SqliteStore, queue: &str) -> Uuid {
    let c = store
        .claim("t", &claim_req(queue, 1))
        .await
        .unwrap()
        .remove(0);
    store
        .complete("t", c.job.id, c.lease_token, Some(&json!("ok")))
        .await
        .unwrap();
    c.job.id
}

async fn enqueue(store: &SqliteStore, jobs: &[NewJob]) -> Vec<tether_core::Enqueued> {
    store
        .enqueue("t", &enqueue_refs(jobs), u32::MAX)
        .await
        .unwrap()
}

/// A failure at the head of a chain of 300 cancels all of it, each job
/// once, with its event naming the job it came through.
#[tokio::test]
async fn a_failure_cancels_a_long_chain_once_per_job() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let mut jobs = vec![NewJob::new("head", "k", json!(0))];
    for i in 1..=300 {
        jobs.push(NewJob::new("chain", "k", json!(i)).after_entry(i - 1));
    }
    let out = enqueue(&store, &jobs).await;
    assert_eq!(out[0].job.state, JobState::Queued);
    assert!(out[1..].iter().all(|a| a.job.state == JobState::Waiting));
    assert_eq!(out[2].job.depends_on, vec![out[1].job.id]);
    let head = claim_and_fail(&store, "head").await;
    assert_eq!(head, out[0].job.id);
    for (i, answer) in out.iter().enumerate().skip(1) {
        let job = store.get("t", answer.job.id).await.unwrap();
        assert_eq!(job.state, JobState::Cancelled, "job {i}");
        assert!(job.finished_at.is_some());
        let events = events_of(&store, job.id).await;
        assert_eq!(
            count(&events, EventKind::Cancelled),
            1,
            "job {i}: {events:?}"
        );
        assert_eq!(events.len(), 2, "enqueued and cancelled: {events:?}");
        let detail: serde_json::Value =
            serde_json::from_str(events[1].detail.as_deref().unwrap()).unwrap();
        let (dependency, state) = match i {
            1 => (head, "failed"),
            _ => (out[i - 1].job.id, "cancelled"),
        };
        assert_eq!(
            detail,
            json!({"dependency": dependency.to_string(), "state": state}),
            "job {i}"
        );
    }
    let released: i64 = sqlx::query_scalar("SELECT count(*) FROM tether_job_releases")
        .fetch_one(&store.reader)
        .await
        .unwrap();
    assert_eq!(released, 0);
    store.close().await;
}

/// The cascade is one statement, not one trigger level per job: a chain
/// deeper than SQLite's limit of nested triggers (1 000) is cancelled too,
/// and a `run` job at its end released.
#[tokio::test]
async fn a_chain_deeper_than_the_trigger_limit_is_cancelled() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let mut jobs = vec![NewJob::new("head", "k", json!(0))];
    for i in 1..=1500 {
        jobs.push(NewJob::new("chain", "k", json!(i)).after_entry(i - 1));
    }
    jobs.push(
        NewJob::new("end", "k", json!(-1))
            .after_entry(1500)
            .dependency_failure(DependencyFailure::Run),
    );
    let out = enqueue(&store, &jobs).await;
    claim_and_fail(&store, "head").await;
    let cancelled = store
        .queue_stats("t", "chain")
        .await
        .unwrap()
        .counts
        .cancelled;
    assert_eq!(cancelled, 1500);
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tether_job_events WHERE event = 'cancelled'")
            .fetch_one(&store.reader)
            .await
            .unwrap();
    assert_eq!(n, 1500);
    let end = store.get("t", out[1501].job.id).await.unwrap();
    assert_eq!(end.state, JobState::Queued);
    for table in [
        "tether_job_cascade",
        "tether_job_cascade_seed",
        "tether_job_releases",
    ] {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&store.reader)
            .await
            .unwrap();
        assert_eq!(n, 0, "{table} is left empty");
    }
    store.close().await;
}

/// A job that two cancelled paths reach at once (a diamond) is cancelled
/// once; a `run` job below the cancelled ones is released once all its
/// dependencies ended, and its queue is woken.
#[tokio::test]
async fn a_diamond_cancels_once_and_run_jobs_are_released() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs = [
        NewJob::new("a", "k", json!(0)),
        NewJob::new("b", "k", json!(1)).after_entry(0),
        NewJob::new("b", "k", json!(2)).after_entry(0),
        NewJob::new("b", "k", json!(3))
            .after_entry(1)
            .after_entry(2),
        NewJob::new("r", "k", json!(4))
            .after_entry(3)
            .after_entry(1)
            .dependency_failure(DependencyFailure::Run),
    ];
    let out = enqueue(&store, &jobs).await;
    assert_eq!(out[4].job.dependency_failure, DependencyFailure::Run);
    let mut wakeup = store.subscribe("t", "r");
    claim_and_fail(&store, "a").await;
    for answer in &out[1..4] {
        let events = events_of(&store, answer.job.id).await;
        assert_eq!(count(&events, EventKind::Cancelled), 1, "{events:?}");
        assert_eq!(
            store.get("t", answer.job.id).await.unwrap().state,
            JobState::Cancelled
        );
    }
    let run = store.get("t", out[4].job.id).await.unwrap();
    assert_eq!(run.state, JobState::Queued);
    let events = events_of(&store, run.id).await;
    assert_eq!(count(&events, EventKind::Released), 1, "{events:?}");
    assert_eq!(count(&events, EventKind::Cancelled), 0, "{events:?}");
    tokio::time::timeout(std::time::Duration::from_secs(2), wakeup.hinted())
        .await
        .expect("the released job's queue is woken");
    store.close().await;
}

/// Success releases, with a wake-up after the commit; a job waits for all
/// of its dependencies; listing, counts and `dependencies` see the edges.
#[tokio::test]
async fn success_releases_once_every_dependency_succeeded() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let first = enqueue(&store, &[NewJob::new("a", "k", json!(1))]).await;
    let second = enqueue(&store, &[NewJob::new("b", "k", json!(2))]).await;
    let (a, b) = (first[0].job.id, second[0].job.id);
    let waiting = enqueue(&store, &[NewJob::new("w", "k", json!(3)).after(a).after(b)]).await;
    let w = waiting[0].job.id;
    assert_eq!(waiting[0].job.state, JobState::Waiting);
    assert_eq!(waiting[0].job.depends_on, vec![a, b]);
    let stats = store.queue_stats("t", "w").await.unwrap();
    assert_eq!((stats.counts.waiting, stats.counts.queued), (1, 0));
    let filter = JobFilter {
        depends_on: Some(b),
        ..JobFilter::default()
    };
    let page = store.list("t", &filter).await.unwrap();
    assert_eq!(page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![w]);
    let filter = JobFilter {
        state: Some(JobState::Waiting),
        ..JobFilter::default()
    };
    assert_eq!(store.list("t", &filter).await.unwrap().jobs.len(), 1);
    // Nothing to claim while it waits.
    assert!(store
        .claim("t", &claim_req("w", 1))
        .await
        .unwrap()
        .is_empty());

    let mut wakeup = store.subscribe("t", "w");
    claim_and_complete(&store, "a").await;
    assert_eq!(store.get("t", w).await.unwrap().state, JobState::Waiting);
    claim_and_complete(&store, "b").await;
    tokio::time::timeout(std::time::Duration::from_secs(2), wakeup.hinted())
        .await
        .expect("the released job's queue is woken");
    let job = store.get("t", w).await.unwrap();
    assert_eq!(job.state, JobState::Queued);
    let events = events_of(&store, w).await;
    assert_eq!(
        events.iter().map(|e| e.event).collect::<Vec<_>>(),
        [EventKind::Enqueued, EventKind::Released]
    );
    let deps = store.dependencies("t", w).await.unwrap();
    assert_eq!(deps.iter().map(|d| d.id).collect::<Vec<_>>(), vec![a, b]);
    assert_eq!(deps[0].result, Some(json!("ok")));
    assert!(store.dependencies("t", a).await.unwrap().is_empty());
    assert!(matches!(
        store.dependencies("t", Uuid::now_v7()).await,
        Err(Error::JobNotFound(_))
    ));
    assert!(matches!(
        store.dependencies("other", w).await,
        Err(Error::JobNotFound(_))
    ));
    store.close().await;
}

/// Dependencies already ended at enqueue: a success is met (created
/// queued, no `released`), a failure cancels at once; an unknown one
/// refuses the whole batch.
#[tokio::test]
async fn ended_and_unknown_dependencies_at_enqueue() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    enqueue(&store, &[NewJob::new("a", "k", json!(1))]).await;
    let done = claim_and_complete(&store, "a").await;
    enqueue(&store, &[NewJob::new("a", "k", json!(2))]).await;
    let failed = claim_and_fail(&store, "a").await;

    let out = enqueue(
        &store,
        &[
            NewJob::new("q", "k", json!(1)).after(done),
            NewJob::new("q", "k", json!(2)).after(failed),
            NewJob::new("q", "k", json!(3)).after_entry(1),
            NewJob::new("q", "k", json!(4))
                .after_entry(1)
                .dependency_failure(DependencyFailure::Run),
        ],
    )
    .await;
    let states: Vec<JobState> = out.iter().map(|a| a.job.state).collect();
    assert_eq!(
        states,
        [
            JobState::Queued,
            JobState::Cancelled,
            JobState::Cancelled,
            JobState::Queued
        ]
    );
    assert_eq!(
        events_of(&store, out[0].job.id)
            .await
            .iter()
            .map(|e| e.event)
            .collect::<Vec<_>>(),
        [EventKind::Enqueued]
    );
    let events = events_of(&store, out[1].job.id).await;
    assert_eq!(count(&events, EventKind::Cancelled), 1);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(events[1].detail.as_deref().unwrap()).unwrap(),
        json!({"dependency": failed.to_string(), "state": "failed"})
    );
    assert_eq!(
        count(
            &events_of(&store, out[2].job.id).await,
            EventKind::Cancelled
        ),
        1
    );

    let before = store
        .list("t", &JobFilter::default())
        .await
        .unwrap()
        .jobs
        .len();
    let unknown = Uuid::now_v7();
    let err = store
        .enqueue(
            "t",
            &enqueue_refs(&[NewJob::new("z", "k", json!(1)).after(unknown)]),
            u32::MAX,
        )
        .await
        .unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains("depends_on"), "{shown}");
    assert!(shown.contains(&unknown.to_string()), "{shown}");
    // Another tenant's job is unknown too; in a batch the entry is named.
    let theirs = store
        .enqueue(
            "u",
            &enqueue_refs(&[NewJob::new("z", "k", json!(1))]),
            u32::MAX,
        )
        .await
        .unwrap()[0]
        .job
        .id;
    let err = store
        .enqueue(
            "t",
            &enqueue_refs(&[
                NewJob::new("z", "k", json!(1)),
                NewJob::new("z", "k", json!(2)).after(theirs),
            ]),
            u32::MAX,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("jobs[1].depends_on"), "{err}");
    assert_eq!(
        store
            .list("t", &JobFilter::default())
            .await
            .unwrap()
            .jobs
            .len(),
        before,
        "nothing written"
    );
    store.close().await;
}

/// Cancel of a waiting job cascades; replay puts a job with dependencies
/// back to `waiting` and settles it; expiry and the reaper release too;
/// pruning removes the edges of what it prunes.
#[tokio::test]
async fn cancel_replay_expiry_reaper_and_pruning() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let out = enqueue(
        &store,
        &[
            NewJob::new("a", "k", json!(0)),
            NewJob::new("b", "k", json!(1)).after_entry(0),
            NewJob::new("c", "k", json!(2)).after_entry(1),
        ],
    )
    .await;
    let (a, b, c) = (out[0].job.id, out[1].job.id, out[2].job.id);
    let cancelled = store.cancel("t", b).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert_eq!(count(&events_of(&store, b).await, EventKind::Cancelled), 1);
    assert_eq!(store.get("t", c).await.unwrap().state, JobState::Cancelled);
    // Replayed while `a` still runs: waiting again, then released by it.
    let replayed = store.replay("t", b, None).await.unwrap();
    assert_eq!(replayed.state, JobState::Waiting);
    claim_and_complete(&store, "a").await;
    assert_eq!(store.get("t", b).await.unwrap().state, JobState::Queued);
    assert_eq!(count(&events_of(&store, b).await, EventKind::Released), 1);
    // Replayed after `a` succeeded: queued at once.
    let b_done = claim_and_complete(&store, "b").await;
    assert_eq!(b_done, b);
    assert_eq!(
        store.replay("t", b, None).await.unwrap().state,
        JobState::Queued
    );
    // `c` replayed in bulk: `b` is queued, so it waits.
    let filter = tether_core::ReplayFilter {
        queue: "c".into(),
        state: JobState::Cancelled,
        kind: None,
        limit: None,
        cursor: None,
        expires_at: None,
    };
    assert_eq!(store.replay_many("t", &filter).await.unwrap().replayed, 1);
    assert_eq!(store.get("t", c).await.unwrap().state, JobState::Waiting);
    // `b` lapses for good: the reaper fails it, which cancels `c`.
    let claimed = store
        .claim(
            "t",
            &ClaimRequest {
                lease_ttl_ms: Some(1),
                ..claim_req("b", 1)
            },
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    sqlx::query("UPDATE tether_jobs SET max_attempts = 1, lease_expires_at = 0 WHERE id = ?1")
        .bind(b.to_string())
        .execute(&store.writer)
        .await
        .unwrap();
    store.reap_lapsed_leases(100).await.unwrap();
    assert_eq!(store.get("t", b).await.unwrap().state, JobState::Failed);
    assert_eq!(store.get("t", c).await.unwrap().state, JobState::Cancelled);

    // Expiry of a queued dependency releases a `run` job.
    let out = enqueue(
        &store,
        &[
            NewJob::new("e", "k", json!(0)),
            NewJob::new("e2", "k", json!(1))
                .after_entry(0)
                .dependency_failure(DependencyFailure::Run),
        ],
    )
    .await;
    sqlx::query("UPDATE tether_jobs SET expires_at = 1 WHERE id = ?1")
        .bind(out[0].job.id.to_string())
        .execute(&store.writer)
        .await
        .unwrap();
    let mut wakeup = store.subscribe("t", "e2");
    assert_eq!(store.expire_jobs(100).await.unwrap(), 1);
    assert_eq!(
        store.get("t", out[1].job.id).await.unwrap().state,
        JobState::Queued
    );
    tokio::time::timeout(std::time::Duration::from_secs(2), wakeup.hinted())
        .await
        .expect("the released job's queue is woken");

    // Pruning everything finished removes the edges of what it pruned.
    let edges = |id: Uuid| {
        let store = store.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM tether_job_dependencies WHERE job_id = ?1",
            )
            .bind(id.to_string())
            .fetch_one(&store.reader)
            .await
            .unwrap()
        }
    };
    assert_eq!(edges(c).await, 1);
    store.prune_finished(-1_000_000, 1000).await.unwrap();
    assert!(matches!(
        store.get("t", c).await,
        Err(Error::JobNotFound(_))
    ));
    assert_eq!(edges(c).await, 0);
    let _ = a;
    store.close().await;
}

/// A file at schema 10 with a job in it: the upgrade rebuilds `tether_jobs`
/// (its CHECK must allow `waiting`) keeping the job and every index, and a
/// dependency on the old job then works.
#[tokio::test]
async fn the_upgrade_keeps_jobs_and_indexes() {
    let db = TempDb::new();
    {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&db.0)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        crate::migrate::run_up_to(&pool, 10).await.unwrap();
        sqlx::raw_sql(
            "INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, priority, attempt,
                 max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at,
                 tags, concurrency_key, report_digest)
             VALUES ('00000000-0000-4000-8000-000000000001', 't', 'old', 'k', '{\"x\":1}',
                 'queued', 3, 0, 5, 1000, 60000, 1000, 1000, 1000, '[\"tag\"]', 'ck', NULL);
             INSERT INTO tether_job_events (job_id, tenant, at, event, attempt)
             VALUES ('00000000-0000-4000-8000-000000000001', 't', 1000, 'enqueued', 0);",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    }
    let store = SqliteStore::open(&db.0).await.unwrap();
    let old: Uuid = "00000000-0000-4000-8000-000000000001".parse().unwrap();
    let job = store.get("t", old).await.unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.payload, json!({"x": 1}));
    assert_eq!(job.priority, 3);
    assert_eq!(job.tags, vec!["tag".to_owned()]);
    assert_eq!(job.concurrency_key.as_deref(), Some("ck"));
    assert!(job.depends_on.is_empty());
    assert_eq!(job.dependency_failure, DependencyFailure::Cancel);
    assert_eq!(events_of(&store, old).await.len(), 1);
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'tether_jobs' \
         AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
    )
    .fetch_all(&store.reader)
    .await
    .unwrap();
    assert_eq!(
        indexes,
        [
            "tether_jobs_claim",
            "tether_jobs_expiry",
            "tether_jobs_finished",
            "tether_jobs_idempotency",
            "tether_jobs_key_claim",
            "tether_jobs_list",
            "tether_jobs_queue_id",
            "tether_jobs_running",
            "tether_jobs_tenant_id",
            "tether_jobs_tenant_state",
            "tether_jobs_unique_active",
            "tether_jobs_waiting",
            "tether_jobs_workflow",
            "tether_jobs_workflow_unfinished",
        ]
    );
    let dependent = enqueue(&store, &[NewJob::new("new", "k", json!(2)).after(old)]).await;
    assert_eq!(dependent[0].job.state, JobState::Waiting);
    let id = claim_and_complete(&store, "old").await;
    assert_eq!(id, old);
    assert_eq!(
        store.get("t", dependent[0].job.id).await.unwrap().state,
        JobState::Queued
    );
    store.close().await;
}

/// A new workflow's batch, through the store.
async fn enqueue_workflow(store: &SqliteStore, name: &str, jobs: &[NewJob]) -> WorkflowEnqueued {
    let id = Uuid::now_v7();
    let jobs: Vec<NewJob> = jobs.iter().cloned().map(|j| j.workflow(id)).collect();
    let flow = NewWorkflow {
        name: name.to_owned(),
        idempotency_key: None,
    };
    store
        .enqueue_workflow("t", id, &flow, &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap()
}

/// Cancelling a workflow cancels each of its waiting jobs itself, once,
/// even when the trigger of a job of the workflow cancelled earlier in the
/// same statement would have reached it (PostgreSQL's trigger runs after
/// the whole statement): one `cancelled` event each, without a dependency
/// named. What waits outside the workflow is moved by the trigger, and a
/// job released there has its queue woken.
#[tokio::test]
async fn cancelling_a_workflow_cancels_its_jobs_once_and_moves_the_rest() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    // a → b → c inside; c → out (cancel) and c → run (run) outside.
    let out = enqueue_workflow(
        &store,
        "chain",
        &[
            NewJob::new("a", "k", json!(0)),
            NewJob::new("b", "k", json!(1)).after_entry(0),
            NewJob::new("b", "k", json!(2)).after_entry(1),
        ],
    )
    .await;
    let ids: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
    let outside = enqueue(
        &store,
        &[
            NewJob::new("o", "k", json!(3)).after(ids[2]),
            NewJob::new("r", "k", json!(4))
                .after(ids[2])
                .dependency_failure(DependencyFailure::Run),
        ],
    )
    .await;
    let mut wakeup = store.subscribe("t", "r");
    let done = store.cancel_workflow("t", out.workflow.id).await.unwrap();
    assert_eq!((done.cancelled, done.cancel_requested), (3, 0));
    for id in &ids {
        assert_eq!(
            store.get("t", *id).await.unwrap().state,
            JobState::Cancelled
        );
        let events = events_of(&store, *id).await;
        assert_eq!(count(&events, EventKind::Cancelled), 1, "{events:?}");
        let cancelled = events.iter().find(|e| e.event == EventKind::Cancelled);
        assert_eq!(cancelled.unwrap().detail, None, "{events:?}");
    }
    let o = outside[0].job.id;
    assert_eq!(store.get("t", o).await.unwrap().state, JobState::Cancelled);
    let events = events_of(&store, o).await;
    assert_eq!(count(&events, EventKind::Cancelled), 1, "{events:?}");
    assert!(events.last().unwrap().detail.is_some(), "{events:?}");
    let r = outside[1].job.id;
    assert_eq!(store.get("t", r).await.unwrap().state, JobState::Queued);
    tokio::time::timeout(std::time::Duration::from_secs(2), wakeup.hinted())
        .await
        .expect("the released job's queue is woken");
    let graph = store.get_workflow("t", out.workflow.id).await.unwrap();
    assert_eq!(graph.workflow.state, WorkflowState::Cancelled);
    assert!(graph.workflow.finished_at.is_some());
    // Nothing left to cancel.
    let again = store.cancel_workflow("t", out.workflow.id).await.unwrap();
    assert_eq!(again, WorkflowCancelled::default());
    store.close().await;
}

/// A retry puts the failed job back (queued, woken) and, downstream, what
/// its failure cancelled, waiting for it again.
#[tokio::test]
async fn retrying_a_workflow_settles_and_wakes() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let out = enqueue_workflow(
        &store,
        "pair",
        &[
            NewJob::new("a", "k", json!(0)),
            NewJob::new("b", "k", json!(1)).after_entry(0),
        ],
    )
    .await;
    let (a, b) = (out.jobs[0].job.id, out.jobs[1].job.id);
    claim_and_fail(&store, "a").await;
    assert_eq!(store.get("t", b).await.unwrap().state, JobState::Cancelled);
    let mut wakeup = store.subscribe("t", "a");
    let n = store
        .retry_workflow("t", out.workflow.id, RetryMode::FailedAndDownstream)
        .await
        .unwrap();
    assert_eq!(n, 2);
    tokio::time::timeout(std::time::Duration::from_secs(2), wakeup.hinted())
        .await
        .expect("the retried job's queue is woken");
    assert_eq!(store.get("t", a).await.unwrap().state, JobState::Queued);
    assert_eq!(store.get("t", b).await.unwrap().state, JobState::Waiting);
    claim_and_complete(&store, "a").await;
    assert_eq!(store.get("t", b).await.unwrap().state, JobState::Queued);
    let filter = JobFilter {
        workflow_id: Some(out.workflow.id),
        ..JobFilter::default()
    };
    let listed: Vec<Uuid> = store
        .list("t", &filter)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(listed, vec![b, a]);
    store.close().await;
}

/// A file at schema 11 with jobs in it: the upgrade adds the workflows'
/// table and the jobs' column in place, the old jobs belong to no
/// workflow, and workflows then work, appends included; a waiting job
/// holds its unique key.
#[tokio::test]
async fn the_workflows_upgrade_keeps_jobs() {
    let db = TempDb::new();
    let old: Uuid = "00000000-0000-4000-8000-000000000001".parse().unwrap();
    {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&db.0)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        crate::migrate::run_up_to(&pool, 11).await.unwrap();
        sqlx::raw_sql(
            "INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, priority, attempt,
                 max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at,
                 tags)
             VALUES ('00000000-0000-4000-8000-000000000001', 't', 'old', 'k', '{}',
                 'queued', 0, 0, 5, 1000, 60000, 1000, 1000, 1000, '[]');",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    }
    let store = SqliteStore::open(&db.0).await.unwrap();
    let job = store.get("t", old).await.unwrap();
    assert_eq!((job.state, job.workflow_id), (JobState::Queued, None));
    let out = enqueue_workflow(
        &store,
        "after",
        &[NewJob::new("new", "k", json!(1)).after(old)],
    )
    .await;
    let w = out.workflow.id;
    assert_eq!(out.jobs[0].job.workflow_id, Some(w));
    assert_eq!(out.jobs[0].job.state, JobState::Waiting);
    let appended = enqueue(&store, &[NewJob::new("new", "k", json!(2)).workflow(w)]).await;
    assert_eq!(appended[0].job.workflow_id, Some(w));
    // A waiting job now holds its unique key (the index is remade).
    let held = enqueue(
        &store,
        &[NewJob::new("new", "k", json!(3)).after(old).unique_key("u")],
    )
    .await;
    assert_eq!(held[0].job.state, JobState::Waiting);
    let again = enqueue(&store, &[NewJob::new("new", "k", json!(4)).unique_key("u")]).await;
    assert_eq!((again[0].created, again[0].job.id), (false, held[0].job.id));
    let graph = store.get_workflow("t", w).await.unwrap();
    assert_eq!(graph.jobs.len(), 2);
    assert_eq!(graph.jobs[0].depends_on, vec![old]);
    assert_eq!(graph.workflow.counts.waiting, 1);
    let page = store
        .list_workflows("t", &WorkflowFilter::default())
        .await
        .unwrap();
    assert_eq!(page.workflows, vec![graph.workflow]);
    store.close().await;
}
