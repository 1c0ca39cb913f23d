//! Batch completion: one round trip, one answer per item.

use serde_json::json;
use tether_core::{Completion, EventKind, JobState};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// complete_many with valid, stale-token and unknown-id items answers each
/// in order: the valid ones succeed (with their results), the stale one is
/// `LeaseLost` and unchanged (with a `lease_lost` event), the unknown one is
/// `JobNotFound`.
pub async fn complete_many_answers_per_item(db: &TestDb) {
    for _ in 0..3 {
        enqueue(db, T, job(Q)).await;
    }
    let c = claim(db, T, Q, 3).await;
    assert_eq!(c.len(), 3);
    let stale_before = get(db, T, c[1].job.id).await;
    let items = vec![
        Completion {
            id: c[0].job.id,
            lease_token: c[0].lease_token,
            result: Some(json!({"n": 0})),
        },
        Completion {
            id: c[1].job.id,
            lease_token: random_token(),
            result: Some(json!({"n": 1})),
        },
        Completion {
            id: Uuid::now_v7(),
            lease_token: random_token(),
            result: None,
        },
        Completion {
            id: c[2].job.id,
            lease_token: c[2].lease_token,
            result: None,
        },
    ];
    let answers = ok(db.engine.complete_many(T, &items).await);
    let codes: Vec<Option<&str>> = answers
        .iter()
        .map(|a| a.as_ref().err().map(|e| e.code().as_str()))
        .collect();
    assert_eq!(
        codes,
        vec![None, Some("lease_lost"), Some("not_found"), None]
    );

    let j0 = get(db, T, c[0].job.id).await;
    assert_eq!(j0.state, JobState::Succeeded);
    assert_eq!(j0.result, Some(json!({"n": 0})));
    assert!(j0.finished_at.is_some());
    assert_eq!(j0.lease_expires_at, None);
    assert_eq!(
        history(db, T, j0.id).await.last(),
        Some(&(EventKind::Succeeded, 1))
    );
    assert_eq!(get(db, T, c[2].job.id).await.state, JobState::Succeeded);
    assert_eq!(get(db, T, c[1].job.id).await, stale_before);
    assert_eq!(
        count_events(db, T, c[1].job.id, EventKind::LeaseLost).await,
        1
    );

    // Completing the same jobs again: the first repeats its complete, with
    // the same result (answered ok, nothing changed), the stale one works.
    let again = ok(db
        .engine
        .complete_many(
            T,
            &[
                Completion {
                    id: c[0].job.id,
                    lease_token: c[0].lease_token,
                    result: Some(json!({"n": 0})),
                },
                Completion {
                    id: c[1].job.id,
                    lease_token: c[1].lease_token,
                    result: None,
                },
            ],
        )
        .await);
    assert!(again[0].is_ok(), "{:?}", again[0]);
    assert!(again[1].is_ok());
    assert_eq!(get(db, T, c[0].job.id).await.result, Some(json!({"n": 0})));
}

/// heartbeat_many extends every owned lease in one call and answers each
/// item in order: valid (extended, progress stored, cancel flag reported),
/// stale token (`LeaseLost`, lease unchanged, `lease_lost` recorded),
/// unknown id (`JobNotFound`).
pub async fn heartbeat_many_answers_per_item(db: &TestDb) {
    for _ in 0..3 {
        enqueue(db, T, job(Q)).await;
    }
    let c = claim(db, T, Q, 3).await;
    assert_eq!(c.len(), 3);
    ok(db.engine.cancel(T, c[2].job.id).await);
    let stale_before = get(db, T, c[1].job.id).await;
    let beat = |i: usize, token| tether_core::Heartbeat {
        id: c[i].job.id,
        lease_token: token,
        lease_ttl_ms: Some(45_000),
        progress: Some(json!({ "i": i })),
    };
    let unknown = tether_core::Heartbeat {
        id: Uuid::now_v7(),
        ..beat(0, c[0].lease_token)
    };
    let answers = ok(db
        .engine
        .heartbeat_many(
            T,
            &[
                beat(0, c[0].lease_token),
                beat(1, random_token()),
                unknown,
                beat(2, c[2].lease_token),
            ],
        )
        .await);
    assert_eq!(answers.len(), 4);
    let first = answers[0].as_ref().expect("owned lease is extended");
    assert!(!first.cancel_requested);
    let stored = get(db, T, c[0].job.id).await;
    assert_eq!(stored.lease_expires_at, Some(first.lease_expires_at));
    assert_eq!(stored.progress, Some(json!({ "i": 0 })));
    let hb_at = stored.heartbeat_at.expect("heartbeat_at");
    assert!((ms_between(first.lease_expires_at, hb_at) - 45_000.0).abs() <= 2.0);
    assert!(matches!(answers[1], Err(tether_core::Error::LeaseLost(_))));
    assert_eq!(get(db, T, c[1].job.id).await, stale_before);
    assert_eq!(
        count_events(db, T, c[1].job.id, EventKind::LeaseLost).await,
        1
    );
    assert!(matches!(
        answers[2],
        Err(tether_core::Error::JobNotFound(_))
    ));
    let cancelled = answers[3]
        .as_ref()
        .expect("cancel-requested job still owned");
    assert!(cancelled.cancel_requested);
}

/// A batch naming one job twice, once with its own token and once with a
/// stale one, answers each item by its own token: the stale item is
/// `lease_lost` even though the same batch extended or completed the job.
pub async fn each_item_is_answered_by_its_own_token(db: &TestDb) {
    enqueue(db, T, job(Q)).await;
    let c = claim(db, T, Q, 1).await;
    let owned = &c[0];
    let stale = random_token();
    let beat = |lease_token| tether_core::Heartbeat {
        id: owned.job.id,
        lease_token,
        lease_ttl_ms: None,
        progress: None,
    };
    let answers = ok(db
        .engine
        .heartbeat_many(T, &[beat(stale), beat(owned.lease_token)])
        .await);
    assert!(
        matches!(answers[0], Err(tether_core::Error::LeaseLost(_))),
        "{answers:?}"
    );
    assert!(answers[1].is_ok(), "{answers:?}");
    let done = |lease_token| Completion {
        id: owned.job.id,
        lease_token,
        result: None,
    };
    let answers = ok(db
        .engine
        .complete_many(T, &[done(owned.lease_token), done(stale)])
        .await);
    assert!(answers[0].is_ok(), "{answers:?}");
    assert!(
        matches!(answers[1], Err(tether_core::Error::LeaseLost(_))),
        "{answers:?}"
    );
    assert_eq!(
        ok(db.engine.get(T, owned.job.id).await).state,
        JobState::Succeeded
    );
}

/// A batch that names one job many times with a stale token (complete or
/// heartbeat) is refused item by item, yet adds one `lease_lost` event to
/// that job per batch: repeated stale items cannot grow its history by the
/// batch size. A job named once with its own token still succeeds.
pub async fn repeated_stale_items_record_one_lease_lost_per_batch(db: &TestDb) {
    enqueue(db, T, job(Q)).await;
    enqueue(db, T, job(Q)).await;
    let c = claim(db, T, Q, 2).await;
    let (victim, other) = (&c[0], &c[1]);
    let stale = random_token();
    let events_before = ok(db.engine.events(T, victim.job.id).await).len();
    for round in 1..=3 {
        let beats: Vec<tether_core::Heartbeat> = (0..500)
            .map(|_| tether_core::Heartbeat {
                id: victim.job.id,
                lease_token: stale,
                lease_ttl_ms: None,
                progress: None,
            })
            .collect();
        let answers = ok(db.engine.heartbeat_many(T, &beats).await);
        assert_eq!(answers.len(), 500);
        assert!(answers
            .iter()
            .all(|a| matches!(a, Err(tether_core::Error::LeaseLost(_)))));
        let mut items: Vec<Completion> = (0..999)
            .map(|_| Completion {
                id: victim.job.id,
                lease_token: stale,
                result: None,
            })
            .collect();
        if round == 3 {
            items.push(Completion {
                id: other.job.id,
                lease_token: other.lease_token,
                result: None,
            });
        }
        let answers = ok(db.engine.complete_many(T, &items).await);
        assert!(answers[..999]
            .iter()
            .all(|a| matches!(a, Err(tether_core::Error::LeaseLost(_)))));
        // One heartbeat and one completion batch per round: two events.
        assert_eq!(
            count_events(db, T, victim.job.id, EventKind::LeaseLost).await,
            2 * round,
            "round {round}"
        );
    }
    assert_eq!(
        ok(db.engine.events(T, victim.job.id).await).len(),
        events_before + 6
    );
    assert_eq!(get(db, T, victim.job.id).await.state, JobState::Running);
    assert_eq!(get(db, T, other.job.id).await.state, JobState::Succeeded);
    assert_eq!(
        count_events(db, T, other.job.id, EventKind::LeaseLost).await,
        0
    );
}
