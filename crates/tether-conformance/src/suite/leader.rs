//! Invariant 10, exactly one maintainer: a named lease row with the same
//! fencing rules as jobs.

use std::time::{Duration, Instant};

use tether_core::lifecycle::MAINTENANCE_LEASE;

use super::support::*;
use crate::TestDb;

const TTL_MS: i64 = 30_000;

/// A acquires; B cannot while A holds it; A renews (same token, later
/// expiry); after a lapse B acquires with a new token and A's renew is
/// `LeaseLost`; a release lets another acquire at once.
pub async fn leader_lease_is_exclusive_and_fenced(db: &TestDb) {
    let e = &db.engine;
    let a = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-a", TTL_MS).await)
        .expect("a free lease is acquired");
    assert_eq!(a.name, MAINTENANCE_LEASE);
    assert_eq!(a.holder, "node-a");
    let left = ms_between(a.expires_at, chrono::Utc::now());
    assert!(left > 20_000.0 && left <= 40_000.0, "expiry {left} ms away");
    assert_eq!(
        ok(e.acquire_lease(MAINTENANCE_LEASE, "node-b", TTL_MS).await),
        None,
        "B acquired a held lease"
    );
    // The holder itself cannot acquire a second time either: it renews.
    assert_eq!(
        ok(e.acquire_lease(MAINTENANCE_LEASE, "node-a", TTL_MS).await),
        None
    );
    // Another role is independent.
    assert!(ok(e.acquire_lease("other-role", "node-b", TTL_MS).await).is_some());

    tick().await;
    let renewed = ok(e.renew_lease(MAINTENANCE_LEASE, a.token, 60_000).await);
    assert_eq!(renewed.token, a.token);
    assert_eq!(renewed.holder, "node-a");
    assert!(renewed.expires_at > a.expires_at);

    db.lapse_named_lease(MAINTENANCE_LEASE).await;
    let b = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-b", TTL_MS).await)
        .expect("a lapsed lease is taken over");
    assert_eq!(b.holder, "node-b");
    assert_ne!(b.token, a.token, "a takeover mints a fresh token");
    expect_named_lease_lost(e.renew_lease(MAINTENANCE_LEASE, a.token, TTL_MS).await);
    // A's release with its stale token must not free B's lease.
    let _ = e.release_lease(MAINTENANCE_LEASE, a.token).await;
    assert_eq!(
        ok(e.acquire_lease(MAINTENANCE_LEASE, "node-c", TTL_MS).await),
        None,
        "a stale release freed the new holder's lease"
    );
    ok(e.renew_lease(MAINTENANCE_LEASE, b.token, TTL_MS).await);

    ok(e.release_lease(MAINTENANCE_LEASE, b.token).await);
    let c = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-c", TTL_MS).await)
        .expect("a released lease is free at once");
    assert_ne!(c.token, b.token);
    expect_named_lease_lost(e.renew_lease(MAINTENANCE_LEASE, b.token, TTL_MS).await);
}

/// A lapsed lease that nobody took over can still be renewed by its holder.
pub async fn lapsed_leader_lease_is_renewable_until_taken(db: &TestDb) {
    let e = &db.engine;
    let a = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-a", TTL_MS).await).unwrap();
    db.lapse_named_lease(MAINTENANCE_LEASE).await;
    let r = ok(e.renew_lease(MAINTENANCE_LEASE, a.token, TTL_MS).await);
    assert_eq!(r.token, a.token);
    assert!(r.expires_at > chrono::Utc::now());
    assert_eq!(
        ok(e.acquire_lease(MAINTENANCE_LEASE, "node-b", TTL_MS).await),
        None,
        "the renewed lease is held again"
    );
}

/// Real time: A takes a 1 s lease and stops renewing; B, polling every
/// 100 ms, gets it after the lease lapsed and within 2.5 s.
pub async fn leader_takeover_within_one_ttl_in_real_time(db: &TestDb) {
    let e = &db.engine;
    let a = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-a", 1_000).await).unwrap();
    let start = Instant::now();
    let b = loop {
        if let Some(b) = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-b", 1_000).await) {
            break b;
        }
        assert!(
            start.elapsed() < Duration::from_millis(2_500),
            "B did not take over within 2.5 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(800),
        "B took the lease after {waited:?}, before A's 1 s lease lapsed"
    );
    assert_ne!(b.token, a.token);
    expect_named_lease_lost(e.renew_lease(MAINTENANCE_LEASE, a.token, 1_000).await);
}

/// The maintenance passes fenced by a leader's lease change nothing once
/// that lease has lapsed or another node took it — a lapsed job is not
/// reaped, an expired one not expired, a finished one not pruned — and do
/// their work while the lease holds; lifted, the fence lets passes run by
/// hand again.
pub async fn fenced_passes_of_a_lapsed_leader_change_nothing(db: &TestDb) {
    let e = &db.engine;
    let lease = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-a", TTL_MS).await)
        .expect("a free lease is acquired");
    e.fence_maintenance(Some((MAINTENANCE_LEASE, lease.token)));

    // A lapsed job, an expired one and a finished one, for each pass.
    let lapsed = enqueue(db, T, job("fenced")).await;
    let claimed = claim(db, T, "fenced", 1).await;
    assert_eq!(claimed[0].job.id, lapsed.id);
    db.lapse_lease(lapsed.id).await;
    let expiring = enqueue(
        db,
        T,
        job("fenced-expiry").expires_at(chrono::Utc::now() + chrono::Duration::milliseconds(50)),
    )
    .await;
    let done = enqueue(db, T, job("fenced-done")).await;
    let c = claim(db, T, "fenced-done", 1).await;
    ok(e.complete(T, done.id, c[0].lease_token, None).await);
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The lease lapses: every fenced pass changes nothing.
    db.lapse_named_lease(MAINTENANCE_LEASE).await;
    assert_eq!(ok(e.reap_lapsed_leases(100).await).requeued, 0);
    assert_eq!(ok(e.expire_jobs(100).await), 0);
    assert_eq!(ok(e.prune_finished(0, 100).await), 0);
    assert_eq!(
        ok(e.get(T, lapsed.id).await).state,
        tether_core::JobState::Running
    );
    assert_eq!(
        ok(e.get(T, expiring.id).await).state,
        tether_core::JobState::Queued
    );

    // Another node takes the lease: still nothing under the old token; the
    // new leader's fenced passes do the work.
    let other = ok(e.acquire_lease(MAINTENANCE_LEASE, "node-b", TTL_MS).await)
        .expect("a lapsed lease is taken over");
    assert_eq!(ok(e.reap_lapsed_leases(100).await).requeued, 0);
    e.fence_maintenance(Some((MAINTENANCE_LEASE, other.token)));
    assert_eq!(ok(e.reap_lapsed_leases(100).await).requeued, 1);
    assert_eq!(ok(e.expire_jobs(100).await), 1);
    // The finished job, and the one just expired.
    assert_eq!(ok(e.prune_finished(0, 100).await), 2);

    // Lifted, the fence leaves passes run by hand unfenced.
    e.fence_maintenance(None);
    ok(e.release_lease(MAINTENANCE_LEASE, other.token).await);
    assert_eq!(ok(e.reap_lapsed_leases(100).await).requeued, 0);
}
