//! The dependency checks, on crafted histories whose `seq` is drawn from one
//! sequence across jobs, as the database draws it.

use super::*;
use crate::obs::ClaimObs;
use crate::plan::Plan;

fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
}

/// The first `k` job numbers (seed 1) whose plan is `want`.
fn numbers(k: usize, want: impl Fn(Plan) -> bool) -> Vec<i64> {
    (0..)
        .filter(|&n| want(plan::plan(1, n as u64)))
        .take(k)
        .collect()
}

/// Jobs, their histories (one `seq` for all), and what the workers printed.
#[derive(Default)]
struct Story {
    seq: i64,
    jobs: Vec<JobRow>,
    events: Vec<EventRow>,
    obs: Obs,
    waits: HashMap<u64, Wait>,
}

impl Story {
    /// A job `n` enqueued at `ms`, waiting for `deps` (jobs of the story)
    /// with `rule`, as its producer sent it.
    fn job(&mut self, ms: i64, n: i64, deps: &[Uuid], rule: DependencyFailure) -> Uuid {
        let id = Uuid::now_v7();
        let on: Vec<u64> = deps
            .iter()
            .map(|d| self.jobs.iter().find(|j| j.id == *d).unwrap().n.unwrap() as u64)
            .collect();
        if !on.is_empty() {
            self.waits.insert(n as u64, Wait { on, rule });
        }
        self.jobs.push(JobRow {
            id,
            key: Some(plan::key(n as u64)),
            queue: plan::plan(1, n as u64).queue().to_owned(),
            concurrency_key: None,
            state: "queued".to_owned(),
            attempt: 0,
            max_attempts: plan::plan(1, n as u64).max_attempts(),
            n: Some(n),
            run_at: t(ms),
            result: None,
            depends_on: deps.to_vec(),
            dependency_failure: rule,
        });
        self.obs.ack(plan::key(n as u64), id, true);
        self.ev(id, ms, "enqueued", 0, None, None);
        id
    }

    fn ev(
        &mut self,
        id: Uuid,
        ms: i64,
        event: &str,
        attempt: i32,
        w: Option<&str>,
        d: Option<&str>,
    ) {
        self.seq += 1;
        self.events.push(EventRow {
            job_id: id,
            seq: self.seq,
            at: t(ms),
            event: event.to_owned(),
            attempt,
            worker_id: w.map(str::to_owned),
            detail: d.map(str::to_owned),
        });
    }

    fn row(&mut self, id: Uuid) -> &mut JobRow {
        self.jobs.iter_mut().find(|j| j.id == id).unwrap()
    }

    /// Claimed by `w` at `ms` (the worker hears of it 1 ms later).
    fn claim(&mut self, id: Uuid, ms: i64, w: &str) {
        self.ev(id, ms, "claimed", 1, Some(w), None);
        self.obs.claims.insert(
            Uuid::new_v4(),
            ClaimObs {
                job: id,
                attempt: 1,
                worker: w.to_owned(),
                at_us: us(t(ms + 1)),
            },
        );
        self.row(id).attempt = 1;
    }

    fn succeed(&mut self, id: Uuid, ms: i64, w: &str) {
        self.ev(id, ms, "succeeded", 1, Some(w), None);
        let n = self.row(id).n;
        let row = self.row(id);
        row.state = "succeeded".to_owned();
        row.result = Some(serde_json::json!({"n": n, "by": w, "attempt": 1}));
    }

    fn fail_fatally(&mut self, id: Uuid, ms: i64, w: &str) {
        self.ev(id, ms, "failed", 1, Some(w), Some(plan::FATAL_MESSAGE));
        self.row(id).state = "failed".to_owned();
    }

    /// Cancelled at `ms` by dependency `dep`, which ended `state`.
    fn cancel(&mut self, id: Uuid, ms: i64, dep: Uuid, state: &str) {
        let detail = format!(r#"{{"dependency":"{dep}","state":"{state}"}}"#);
        self.ev(id, ms, "cancelled", 0, None, Some(&detail));
        self.row(id).state = "cancelled".to_owned();
    }

    fn release(&mut self, id: Uuid, ms: i64) {
        self.ev(id, ms, "released", 0, None, None);
    }

    fn check(&self) -> Findings {
        let mut events = self.events.clone();
        events.sort_by_key(|e| (e.job_id, e.seq));
        let cx = Context {
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
            waits: self.waits.clone(),
            stream: None,
        };
        check(&self.jobs, &events, &self.obs, &cx)
    }
}

fn ok(k: usize) -> Vec<i64> {
    numbers(k, |p| matches!(p, Plan::Ok { .. }))
}

fn fatal() -> i64 {
    numbers(1, |p| p == Plan::Fatal)[0]
}

/// A parent that succeeds and a child after it; a fatal parent, a
/// `cancel` child (and its `cancel` child) cancelled through the graph, a
/// `run` child released by the failure, and a later single that waits for
/// the failed parent and is cancelled at enqueue.
fn graphs() -> (Story, [Uuid; 7]) {
    use DependencyFailure::{Cancel, Run};
    let n = ok(6);
    let mut s = Story::default();
    let p = s.job(0, n[0], &[], Cancel);
    let c = s.job(0, n[1], &[p], Cancel);
    let f = s.job(0, fatal(), &[], Cancel);
    let x = s.job(0, n[2], &[f], Cancel);
    let z = s.job(0, n[3], &[x], Cancel);
    let y = s.job(0, n[4], &[f], Run);
    s.claim(p, 10, "w1");
    s.claim(f, 10, "w2");
    s.succeed(p, 20, "w1");
    s.release(c, 20);
    s.fail_fatally(f, 25, "w2");
    s.cancel(x, 25, f, "failed");
    s.cancel(z, 25, x, "cancelled");
    s.release(y, 25);
    s.claim(c, 30, "w1");
    s.claim(y, 30, "w2");
    s.succeed(c, 40, "w1");
    s.succeed(y, 40, "w2");
    let w = s.job(50, n[5], &[f], Cancel);
    s.cancel(w, 50, f, "failed");
    (s, [p, c, f, x, z, y, w])
}

#[test]
fn graphs_that_ran_as_their_rules_say_pass() {
    let (s, _) = graphs();
    let f = s.check();
    assert!(f.passed(), "{:?}", f.violations);
    let g = &f.stats.graphs;
    assert_eq!((g.jobs, g.edges, g.waits_sent), (5, 5, 5));
    assert_eq!((g.rules["cancel"], g.rules["run"]), (4, 1));
    assert_eq!((g.released, g.ran_after_failure), (2, 1));
    assert_eq!((g.cancelled_by_dependency, g.cancelled_at_enqueue), (3, 1));
    assert_eq!(f.stats.states["cancelled"], 3);
}

#[test]
fn a_claim_before_the_dependency_ended_is_caught() {
    let (mut s, [p, c, ..]) = graphs();
    // The child's claim moved before its parent's success: in the
    // history's order, and as its worker heard of it.
    let parent_end = s
        .events
        .iter()
        .position(|e| e.job_id == p && e.event == "succeeded")
        .unwrap();
    let claim = s
        .events
        .iter()
        .position(|e| e.job_id == c && e.event == "claimed")
        .unwrap();
    let parent_seq = s.events[parent_end].seq;
    s.events[claim].seq = parent_seq - 1;
    s.events[claim].at = t(-100);
    for o in s.obs.claims.values_mut().filter(|o| o.job == c) {
        o.at_us = us(t(-100));
    }
    let f = s.check();
    let v = &f.violations["dependency_order"];
    assert_eq!(v.count, 2, "{:?}", v.examples);
    assert!(v.examples.iter().any(|e| e.contains("received its claim")));
    assert!(v.examples.iter().any(|e| e.contains("before dependency")));
}

#[test]
fn a_cancel_job_that_ran_after_a_failure_is_caught() {
    let (mut s, [.., f, x, _, _, _]) = graphs();
    // x runs instead of being cancelled (and z, below it, is still
    // cancelled, now by a dependency that did not end so).
    s.events
        .retain(|e| !(e.job_id == x && e.event == "cancelled"));
    s.release(x, 25);
    s.claim(x, 30, "w3");
    s.succeed(x, 40, "w3");
    let found = s.check();
    for v in ["dependency_order", "dependency_cancel"] {
        assert!(
            found.violations.contains_key(v),
            "{v}: {:?}",
            found.violations
        );
    }
    let _ = f;
}

#[test]
fn a_job_left_waiting_is_caught() {
    let (mut s, [.., x, z, _, _]) = graphs();
    s.events
        .retain(|e| !(e.job_id == x && e.event == "cancelled"));
    s.row(x).state = "waiting".to_owned();
    let f = s.check();
    assert_eq!(f.violations["dependency_left_waiting"].count, 1);
    // x itself (not cancelled by its failed parent), and z, cancelled
    // through x, which never ended.
    assert_eq!(
        f.violations["dependency_cancel"].count, 2,
        "{:?}",
        f.violations
    );
    assert!(!f.violations.contains_key("history_mismatch"));
    let _ = z;
}

#[test]
fn edges_and_cancellations_must_be_the_ones_sent() {
    let (mut s, [p, c, _, _, _, y, _]) = graphs();
    // c's stored edge is not the one sent; y (run) is cancelled by the
    // failure instead of running.
    s.row(c).depends_on = vec![y];
    let n_y = s.row(y).n.unwrap() as u64;
    s.waits.remove(&n_y);
    s.row(y).depends_on.clear();
    let f = s.check();
    assert!(
        f.violations.contains_key("dependency_graph"),
        "{:?}",
        f.violations
    );
    let _ = p;

    let (mut s, [.., f_id, _, _, y, _]) = graphs();
    s.events.retain(|e| e.job_id != y || e.event == "enqueued");
    s.row(y).state = "queued".to_owned();
    s.cancel(y, 25, f_id, "failed");
    let found = s.check();
    assert!(
        found.violations["dependency_cancel"]
            .examples
            .iter()
            .any(|e| e.contains("(run")),
        "{:?}",
        found.violations
    );
}

#[test]
fn graphs_that_never_failed_are_not_exercised() {
    let (s, _) = graphs();
    let mut events = s.events.clone();
    events.sort_by_key(|e| (e.job_id, e.seq));
    let mut cx = Context {
        seed: 1,
        jobs: 5_000,
        now: t(100_000),
        stops_with_jobs: 0,
        cuts_with_jobs: 0,
        limited_per_mille: 0,
        limits: plan::LIMITS,
        failover: None,
        partitions: None,
        clock_back_us: 0,
        waits: s.waits.clone(),
        stream: None,
    };
    let f = check(&s.jobs, &events, &s.obs, &cx);
    assert!(!f.violations.contains_key("dependencies_not_exercised"));
    // Only the successful graph.
    let keep: Vec<Uuid> = s.jobs.iter().take(2).map(|j| j.id).collect();
    let jobs: Vec<JobRow> = s.jobs.iter().take(2).cloned().collect();
    events.retain(|e| keep.contains(&e.job_id));
    cx.waits
        .retain(|n, _| jobs.iter().any(|j| j.n == Some(*n as i64)));
    let f = check(&jobs, &events, &s.obs, &cx);
    assert_eq!(f.violations["dependencies_not_exercised"].count, 2);
}
