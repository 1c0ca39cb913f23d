//! Job headers: set at enqueue, carried unchanged, handed to the worker by
//! every claim, and bounded.

use std::collections::BTreeMap;

use tether_core::{Failure, NewJob, NewWorkflow};

use super::support::*;
use crate::TestDb;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn traced(queue: &str) -> NewJob {
    job(queue)
        .header("traceparent", TRACEPARENT)
        .header("tracestate", "vendor=opaque,é=ü")
}

fn expected() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("traceparent".to_owned(), TRACEPARENT.to_owned()),
        ("tracestate".to_owned(), "vendor=opaque,é=ü".to_owned()),
    ])
}

/// One job, a batch of jobs with and without headers, a graph batch and a
/// workflow: each job keeps exactly its own headers through enqueue, GET,
/// claim, a retry's claim, an idempotent duplicate and a replay; a job
/// without headers has none.
pub async fn headers_travel_with_the_job(db: &TestDb) {
    let e = &db.engine;
    let one = enqueue(db, T, traced("h1")).await;
    assert_eq!(one.headers, expected());
    assert_eq!(get(db, T, one.id).await.headers, expected());
    let claimed = claim_id(db, T, "h1", one.id).await;
    assert_eq!(claimed.job.headers, expected());
    // A retry's claim carries them again.
    let retry_at_once = Failure {
        retry_after_ms: Some(0),
        ..failure("once")
    };
    let again = ok(e.fail(T, one.id, claimed.lease_token, retry_at_once).await);
    assert_eq!(again.headers, expected());
    assert_eq!(claim_id(db, T, "h1", one.id).await.job.headers, expected());

    let batch = ok(e
        .enqueue_many(
            T,
            &[
                job("h2").header("only", "first"),
                job("h2"),
                job("h2").after_entry(0).header("x-id", "third"),
            ],
        )
        .await);
    let got: Vec<BTreeMap<String, String>> = batch.iter().map(|b| b.job.headers.clone()).collect();
    assert_eq!(
        got,
        [
            BTreeMap::from([("only".to_owned(), "first".to_owned())]),
            BTreeMap::new(),
            BTreeMap::from([("x-id".to_owned(), "third".to_owned())]),
        ]
    );
    for b in &batch {
        assert_eq!(get(db, T, b.job.id).await.headers, b.job.headers);
    }

    let flow = ok(e
        .enqueue_workflow(
            T,
            &NewWorkflow {
                name: "traced".into(),
                idempotency_key: None,
            },
            &[traced("h3"), job("h3").after_entry(0)],
        )
        .await);
    let first = flow.jobs[0].job.id;
    assert_eq!(get(db, T, first).await.headers, expected());
    assert_eq!(claim_id(db, T, "h3", first).await.job.headers, expected());

    // The duplicate of an idempotent enqueue answers the first job, with
    // the first job's headers.
    let keyed = ok(e.enqueue(T, traced("h4").idempotency_key("k1")).await);
    let dup = ok(e
        .enqueue(T, job("h4").idempotency_key("k1").header("other", "x"))
        .await);
    assert!(!dup.created);
    assert_eq!(dup.job.id, keyed.job.id);
    assert_eq!(dup.job.headers, expected());

    // A replay keeps them.
    let c = claim_id(db, T, "h4", keyed.job.id).await;
    ok(e.fail(T, keyed.job.id, c.lease_token, fatal("no")).await);
    let replayed = ok(e.replay(T, keyed.job.id).await);
    assert_eq!(replayed.headers, expected());

    let plain = enqueue(db, T, job("h5")).await;
    assert!(get(db, T, plain.id).await.headers.is_empty());
}

/// Headers past a bound, or with a bad name or a control character, are
/// refused with the field named, and nothing is enqueued (a batch
/// neither).
pub async fn bad_headers_are_refused_and_enqueue_nothing(db: &TestDb) {
    let e = &db.engine;
    let many = (0..33).fold(job("hb"), |j, i| j.header(format!("h{i}"), "v"));
    let bulky = (0..5).fold(job("hb"), |j, i| {
        j.header(format!("h{i}"), "v".repeat(1_000))
    });
    let cases = [
        (many, "at most 32 headers"),
        (job("hb").header("", "v"), "1 to 64"),
        (job("hb").header("n".repeat(65), "v"), "1 to 64"),
        (job("hb").header("bad name", "v"), "contains ' '"),
        (job("hb").header("x:y", "v"), "contains ':'"),
        (
            job("hb").header("n", "v".repeat(1_025)),
            "at most 1024 bytes",
        ),
        (job("hb").header("n", "a\u{0}b"), "control character"),
        (job("hb").header("n", "line\nbreak"), "control character"),
        (bulky, "4096 bytes in all"),
    ];
    for (bad, message) in cases {
        let error = expect_invalid(e.enqueue(T, bad.clone()).await);
        let text = error.to_string();
        assert!(text.contains("headers"), "{text}");
        assert!(text.contains(message), "{message:?} in {text}");
        let error = expect_invalid(e.enqueue_many(T, &[job("hb"), bad]).await);
        assert!(error.to_string().contains("jobs[1].headers"), "{error}");
    }
    assert!(jobs_in(db, T, "hb").await.is_empty());
    // The bounds themselves are accepted.
    let full = (0..32).fold(job("hb"), |j, i| {
        j.header(format!("h{i:02}"), "v".repeat(100))
    });
    let at_the_value_bound = job("hb").header("n", "€".repeat(341));
    for good in [full, at_the_value_bound] {
        let created = enqueue(db, T, good.clone()).await;
        assert_eq!(get(db, T, created.id).await.headers, good.headers);
    }
}
