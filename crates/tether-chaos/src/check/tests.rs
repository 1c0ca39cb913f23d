//! The checks, on crafted histories.

use super::*;
use crate::obs::{ClaimObs, LostObs};
use crate::plan::Plan;

fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
}

/// A job number whose plan is a plain success, for seed 1.
fn ok_n() -> i64 {
    (0..)
        .find(|&n| matches!(plan::plan(1, n as u64), Plan::Ok { .. }))
        .unwrap()
}

struct H {
    id: Uuid,
    events: Vec<EventRow>,
}

impl H {
    fn new() -> H {
        let mut h = H {
            id: Uuid::now_v7(),
            events: Vec::new(),
        };
        h.ev(0, "enqueued", 0, None, None);
        h
    }
    fn ev(
        &mut self,
        ms: i64,
        event: &str,
        attempt: i32,
        worker: Option<&str>,
        detail: Option<&str>,
    ) -> &mut Self {
        self.events.push(EventRow {
            job_id: self.id,
            seq: self.events.len() as i64 + 1,
            at: t(ms),
            event: event.to_owned(),
            attempt,
            worker_id: worker.map(str::to_owned),
            detail: detail.map(str::to_owned),
        });
        self
    }
}

fn row(h: &H, n: i64, state: &str, attempt: i32, result: Option<Value>) -> JobRow {
    JobRow {
        id: h.id,
        key: Some(plan::key(n as u64)),
        queue: plan::plan(1, n as u64).queue().to_owned(),
        concurrency_key: None,
        state: state.to_owned(),
        attempt,
        max_attempts: 5,
        n: Some(n),
        run_at: t(0),
        result,
        depends_on: Vec::new(),
        dependency_failure: DependencyFailure::Cancel,
    }
}

fn cx() -> Context {
    Context {
        seed: 1,
        jobs: 0,
        now: t(100_000),
        stops_with_jobs: 0,
        cuts_with_jobs: 0,
        limited_per_mille: 0,
        limits: plan::LIMITS,
        failover: None,
        partitions: None,
        clock_back_us: 0,
        waits: HashMap::new(),
        stream: None,
    }
}

/// A job claimed by w1, SIGSTOPped and reaped, claimed and completed by
/// w2, whose stale worker then heard lease_lost on its completion.
fn fenced_story() -> (H, JobRow, Obs) {
    let n = ok_n();
    let mut h = H::new();
    h.ev(10, "claimed", 1, Some("w1"), None)
        .ev(5_000, "lease_expired", 1, Some("w1"), Some("queued"))
        .ev(5_100, "claimed", 2, Some("w2"), None)
        .ev(5_200, "succeeded", 2, Some("w2"), None)
        .ev(9_000, "lease_lost", 2, None, Some("complete"));
    let job = row(
        &h,
        n,
        "succeeded",
        2,
        Some(serde_json::json!({"n": n, "by": "w2", "attempt": 2})),
    );
    let mut obs = Obs::default();
    obs.ack(plan::key(n as u64), h.id, true);
    obs.ack(plan::key(n as u64), h.id, false);
    let (t1, t2) = (Uuid::new_v4(), Uuid::new_v4());
    obs.claims.insert(
        t1,
        ClaimObs {
            job: h.id,
            attempt: 1,
            worker: "w1".into(),
            at_us: us(t(12)),
        },
    );
    obs.claims.insert(
        t2,
        ClaimObs {
            job: h.id,
            attempt: 2,
            worker: "w2".into(),
            at_us: us(t(5_101)),
        },
    );
    obs.losts.push(LostObs {
        op: "complete".into(),
        job: h.id,
        token: t1,
        at_us: us(t(9_001)),
    });
    (h, job, obs)
}

#[test]
fn a_clean_fenced_history_passes() {
    let (h, job, obs) = fenced_story();
    let f = check(&[job], &h.events, &obs, &cx());
    assert!(f.passed(), "{:?}", f.violations);
    assert_eq!(f.stats.claims, 2);
    assert_eq!(f.stats.lease_lost["complete"], 1);
    assert_eq!(f.stats.keys_acked_repeatedly, 1);
}

#[test]
fn a_second_accepted_completion_is_caught() {
    let (mut h, job, obs) = fenced_story();
    h.events.pop();
    h.ev(9_000, "succeeded", 2, Some("w1"), None);
    let f = check(&[job], &h.events, &obs, &cx());
    assert!(
        f.violations.contains_key("double_completion"),
        "{:?}",
        f.violations
    );
}

#[test]
fn lease_lost_for_the_owner_is_caught() {
    let n = ok_n();
    let mut h = H::new();
    h.ev(10, "claimed", 1, Some("w1"), None)
        .ev(20, "lease_lost", 1, None, Some("heartbeat"))
        .ev(100, "succeeded", 1, Some("w1"), None);
    let job = row(
        &h,
        n,
        "succeeded",
        1,
        Some(serde_json::json!({"by": "w1", "attempt": 1})),
    );
    let mut obs = Obs::default();
    obs.ack(plan::key(n as u64), h.id, true);
    let token = Uuid::new_v4();
    obs.claims.insert(
        token,
        ClaimObs {
            job: h.id,
            attempt: 1,
            worker: "w1".into(),
            at_us: us(t(11)),
        },
    );
    obs.losts.push(LostObs {
        op: "heartbeat".into(),
        job: h.id,
        token,
        at_us: us(t(21)),
    });
    let f = check(&[job], &h.events, &obs, &cx());
    assert!(
        f.violations.contains_key("lease_lost_not_superseded"),
        "{:?}",
        f.violations
    );
    assert!(
        f.violations.contains_key("lease_lost_client"),
        "{:?}",
        f.violations
    );
}

#[test]
fn too_many_claims_and_lost_jobs_and_split_keys_are_caught() {
    let n = ok_n();
    let mut h = H::new();
    for a in 1..=6 {
        h.ev(a * 10, "claimed", a as i32, Some("w"), None).ev(
            a * 10 + 5,
            "lease_expired",
            a as i32,
            Some("w"),
            Some("queued"),
        );
    }
    let mut job = row(&h, n, "queued", 6, None);
    job.run_at = t(0);
    let mut obs = Obs::default();
    obs.ack(plan::key(n as u64), h.id, true);
    obs.ack(plan::key(n as u64), Uuid::now_v7(), true);
    let mut c = cx();
    c.jobs = n as u64 + 2;
    let f = check(&[job], &h.events, &obs, &c);
    for v in [
        "too_many_claims",
        "not_terminal",
        "lost",
        "key_two_jobs",
        "not_acknowledged",
    ] {
        assert!(f.violations.contains_key(v), "{v}: {:?}", f.violations);
    }
}

#[test]
fn snoozes_give_their_attempt_back() {
    let n = ok_n();
    let mut h = H::new();
    for a in 0..8 {
        h.ev(a * 10, "claimed", 1, Some("w"), None).ev(
            a * 10 + 5,
            "snoozed",
            0,
            Some("w"),
            Some("delay 5 ms"),
        );
    }
    h.ev(100, "claimed", 1, Some("w"), None)
        .ev(110, "succeeded", 1, Some("w"), None);
    let job = row(
        &h,
        n,
        "succeeded",
        1,
        Some(serde_json::json!({"by": "w", "attempt": 1})),
    );
    let mut obs = Obs::default();
    obs.ack(plan::key(n as u64), h.id, true);
    let f = check(&[job], &h.events, &obs, &cx());
    assert!(f.passed(), "{:?}", f.violations);
    assert_eq!((f.stats.claims, f.stats.snoozes), (9, 8));
}

#[test]
fn outcomes_must_be_what_the_handler_answered() {
    let n = (0..)
        .find(|&n| plan::plan(1, n as u64) == Plan::Fatal)
        .unwrap();
    let mut h = H::new();
    h.ev(10, "claimed", 1, Some("w"), None)
        .ev(20, "succeeded", 1, Some("w"), None);
    let job = row(
        &h,
        n,
        "succeeded",
        1,
        Some(serde_json::json!({"by": "w", "attempt": 1})),
    );
    let mut obs = Obs::default();
    obs.ack(plan::key(n as u64), h.id, true);
    let f = check(&[job], &h.events, &obs, &cx());
    assert!(
        f.violations.contains_key("outcome_vs_handler"),
        "{:?}",
        f.violations
    );

    let mut h2 = H::new();
    h2.ev(10, "claimed", 1, Some("w"), None).ev(
        20,
        "failed",
        1,
        Some("w"),
        Some(plan::FATAL_MESSAGE),
    );
    let mut job2 = row(&h2, n, "failed", 1, None);
    job2.key = Some(plan::key(n as u64));
    let f = check(&[job2], &h2.events, &obs_for(&h2, n), &cx());
    assert!(f.passed(), "{:?}", f.violations);
    assert_eq!(f.stats.failed_by["fatal"], 1);
}

fn obs_for(h: &H, n: i64) -> Obs {
    let mut obs = Obs::default();
    obs.ack(plan::key(n as u64), h.id, true);
    obs
}

#[test]
fn error_codes_are_judged() {
    let mut obs = Obs::default();
    obs.error(Side::Worker, "unavailable");
    obs.error(Side::Worker, "transport");
    obs.error(Side::Producer, "lease_lost");
    let f = check(&[], &[], &obs, &cx());
    assert!(f.passed(), "{:?}", f.violations);
    obs.error(Side::Producer, "internal");
    obs.error(Side::Worker, "decode");
    obs.error(Side::Worker, "unauthenticated");
    let f = check(&[], &[], &obs, &cx());
    for v in [
        "internal_errors",
        "undocumented_errors",
        "unexpected_errors",
    ] {
        assert!(f.violations.contains_key(v), "{v}: {:?}", f.violations);
    }
}

/// A job of the limited queue with `key`, one attempt per span:
/// claimed at `.0`, ended by `.2` at `.1` (or still running).
fn limited(key: Option<&str>, spans: &[(i64, Option<(i64, &str)>)]) -> (JobRow, Vec<EventRow>) {
    let mut h = H::new();
    let mut attempt = 0;
    let mut state = "queued";
    for &(start, end) in spans {
        attempt += 1;
        h.ev(start, "claimed", attempt, Some("w"), None);
        state = "running";
        if let Some((at, ev)) = end {
            h.ev(at, ev, attempt, Some("w"), None);
            state = match ev {
                "succeeded" | "failed" => ev,
                "lease_lost" => "running",
                _ => "queued",
            };
        }
    }
    let job = JobRow {
        id: h.id,
        key: None,
        queue: plan::LIMITED_QUEUE.to_owned(),
        concurrency_key: key.map(str::to_owned),
        state: state.to_owned(),
        attempt,
        max_attempts: 5,
        n: None,
        run_at: t(0),
        result: None,
        depends_on: Vec::new(),
        dependency_failure: DependencyFailure::Cancel,
    };
    (job, h.events)
}

fn limits_of(stories: &[(JobRow, Vec<EventRow>)], c: &Context) -> Findings {
    let jobs: Vec<JobRow> = stories.iter().map(|s| s.0.clone()).collect();
    let mut history: HashMap<Uuid, Vec<&EventRow>> = HashMap::new();
    for (_, events) in stories {
        for e in events {
            history.entry(e.job_id).or_default().push(e);
        }
    }
    let mut f = Findings::default();
    check_limits(&mut f, &jobs, &history, c);
    f
}

#[test]
fn an_end_stamped_before_its_claim_is_flagged_unless_the_clock_stepped_back() {
    let story = limited(Some("k"), &[(1_000, Some((997, "retry_scheduled")))]);
    let f = limits_of(std::slice::from_ref(&story), &cx());
    assert!(
        f.violations.contains_key("history_mismatch"),
        "{:?}",
        f.violations
    );
    let stepped = Context {
        clock_back_us: 5_000,
        ..cx()
    };
    let f = limits_of(&[story], &stepped);
    assert!(
        !f.violations.contains_key("history_mismatch"),
        "{:?}",
        f.violations
    );
}

#[test]
fn limits_that_held_pass_and_show_their_maxima() {
    // Six at once, two per key; a slot freed at 1 000 is taken at
    // 1 000 exactly (half-open attempts); retries and snoozes end
    // attempts too.
    let mut s = Vec::new();
    for i in 0..3 {
        let key = format!("k{i}");
        s.push(limited(Some(&key), &[(0, Some((1_000, "succeeded")))]));
        s.push(limited(
            Some(&key),
            &[
                (10, Some((500, "retry_scheduled"))),
                (1_000, Some((1_500, "snoozed"))),
                (2_500, Some((2_600, "failed"))),
            ],
        ));
    }
    for _ in 0..2 {
        s.push(limited(None, &[(1_000, Some((1_200, "succeeded")))]));
    }
    // Reaped on its last attempt.
    let mut reaped = limited(Some("k0"), &[(1_000, Some((3_000, "lease_expired")))]);
    reaped.0.state = "failed".to_owned();
    s.push(reaped);
    let f = limits_of(&s, &cx());
    assert!(f.passed(), "{:?}", f.violations);
    let l = &f.stats.limited;
    assert_eq!((l.jobs, l.claims, l.keys, l.unkeyed), (9, 15, 3, 2));
    assert_eq!((l.max_running, l.max_key_running), (6, 2));
    // [10, 500) with six running and [1 000, 1 200) with six.
    assert_eq!(l.at_max_running_us, 490_000 + 200_000);
    assert_eq!((l.max_running_reached, l.key_max_reached), (2, 5));
    // [10, 1 010): three claims at 10 and six at 1 000.
    assert_eq!(l.max_window_claims, 9);
}

#[test]
fn too_many_running_at_once_is_caught() {
    let mut s: Vec<_> = (0..6)
        .map(|i| {
            limited(
                Some(&format!("k{i}")),
                &[(i * 10, Some((1_000, "succeeded")))],
            )
        })
        .collect();
    // Its lease_lost does not end its attempt: it still runs at 500.
    s.push(limited(None, &[(100, Some((200, "lease_lost")))]));
    let f = limits_of(&s, &cx());
    assert_eq!(
        f.violations["limit_max_running"].count, 1,
        "{:?}",
        f.violations
    );
    assert_eq!(f.stats.limited.max_running, 7);
    // A job still running at the end runs forever.
    let mut s: Vec<_> = (0..6)
        .map(|i| limited(None, &[(10_000 + i, Some((20_000, "succeeded")))]))
        .collect();
    s.push(limited(None, &[(0, None)]));
    let f = limits_of(&s, &cx());
    assert!(
        f.violations.contains_key("limit_max_running"),
        "{:?}",
        f.violations
    );
    assert!(!f.violations.contains_key("limit_key_max_running"));
}

#[test]
fn too_many_running_of_one_key_is_caught() {
    let s: Vec<_> = (0..3)
        .map(|i| limited(Some("hot"), &[(i * 100, Some((1_000 + i, "succeeded")))]))
        .collect();
    let f = limits_of(&s, &cx());
    let v = &f.violations["limit_key_max_running"];
    assert_eq!(v.count, 1);
    assert!(v.examples[0].contains("key hot"), "{v:?}");
    assert_eq!(f.stats.limited.max_key_running, 3);
    assert!(!f.violations.contains_key("limit_max_running"));
}

#[test]
fn too_many_claims_in_a_window_are_caught() {
    let mut c = cx();
    c.limits.max_running = 100;
    // 21 claims: the 21st exactly one period after the first is in the
    // next window.
    let at = |i: i64| if i == 20 { 1_000 } else { i * 10 };
    let s: Vec<_> = (0..21)
        .map(|i| limited(None, &[(at(i), Some((at(i) + 1, "succeeded")))]))
        .collect();
    let f = limits_of(&s, &c);
    assert!(f.passed(), "{:?}", f.violations);
    assert_eq!(f.stats.limited.max_window_claims, 20);
    assert!(f.stats.limited.full_windows >= 1);
    let s: Vec<_> = (0..21)
        .map(|i| limited(None, &[(i * 49, Some((i * 49 + 1, "succeeded")))]))
        .collect();
    let f = limits_of(&s, &c);
    assert_eq!(f.violations["limit_rate"].count, 1, "{:?}", f.violations);
    assert_eq!(f.stats.limited.max_window_claims, 21);
}

#[test]
fn limits_that_never_bound_and_misplaced_jobs_are_caught() {
    // 200 claims one at a time, 10 s apart: no limit ever bound.
    let s: Vec<_> = (0..200)
        .map(|i| {
            limited(
                Some("k"),
                &[(i * 10_000, Some((i * 10_000 + 5, "succeeded")))],
            )
        })
        .collect();
    let f = limits_of(&s, &cx());
    assert_eq!(
        f.violations["limits_not_exercised"].count, 3,
        "{:?}",
        f.violations
    );
    // A job of the limited queue still queued; a job sent there found
    // on the main queue.
    let (mut job, events) = limited(None, &[(0, Some((10, "retry_scheduled")))]);
    job.state = "queued".to_owned();
    let mut c = cx();
    c.limited_per_mille = 1_000;
    let n = (0..).find(|&n| plan::is_limited(1, n, 1_000)).unwrap();
    let (mut moved, _) = limited(None, &[]);
    moved.n = Some(n as i64);
    moved.queue = plan::QUEUE.to_owned();
    let f = limits_of(&[(job, events), (moved, Vec::new())], &c);
    assert_eq!(f.violations["limited_jobs"].count, 2, "{:?}", f.violations);
}

#[test]
fn a_stop_without_any_lease_lost_means_fencing_was_not_exercised() {
    let mut c = cx();
    c.stops_with_jobs = 1;
    let f = check(&[], &[], &Obs::default(), &c);
    assert!(f.violations.contains_key("fencing_not_exercised"));
    let mut c = cx();
    c.cuts_with_jobs = 1;
    let f = check(&[], &[], &Obs::default(), &c);
    assert!(f.violations.contains_key("fencing_not_exercised"));
}

#[test]
fn checks_are_made_by_mode() {
    assert!(made("lost", false, false) && made("lost", true, false));
    assert!(!made(FAILOVER_CHECK, false, true) && made(FAILOVER_CHECK, true, false));
    for name in leadership::CHECKS.iter().chain([&RECOVERY_CHECK]) {
        assert!(
            made(name, false, true) && !made(name, true, false),
            "{name}"
        );
        assert!(CHECKS.iter().any(|(n, _)| n == name), "{name} is listed");
    }
}

#[test]
fn work_after_the_failover_must_reach_every_replica() {
    // Workers w0 and w2 talk to replica 0, w1 to replica 1 (slot % 2).
    let mut h = H::new();
    h.ev(10, "claimed", 1, Some("w0g1.m"), None)
        .ev(20, "succeeded", 1, Some("w0g1.m"), None)
        .ev(1_000, "claimed", 2, Some("w2g3.s"), None)
        .ev(1_100, "succeeded", 2, Some("w2g3.s"), None)
        .ev(1_200, "claimed", 3, Some("w1g1.m"), None);
    let mut c = cx();
    c.failover = Some((t(500), 2));
    let f = check(&[], &h.events, &Obs::default(), &c);
    let after = f.stats.after_failover.as_ref().unwrap();
    assert_eq!(
        (after.claims.clone(), after.successes.clone()),
        (vec![1, 1], vec![1, 0])
    );
    assert_eq!(after.events, 3);
    // Replica 1 claimed but completed nothing after the promotion.
    assert_eq!(f.violations[FAILOVER_CHECK].count, 1, "{:?}", f.violations);

    h.ev(1_300, "succeeded", 3, Some("w1g1.m"), None);
    let f = check(&[], &h.events, &Obs::default(), &c);
    assert!(
        !f.violations.contains_key(FAILOVER_CHECK),
        "{:?}",
        f.violations
    );
    // Work from before the promotion does not count: after 1.25 s only
    // replica 1's completion is left.
    c.failover = Some((t(1_250), 2));
    let f = check(&[], &h.events, &Obs::default(), &c);
    assert_eq!(f.violations[FAILOVER_CHECK].count, 2, "{:?}", f.violations);
    // Without --failover the check is not made.
    let f = check(&[], &h.events, &Obs::default(), &cx());
    assert!(f.stats.after_failover.is_none());
    assert!(!f.violations.contains_key(FAILOVER_CHECK));
}

/// What a stream would have delivered of these history rows.
fn streamed(rows: &[&EventRow]) -> Vec<StreamedEvent> {
    rows.iter()
        .map(|e| StreamedEvent {
            job_id: e.job_id,
            event: e.event.clone(),
            attempt: e.attempt,
            // The wire cuts the time to milliseconds.
            at: DateTime::from_timestamp_millis(e.at.timestamp_millis()).unwrap(),
            worker_id: e.worker_id.clone(),
            detail: e.detail.clone(),
        })
        .collect()
}

fn stream_findings(history: &[EventRow], run: StreamRun) -> Findings {
    let mut events = history.to_vec();
    events.sort_by_key(|e| (e.job_id, e.seq));
    let c = Context {
        stream: Some(run),
        ..cx()
    };
    let mut f = Findings::default();
    stream::check_stream(&mut f, &events, &c);
    f
}

#[test]
fn stream_saw_the_history() {
    let mut a = H::new();
    a.ev(10, "claimed", 1, Some("w1"), None)
        .ev(20, "succeeded", 1, Some("w1"), None);
    let mut b = H::new();
    b.ev(15, "claimed", 1, Some("w2"), None)
        .ev(25, "retry_scheduled", 1, Some("w2"), Some("boom"));
    let history: Vec<EventRow> = a.events.iter().chain(&b.events).cloned().collect();
    // Interleaved across jobs, each job's in order: the stream's promise.
    let order = [
        &a.events[0],
        &b.events[0],
        &a.events[1],
        &b.events[1],
        &b.events[2],
        &a.events[2],
    ];
    let everything: HashMap<Uuid, i64> = [(a.id, 3), (b.id, 3)].into();
    let run = |seen: Vec<StreamedEvent>, required: HashMap<Uuid, i64>| StreamRun {
        events: seen,
        required,
        caught_up: Some(std::time::Duration::from_millis(5)),
        ..StreamRun::default()
    };
    let f = stream_findings(&history, run(streamed(&order), everything.clone()));
    assert!(f.passed(), "{:?}", f.violations);
    let s = f.stats.stream.unwrap();
    assert_eq!((s.seen, s.required, s.jobs, s.missing), (6, 6, 2, 0));

    // A lost event, a duplicate, a swap, an event from nowhere: each fails.
    let mut lost = order.to_vec();
    lost.remove(3);
    let f = stream_findings(&history, run(streamed(&lost), everything.clone()));
    assert_eq!(f.stats.stream.as_ref().unwrap().missing, 1);
    assert_eq!(f.violations[STREAM_CHECK].count, 1, "{:?}", f.violations);
    let mut twice = order.to_vec();
    twice.push(&b.events[2]);
    let f = stream_findings(&history, run(streamed(&twice), everything.clone()));
    assert_eq!(f.stats.stream.as_ref().unwrap().duplicated, 1);
    let mut swapped = order.to_vec();
    swapped.swap(1, 3);
    let f = stream_findings(&history, run(streamed(&swapped), everything.clone()));
    let s = f.stats.stream.as_ref().unwrap();
    assert_eq!((s.out_of_order, s.missing, s.duplicated), (1, 0, 0));
    let mut forged = streamed(&order);
    forged[5].attempt = 9;
    let f = stream_findings(&history, run(forged, everything.clone()));
    let s = f.stats.stream.as_ref().unwrap();
    assert_eq!((s.unknown, s.missing), (1, 1));

    // Events written after the reader caught up need not be seen, but
    // those seen come in order.
    let early: HashMap<Uuid, i64> = [(a.id, 3), (b.id, 2)].into();
    let before = [order[0], order[1], order[2], order[3], order[5]];
    let f = stream_findings(&history, run(streamed(&before), early.clone()));
    assert!(f.passed(), "{:?}", f.violations);
    let s = f.stats.stream.unwrap();
    assert_eq!((s.required, s.later, s.later_seen), (5, 1, 0));
    let f = stream_findings(&history, run(streamed(&order), early));
    assert_eq!(f.stats.stream.unwrap().later_seen, 1);

    // A gap, an error, or a reader that never caught up fail the check.
    let mut gap = run(streamed(&order), everything.clone());
    gap.gaps = 1;
    assert!(!stream_findings(&history, gap).passed());
    let mut err = run(streamed(&order), everything.clone());
    err.errors.push("401 unauthorized".into());
    assert!(!stream_findings(&history, err).passed());
    let mut late = run(streamed(&order), everything);
    late.caught_up = None;
    assert!(!stream_findings(&history, late).passed());
}
