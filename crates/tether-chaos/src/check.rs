//! The verdict: every promise checked from the database (`tether.jobs`), the
//! history (`tether.job_events`) and what the clients observed. Pure logic
//! over rows, so it is tested on crafted histories.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::Value;
use tether_core::ErrorCode;
use uuid::Uuid;

use crate::leadership;
use crate::obs::{Obs, Side};
use crate::plan::{self, Limits};

/// One row of `tether.jobs` (the columns the checks need).
#[derive(Debug, Clone)]
pub struct JobRow {
    /// Job id.
    pub id: Uuid,
    /// Idempotency key.
    pub key: Option<String>,
    /// Queue.
    pub queue: String,
    /// Concurrency key.
    pub concurrency_key: Option<String>,
    /// State.
    pub state: String,
    /// Attempt counter.
    pub attempt: i32,
    /// Attempt budget.
    pub max_attempts: i32,
    /// `payload.n`.
    pub n: Option<i64>,
    /// Not-before.
    pub run_at: DateTime<Utc>,
    /// Result of the accepted completion.
    pub result: Option<Value>,
}

/// One row of `tether.job_events`.
#[derive(Debug, Clone)]
pub struct EventRow {
    /// The job.
    pub job_id: Uuid,
    /// Order within the history.
    pub seq: i64,
    /// When (database clock).
    pub at: DateTime<Utc>,
    /// What.
    pub event: String,
    /// The job's attempt after the transition.
    pub attempt: i32,
    /// Who.
    pub worker_id: Option<String>,
    /// Detail (error message, lease_lost operation, reaper outcome, ...).
    pub detail: Option<String>,
}

/// Every check, by name, with the promise it guards (the report lists them).
pub const CHECKS: [(&str, &str); 30] = [
    (
        "lost",
        "every acknowledged job exists under its key (nothing lost)",
    ),
    (
        "not_acknowledged",
        "every submitted job was acknowledged to its producer",
    ),
    (
        "unacknowledged_job",
        "no job exists that no producer was told about",
    ),
    ("key_two_jobs", "no idempotency key produced two jobs"),
    (
        "not_terminal",
        "every job is terminal or legitimately still queued (nothing stuck)",
    ),
    (
        "double_completion",
        "no job has more than one accepted completion",
    ),
    (
        "too_many_claims",
        "no job claimed more than max_attempts times (claims − snoozes)",
    ),
    (
        "history_mismatch",
        "row and history agree (one enqueued, attempt = claims − snoozes, state)",
    ),
    (
        "lease_lost_not_superseded",
        "every lease_lost in the history follows a superseded claim",
    ),
    (
        "lease_lost_client",
        "every lease_lost a worker heard refers to a claim already ended then",
    ),
    (
        "claim_not_in_history",
        "every claim a worker received is in the history",
    ),
    (
        "outcome_vs_handler",
        "every outcome is one the handler answered or the reaper decided",
    ),
    ("internal_errors", "no client saw `internal`"),
    (
        "undocumented_errors",
        "clients saw only documented error codes",
    ),
    (
        "unexpected_errors",
        "clients saw only `unavailable`, `lease_lost` and transport failures",
    ),
    (
        "limit_max_running",
        "the limited queue never ran more jobs at once than its max_running",
    ),
    (
        "limit_key_max_running",
        "no concurrency key ran more jobs at once than key_max_running",
    ),
    (
        "limit_rate",
        "no window of the rate limit's period held more claims than its count",
    ),
    (
        "limited_jobs",
        "the limited queue holds exactly the jobs sent to it (with their keys), each ended",
    ),
    (
        "limits_not_exercised",
        "every limit was reached during the run (each one bound the claims)",
    ),
    (
        "fencing_not_exercised",
        "a SIGSTOPped or cut-off worker's late reports were fenced (lease_lost)",
    ),
    (
        FAILOVER_CHECK,
        "after the failover, the workers of every replica claimed and completed jobs on the new primary",
    ),
    (
        leadership::AFTER_LEASE,
        "no maintenance leader reaped, expired or fired anything after its lease could have lapsed",
    ),
    (
        leadership::LEADERSHIP,
        "the maintenance lease never had two holders, and every leader cut off was replaced meanwhile",
    ),
    (
        leadership::DOUBLE_FIRE,
        "no schedule instant fired twice (and the schedule fired)",
    ),
    (
        RECOVERY_CHECK,
        "every replica cut off from PostgreSQL took writes again after the link came back",
    ),
    (
        "producer_problems",
        "producers got every submission acknowledged",
    ),
    (
        "fault_failures",
        "every fault was injected and every process came back",
    ),
    ("crashes", "no replica or worker process exited on its own"),
    (
        "graceful_stop",
        "workers and replicas exited on SIGTERM at the end",
    ),
];

/// The check that only a `--failover` run makes.
pub const FAILOVER_CHECK: &str = "failover_not_exercised";
/// A check that only a `--partitions` run makes (besides
/// [`leadership::CHECKS`]).
pub const RECOVERY_CHECK: &str = "partition_recovery";

/// Whether check `name` is made in a run with these options.
pub fn made(name: &str, failover: bool, partitions: bool) -> bool {
    if name == FAILOVER_CHECK {
        return failover;
    }
    if name == RECOVERY_CHECK || leadership::CHECKS.contains(&name) {
        return partitions;
    }
    true
}

/// Events that end an attempt (the one its `claimed` event started); a
/// `lease_lost` or `cancel_requested` does not. (`expired` ends a job that
/// was never claimed; it is here so that an attempt list stays closed.)
const ATTEMPT_ENDS: [&str; 7] = [
    "succeeded",
    "failed",
    "retry_scheduled",
    "snoozed",
    "lease_expired",
    "cancelled",
    "expired",
];

/// Whether an event ends the ownership of the latest claim: an attempt's
/// end other than `expired`, or the next claim.
fn ends_ownership(event: &str) -> bool {
    event == "claimed" || (event != "expired" && ATTEMPT_ENDS.contains(&event))
}

/// The limits are judged as exercised only when the limited queue saw at
/// least this many times the rate limit's count of claims (a tiny run may
/// never fill a window).
const EXERCISED_AFTER_WINDOWS: u64 = 10;

/// Failures that carry no API code: the request got no answer
/// (`transport`), or the worker's own heartbeat time limit (`timeout`).
pub const NO_ANSWER: [&str; 2] = ["transport", "timeout"];

/// What this scenario may legitimately show a client: outages and fencing.
const EXPECTED: [ErrorCode; 2] = [ErrorCode::Unavailable, ErrorCode::LeaseLost];

/// How far the worker's and the database's readings of the one host clock
/// may disagree (rounding, and nothing else on one machine).
const CLOCK_SLACK_US: i64 = 20_000;

/// One violated promise: how often, and a few examples.
#[derive(Debug, Default, Clone)]
pub struct Violation {
    /// Occurrences.
    pub count: u64,
    /// Up to five, for the report.
    pub examples: Vec<String>,
}

/// Counts taken from the history.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Jobs in the database.
    pub jobs: u64,
    /// By final state.
    pub states: BTreeMap<String, u64>,
    /// Queued with a `run_at` in the future (legitimately waiting).
    pub queued_later: u64,
    /// `claimed` events.
    pub claims: u64,
    /// `retry_scheduled` events.
    pub retries: u64,
    /// `snoozed` events.
    pub snoozes: u64,
    /// `lease_expired` events (the reaper), by outcome.
    pub lease_expired: BTreeMap<String, u64>,
    /// `lease_lost` events, by operation.
    pub lease_lost: BTreeMap<String, u64>,
    /// `lease_lost` answers workers printed.
    pub client_lease_lost: u64,
    /// Claims workers printed.
    pub client_claims: u64,
    /// Most claims of one job.
    pub max_claims: u64,
    /// Failed jobs: fatal, attempts exhausted by the handler, by the reaper.
    pub failed_by: BTreeMap<&'static str, u64>,
    /// Keys acknowledged more than once (duplicate submissions, retries).
    pub keys_acked_repeatedly: u64,
    /// The limited queue.
    pub limited: LimitedStats,
    /// What happened on the new primary (`--failover`).
    pub after_failover: Option<AfterFailover>,
    /// What the leadership audit shows (`--partitions`).
    pub leadership: Option<leadership::Stats>,
    /// How far (µs) the wall clock was stepped back during the run.
    pub clock_back_us: i64,
}

/// The history written on the new primary: the events at or after the
/// instant the promoted standby first took writes.
#[derive(Debug, Default, Clone)]
pub struct AfterFailover {
    /// Every such event.
    pub events: u64,
    /// `claimed` events, by the replica the claiming worker talks to.
    pub claims: Vec<u64>,
    /// `succeeded` events, by the replica the completing worker talks to.
    pub successes: Vec<u64>,
    /// `lease_expired` events (the maintenance leader reaping there).
    pub reaped: u64,
}

/// What the history shows of the limited queue.
#[derive(Debug, Default, Clone)]
pub struct LimitedStats {
    /// Its jobs.
    pub jobs: u64,
    /// ... of them without a concurrency key.
    pub unkeyed: u64,
    /// Distinct concurrency keys.
    pub keys: u64,
    /// Its jobs by final state.
    pub states: BTreeMap<String, u64>,
    /// Its `claimed` events.
    pub claims: u64,
    /// Most jobs running at one instant.
    pub max_running: u64,
    /// Microseconds during which `max_running` (the limit) jobs ran.
    pub at_max_running_us: i64,
    /// Times the running jobs rose to `max_running`.
    pub max_running_reached: u64,
    /// Most jobs of one key running at one instant, and that key.
    pub max_key_running: u64,
    /// The key that reached [`LimitedStats::max_key_running`] first.
    pub max_key: Option<String>,
    /// Microseconds during which some key ran `key_max_running` jobs.
    pub at_key_max_us: i64,
    /// Times a key's running jobs rose to `key_max_running`.
    pub key_max_reached: u64,
    /// Most claims in one window of the rate limit's period.
    pub max_window_claims: u64,
    /// Claims that filled a window to the rate limit's count (the windows
    /// starting at them held exactly `count` claims).
    pub full_windows: u64,
}

/// The outcome of the checks.
#[derive(Debug, Default, Clone)]
pub struct Findings {
    /// Violations by check.
    pub violations: BTreeMap<&'static str, Violation>,
    /// Counts.
    pub stats: Stats,
}

impl Findings {
    /// Records one violation of `check` (one of [`CHECKS`]).
    pub fn flag(&mut self, check: &'static str, example: impl FnOnce() -> String) {
        let v = self.violations.entry(check).or_default();
        v.count += 1;
        if v.examples.len() < 5 {
            v.examples.push(example());
        }
    }

    /// Whether every promise held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// What the run knows besides the rows.
#[derive(Debug, Clone)]
pub struct Context {
    /// The run's seed (decides every handler's plan).
    pub seed: u64,
    /// Jobs the producers were to enqueue (`n` in `0..jobs`).
    pub jobs: u64,
    /// The database's `now()` when the rows were read.
    pub now: DateTime<Utc>,
    /// SIGSTOPs of a worker that held running jobs.
    pub stops_with_jobs: u64,
    /// Cuts of a worker's link (past its lease) while it held running jobs.
    pub cuts_with_jobs: u64,
    /// The share of the jobs (per mille) the producers sent to the limited
    /// queue ([`plan::queue`]).
    pub limited_per_mille: u64,
    /// The limited queue's limits.
    pub limits: Limits,
    /// With `--failover`: the new primary's clock when it first took
    /// writes, and the number of replicas.
    pub failover: Option<(DateTime<Utc>, usize)>,
    /// With `--partitions`: the leadership audit and the network's faults.
    pub partitions: Option<leadership::Facts>,
    /// How far (µs) the wall clock, which stamps the history, was stepped
    /// back during the run ([`crate::clock::ClockWatch`]): an event stamped
    /// up to this much before the claim it ends is the clock's doing.
    pub clock_back_us: i64,
}

fn us(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// Runs every check. `events` must be ordered by job and `seq`.
pub fn check(jobs: &[JobRow], events: &[EventRow], obs: &Obs, cx: &Context) -> Findings {
    let mut f = Findings::default();
    let by_id: HashMap<Uuid, &JobRow> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut history: HashMap<Uuid, Vec<&EventRow>> = HashMap::new();
    for e in events {
        history.entry(e.job_id).or_default().push(e);
    }
    f.stats.jobs = jobs.len() as u64;
    f.stats.clock_back_us = cx.clock_back_us;

    check_keys(&mut f, jobs, &by_id, obs, cx);
    for job in jobs {
        let empty = Vec::new();
        let h = history.get(&job.id).unwrap_or(&empty);
        check_job(&mut f, job, h, cx);
    }
    for id in history.keys() {
        if !by_id.contains_key(id) {
            f.flag("history_mismatch", || {
                format!("events of job {id}, which does not exist")
            });
        }
    }
    check_client_fencing(&mut f, &history, obs);
    check_limits(&mut f, jobs, &history, cx);
    check_errors(&mut f, obs);
    check_failover(&mut f, events, cx);
    if let Some(facts) = &cx.partitions {
        leadership::check(&mut f, events, facts);
    }
    let lost_events: u64 = f.stats.lease_lost.values().sum();
    if cx.stops_with_jobs + cx.cuts_with_jobs > 0 && lost_events == 0 {
        f.flag("fencing_not_exercised", || {
            format!(
                "{} SIGSTOPs and {} cuts of workers holding jobs, yet no lease_lost in the history",
                cx.stops_with_jobs, cx.cuts_with_jobs
            )
        });
    }
    f
}

/// Nothing lost, no key with two jobs, every submission acknowledged.
fn check_keys(
    f: &mut Findings,
    jobs: &[JobRow],
    by_id: &HashMap<Uuid, &JobRow>,
    obs: &Obs,
    cx: &Context,
) {
    for (key, acks) in &obs.acks {
        let ids: HashSet<Uuid> = acks.iter().map(|a| a.0).collect();
        if ids.len() > 1 {
            f.flag("key_two_jobs", || {
                format!("key {key} acknowledged as jobs {ids:?}")
            });
        }
        let created = acks.iter().filter(|a| a.1).count();
        if created > 1 {
            f.flag("key_two_jobs", || {
                format!("key {key} answered created=true {created} times")
            });
        }
        if acks.len() > 1 {
            f.stats.keys_acked_repeatedly += 1;
        }
        for id in ids {
            match by_id.get(&id) {
                None => f.flag("lost", || {
                    format!("job {id} (key {key}) was acknowledged but is not in the database")
                }),
                Some(j) if j.key.as_deref() != Some(key) => f.flag("lost", || {
                    format!(
                        "job {id} was acknowledged for key {key} but holds key {:?}",
                        j.key
                    )
                }),
                Some(_) => {}
            }
        }
    }
    for n in 0..cx.jobs {
        let key = plan::key(n);
        if !obs.acks.contains_key(&key) {
            f.flag("not_acknowledged", || {
                format!("key {key} was never acknowledged to its producer")
            });
        }
    }
    let mut per_key: HashMap<&str, u32> = HashMap::new();
    for j in jobs {
        match j.key.as_deref() {
            Some(k) => {
                let c = per_key.entry(k).or_insert(0);
                *c += 1;
                if *c == 2 {
                    f.flag("key_two_jobs", || {
                        format!("key {k} holds two jobs in the database")
                    });
                }
                if !obs.acks.contains_key(k) {
                    f.flag("unacknowledged_job", || {
                        format!("job {} (key {k}) exists but no producer was told so", j.id)
                    });
                }
            }
            None => f.flag("unacknowledged_job", || {
                format!("job {} has no idempotency key", j.id)
            }),
        }
    }
}

/// The history of one job, replayed.
fn check_job(f: &mut Findings, job: &JobRow, h: &[&EventRow], cx: &Context) {
    let id = job.id;
    let p = job.n.map(|n| plan::plan(cx.seed, n as u64));
    let mut state = "none";
    let (mut claims, mut snoozes, mut enqueued) = (0u64, 0u64, 0u64);
    let mut succeeded: Vec<&EventRow> = Vec::new();
    for e in h {
        let ev = e.event.as_str();
        let terminal = matches!(state, "succeeded" | "failed" | "cancelled");
        if terminal && !matches!(ev, "lease_lost" | "cancel_requested") {
            f.flag("history_mismatch", || {
                format!("job {id}: {ev} (seq {}) after it was {state}", e.seq)
            });
        }
        match ev {
            "enqueued" => {
                enqueued += 1;
                state = "queued";
            }
            "claimed" => {
                claims += 1;
                f.stats.claims += 1;
                let expected = claims as i64 - snoozes as i64;
                if i64::from(e.attempt) != expected {
                    f.flag("history_mismatch", || {
                        format!("job {id}: claim (seq {}) at attempt {}, but claims − snoozes = {expected}", e.seq, e.attempt)
                    });
                }
                if e.attempt > job.max_attempts {
                    f.flag("too_many_claims", || {
                        format!(
                            "job {id}: claimed for attempt {} of {}",
                            e.attempt, job.max_attempts
                        )
                    });
                }
                if state != "queued" {
                    f.flag("history_mismatch", || {
                        format!("job {id}: claimed (seq {}) while {state}", e.seq)
                    });
                }
                state = "running";
            }
            "snoozed" => {
                snoozes += 1;
                f.stats.snoozes += 1;
                state = "queued";
            }
            "retry_scheduled" | "failed" => {
                if ev == "retry_scheduled" {
                    f.stats.retries += 1;
                }
                state = if ev == "failed" { "failed" } else { "queued" };
                if let Some(p) = p {
                    let detail = e.detail.as_deref().unwrap_or_default();
                    match p.failure_on(e.attempt) {
                        Some((fatal, msg)) if msg == detail => {
                            let exhausted = e.attempt >= job.max_attempts;
                            let should_fail = fatal || exhausted;
                            if should_fail != (ev == "failed") {
                                f.flag("outcome_vs_handler", || {
                                    format!("job {id}: {ev} at attempt {} of {} after a {} failure", e.attempt, job.max_attempts, if fatal { "fatal" } else { "retryable" })
                                });
                            }
                            if ev == "failed" {
                                *f.stats.failed_by.entry(if fatal { "fatal" } else { "exhausted" }).or_insert(0) += 1;
                            }
                        }
                        _ => f.flag("outcome_vs_handler", || {
                            format!("job {id} ({p:?}): {ev} at attempt {} with {detail:?}, which its handler never answers", e.attempt)
                        }),
                    }
                }
            }
            "succeeded" => {
                succeeded.push(e);
                state = "succeeded";
                if let Some(p) = p {
                    if p.failure_on(e.attempt).is_some() {
                        f.flag("outcome_vs_handler", || {
                            format!("job {id} ({p:?}): succeeded at attempt {}, which its handler fails", e.attempt)
                        });
                    }
                }
            }
            "lease_expired" => {
                let outcome = e.detail.as_deref().unwrap_or("?");
                *f.stats.lease_expired.entry(outcome.to_owned()).or_insert(0) += 1;
                match outcome {
                    "queued" if e.attempt < job.max_attempts => state = "queued",
                    "queued" => {
                        f.flag("too_many_claims", || {
                            format!(
                                "job {id}: the reaper requeued it at attempt {} of {}",
                                e.attempt, job.max_attempts
                            )
                        });
                        state = "queued";
                    }
                    "failed" => {
                        *f.stats.failed_by.entry("reaped").or_insert(0) += 1;
                        state = "failed";
                    }
                    other => {
                        state = "cancelled";
                        f.flag("outcome_vs_handler", || {
                            format!("job {id}: reaped to {other}")
                        });
                    }
                }
            }
            "lease_lost" => {
                let op = e.detail.clone().unwrap_or_else(|| "?".to_owned());
                *f.stats.lease_lost.entry(op.clone()).or_insert(0) += 1;
                // Which token was presented is not recorded; the strongest
                // history-only proof that it was superseded: some claim
                // happened, and either the job no longer runs (its last
                // claim ended) or it runs under a later claim than another.
                if claims == 0 || (state == "running" && claims == 1) {
                    f.flag("lease_lost_not_superseded", || {
                        format!("job {id}: lease_lost ({op}, seq {}) while the only token ever minted ({claims} claims) still owned it ({state})", e.seq)
                    });
                }
            }
            "cancelled" => {
                state = "cancelled";
                f.flag("outcome_vs_handler", || {
                    format!("job {id}: cancelled, though nobody cancels")
                });
            }
            "cancel_requested" => {}
            other => f.flag("history_mismatch", || {
                format!("job {id}: unexpected event {other}")
            }),
        }
    }
    f.stats.max_claims = f.stats.max_claims.max(claims);
    *f.stats.states.entry(job.state.clone()).or_insert(0) += 1;
    if enqueued != 1 {
        f.flag("history_mismatch", || {
            format!("job {id}: {enqueued} enqueued events")
        });
    }
    if succeeded.len() > 1 {
        f.flag("double_completion", || {
            format!("job {id}: {} accepted completions", succeeded.len())
        });
    }
    if state != job.state {
        f.flag("history_mismatch", || {
            format!(
                "job {id}: the row says {}, its history says {state}",
                job.state
            )
        });
    }
    let spent = claims as i64 - snoozes as i64;
    if spent > i64::from(job.max_attempts) {
        f.flag("too_many_claims", || {
            format!(
                "job {id}: {claims} claims − {snoozes} snoozes > max_attempts {}",
                job.max_attempts
            )
        });
    }
    if i64::from(job.attempt) != spent {
        f.flag("history_mismatch", || {
            format!(
                "job {id}: attempt {} but claims − snoozes = {spent}",
                job.attempt
            )
        });
    }
    match job.state.as_str() {
        "succeeded" => {
            if let Some(e) = succeeded.last() {
                let by = job
                    .result
                    .as_ref()
                    .and_then(|r| r.get("by"))
                    .and_then(Value::as_str);
                let attempt = job
                    .result
                    .as_ref()
                    .and_then(|r| r.get("attempt"))
                    .and_then(Value::as_i64);
                if by != e.worker_id.as_deref() || attempt != Some(i64::from(e.attempt)) {
                    f.flag("outcome_vs_handler", || {
                        format!("job {id}: result {:?} is not the accepted completion's (worker {:?}, attempt {})", job.result, e.worker_id, e.attempt)
                    });
                }
            }
        }
        "failed" | "cancelled" => {}
        "queued" if job.run_at > cx.now => f.stats.queued_later += 1,
        other => f.flag("not_terminal", || {
            format!(
                "job {id} is still {other} (attempt {}, run_at {})",
                job.attempt, job.run_at
            )
        }),
    }
}

/// Every `lease_lost` a worker was told refers to a token whose claim had
/// ended by then (per the history and the one clock of this machine); every
/// claim a worker was given is in the history.
fn check_client_fencing(f: &mut Findings, history: &HashMap<Uuid, Vec<&EventRow>>, obs: &Obs) {
    f.stats.client_claims = obs.claims.len() as u64;
    f.stats.client_lease_lost = obs.losts.len() as u64;
    let empty = Vec::new();
    // The claim event that minted a token: the latest claim by that worker
    // at that attempt recorded before the worker had the answer.
    let minted = |token: &Uuid| -> Option<(usize, &EventRow)> {
        let c = obs.claims.get(token)?;
        let h = history.get(&c.job).unwrap_or(&empty);
        h.iter()
            .enumerate()
            .rev()
            .find(|(_, e)| {
                e.event == "claimed"
                    && e.attempt == c.attempt
                    && e.worker_id.as_deref() == Some(c.worker.as_str())
                    && us(e.at) <= c.at_us + CLOCK_SLACK_US
            })
            .map(|(i, e)| (i, *e))
    };
    for (token, c) in &obs.claims {
        if minted(token).is_none() {
            f.flag("claim_not_in_history", || {
                format!(
                    "worker {} was given job {} (attempt {}), but the history has no such claim",
                    c.worker, c.job, c.attempt
                )
            });
        }
    }
    for l in &obs.losts {
        let Some(c) = obs.claims.get(&l.token) else {
            f.flag("lease_lost_client", || {
                format!(
                    "lease_lost ({}) on job {} for token {}, which no worker was given",
                    l.op, l.job, l.token
                )
            });
            continue;
        };
        if c.job != l.job {
            f.flag("lease_lost_client", || {
                format!(
                    "token {} presented for job {} but minted for {}",
                    l.token, l.job, c.job
                )
            });
            continue;
        }
        let Some((i, claim)) = minted(&l.token) else {
            continue; // already flagged as claim_not_in_history
        };
        let h = &history[&c.job];
        let superseded = h[i + 1..]
            .iter()
            .find(|e| ends_ownership(&e.event) && us(e.at) <= l.at_us + CLOCK_SLACK_US);
        if superseded.is_none() {
            f.flag("lease_lost_client", || {
                format!("job {}: worker {} was told lease_lost ({}) for its claim of seq {} although nothing had ended that claim yet", l.job, c.worker, l.op, claim.seq)
            });
        }
    }
}

/// The limited queue's jobs are the ones sent there, and its history kept
/// its limits: attempts are half-open intervals `[claimed.at, end.at)` on
/// the database clock (an attempt still open at the end runs forever), and
/// at no instant do more of them overlap than `max_running`, nor more of
/// one key than `key_max_running`; no half-open window of `period_ms` holds
/// more than `count` `claimed` events.
fn check_limits(
    f: &mut Findings,
    jobs: &[JobRow],
    history: &HashMap<Uuid, Vec<&EventRow>>,
    cx: &Context,
) {
    let limits = cx.limits;
    let mut keys: Vec<Option<&str>> = Vec::new();
    // Attempts: (start µs, end µs or None, key index).
    let mut attempts: Vec<(i64, Option<i64>, usize)> = Vec::new();
    let mut claims: Vec<i64> = Vec::new();
    let empty = Vec::new();
    for job in jobs {
        let id = job.id;
        if let Some(n) = job.n {
            let n = n as u64;
            let queue = plan::queue(cx.seed, n, cx.limited_per_mille);
            let key = (queue == plan::LIMITED_QUEUE)
                .then(|| plan::concurrency_key(cx.seed, n))
                .flatten();
            if job.queue != queue || job.concurrency_key != key {
                f.flag("limited_jobs", || {
                    format!(
                        "job {id} (n {n}) is on queue {} with key {:?}, but was sent to {queue} with key {key:?}",
                        job.queue, job.concurrency_key
                    )
                });
            }
        }
        if job.queue != plan::LIMITED_QUEUE {
            continue;
        }
        let l = &mut f.stats.limited;
        l.jobs += 1;
        *l.states.entry(job.state.clone()).or_insert(0) += 1;
        if !matches!(job.state.as_str(), "succeeded" | "failed") {
            f.flag("limited_jobs", || {
                format!(
                    "job {id} of the limited queue ended {} (attempt {})",
                    job.state, job.attempt
                )
            });
        }
        let key = job.concurrency_key.as_deref();
        let k = match keys.iter().position(|k| *k == key) {
            Some(k) => k,
            None => {
                keys.push(key);
                keys.len() - 1
            }
        };
        let mut open: Option<(i64, i64)> = None; // (start µs, seq)
        for e in history.get(&id).unwrap_or(&empty) {
            let at = us(e.at);
            let ev = e.event.as_str();
            if ev == "claimed" {
                claims.push(at);
                // A claim while running (flagged as history_mismatch) ends
                // the attempt before it, as a new claim supersedes it.
                if let Some((start, _)) = open.take() {
                    attempts.push((start, Some(at.max(start)), k));
                }
                open = Some((at, e.seq));
            } else if ATTEMPT_ENDS.contains(&ev) {
                if let Some((start, seq)) = open.take() {
                    if at + cx.clock_back_us < start {
                        f.flag("history_mismatch", || {
                            format!("job {id}: {ev} (seq {}) at {} is before the claim it ends (seq {seq})", e.seq, e.at)
                        });
                    }
                    attempts.push((start, Some(at.max(start)), k));
                }
            }
        }
        if let Some((start, _)) = open {
            attempts.push((start, None, k));
        }
    }
    let l = &mut f.stats.limited;
    l.claims = claims.len() as u64;
    l.unkeyed = jobs
        .iter()
        .filter(|j| j.queue == plan::LIMITED_QUEUE && j.concurrency_key.is_none())
        .count() as u64;
    l.keys = keys.iter().filter(|k| k.is_some()).count() as u64;
    if cx.limited_per_mille > 0 && cx.jobs > 0 && l.jobs == 0 {
        f.flag("limited_jobs", || {
            "the limited queue holds no job".to_owned()
        });
    }

    // The sweep over attempt starts and ends, one instant at a time: at an
    // instant the ends come first (an attempt is half-open), so what runs
    // after an instant's changes runs until the next one. Empty attempts
    // never ran. A violation is one episode: from the instant a limit is
    // exceeded until the instant it holds again, with its peak.
    let mut points: Vec<(i64, i32, usize)> = Vec::with_capacity(attempts.len() * 2);
    for &(start, end, k) in &attempts {
        if end == Some(start) {
            continue;
        }
        points.push((start, 1, k));
        if let Some(end) = end {
            points.push((end, -1, k));
        }
    }
    points.sort_unstable();
    let max_running = i64::from(limits.max_running);
    let key_max = i64::from(limits.key_max_running);
    let mut running = 0i64;
    let mut per_key = vec![0i64; keys.len()];
    let mut keys_at_max = 0usize; // keys running key_max_running or more now
    let mut over: Option<Episode> = None;
    let mut key_over: Vec<Option<Episode>> = vec![None; keys.len()];
    let mut touched: Vec<(usize, i64)> = Vec::new(); // (key, before the instant)
    let mut i = 0;
    let mut last = points.first().map_or(0, |p| p.0);
    while i < points.len() {
        let at = points[i].0;
        let l = &mut f.stats.limited;
        if running == max_running {
            l.at_max_running_us += at - last;
        }
        if keys_at_max > 0 {
            l.at_key_max_us += at - last;
        }
        last = at;
        let before = running;
        touched.clear();
        while i < points.len() && points[i].0 == at {
            let (_, delta, k) = points[i];
            i += 1;
            running += i64::from(delta);
            if keys[k].is_some() {
                if !touched.iter().any(|t| t.0 == k) {
                    touched.push((k, per_key[k]));
                }
                per_key[k] += i64::from(delta);
            }
        }
        l.max_running = l.max_running.max(running.max(0) as u64);
        if before < max_running && running >= max_running {
            l.max_running_reached += 1;
        }
        Episode::step(&mut over, at, running, max_running, |e| {
            f.flag("limit_max_running", || {
                format!(
                    "{} jobs of {} running at once {} (max_running {max_running})",
                    e.peak,
                    plan::LIMITED_QUEUE,
                    e.describe(Some(at))
                )
            });
        });
        for &(k, was) in &touched {
            let now = per_key[k];
            let l = &mut f.stats.limited;
            if now.max(0) as u64 > l.max_key_running {
                l.max_key_running = now as u64;
                l.max_key = keys[k].map(str::to_owned);
            }
            match (was >= key_max, now >= key_max) {
                (false, true) => {
                    keys_at_max += 1;
                    l.key_max_reached += 1;
                }
                (true, false) => keys_at_max -= 1,
                _ => {}
            }
            let key = keys[k].unwrap_or_default();
            Episode::step(&mut key_over[k], at, now, key_max, |e| {
                f.flag("limit_key_max_running", || {
                    format!(
                        "{} jobs of key {key} running at once {} (key_max_running {key_max})",
                        e.peak,
                        e.describe(Some(at))
                    )
                });
            });
        }
    }
    // Episodes still open at the end (an attempt that never ended).
    if let Some(e) = over {
        f.flag("limit_max_running", || {
            format!(
                "{} jobs of {} running at once {} (max_running {max_running})",
                e.peak,
                plan::LIMITED_QUEUE,
                e.describe(None)
            )
        });
    }
    for (k, e) in key_over.into_iter().enumerate() {
        if let Some(e) = e {
            let key = keys[k].unwrap_or_default();
            f.flag("limit_key_max_running", || {
                format!(
                    "{} jobs of key {key} running at once {} (key_max_running {key_max})",
                    e.peak,
                    e.describe(None)
                )
            });
        }
    }

    // The rate limit: the window starting at each claim; a violation is a
    // run of consecutive windows over the count, with its fullest window.
    claims.sort_unstable();
    let period_us = limits.rate.period_ms * 1_000;
    let count = limits.rate.count as u64;
    let mut end = 0;
    let mut over: Option<Episode> = None;
    let flag_rate = |f: &mut Findings, e: Episode| {
        f.flag("limit_rate", || {
            format!(
                "{} claims of {} in the {} ms from {} (rate limit {count})",
                e.peak,
                plan::LIMITED_QUEUE,
                limits.rate.period_ms,
                at_us(e.peak_at)
            )
        });
    };
    for (i, &t) in claims.iter().enumerate() {
        while end < claims.len() && claims[end] - t < period_us {
            end += 1;
        }
        let inside = (end - i) as u64;
        let l = &mut f.stats.limited;
        l.max_window_claims = l.max_window_claims.max(inside);
        if inside == count {
            l.full_windows += 1;
        }
        let mut ended = None;
        Episode::step(&mut over, t, inside as i64, count as i64, |e| {
            ended = Some(e)
        });
        if let Some(e) = ended {
            flag_rate(f, e);
        }
    }
    if let Some(e) = over {
        flag_rate(f, e);
    }

    let l = f.stats.limited.clone();
    if l.claims >= EXERCISED_AFTER_WINDOWS * count {
        let reached = [
            ("max_running", l.max_running, max_running as u64),
            ("key_max_running", l.max_key_running, key_max as u64),
            ("the rate limit", l.max_window_claims, count),
        ];
        for (what, seen, limit) in reached {
            if seen < limit {
                f.flag("limits_not_exercised", || {
                    format!("{what} {limit} never bound: at most {seen} ({} claims of the limited queue)", l.claims)
                });
            }
        }
    }
}

/// A stretch of time during which a limit was exceeded.
#[derive(Debug, Clone, Copy)]
struct Episode {
    /// Where it began (µs).
    from: i64,
    /// The highest count in it.
    peak: i64,
    /// Where that count was first reached (µs).
    peak_at: i64,
}

impl Episode {
    /// Updates the episode `over` with the `value` that holds from `at` on
    /// against `limit`; calls `ended` with an episode that ends at `at`.
    fn step(
        over: &mut Option<Episode>,
        at: i64,
        value: i64,
        limit: i64,
        ended: impl FnOnce(Episode),
    ) {
        if value > limit {
            let e = over.get_or_insert(Episode {
                from: at,
                peak: value,
                peak_at: at,
            });
            if value > e.peak {
                e.peak = value;
                e.peak_at = at;
            }
        } else if let Some(e) = over.take() {
            ended(e);
        }
    }

    /// "from X until Y" (`until`: `None` for the end of the history).
    fn describe(&self, until: Option<i64>) -> String {
        format!(
            "from {} until {}",
            at_us(self.from),
            until.map_or("the end".to_owned(), |u| at_us(u).to_string())
        )
    }
}

/// An instant in µs as a timestamp.
fn at_us(t: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t).unwrap_or_default()
}

/// With `--failover`, the work went on on the new primary through every
/// replica. An event at or after the instant the promoted standby first
/// took writes was written there (the old primary was gone by then); among
/// them there must be claims and completions by workers of each replica,
/// so each replica's pool moved to the new primary and served on it.
fn check_failover(f: &mut Findings, events: &[EventRow], cx: &Context) {
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
fn check_errors(f: &mut Findings, obs: &Obs) {
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

#[cfg(test)]
mod tests {
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
}
