//! Invariant 14, limits hold everywhere: a queue's `max_running`, per-key
//! `key_max_running` and `rate_limit` are never exceeded by claims,
//! whatever the number of claimers; a job frees its slot when it ends or the
//! reaper takes it back; a throttled claim hands out fewer jobs and is never
//! an error. Invariant 15, fair shares: with `fair`, claims take keys in
//! turn.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tether_core::{ClaimRequest, EventKind, JobFilter, JobState, QueueConfigPatch, RateLimit};

use super::support::*;
use crate::TestDb;

fn max_running(n: Option<i32>) -> QueueConfigPatch {
    QueueConfigPatch {
        max_running: Some(n),
        ..Default::default()
    }
}

async fn running(db: &TestDb, queue: &str) -> i64 {
    ok(db.engine.queue_stats(T, queue).await).counts.running
}

/// With `max_running` 3, claims hand out 3 jobs and then none; each job
/// that ends (success, retryable failure, snooze) frees one slot; lowering
/// the limit below the running count hands out nothing until enough end;
/// `None` removes the limit. The setting shows in the queue's stats, stays
/// when a patch leaves it out, and keeps the queue's row when it is empty.
pub async fn max_running_caps_claims_and_ends_free_slots(db: &TestDb) {
    for _ in 0..10 {
        enqueue(db, T, job(Q)).await;
    }
    let stats = ok(db.engine.configure_queue(T, Q, &max_running(Some(3))).await);
    assert_eq!(stats.limits.max_running, Some(3));
    let first = claim(db, T, Q, 10).await;
    assert_eq!(first.len(), 3, "a claim of 10 under max_running 3");
    claim_none(db, T, Q).await;

    ok(db
        .engine
        .complete(T, first[0].job.id, first[0].lease_token, None)
        .await);
    assert_eq!(
        claim(db, T, Q, 10).await.len(),
        1,
        "a success frees one slot"
    );
    claim_none(db, T, Q).await;
    ok(db
        .engine
        .fail(T, first[1].job.id, first[1].lease_token, failure("again"))
        .await);
    assert_eq!(
        claim(db, T, Q, 10).await.len(),
        1,
        "a failure frees one slot"
    );
    ok(db
        .engine
        .snooze(T, first[2].job.id, first[2].lease_token, 60_000)
        .await);
    assert_eq!(
        claim(db, T, Q, 10).await.len(),
        1,
        "a snooze frees one slot"
    );
    assert_eq!(running(db, Q).await, 3);

    // A patch that leaves the limit out keeps it.
    let other = QueueConfigPatch {
        max_attempts: Some(7),
        ..Default::default()
    };
    let stats = ok(db.engine.configure_queue(T, Q, &other).await);
    assert_eq!(stats.limits.max_running, Some(3));
    claim_none(db, T, Q).await;

    // Lowered below the running count: nothing until the count is under it.
    ok(db.engine.configure_queue(T, Q, &max_running(Some(1))).await);
    let held: Vec<_> = ok(db.engine.list(T, &Default::default()).await)
        .jobs
        .into_iter()
        .filter(|j| j.state == JobState::Running)
        .collect();
    assert_eq!(held.len(), 3);
    claim_none(db, T, Q).await;

    // No limit: the rest of the ready jobs (the failed one backs off and
    // the snoozed one is not due).
    let stats = ok(db.engine.configure_queue(T, Q, &max_running(None)).await);
    assert_eq!(stats.limits.max_running, None);
    assert_eq!(claim(db, T, Q, 10).await.len(), 4);

    // Another tenant's queue of the same name is not limited by ours.
    ok(db
        .engine
        .configure_queue(T, "capped", &max_running(Some(1)))
        .await);
    for _ in 0..3 {
        enqueue(db, T2, job("capped")).await;
    }
    assert_eq!(claim(db, T2, "capped", 10).await.len(), 3);

    // An empty queue with a limit keeps its row (and so its limit).
    ok(db.engine.prune_empty_queues(1_000).await);
    let capped = ok(db.engine.queue_stats(T, "capped").await);
    assert_eq!(capped.limits.max_running, Some(1));

    // Out of range: refused, nothing changes.
    for bad in [0, -1, 100_001] {
        expect_invalid(
            db.engine
                .configure_queue(T, Q, &max_running(Some(bad)))
                .await,
        );
    }
    assert_eq!(
        ok(db.engine.queue_stats(T, Q).await).limits.max_running,
        None
    );
}

/// Sixteen claimers race for five slots, round after round: every round
/// hands out exactly five jobs in all, never more, however the claims
/// interleave.
pub async fn concurrent_claimers_never_exceed_max_running(db: &TestDb) {
    const SLOTS: usize = 5;
    const ROUNDS: usize = 4;
    for _ in 0..(SLOTS * ROUNDS + 10) {
        enqueue(db, T, job(Q)).await;
    }
    ok(db
        .engine
        .configure_queue(T, Q, &max_running(Some(SLOTS as i32)))
        .await);
    for round in 0..ROUNDS {
        let claimed = race(db).await;
        assert_eq!(claimed.len(), SLOTS, "round {round}: slots handed out");
        assert_eq!(running(db, Q).await, SLOTS as i64);
        for c in &claimed {
            ok(db.engine.complete(T, c.job.id, c.lease_token, None).await);
        }
    }
}

/// Sixteen claims of up to 3 jobs each from `Q` at once; what they got.
/// Each claimant gets at most what it asked for, every job once, each
/// under the claimant's own worker id (claims that wait for one turn may
/// be made together), on the answer and on the job.
async fn race(db: &TestDb) -> Vec<tether_core::ClaimedJob> {
    let claims = (0..16).map(|i| {
        let engine = db.engine.clone();
        tokio::spawn(async move {
            let req = ClaimRequest {
                worker_id: format!("racer-{i}"),
                ..claim_req(Q, 3)
            };
            let claimed = ok(engine.claim(T, &req).await);
            assert!(
                claimed.len() <= 3,
                "{} jobs for a claim of 3",
                claimed.len()
            );
            for c in &claimed {
                assert_eq!(c.job.worker_id.as_deref(), Some(req.worker_id.as_str()));
                let stored = ok(engine.get(T, c.job.id).await);
                assert_eq!(stored.worker_id.as_deref(), Some(req.worker_id.as_str()));
            }
            claimed
        })
    });
    let mut claimed = Vec::new();
    for c in futures_util::future::join_all(claims).await {
        claimed.extend(c.expect("claimer"));
    }
    let ids: std::collections::HashSet<_> = claimed.iter().map(|c| c.job.id).collect();
    assert_eq!(ids.len(), claimed.len(), "a job handed out twice");
    claimed
}

/// Real time: a job whose lease lapsed holds its slot until the reaper
/// takes it back; then the slot is free again.
pub async fn reaped_job_frees_its_slot(db: &TestDb) {
    enqueue(db, T, job(Q)).await;
    enqueue(db, T, job(Q)).await;
    ok(db.engine.configure_queue(T, Q, &max_running(Some(1))).await);
    let req = ClaimRequest {
        lease_ttl_ms: Some(1_000),
        ..claim_req(Q, 2)
    };
    assert_eq!(ok(db.engine.claim(T, &req).await).len(), 1);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // Lapsed but not yet reaped: still running, still counted.
    claim_none(db, T, Q).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    assert_eq!(claim(db, T, Q, 2).await.len(), 1);
    claim_none(db, T, Q).await;
}

/// A claim the limit held back hears when a slot frees: a subscriber of a
/// throttled queue is woken by a job of it ending (a completion alone and
/// in a batch, a failure) and by the reaper taking one back, not only by
/// its poll interval.
pub async fn a_freed_slot_wakes_throttled_claims(db: &TestDb) {
    const WITHIN: Duration = Duration::from_secs(5);
    for _ in 0..6 {
        enqueue(db, T, job(Q)).await;
    }
    ok(db.engine.configure_queue(T, Q, &max_running(Some(1))).await);
    let mut w = db.engine.subscribe(T, Q).expect("subscribe");
    // Drain a start-up hint (e.g. a listener connecting) and the enqueues'.
    drain(&mut w).await;

    let mut ends = 0;
    let mut holder = claim_one(db, T, Q).await;
    loop {
        // Held back: the queue has ready jobs and no free slot.
        claim_none(db, T, Q).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(200), w.hinted())
                .await
                .is_err(),
            "a hint before any slot freed"
        );
        let (id, token) = (holder.job.id, holder.lease_token);
        match ends {
            0 => drop(ok(db.engine.complete(T, id, token, None).await)),
            1 => {
                let item = holder.success();
                for answer in ok(db.engine.complete_many(T, &[item]).await) {
                    ok(answer);
                }
            }
            2 => drop(ok(db.engine.fail(T, id, token, failure("again")).await)),
            _ => break,
        }
        if tokio::time::timeout(WITHIN, w.hinted()).await.is_err() {
            panic!("no hint within {WITHIN:?} after end {ends} freed the slot");
        }
        // On PostgreSQL the process also hears its own NOTIFY a moment later.
        drain(&mut w).await;
        holder = claim_one(db, T, Q).await;
        ends += 1;
    }

    // The reaper taking a lapsed job back frees its slot too.
    db.lapse_lease(holder.job.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    if tokio::time::timeout(WITHIN, w.hinted()).await.is_err() {
        panic!("no hint within {WITHIN:?} after the reaper freed the slot");
    }
    claim_one(db, T, Q).await;
}

fn keyed(queue: &str, key: &str) -> tether_core::NewJob {
    job(queue).concurrency_key(key)
}

fn key_limit(n: i32) -> QueueConfigPatch {
    QueueConfigPatch {
        key_max_running: Some(Some(n)),
        ..Default::default()
    }
}

/// How many of `claimed` have each key (`-` for none).
fn per_key(claimed: &[tether_core::ClaimedJob]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for c in claimed {
        let key = c.job.concurrency_key.clone().unwrap_or_else(|| "-".into());
        *out.entry(key).or_default() += 1;
    }
    out
}

/// With `key_max_running` 2, a claim passes over a key at its limit and
/// takes other keys' jobs and jobs without a key (which it does not
/// limit), even when the full key's backlog is older; a job of the key that
/// ends or is reaped frees its key's slot; with `max_running` too, both hold;
/// a paused queue hands out nothing; the key shows on the job.
pub async fn key_max_running_passes_over_full_keys(db: &TestDb) {
    for _ in 0..6 {
        enqueue(db, T, keyed(Q, "big")).await;
    }
    enqueue(db, T, keyed(Q, "small")).await;
    enqueue(db, T, keyed(Q, "small")).await;
    enqueue(db, T, keyed(Q, "small")).await;
    enqueue(db, T, job(Q)).await;
    enqueue(db, T, job(Q)).await;
    let stats = ok(db.engine.configure_queue(T, Q, &key_limit(2)).await);
    assert_eq!(stats.limits.key_max_running, Some(2));

    let first = claim(db, T, Q, 100).await;
    let counts = per_key(&first);
    assert_eq!(
        (counts.get("big"), counts.get("small"), counts.get("-")),
        (Some(&2), Some(&2), Some(&2)),
        "two per key, every job without a key: {counts:?}"
    );
    claim_none(db, T, Q).await;

    // A big job ends: one big slot frees; a lapsed small job reaped frees one.
    let big = first
        .iter()
        .find(|c| c.job.concurrency_key.as_deref() == Some("big"))
        .unwrap();
    ok(db
        .engine
        .complete(T, big.job.id, big.lease_token, None)
        .await);
    let next = claim(db, T, Q, 100).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].job.concurrency_key.as_deref(), Some("big"));
    let small = first
        .iter()
        .find(|c| c.job.concurrency_key.as_deref() == Some("small"))
        .unwrap();
    db.lapse_lease(small.job.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    let next = claim(db, T, Q, 100).await;
    assert_eq!(next.len(), 1, "the reaped job's key slot is free again");
    assert_eq!(next[0].job.concurrency_key.as_deref(), Some("small"));
    claim_none(db, T, Q).await;

    // With max_running as well, the tighter of the two holds.
    for key in ["c", "c", "d", "d", "e", "e"] {
        enqueue(db, T, keyed(Q, key)).await;
    }
    ok(db.engine.configure_queue(T, Q, &max_running(Some(8))).await);
    assert_eq!(running(db, Q).await, 6);
    let more = claim(db, T, Q, 100).await;
    assert_eq!(more.len(), 2, "max_running 8 leaves two slots");
    ok(db.engine.pause(T, Q).await);
    ok(db.engine.configure_queue(T, Q, &max_running(None)).await);
    claim_none(db, T, Q).await;
    ok(db.engine.resume(T, Q).await);
    let rest = claim(db, T, Q, 100).await;
    assert_eq!(rest.len(), 4, "c, d and e each get to two");
    assert_eq!(
        ok(db.engine.get(T, rest[0].job.id).await).concurrency_key,
        rest[0].job.concurrency_key
    );

    // A full key whose backlog fills the head of the queue, far past what
    // one small claim looks at first: the claim still finds the other key.
    for _ in 0..12 {
        enqueue(db, T, keyed("walk", "full")).await;
    }
    enqueue(db, T, keyed("walk", "other")).await;
    ok(db.engine.configure_queue(T, "walk", &key_limit(1)).await);
    let first = claim(db, T, "walk", 1).await;
    assert_eq!(first[0].job.concurrency_key.as_deref(), Some("full"));
    let second = claim(db, T, "walk", 1).await;
    assert_eq!(second.len(), 1, "the other key's job");
    assert_eq!(second[0].job.concurrency_key.as_deref(), Some("other"));
    claim_none(db, T, "walk").await;
}

/// A fair queue with `key_max_running` 1 whose head is one key's long
/// backlog, then more keys than one claim's walk visits
/// (`tether_core::flow::walk_len`): each claim walks only part of the keys,
/// and successive claims go on where the last one stopped, so small claims
/// reach every key — each key once, the full key never twice — and then
/// hand out nothing.
pub async fn a_bounded_walk_reaches_every_key_in_turn(db: &TestDb) {
    const KEYS: usize = 700;
    let queue = "many-keys";
    let backlog: Vec<_> = (0..50).map(|_| keyed(queue, "hot")).collect();
    ok(db.engine.enqueue_many(T, &backlog).await);
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(500) {
        let jobs: Vec<_> = chunk
            .iter()
            .map(|i| keyed(queue, &format!("k{i:04}")))
            .collect();
        ok(db.engine.enqueue_many(T, &jobs).await);
    }
    let patch = QueueConfigPatch {
        fair: Some(true),
        ..key_limit(1)
    };
    ok(db.engine.configure_queue(T, queue, &patch).await);
    assert!(
        tether_core::flow::walk_len(10) < KEYS as u32,
        "the test needs more keys than a walk visits"
    );
    let mut taken: HashMap<String, usize> = HashMap::new();
    let mut claims = 0;
    loop {
        let got = claim(db, T, queue, 10).await;
        claims += 1;
        if got.is_empty() {
            break;
        }
        for (key, n) in per_key(&got) {
            *taken.entry(key).or_default() += n;
        }
        assert!(claims < 500, "claims kept handing out jobs: {taken:?}");
    }
    assert_eq!(taken.len(), KEYS + 1, "every key, the hot one too");
    assert!(
        taken.values().all(|&n| n == 1),
        "one job per key under key_max_running 1"
    );
    assert_eq!(running(db, queue).await, KEYS as i64 + 1);
}

/// Sixteen claimers race under `key_max_running` 2 over four keys: every
/// round ends with exactly two running jobs per key.
pub async fn concurrent_claimers_never_exceed_key_max_running(db: &TestDb) {
    const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
    const ROUNDS: usize = 3;
    for _ in 0..(ROUNDS * 2 + 2) {
        for key in KEYS {
            enqueue(db, T, keyed(Q, key)).await;
        }
    }
    ok(db.engine.configure_queue(T, Q, &key_limit(2)).await);
    for round in 0..ROUNDS {
        let claimed = race(db).await;
        let counts = per_key(&claimed);
        for key in KEYS {
            assert_eq!(counts.get(key), Some(&2), "round {round}: {counts:?}");
        }
        for c in &claimed {
            ok(db.engine.complete(T, c.job.id, c.lease_token, None).await);
        }
    }
}

/// Claims that raced under per-key limits, then the limits changed: with
/// `max_running` 3 in place of `key_max_running`, racing claims hand out
/// exactly 3 jobs in all whatever their keys; with no limits, a claim
/// takes what it asks for.
pub async fn claims_follow_the_limits_when_they_change(db: &TestDb) {
    for _ in 0..8 {
        enqueue(db, T, keyed(Q, "k0")).await;
    }
    ok(db.engine.configure_queue(T, Q, &key_limit(2)).await);
    let claimed = race(db).await;
    assert_eq!(per_key(&claimed).get("k0"), Some(&2));
    let swap = QueueConfigPatch {
        key_max_running: Some(None),
        max_running: Some(Some(3)),
        ..Default::default()
    };
    ok(db.engine.configure_queue(T, Q, &swap).await);
    for c in &claimed {
        ok(db.engine.complete(T, c.job.id, c.lease_token, None).await);
    }
    let claimed = race(db).await;
    assert_eq!(claimed.len(), 3, "max_running 3 in place of the key limit");
    ok(db.engine.configure_queue(T, Q, &max_running(None)).await);
    let rest = ok(db.engine.claim(T, &claim_req(Q, 10)).await);
    assert_eq!(rest.len(), 3, "the rest, with no limits");
}

/// With a rate limit of 5 per second, claimers that keep asking (and
/// finish every job at once, which gives no slot back) get at most 5 jobs
/// in any second of the history's `claimed` events — a sliding window, not
/// one that resets on the second — and still get jobs in every window.
pub async fn rate_limit_holds_a_sliding_window(db: &TestDb) {
    const COUNT: usize = 5;
    const PERIOD_MS: i64 = 1_000;
    for _ in 0..40 {
        enqueue(db, T, job(Q)).await;
    }
    let rate = QueueConfigPatch {
        rate_limit: Some(Some(RateLimit {
            count: COUNT as i32,
            period_ms: PERIOD_MS,
        })),
        ..Default::default()
    };
    let stats = ok(db.engine.configure_queue(T, Q, &rate).await);
    assert_eq!(stats.limits.rate_limit.map(|r| r.count), Some(5));
    // Claims of 2 and 3 every 70 ms for 2.6 s: the window fills in pieces,
    // so a fixed window would let 10 through around a boundary.
    let start = std::time::Instant::now();
    let mut handed_out = 0;
    let mut size = 2;
    while start.elapsed() < Duration::from_millis(2_600) {
        for c in claim(db, T, Q, size).await {
            handed_out += 1;
            ok(db.engine.complete(T, c.job.id, c.lease_token, None).await);
        }
        size = 5 - size;
        tokio::time::sleep(Duration::from_millis(70)).await;
    }
    let mut claims: Vec<DateTime<Utc>> = Vec::new();
    let query = JobFilter {
        queue: Some(Q.to_owned()),
        limit: Some(100),
        ..Default::default()
    };
    for j in ok(db.engine.list(T, &query).await).jobs {
        for e in ok(db.engine.events(T, j.id).await) {
            if e.event == EventKind::Claimed {
                claims.push(e.at);
            }
        }
    }
    claims.sort();
    assert_eq!(claims.len(), handed_out);
    for (i, at) in claims.iter().enumerate() {
        let in_window = claims[..=i]
            .iter()
            .filter(|c| (*at - **c).num_milliseconds() < PERIOD_MS)
            .count();
        assert!(
            in_window <= COUNT,
            "{in_window} claims in the second up to {at}: {claims:?}"
        );
    }
    // Three windows began in 2.6 s: each hands out its five.
    assert!(
        (11..=15).contains(&handed_out),
        "{handed_out} jobs handed out in 2.6 s at 5 per second"
    );
}

/// A claim the rate limit held back hears when the window frees a slot
/// (nothing ends to send the hint: the window's clock does), and `fair`
/// claims interleave keys: a key with a big, older backlog gets an equal
/// share of a claim, not all of it; priority still comes first.
pub async fn rate_window_wakes_claims_and_fair_claims_share(db: &TestDb) {
    for _ in 0..3 {
        enqueue(db, T, job("rated")).await;
    }
    let rate = QueueConfigPatch {
        rate_limit: Some(Some(RateLimit {
            count: 2,
            period_ms: 1_000,
        })),
        ..Default::default()
    };
    ok(db.engine.configure_queue(T, "rated", &rate).await);
    let mut w = db.engine.subscribe(T, "rated").expect("subscribe");
    drain(&mut w).await;
    assert_eq!(claim(db, T, "rated", 10).await.len(), 2);
    claim_none(db, T, "rated").await;
    if tokio::time::timeout(Duration::from_secs(3), w.hinted())
        .await
        .is_err()
    {
        panic!("no hint when the rate window opened");
    }
    assert_eq!(claim(db, T, "rated", 10).await.len(), 1);

    for _ in 0..30 {
        enqueue(db, T, keyed(Q, "big")).await;
    }
    for key in ["small", "small", "small", "tiny"] {
        enqueue(db, T, keyed(Q, key)).await;
    }
    enqueue(db, T, keyed(Q, "big").priority(5)).await;
    let fair = QueueConfigPatch {
        fair: Some(true),
        ..Default::default()
    };
    assert!(ok(db.engine.configure_queue(T, Q, &fair).await).limits.fair);
    let first = claim(db, T, Q, 7).await;
    assert_eq!(first[0].job.priority, 5, "priority first");
    let counts = per_key(&first[1..]);
    assert_eq!(
        (counts.get("big"), counts.get("small"), counts.get("tiny")),
        (Some(&2), Some(&3), Some(&1)),
        "{counts:?}"
    );
    // Only big is left: it gets the whole claim.
    assert_eq!(claim(db, T, Q, 10).await.len(), 10);

    // Many keys mixed in the backlog: one job of each of the keys whose
    // oldest job is oldest (the claim finds them in its first look).
    for key in ["a", "a", "b", "a", "c", "d", "b", "e"] {
        enqueue(db, T, keyed("mixed", key)).await;
    }
    ok(db.engine.configure_queue(T, "mixed", &fair).await);
    let mut keys: Vec<_> = claim(db, T, "mixed", 3)
        .await
        .into_iter()
        .map(|c| c.job.concurrency_key.unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, ["a", "b", "c"]);
}

/// Waits until no hint has come for 300 ms.
async fn drain(w: &mut tether_core::Wakeup) {
    while tokio::time::timeout(Duration::from_millis(300), w.hinted())
        .await
        .is_ok()
    {}
}
