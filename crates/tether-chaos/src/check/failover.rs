//! The checks of a failover run and of the errors the clients saw.

use super::*;

/// With `--failover`, the work went on on the new primary through every
/// replica. An event at or after the instant the promoted standby first
/// took writes was written there (the old primary was gone by then); among
/// them there must be claims and completions by workers of each replica,
/// so each replica's pool moved to the new primary and served on it.
pub(super) fn check_failover(f: &mut Findings, events: &[EventRow], cx: &Context) {
    let Some((at, replicas)) = cx.failover else {
        return;
    };
    let mut after = AfterFailover {
        claims: vec![0; replicas],
        successes: vec![0; replicas],
        ..AfterFailover::default()
    };
    for e in events.iter().filter(|e| e.at >= at) {
        after.events += 1;
        let replica = e
            .worker_id
            .as_deref()
            .and_then(|w| crate::cluster::replica_of(w, replicas));
        match (e.event.as_str(), replica) {
            ("claimed", Some(r)) => after.claims[r] += 1,
            ("succeeded", Some(r)) => after.successes[r] += 1,
            ("lease_expired", _) => after.reaped += 1,
            _ => {}
        }
    }
    for r in 0..replicas {
        if after.claims[r] == 0 || after.successes[r] == 0 {
            f.flag(FAILOVER_CHECK, || {
                format!(
                    "after the promotion at {at}, the workers of replica {r} made {} claims and \
                     {} completions",
                    after.claims[r], after.successes[r]
                )
            });
        }
    }
    f.stats.after_failover = Some(after);
}

/// Clients saw only documented codes, and none that means a bug.
pub(super) fn check_errors(f: &mut Findings, obs: &Obs) {
    for ((side, code), n) in &obs.errors {
        let who = match side {
            Side::Producer => "producers",
            Side::Worker => "workers",
        };
        match ErrorCode::parse(code) {
            Some(ErrorCode::Internal) => {
                f.flag("internal_errors", || format!("{who} got {n} × internal"));
            }
            Some(c) if !EXPECTED.contains(&c) => f.flag("unexpected_errors", || {
                format!("{who} got {n} × {code} (documented, but nothing in this scenario should cause it)")
            }),
            Some(_) => {}
            None if NO_ANSWER.contains(&code.as_str()) => {}
            None => f.flag("undocumented_errors", || format!("{who} got {n} × {code}")),
        }
    }
}
