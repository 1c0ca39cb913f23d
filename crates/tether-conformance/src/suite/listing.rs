//! Listing: filters by queue, state, kind and tag; newest first; cursor
//! pagination that covers every job exactly once.

use std::collections::HashSet;

use serde_json::json;
use tether_core::{JobFilter, JobState, NewJob};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

async fn ids(db: &TestDb, filter: JobFilter) -> Vec<Uuid> {
    let page = ok(db.engine.list(T, &filter).await);
    let ids: Vec<Uuid> = page.jobs.iter().map(|j| j.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]),
        "a listing must be newest first (id descending): {ids:?}"
    );
    ids
}

fn set(ids: &[Uuid]) -> HashSet<Uuid> {
    ids.iter().copied().collect()
}

/// Each filter (queue, state, kind, tag, and their combination) returns
/// exactly the matching jobs, newest first.
pub async fn list_filters_by_queue_state_kind_and_tag(db: &TestDb) {
    let a1 = enqueue(db, T, NewJob::new("qa", "ka", json!({})).tags(["red"])).await;
    let a2 = enqueue(
        db,
        T,
        NewJob::new("qa", "kb", json!({}))
            .tags(["red", "blue"])
            .priority(5),
    )
    .await;
    let b1 = enqueue(db, T, NewJob::new("qb", "ka", json!({})).priority(5)).await;
    let b2 = enqueue(db, T, NewJob::new("qb", "kb", json!({})).tags(["blue"])).await;
    enqueue(db, T2, NewJob::new("qa", "ka", json!({})).tags(["red"])).await;
    claim_id(db, T, "qa", a2.id).await;
    let c = claim_id(db, T, "qb", b1.id).await;
    ok(db.engine.fail(T, b1.id, c.lease_token, fatal("x")).await);
    let c = claim_id(db, T, "qb", b2.id).await;
    ok(db.engine.complete(T, b2.id, c.lease_token, None).await);

    let f = JobFilter::default;
    let all = ids(db, f()).await;
    assert_eq!(all, vec![b2.id, b1.id, a2.id, a1.id]);
    let cases: Vec<(&str, JobFilter, Vec<Uuid>)> = vec![
        (
            "queue",
            JobFilter {
                queue: Some("qa".into()),
                ..f()
            },
            vec![a1.id, a2.id],
        ),
        (
            "state running",
            JobFilter {
                state: Some(JobState::Running),
                ..f()
            },
            vec![a2.id],
        ),
        (
            "state failed",
            JobFilter {
                state: Some(JobState::Failed),
                ..f()
            },
            vec![b1.id],
        ),
        (
            "kind",
            JobFilter {
                kind: Some("ka".into()),
                ..f()
            },
            vec![a1.id, b1.id],
        ),
        (
            "tag",
            JobFilter {
                tag: Some("blue".into()),
                ..f()
            },
            vec![a2.id, b2.id],
        ),
        (
            "queue+state+tag",
            JobFilter {
                queue: Some("qa".into()),
                state: Some(JobState::Queued),
                tag: Some("red".into()),
                ..f()
            },
            vec![a1.id],
        ),
        (
            "unknown tag",
            JobFilter {
                tag: Some("green".into()),
                ..f()
            },
            vec![],
        ),
        (
            "unknown queue",
            JobFilter {
                queue: Some("qz".into()),
                ..f()
            },
            vec![],
        ),
    ];
    for (label, filter, want) in cases {
        assert_eq!(set(&ids(db, filter).await), set(&want), "filter {label}");
    }
    let tagged = get(db, T, a2.id).await;
    assert_eq!(tagged.tags, vec!["red".to_owned(), "blue".to_owned()]);
}

/// Following `next_cursor` page by page visits every job exactly once,
/// newest first, with and without a filter; the default page is 50.
pub async fn cursor_pagination_covers_every_job_once(db: &TestDb) {
    let batch: Vec<NewJob> = (0..23).map(|i| NewJob::new(Q, "k", json!(i))).collect();
    let made: Vec<Uuid> = ok(db.engine.enqueue_many(T, &batch).await)
        .into_iter()
        .map(|e| e.job.id)
        .collect();
    let claimed: HashSet<Uuid> = claim(db, T, Q, 7).await.iter().map(|c| c.job.id).collect();

    async fn walk(db: &TestDb, base: JobFilter, page: u32) -> Vec<Uuid> {
        let mut out = Vec::new();
        let mut cursor = None;
        for _ in 0..100 {
            let p = ok(db
                .engine
                .list(
                    T,
                    &JobFilter {
                        limit: Some(page),
                        cursor,
                        ..base.clone()
                    },
                )
                .await);
            assert!(p.jobs.len() <= page as usize, "page larger than its limit");
            out.extend(p.jobs.iter().map(|j| j.id));
            match p.next_cursor {
                Some(next) => {
                    assert!(!p.jobs.is_empty(), "an empty page with a next cursor");
                    cursor = Some(next);
                }
                None => return out,
            }
        }
        panic!("pagination did not end");
    }

    let all = walk(db, JobFilter::default(), 5).await;
    assert_eq!(all.len(), 23, "pages visited {} jobs", all.len());
    assert_eq!(set(&all), set(&made));
    assert!(all.windows(2).all(|w| w[0] > w[1]), "pages out of order");

    for size in [1, 4, 23, 30] {
        let again = walk(db, JobFilter::default(), size).await;
        assert_eq!(again, all, "page size {size}");
    }

    let queued = walk(
        db,
        JobFilter {
            state: Some(JobState::Queued),
            ..JobFilter::default()
        },
        4,
    )
    .await;
    assert_eq!(queued.len(), 16);
    assert!(queued.iter().all(|id| !claimed.contains(id)));
    assert_eq!(set(&queued).len(), 16);

    let more: Vec<NewJob> = (0..40).map(|_| job(Q)).collect();
    ok(db.engine.enqueue_many(T, &more).await);
    let p = ok(db.engine.list(T, &JobFilter::default()).await);
    assert_eq!(p.jobs.len(), 50, "the default page is 50");
    assert!(p.next_cursor.is_some());
}
