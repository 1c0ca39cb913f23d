//! What an operator reads and does beyond single jobs: who is working,
//! a queue's per-minute throughput, removing an empty queue, the recent
//! runs of every schedule at once, and finding jobs by id prefix and
//! creation time.

use chrono::{Duration, Utc};
use tether_core::{
    ClaimRequest, IdPrefix, JobFilter, JobState, ScheduleSpec, WorkerAnnouncement,
    WORKER_FORGET_AFTER_MS,
};

use super::support::*;
use crate::TestDb;

fn claim_as(queue: &str, worker: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        worker_id: worker.to_owned(),
        ..claim_req(queue, limit)
    }
}

/// Workers are read from the running jobs: each with its queues (by
/// name), how many jobs it holds and its latest heartbeat; one whose jobs
/// all ended is gone; another tenant's workers are not shown.
pub async fn workers_are_read_from_running_jobs(db: &TestDb) {
    let e = &db.engine;
    assert!(ok(e.list_workers(T).await).is_empty());
    for q in ["mail", "mail", "mail", "pdf"] {
        enqueue(db, T, job(q)).await;
    }
    enqueue(db, T2, job("mail")).await;
    let a = ok(e.claim(T, &claim_as("mail", "w-a", 2)).await);
    let a2 = ok(e.claim(T, &claim_as("pdf", "w-a", 1)).await);
    let b = ok(e.claim(T, &claim_as("mail", "w-b", 5)).await);
    ok(e.claim(T2, &claim_as("mail", "w-other", 1)).await);
    assert_eq!((a.len(), a2.len(), b.len()), (2, 1, 1));
    let workers = ok(e.list_workers(T).await);
    let shown: Vec<(&str, Vec<&str>, u64)> = workers
        .iter()
        .map(|w| {
            let queues = w.queues.iter().map(String::as_str).collect();
            (w.worker_id.as_str(), queues, w.running)
        })
        .collect();
    assert_eq!(
        shown,
        [("w-a", vec!["mail", "pdf"], 3), ("w-b", vec!["mail"], 1)]
    );
    for w in &workers {
        let at = w
            .last_heartbeat_at
            .expect("a claim counts as a sign of life");
        assert!((Utc::now() - at).num_seconds().abs() < 60, "{at}");
    }
    ok(e.complete(T, b[0].job.id, b[0].lease_token, None).await);
    let workers = ok(e.list_workers(T).await);
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].worker_id, "w-a");
    assert_eq!(ok(e.list_workers(T2).await)[0].worker_id, "w-other");
}

/// Announced workers are listed idle (running 0) with what they said,
/// merged with what their running jobs say once they claim; announcing
/// again replaces it; a worker unseen for 5 minutes is forgotten, and a
/// claim keeps it seen; tenants are apart; bad announcements are refused.
pub async fn announced_workers_are_listed_idle_and_forgotten(db: &TestDb) {
    let e = &db.engine;
    let announced = |queues: &[&str], concurrency: u32| WorkerAnnouncement {
        queues: queues.iter().map(|q| q.to_string()).collect(),
        concurrency,
        sdk: Some("python".into()),
        version: Some("0.1.0".into()),
        host: Some("box-1".into()),
        pid: Some(4242),
    };
    let before = Utc::now() - Duration::seconds(60);
    ok(
        e.announce_worker(T, "idle-1", &announced(&["mail", "pdf"], 8))
            .await,
    );
    ok(e.announce_worker(T2, "theirs", &announced(&["mail"], 1))
        .await);
    let workers = ok(e.list_workers(T).await);
    assert_eq!(workers.len(), 1, "{workers:?}");
    let w = &workers[0];
    assert_eq!((w.worker_id.as_str(), w.running), ("idle-1", 0));
    assert_eq!(w.queues, ["mail", "pdf"]);
    assert_eq!(w.last_heartbeat_at, None);
    let presence = w.presence.as_ref().expect("announced");
    assert_eq!(presence.announcement, announced(&["mail", "pdf"], 8));
    assert!(presence.last_seen_at > before);

    // It claims: its running job is counted, its queues merged.
    enqueue(db, T, job("zip")).await;
    let claimed = ok(e.claim(T, &claim_as("zip", "idle-1", 1)).await);
    assert_eq!(claimed.len(), 1);
    let w = ok(e.list_workers(T).await).remove(0);
    assert_eq!(
        (w.running, w.queues.clone()),
        (1, vec!["mail".to_owned(), "pdf".into(), "zip".into()])
    );
    assert!(w.presence.is_some() && w.last_heartbeat_at.is_some());

    // Announcing again replaces what it said.
    let mut less = announced(&["mail"], 2);
    less.host = None;
    ok(e.announce_worker(T, "idle-1", &less).await);
    let w = ok(e.list_workers(T).await).remove(0);
    assert_eq!(w.presence.unwrap().announcement, less);

    // Unseen for five minutes: forgotten (the job it holds still lists it,
    // without presence).
    db.age_worker(T, "idle-1", WORKER_FORGET_AFTER_MS + 1_000)
        .await;
    let w = ok(e.list_workers(T).await).remove(0);
    assert_eq!((w.worker_id.as_str(), w.running), ("idle-1", 1));
    assert!(w.presence.is_none(), "forgotten");
    ok(
        e.complete(T, claimed[0].job.id, claimed[0].lease_token, None)
            .await,
    );
    assert!(ok(e.list_workers(T).await).is_empty());

    // A claim keeps an announced worker seen (a fresh engine: this one's
    // refresh interval has not passed).
    ok(e.announce_worker(T, "claimer", &announced(&["q"], 1)).await);
    db.age_worker(T, "claimer", WORKER_FORGET_AFTER_MS - 1_000)
        .await;
    let fresh = tether_core::Engine::new(e.store().clone());
    ok(fresh.claim(T, &claim_as("q", "claimer", 1)).await);
    db.age_worker(T, "claimer", 2_000).await;
    let listed: Vec<String> = ok(e.list_workers(T).await)
        .into_iter()
        .map(|w| w.worker_id)
        .collect();
    assert_eq!(listed, ["claimer"], "the claim refreshed it");

    // Bad announcements change nothing.
    for (id, bad) in [
        ("", announced(&["q"], 1)),
        ("w", announced(&[], 1)),
        ("w", announced(&["bad name"], 1)),
        ("w", announced(&["q", "q"], 1)),
        ("w", announced(&["q"], 0)),
        (
            "w",
            WorkerAnnouncement {
                sdk: Some("a\nb".into()),
                ..announced(&["q"], 1)
            },
        ),
        (
            "w",
            WorkerAnnouncement {
                host: Some("h".repeat(256)),
                ..announced(&["q"], 1)
            },
        ),
    ] {
        expect_invalid(e.announce_worker(T, id, &bad).await);
    }
    assert_eq!(ok(e.list_workers(T).await).len(), 1);
    assert_eq!(ok(e.list_workers(T2).await)[0].worker_id, "theirs");
}

/// Throughput: `minutes` entries ending with the current minute, counting
/// the queue's successes, failures, retries and cancellations from its
/// history (other queues and tenants apart), and the wait and run
/// percentiles of the jobs that finished; out-of-range windows refused.
pub async fn throughput_counts_outcomes_per_minute(db: &TestDb) {
    let e = &db.engine;
    let empty = ok(e.throughput(T, "tp", 5).await);
    assert_eq!(empty.minutes.len(), 5);
    assert!(empty.wait_ms.is_none() && empty.run_ms.is_none());
    let last = empty.minutes.last().unwrap().at;
    assert!(last <= Utc::now() && Utc::now() - last < Duration::seconds(120));
    for pair in empty.minutes.windows(2) {
        assert_eq!(pair[1].at - pair[0].at, Duration::minutes(1));
    }

    for _ in 0..6 {
        enqueue(db, T, job("tp").max_attempts(2)).await;
    }
    enqueue(db, T, job("other")).await;
    enqueue(db, T2, job("tp")).await;
    let started = Utc::now();
    let claimed = claim(db, T, "tp", 6).await;
    // 3 succeed, 1 fails for good, 1 fails and is retried, 1 is cancelled.
    for c in &claimed[..3] {
        ok(e.complete(T, c.job.id, c.lease_token, None).await);
    }
    ok(
        e.fail(T, claimed[3].job.id, claimed[3].lease_token, fatal("no"))
            .await,
    );
    ok(e.fail(
        T,
        claimed[4].job.id,
        claimed[4].lease_token,
        failure("again"),
    )
    .await);
    ok(e.cancel(T, claimed[5].job.id).await);
    ok(e.fail(
        T,
        claimed[5].job.id,
        claimed[5].lease_token,
        failure("stopping"),
    )
    .await);
    assert_eq!(
        get(db, T, claimed[5].job.id).await.state,
        JobState::Cancelled
    );
    let c = claim_one(db, T2, "tp").await;
    ok(e.complete(T2, c.job.id, c.lease_token, None).await);
    let elapsed = (Utc::now() - started).num_milliseconds() + 1_000;

    let t = ok(e.throughput(T, "tp", 60).await);
    assert_eq!(t.minutes.len(), 60);
    let sum = |f: fn(&tether_core::MinuteCounts) -> u64| t.minutes.iter().map(f).sum::<u64>();
    assert_eq!(
        (
            sum(|m| m.succeeded),
            sum(|m| m.failed),
            sum(|m| m.retried),
            sum(|m| m.cancelled)
        ),
        (3, 1, 1, 1)
    );
    // Everything happened in the last two minutes (a minute may have turned).
    let recent: u64 = t.minutes[58..]
        .iter()
        .map(|m| m.succeeded + m.failed + m.retried + m.cancelled)
        .sum();
    assert_eq!(recent, 6);
    // 4 jobs finished with a result (3 succeeded, 1 failed): their times.
    for p in [t.wait_ms.unwrap(), t.run_ms.unwrap()] {
        assert!(0 <= p.p50 && p.p50 <= p.p95 && p.p95 <= p.p99, "{p:?}");
        assert!(p.p99 <= elapsed + 60_000, "{p:?}");
    }
    assert!(ok(e.throughput(T, "other", 60).await).run_ms.is_none());
    for bad in [0, 1_441] {
        expect_invalid(e.throughput(T, "tp", bad).await);
    }
}

/// Only an empty queue's row can be removed: one holding jobs (in any
/// state) is `invalid_state` and stays; a queue without a row is
/// `not_found`; a removed queue leaves the listing and reads as new.
pub async fn only_an_empty_queue_is_removed(db: &TestDb) {
    let e = &db.engine;
    ok(e.pause(T, "typo").await);
    assert!(ok(e.list_queues(T).await).iter().any(|q| q.name == "typo"));
    ok(e.delete_queue(T, "typo").await);
    assert!(!ok(e.list_queues(T).await).iter().any(|q| q.name == "typo"));
    assert!(!ok(e.queue_stats(T, "typo").await).paused);
    expect_code(e.delete_queue(T, "typo").await, "not_found");

    let j = enqueue(db, T, job("busy")).await;
    let c = claim_one(db, T, "busy").await;
    ok(e.complete(T, j.id, c.lease_token, None).await);
    let refused = expect_code(e.delete_queue(T, "busy").await, "invalid_state");
    assert!(refused.to_string().contains("1 job"), "{refused}");
    assert!(ok(e.list_queues(T).await).iter().any(|q| q.name == "busy"));
    // Another tenant's queue of the same name is not this tenant's.
    ok(e.pause(T2, "typo").await);
    expect_code(e.delete_queue(T, "typo").await, "not_found");
    assert!(ok(e.queue_stats(T2, "typo").await).paused);
    expect_invalid(e.delete_queue(T, "bad name!").await);
}

/// The newest runs of every schedule come in one call, at most `limit`
/// each, newest first, keyed by schedule; other tenants' are not there.
pub async fn recent_runs_of_every_schedule(db: &TestDb) {
    let e = &db.engine;
    let spec = |name: &str| ScheduleSpec::new(name, "0 4 * * *", "cron-q", "tick");
    let a = ok(e.create_schedule(T, &spec("a")).await);
    let b = ok(e.create_schedule(T, &spec("b")).await);
    let quiet = ok(e.create_schedule(T, &spec("quiet")).await);
    let theirs = ok(e.create_schedule(T2, &spec("a")).await);
    for _ in 0..3 {
        ok(e.trigger_schedule(T, a.id).await);
    }
    ok(e.trigger_schedule(T, b.id).await);
    ok(e.trigger_schedule(T2, theirs.id).await);
    let runs = ok(e.recent_schedule_runs(T, 2).await);
    assert_eq!(runs.get(&a.id).map(Vec::len), Some(2));
    assert_eq!(runs.get(&b.id).map(Vec::len), Some(1));
    assert!(!runs.contains_key(&quiet.id) && !runs.contains_key(&theirs.id));
    let a_runs = &runs[&a.id];
    assert!(a_runs[0].fire_at >= a_runs[1].fire_at);
    let all_a = ok(e.schedule_runs(T, a.id).await);
    assert_eq!(&all_a[..2], &a_runs[..]);
    for bad in [0, tether_core::MAX_LISTED_RUNS + 1] {
        expect_invalid(e.recent_schedule_runs(T, bad).await);
    }
}

/// Jobs are found by the first hex digits of their id (dashes ignored,
/// any case) and by creation time, together with the other filters.
pub async fn jobs_are_found_by_id_prefix_and_creation_time(db: &TestDb) {
    let e = &db.engine;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(enqueue(db, T, job("find")).await);
    }
    enqueue(db, T2, job("find")).await;
    let list = |filter: JobFilter| async move { ok(e.list(T, &filter).await).jobs };
    let target = &ids[1];
    let full = target.id.to_string();
    for prefix in [
        full.clone(),
        // Past the id's millisecond and its counter (24 hex digits): ids made
        // in one millisecond share their first 12 digits, and the counter
        // that orders them within it makes the next few alike too (20
        // digits failed this when two jobs met in one millisecond).
        full[..28].to_uppercase(),
        full.replace('-', ""),
    ] {
        let found = list(JobFilter {
            id_prefix: Some(prefix.parse::<IdPrefix>().unwrap()),
            ..JobFilter::default()
        })
        .await;
        assert_eq!(found.len(), 1, "{prefix}");
        assert_eq!(found[0].id, target.id);
    }
    // A short prefix matches every id that starts with it, and only those.
    let short: IdPrefix = full[..4].parse().unwrap();
    let found = list(JobFilter {
        id_prefix: Some(short),
        ..JobFilter::default()
    })
    .await;
    assert!(found
        .iter()
        .all(|j| j.id.to_string().starts_with(&full[..4])));
    assert!(found.iter().any(|j| j.id == target.id));
    let none = list(JobFilter {
        id_prefix: Some("ffffffffffff".parse().unwrap()),
        ..JobFilter::default()
    })
    .await;
    assert!(none.is_empty());
    for bad in ["", "xyz", "0123456789abcdef0123456789abcdef0"] {
        assert!(bad.parse::<IdPrefix>().is_err(), "{bad}");
    }

    // By creation time: [after, before).
    let at = ids[1].created_at;
    let from_second = list(JobFilter {
        queue: Some("find".into()),
        created_after: Some(at),
        ..JobFilter::default()
    })
    .await;
    assert!(from_second.iter().all(|j| j.created_at >= at));
    assert!(from_second.iter().any(|j| j.id == ids[1].id));
    let before_second = list(JobFilter {
        queue: Some("find".into()),
        created_before: Some(at),
        ..JobFilter::default()
    })
    .await;
    assert!(before_second.iter().all(|j| j.created_at < at));
    assert!(!before_second.iter().any(|j| j.id == ids[1].id));
    assert_eq!(from_second.len() + before_second.len(), 3);
    let window = list(JobFilter {
        state: Some(JobState::Queued),
        created_after: Some(Utc::now() + Duration::hours(1)),
        ..JobFilter::default()
    })
    .await;
    assert!(window.is_empty());
}
