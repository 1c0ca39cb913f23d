//! Model-based test: random operation sequences run against a small
//! in-memory reference model and the backend, comparing every observable
//! result after every step.
//!
//! The model knows no clock: a queued job is either *ready* (run_at ≤ now)
//! or *not ready* (run_at far in the future). Queues use backoff 0/0, so a
//! retry is ready at once, and "not now" is always a far-future delay.
//! Claims are checked by validity (count = min(limit, ready), every claimed
//! job ready, no unclaimed ready job of higher priority) and the model then
//! adopts the backend's choice, because equal timestamps may order either
//! way at millisecond precision.
//!
//! Some new jobs wait for an earlier job (one dependency each, `cancel` or
//! `run`): the model settles every waiting job after every step, by the
//! rule of invariant 16, whichever operation ended its dependency.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;
use tether_core::lifecycle::{fail_outcome, lapse_outcome, FailOutcome, Report};
use tether_core::{
    Backoff, ClaimRequest, Completion, DependencyFailure, Error, Failure, Heartbeat, JobFilter,
    JobState, LeaseToken, NewJob, QueueConfigPatch, RunAt,
};
use uuid::Uuid;

use crate::TestDb;

/// "Not ready": a delay that never passes during a test.
const FAR_MS: i64 = 1_000_000_000;
/// Lease length of model claims: never lapses by itself during a run.
const MODEL_TTL_MS: i64 = 3_600_000;
const QUEUES: [&str; 2] = ["mq0", "mq1"];

#[derive(Debug, Clone)]
struct NewSpec {
    queue: u8,
    priority: i16,
    delayed: bool,
    max_attempts: i32,
    unique: Option<u8>,
    idem: Option<u8>,
    /// Waits for an earlier job (picked among those before the batch),
    /// with `run` when true.
    after: Option<(Index, bool)>,
}

/// Which token an operation presents.
#[derive(Debug, Clone, Copy)]
enum Tok {
    /// The job's latest token (valid while it runs).
    Latest,
    /// The token of the claim before the latest (always stale).
    Older,
    /// A token nobody was given.
    Random,
}

#[derive(Debug, Clone, Copy)]
enum FailKind {
    Plain,
    Fatal,
    RetryAfterNow,
    RetryAfterFar,
    Cancelled,
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue(Vec<NewSpec>),
    Claim { queue: u8, limit: u32 },
    Heartbeat(Index, Tok),
    Complete(Index, Tok),
    CompleteMany(Vec<(Index, Tok)>),
    Fail(Index, Tok, FailKind),
    Snooze { job: Index, tok: Tok, far: bool },
    Cancel(Index),
    Replay(Index),
    Lapse(Index),
    Reap,
    MakeDue(Index),
    Pause(u8),
    Resume(u8),
}

fn spec() -> impl Strategy<Value = NewSpec> {
    (
        0u8..2,
        -2i16..=2,
        prop::bool::weighted(0.25),
        1i32..=3,
        prop::option::weighted(0.35, 0u8..2),
        prop::option::weighted(0.25, 0u8..3),
        prop::option::weighted(0.3, (any::<Index>(), any::<bool>())),
    )
        .prop_map(
            |(queue, priority, delayed, max_attempts, unique, idem, after)| NewSpec {
                queue,
                priority,
                delayed,
                max_attempts,
                unique,
                idem,
                after,
            },
        )
}

fn tok() -> impl Strategy<Value = Tok> {
    prop_oneof![6 => Just(Tok::Latest), 1 => Just(Tok::Older), 1 => Just(Tok::Random)]
}

fn fail_kind() -> impl Strategy<Value = FailKind> {
    prop_oneof![
        3 => Just(FailKind::Plain),
        1 => Just(FailKind::Fatal),
        1 => Just(FailKind::RetryAfterNow),
        1 => Just(FailKind::RetryAfterFar),
        1 => Just(FailKind::Cancelled),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::collection::vec(spec(), 1..=3).prop_map(Op::Enqueue),
        5 => (0u8..2, 1u32..=4).prop_map(|(queue, limit)| Op::Claim { queue, limit }),
        1 => (any::<Index>(), tok()).prop_map(|(i, t)| Op::Heartbeat(i, t)),
        2 => (any::<Index>(), tok()).prop_map(|(i, t)| Op::Complete(i, t)),
        1 => prop::collection::vec((any::<Index>(), tok()), 1..=3).prop_map(Op::CompleteMany),
        3 => (any::<Index>(), tok(), fail_kind()).prop_map(|(i, t, k)| Op::Fail(i, t, k)),
        2 => (any::<Index>(), tok(), any::<bool>())
            .prop_map(|(job, tok, far)| Op::Snooze { job, tok, far }),
        1 => any::<Index>().prop_map(Op::Cancel),
        2 => any::<Index>().prop_map(Op::Replay),
        2 => any::<Index>().prop_map(Op::Lapse),
        1 => Just(Op::Reap),
        1 => any::<Index>().prop_map(Op::MakeDue),
        1 => (0u8..2).prop_map(Op::Pause),
        1 => (0u8..2).prop_map(Op::Resume),
    ]
}

#[derive(Debug, Clone)]
struct MJob {
    id: Uuid,
    queue: u8,
    priority: i16,
    state: JobState,
    attempt: i32,
    max_attempts: i32,
    ready: bool,
    cancel_requested: bool,
    unique: Option<u8>,
    idem: Option<u8>,
    tokens: Vec<LeaseToken>,
    /// The token the job's row carries: the latest claim's, kept after a
    /// report ends the attempt, dropped by the reaper and by replay.
    kept: Option<LeaseToken>,
    /// The digest of the report that ended the attempt of `kept`.
    ended_by: Option<String>,
    lapsed: bool,
    /// The job it waits for (an index of the model) and its rule.
    dep: Option<(usize, DependencyFailure)>,
}

impl MJob {
    fn active(&self) -> bool {
        matches!(
            self.state,
            JobState::Waiting | JobState::Queued | JobState::Running
        )
    }

    fn token(&self, t: Tok) -> LeaseToken {
        let random = || LeaseToken(Uuid::new_v4());
        match t {
            Tok::Latest => self.tokens.last().copied().unwrap_or_else(random),
            Tok::Older if self.tokens.len() >= 2 => self.tokens[self.tokens.len() - 2],
            Tok::Older | Tok::Random => random(),
        }
    }

    fn owns(&self, token: LeaseToken) -> bool {
        self.state == JobState::Running && self.tokens.last() == Some(&token)
    }

    /// What `report` with `token`, which does not own the job, is answered:
    /// `None` for a repeat of the report that ended the attempt (the job
    /// as it stands, nothing changed), else the error code — a different
    /// report with that token is `invalid_state`, any other token
    /// `lease_lost`.
    fn refusal(&self, token: LeaseToken, report: Report<'_>) -> Option<&'static str> {
        if self.state == JobState::Running || self.kept != Some(token) {
            Some("lease_lost")
        } else if self.ended_by == Some(report.digest()) {
            None
        } else {
            Some("invalid_state")
        }
    }

    /// The job leaves `running` for `state` (lease dropped).
    fn settle(&mut self, state: JobState) {
        self.state = state;
        self.lapsed = false;
        if state == JobState::Queued {
            self.ready = true;
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    jobs: Vec<MJob>,
    paused: [bool; 2],
    tokens_seen: HashSet<Uuid>,
}

impl Model {
    /// Moves every waiting job whose dependency has ended: queued when it
    /// succeeded (or ended at all, with `run`), cancelled when it failed or
    /// was cancelled (with `cancel`), again until nothing moves (a
    /// cancellation cascades down a chain).
    fn settle_waiting(&mut self) {
        loop {
            let mut moved = false;
            for i in 0..self.jobs.len() {
                let Some((d, rule)) = self.jobs[i].dep else {
                    continue;
                };
                if self.jobs[i].state != JobState::Waiting {
                    continue;
                }
                let next = match self.jobs[d].state {
                    JobState::Succeeded => JobState::Queued,
                    JobState::Failed | JobState::Cancelled => match rule {
                        DependencyFailure::Run => JobState::Queued,
                        DependencyFailure::Cancel => JobState::Cancelled,
                    },
                    _ => continue,
                };
                self.jobs[i].state = next;
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }
}

type Check = std::result::Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

fn expect_err_code<T: std::fmt::Debug>(r: tether_core::Result<T>, code: &str) -> Check {
    match r {
        Ok(v) => Err(format!("expected error {code}, got Ok({v:?})")),
        Err(e) if e.code() == code => Ok(()),
        Err(e) => Err(format!("expected error {code}, got [{}] {e}", e.code())),
    }
}

fn expect_ok<T>(r: tether_core::Result<T>, what: &str) -> std::result::Result<T, String> {
    r.map_err(|e| format!("{what}: expected success, got [{}] {e}", e.code()))
}

/// A repeated report: answered with the job as it stands (in the model's
/// state), nothing changed.
fn expect_repeat(r: tether_core::Result<tether_core::Job>, state: JobState, what: &str) -> Check {
    let job = expect_ok(r, &format!("repeated {what}"))?;
    ensure!(
        job.state == state,
        "repeated {what} answered a job {}, model {state}",
        job.state
    );
    Ok(())
}

fn failure_of(kind: FailKind) -> Failure {
    let base = Failure {
        error: format!("model {kind:?}"),
        ..Failure::default()
    };
    match kind {
        FailKind::Plain => base,
        FailKind::Fatal => Failure {
            fatal: true,
            ..base
        },
        FailKind::RetryAfterNow => Failure {
            retry_after_ms: Some(0),
            ..base
        },
        FailKind::RetryAfterFar => Failure {
            retry_after_ms: Some(FAR_MS),
            ..base
        },
        FailKind::Cancelled => Failure {
            cancelled: true,
            ..base
        },
    }
}

struct Case<'a> {
    db: &'a TestDb,
    tenant: String,
    m: Model,
}

impl Case<'_> {
    fn pick(&self, i: &Index) -> Option<usize> {
        (!self.m.jobs.is_empty()).then(|| i.index(self.m.jobs.len()))
    }

    async fn step(&mut self, op: &Op) -> Check {
        let e = &self.db.engine;
        let t = self.tenant.as_str();
        match op {
            Op::Enqueue(specs) => {
                // Dependencies name jobs from before the batch.
                let before = self.m.jobs.len();
                let deps: Vec<Option<(usize, DependencyFailure)>> = specs
                    .iter()
                    .map(|s| {
                        let (i, run) = s.after.as_ref()?;
                        (before > 0).then(|| {
                            let rule = match run {
                                true => DependencyFailure::Run,
                                false => DependencyFailure::Cancel,
                            };
                            (i.index(before), rule)
                        })
                    })
                    .collect();
                let news: Vec<NewJob> = specs
                    .iter()
                    .zip(&deps)
                    .map(|(s, dep)| {
                        let mut n = NewJob::new(QUEUES[s.queue as usize], "mk", json!({}))
                            .priority(s.priority)
                            .max_attempts(s.max_attempts);
                        if s.delayed {
                            n = n.run_at(RunAt::Delay(FAR_MS));
                        }
                        if let Some(u) = s.unique {
                            n = n.unique_key(format!("u{u}"));
                        }
                        if let Some(k) = s.idem {
                            n = n.idempotency_key(format!("i{k}"));
                        }
                        if let Some((d, rule)) = dep {
                            n = n.after(self.m.jobs[*d].id).dependency_failure(*rule);
                        }
                        n
                    })
                    .collect();
                let out = expect_ok(e.enqueue_many(t, &news).await, "enqueue")?;
                ensure!(
                    out.len() == specs.len(),
                    "{} answers for {} jobs",
                    out.len(),
                    specs.len()
                );
                let mut created = Vec::new();
                for (k, ((s, got), dep)) in specs.iter().zip(&out).zip(&deps).enumerate() {
                    let by_idem = s
                        .idem
                        .and_then(|i| self.m.jobs.iter().position(|j| j.idem == Some(i)));
                    let by_unique = s.unique.and_then(|u| {
                        self.m
                            .jobs
                            .iter()
                            .position(|j| j.unique == Some(u) && j.active())
                    });
                    match by_idem.or(by_unique) {
                        Some(idx) => {
                            ensure!(!got.created, "jobs[{k}] created a duplicate of job #{idx}");
                            ensure!(
                                got.job.id == self.m.jobs[idx].id,
                                "jobs[{k}] returned {} instead of the existing #{idx} {}",
                                got.job.id,
                                self.m.jobs[idx].id
                            );
                        }
                        None => {
                            ensure!(
                                got.created,
                                "jobs[{k}] was not created but returned {}",
                                got.job.id
                            );
                            ensure!(
                                got.job.attempt == 0,
                                "new job has attempt {}",
                                got.job.attempt
                            );
                            ensure!(
                                self.m.jobs.iter().all(|j| j.id != got.job.id),
                                "a new job reused id {}",
                                got.job.id
                            );
                            created.push((k, self.m.jobs.len()));
                            self.m.jobs.push(MJob {
                                id: got.job.id,
                                queue: s.queue,
                                priority: s.priority,
                                state: match dep {
                                    Some(_) => JobState::Waiting,
                                    None => JobState::Queued,
                                },
                                attempt: 0,
                                max_attempts: s.max_attempts,
                                ready: !s.delayed,
                                cancel_requested: false,
                                unique: s.unique,
                                idem: s.idem,
                                tokens: Vec::new(),
                                kept: None,
                                ended_by: None,
                                lapsed: false,
                                dep: *dep,
                            });
                        }
                    }
                }
                self.m.settle_waiting();
                for (k, idx) in created {
                    ensure!(
                        out[k].job.state == self.m.jobs[idx].state,
                        "new job #{idx} is {}, expected {}",
                        out[k].job.state,
                        self.m.jobs[idx].state
                    );
                }
            }
            Op::Claim { queue, limit } => {
                let req = ClaimRequest {
                    queue: QUEUES[*queue as usize].into(),
                    worker_id: "model-worker".into(),
                    limit: *limit,
                    lease_ttl_ms: Some(MODEL_TTL_MS),
                };
                let got = expect_ok(e.claim(t, &req).await, "claim")?;
                let candidates: Vec<usize> = if self.m.paused[*queue as usize] {
                    Vec::new()
                } else {
                    (0..self.m.jobs.len())
                        .filter(|&i| {
                            let j = &self.m.jobs[i];
                            j.queue == *queue && j.state == JobState::Queued && j.ready
                        })
                        .collect()
                };
                let want = candidates.len().min(*limit as usize);
                ensure!(
                    got.len() == want,
                    "claimed {} jobs, expected min(limit {limit}, ready {}) = {want}",
                    got.len(),
                    candidates.len()
                );
                let mut claimed = Vec::new();
                for c in &got {
                    let idx = self.m.jobs.iter().position(|j| j.id == c.job.id);
                    let Some(idx) = idx else {
                        return Err(format!("claimed unknown job {}", c.job.id));
                    };
                    ensure!(
                        candidates.contains(&idx),
                        "claimed job #{idx} which is not ready: {:?}",
                        self.m.jobs[idx]
                    );
                    ensure!(
                        !claimed.contains(&idx),
                        "job #{idx} claimed twice in one batch"
                    );
                    claimed.push(idx);
                }
                if let Some(min_claimed) = claimed.iter().map(|&i| self.m.jobs[i].priority).min() {
                    let skipped = candidates
                        .iter()
                        .filter(|i| !claimed.contains(i))
                        .map(|&i| self.m.jobs[i].priority)
                        .max();
                    if let Some(max_skipped) = skipped {
                        ensure!(
                            max_skipped <= min_claimed,
                            "claim took priority {min_claimed} over a ready job of priority {max_skipped}"
                        );
                    }
                }
                for (c, &idx) in got.iter().zip(&claimed) {
                    ensure!(
                        self.m.tokens_seen.insert(c.lease_token.0),
                        "token {} minted twice",
                        c.lease_token
                    );
                    let j = &mut self.m.jobs[idx];
                    j.state = JobState::Running;
                    j.attempt += 1;
                    j.lapsed = false;
                    j.tokens.push(c.lease_token);
                    j.kept = Some(c.lease_token);
                    j.ended_by = None;
                    ensure!(
                        c.job.state == JobState::Running && c.job.attempt == j.attempt,
                        "claimed job #{idx} reads {} attempt {}, expected running attempt {}",
                        c.job.state,
                        c.job.attempt,
                        j.attempt
                    );
                    ensure!(
                        j.attempt <= j.max_attempts,
                        "job #{idx} claimed for attempt {} of {}",
                        j.attempt,
                        j.max_attempts
                    );
                }
            }
            Op::Heartbeat(i, tk) => {
                let Some(idx) = self.pick(i) else {
                    return Ok(());
                };
                let j = &mut self.m.jobs[idx];
                let token = j.token(*tk);
                let r = e
                    .heartbeat(
                        t,
                        &Heartbeat {
                            id: j.id,
                            lease_token: token,
                            lease_ttl_ms: None,
                            progress: None,
                        },
                    )
                    .await;
                if j.owns(token) {
                    let ack = expect_ok(r, "heartbeat")?;
                    ensure!(
                        ack.cancel_requested == j.cancel_requested,
                        "heartbeat says cancel_requested={}, model {}",
                        ack.cancel_requested,
                        j.cancel_requested
                    );
                    j.lapsed = false;
                } else {
                    expect_err_code(r, "lease_lost")?;
                }
            }
            Op::Complete(i, tk) => {
                let Some(idx) = self.pick(i) else {
                    return Ok(());
                };
                let j = &mut self.m.jobs[idx];
                let token = j.token(*tk);
                let r = e.complete(t, j.id, token, None).await;
                if j.owns(token) {
                    let job = expect_ok(r, "complete")?;
                    ensure!(
                        job.state == JobState::Succeeded,
                        "completed job is {}",
                        job.state
                    );
                    j.settle(JobState::Succeeded);
                    j.ended_by = Some(Report::Complete(None).digest());
                } else {
                    match j.refusal(token, Report::Complete(None)) {
                        None => expect_repeat(r, j.state, "complete")?,
                        Some(code) => expect_err_code(r, code)?,
                    }
                }
            }
            Op::CompleteMany(items) => {
                let mut picked: Vec<(usize, LeaseToken)> = Vec::new();
                for (i, tk) in items {
                    if let Some(idx) = self.pick(i) {
                        if picked.iter().all(|(p, _)| *p != idx) {
                            picked.push((idx, self.m.jobs[idx].token(*tk)));
                        }
                    }
                }
                if picked.is_empty() {
                    return Ok(());
                }
                let batch: Vec<Completion> = picked
                    .iter()
                    .map(|&(idx, token)| Completion {
                        id: self.m.jobs[idx].id,
                        lease_token: token,
                        result: Some(json!(idx)),
                    })
                    .collect();
                let answers = expect_ok(e.complete_many(t, &batch).await, "complete_many")?;
                ensure!(
                    answers.len() == batch.len(),
                    "{} answers for {} items",
                    answers.len(),
                    batch.len()
                );
                for ((idx, token), answer) in picked.into_iter().zip(answers) {
                    let j = &mut self.m.jobs[idx];
                    let result = json!(idx);
                    let report = Report::Complete(Some(&result));
                    if j.owns(token) {
                        expect_ok(answer, &format!("complete_many item #{idx}"))?;
                        j.settle(JobState::Succeeded);
                        j.ended_by = Some(report.digest());
                    } else {
                        match j.refusal(token, report) {
                            None => {
                                expect_ok(answer, &format!("repeated complete_many item #{idx}"))?;
                            }
                            Some(code) => expect_err_code(answer, code)
                                .map_err(|m| format!("complete_many item #{idx}: {m}"))?,
                        }
                    }
                }
            }
            Op::Fail(i, tk, kind) => {
                let Some(idx) = self.pick(i) else {
                    return Ok(());
                };
                let j = &mut self.m.jobs[idx];
                let token = j.token(*tk);
                let failure = failure_of(*kind);
                let r = e.fail(t, j.id, token, failure.clone()).await;
                if j.owns(token) {
                    let job = expect_ok(r, "fail")?;
                    let outcome =
                        fail_outcome(j.attempt, j.max_attempts, j.cancel_requested, &failure);
                    j.settle(outcome.state());
                    if outcome == FailOutcome::Retry {
                        j.ready = !matches!(kind, FailKind::RetryAfterFar);
                    }
                    j.ended_by = Some(Report::Fail(&failure).digest());
                    ensure!(
                        job.state == j.state,
                        "fail routed the job to {}, expected {}",
                        job.state,
                        j.state
                    );
                } else {
                    match j.refusal(token, Report::Fail(&failure)) {
                        None => expect_repeat(r, j.state, "fail")?,
                        Some(code) => expect_err_code(r, code)?,
                    }
                }
            }
            Op::Snooze { job, tok, far } => {
                let Some(idx) = self.pick(job) else {
                    return Ok(());
                };
                let j = &mut self.m.jobs[idx];
                let token = j.token(*tok);
                let delay = if *far { FAR_MS } else { 0 };
                let r = e.snooze(t, j.id, token, delay).await;
                if j.owns(token) {
                    let job = expect_ok(r, "snooze")?;
                    if j.cancel_requested {
                        j.settle(JobState::Cancelled);
                        // Whether the attempt is given back on the way to
                        // `cancelled` is not specified: adopt either.
                        ensure!(
                            job.attempt == j.attempt || job.attempt == j.attempt - 1,
                            "snooze-cancel left attempt {} (was {})",
                            job.attempt,
                            j.attempt
                        );
                        j.attempt = job.attempt;
                    } else {
                        j.settle(JobState::Queued);
                        j.attempt -= 1;
                        j.ready = !far;
                    }
                    j.ended_by = Some(Report::Snooze(delay).digest());
                    ensure!(
                        job.state == j.state,
                        "snooze left the job {}, expected {}",
                        job.state,
                        j.state
                    );
                } else {
                    match j.refusal(token, Report::Snooze(delay)) {
                        None => expect_repeat(r, j.state, "snooze")?,
                        Some(code) => expect_err_code(r, code)?,
                    }
                }
            }
            Op::Cancel(i) => {
                let Some(idx) = self.pick(i) else {
                    return Ok(());
                };
                let r = e.cancel(t, self.m.jobs[idx].id).await;
                let j = &mut self.m.jobs[idx];
                match j.state {
                    JobState::Queued | JobState::Waiting => {
                        let job = expect_ok(r, "cancel")?;
                        j.settle(JobState::Cancelled);
                        ensure!(
                            job.state == JobState::Cancelled,
                            "cancelled queued or waiting job is {}",
                            job.state
                        );
                    }
                    JobState::Running => {
                        let job = expect_ok(r, "cancel")?;
                        j.cancel_requested = true;
                        ensure!(
                            job.state == JobState::Running && job.cancel_requested,
                            "cancel of a running job left {} cancel_requested={}",
                            job.state,
                            job.cancel_requested
                        );
                    }
                    _ => expect_err_code(r, "invalid_state")?,
                }
            }
            Op::Replay(i) => {
                let Some(idx) = self.pick(i) else {
                    return Ok(());
                };
                let r = e.replay(t, self.m.jobs[idx].id).await;
                let j = &self.m.jobs[idx];
                match j.state {
                    // Any finished job replays; a succeeded one runs again.
                    JobState::Failed | JobState::Cancelled | JobState::Succeeded => {
                        let held = j.unique.is_some()
                            && self
                                .m
                                .jobs
                                .iter()
                                .any(|o| o.id != j.id && o.unique == j.unique && o.active());
                        if held {
                            match r {
                                Err(Error::Conflict(_)) => {}
                                other => {
                                    return Err(format!(
                                        "replay with a held unique key: expected Conflict, got {other:?}"
                                    ))
                                }
                            }
                        } else {
                            let job = expect_ok(r, "replay")?;
                            let j = &mut self.m.jobs[idx];
                            j.settle(JobState::Queued);
                            j.attempt = 0;
                            j.cancel_requested = false;
                            j.kept = None;
                            if j.dep.is_some() {
                                // Back to waiting, settled as at enqueue.
                                j.state = JobState::Waiting;
                                self.m.settle_waiting();
                            }
                            let want = self.m.jobs[idx].state;
                            ensure!(
                                job.state == want && job.attempt == 0,
                                "replayed job is {} attempt {}, expected {want} attempt 0",
                                job.state,
                                job.attempt
                            );
                        }
                    }
                    _ => expect_err_code(r, "invalid_state")?,
                }
            }
            Op::Lapse(i) => {
                let Some(idx) = self.pick(i) else {
                    return Ok(());
                };
                if self.m.jobs[idx].state == JobState::Running {
                    self.db.lapse_lease(self.m.jobs[idx].id).await;
                    self.m.jobs[idx].lapsed = true;
                }
            }
            Op::Reap => {
                let r = expect_ok(e.reap_lapsed_leases(1_000).await, "reap")?;
                let (mut failed, mut cancelled, mut requeued) = (0, 0, 0);
                for j in &mut self.m.jobs {
                    if j.state == JobState::Running && j.lapsed {
                        let to = lapse_outcome(j.attempt, j.max_attempts, j.cancel_requested);
                        match to {
                            JobState::Failed => failed += 1,
                            JobState::Cancelled => cancelled += 1,
                            _ => requeued += 1,
                        }
                        j.settle(to);
                        j.kept = None;
                    }
                }
                ensure!(
                    (r.failed, r.cancelled, r.requeued) == (failed, cancelled, requeued),
                    "reaper report {r:?}, expected failed {failed} cancelled {cancelled} requeued {requeued}"
                );
            }
            Op::MakeDue(i) => {
                let Some(idx) = self.pick(i) else {
                    return Ok(());
                };
                if self.m.jobs[idx].state == JobState::Queued {
                    self.db.make_due(self.m.jobs[idx].id).await;
                    self.m.jobs[idx].ready = true;
                }
            }
            Op::Pause(q) | Op::Resume(q) => {
                let pause = matches!(op, Op::Pause(_));
                let name = QUEUES[*q as usize];
                let stats = if pause {
                    expect_ok(e.pause(t, name).await, "pause")?
                } else {
                    expect_ok(e.resume(t, name).await, "resume")?
                };
                ensure!(
                    stats.paused == pause,
                    "paused={} after pause={pause}",
                    stats.paused
                );
                self.m.paused[*q as usize] = pause;
            }
        }
        // Whatever ended a dependency moved what waited for it.
        self.m.settle_waiting();
        Ok(())
    }

    /// Compares every job and every queue's numbers with the model.
    async fn compare(&self) -> Check {
        let e = &self.db.engine;
        let t = self.tenant.as_str();
        let page = expect_ok(
            e.list(
                t,
                &JobFilter {
                    limit: Some(500),
                    ..JobFilter::default()
                },
            )
            .await,
            "list",
        )?;
        ensure!(
            page.jobs.len() == self.m.jobs.len(),
            "the store lists {} jobs, the model has {}",
            page.jobs.len(),
            self.m.jobs.len()
        );
        let stored: HashMap<Uuid, &tether_core::Job> =
            page.jobs.iter().map(|j| (j.id, j)).collect();
        for (idx, j) in self.m.jobs.iter().enumerate() {
            let Some(s) = stored.get(&j.id) else {
                return Err(format!("job #{idx} {} missing from the listing", j.id));
            };
            ensure!(
                (s.state, s.attempt, s.cancel_requested) == (j.state, j.attempt, j.cancel_requested),
                "job #{idx}: store has {} attempt {} cancel_requested {}, model {} attempt {} cancel_requested {}",
                s.state,
                s.attempt,
                s.cancel_requested,
                j.state,
                j.attempt,
                j.cancel_requested
            );
            ensure!(
                j.state == JobState::Running || s.lease_expires_at.is_none(),
                "job #{idx} is {} but still has a lease",
                s.state
            );
        }
        for (q, name) in QUEUES.iter().enumerate() {
            let s = expect_ok(e.queue_stats(t, name).await, "queue_stats")?;
            let of_q = || self.m.jobs.iter().filter(|j| j.queue as usize == q);
            let count = |st: JobState| of_q().filter(|j| j.state == st).count() as i64;
            let ready = of_q()
                .filter(|j| j.state == JobState::Queued && j.ready)
                .count() as i64;
            let scheduled = count(JobState::Queued) - ready;
            let lapsed = of_q()
                .filter(|j| j.state == JobState::Running && j.lapsed)
                .count() as i64;
            let want = (
                count(JobState::Waiting),
                count(JobState::Queued),
                count(JobState::Running),
                count(JobState::Succeeded),
                count(JobState::Failed),
                count(JobState::Cancelled),
                ready,
                scheduled,
                lapsed,
                self.m.paused[q],
            );
            let got = (
                s.counts.waiting,
                s.counts.queued,
                s.counts.running,
                s.counts.succeeded,
                s.counts.failed,
                s.counts.cancelled,
                s.ready,
                s.scheduled,
                s.expired_leases,
                s.paused,
            );
            ensure!(
                got == want,
                "queue {name} stats (waiting, queued, running, succeeded, failed, cancelled, ready, scheduled, expired_leases, paused) = {got:?}, model {want:?}"
            );
        }
        Ok(())
    }
}

async fn run_case(db: &TestDb, tenant: String, ops: &[Op]) -> Check {
    // Leftovers of an earlier (failed) case must not count in this one's
    // reaper reports: the reaper works across tenants.
    while expect_ok(db.engine.reap_lapsed_leases(1_000).await, "drain")?.total() > 0 {}
    for name in QUEUES {
        expect_ok(
            db.engine
                .configure_queue(
                    &tenant,
                    name,
                    &QueueConfigPatch {
                        backoff: Some(Backoff {
                            base_ms: 0,
                            cap_ms: 0,
                        }),
                        ..QueueConfigPatch::default()
                    },
                )
                .await,
            "configure",
        )?;
    }
    let mut case = Case {
        db,
        tenant,
        m: Model::default(),
    };
    let tail = [Op::Reap];
    for (i, op) in ops.iter().chain(&tail).enumerate() {
        case.step(op)
            .await
            .map_err(|e| format!("step {i} {op:?}: {e}"))?;
        case.compare()
            .await
            .map_err(|e| format!("after step {i} {op:?}: {e}"))?;
    }
    Ok(())
}

/// Random sequences of 30–60 operations (enqueue with priorities, delays,
/// keys and a dependency on an earlier job; claim; heartbeat; complete and complete_many; fail of every
/// kind; snooze; cancel; replay; lease lapse and reap; make_due; pause and
/// resume), with valid, stale and random tokens, run against the reference
/// model and the backend; every result, every job's state, attempt and
/// cancel flag and every queue's numbers must agree after every step.
/// Cases: `TETHER_MODEL_CASES` (default 48), each in a fresh tenant.
pub async fn model_based_random_operation_sequences(db: &TestDb) {
    let cases = std::env::var("TETHER_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let config = Config {
        cases,
        max_shrink_iters: 4_096,
        max_shrink_time: 30_000,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let handle = tokio::runtime::Handle::current();
    let counter = AtomicUsize::new(0);
    let strategy = prop::collection::vec(op(), 30..=60);
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |ops| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            handle
                .block_on(run_case(db, format!("model-{n}"), &ops))
                .map_err(TestCaseError::fail)
        })
    });
    if let Err(e) = result {
        panic!("model test failed on {}:\n{e}", db.backend());
    }
}
