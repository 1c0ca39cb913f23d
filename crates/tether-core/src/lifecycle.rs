//! The lifecycle rules that need no database: defaults, the backoff formula,
//! where a failed attempt goes, and how error messages are kept.
//!
//! Backends evaluate the same rules inside their SQL (so that each transition
//! stays one atomic statement); the behaviour suite checks them against these
//! functions.
//!
//! Each rule below names the statements that mirror it, as
//! `tether_postgres::sql::<module>::<NAME>` and
//! `tether_sqlite::sql::<module>::<NAME>`: crate-private constants, found in
//! `crates/tether-<backend>/src/sql/<module>.rs`. A change to a rule is a
//! change to every statement it names (and to the tables' column defaults
//! in the migrations, for the `DEFAULT_*` values).

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::Error;
use crate::model::{Backoff, Failure, JobState, LeaseToken};

/// The defaults of a queue that sets none, written once, as literals: the
/// `DEFAULT_*` constants below take their values from these, and so do the
/// PostgreSQL statements that need them in their text (built with
/// `concat!`). The first migrations of both backends wrote the same values
/// as column defaults; the behaviour suite checks that a new queue gets
/// these constants on every backend.
#[doc(hidden)]
#[macro_export]
macro_rules! default_max_attempts {
    () => {
        5
    };
}
/// See [`default_max_attempts!`].
#[doc(hidden)]
#[macro_export]
macro_rules! default_backoff_base_ms {
    () => {
        1000
    };
}
/// See [`default_max_attempts!`].
#[doc(hidden)]
#[macro_export]
macro_rules! default_backoff_cap_ms {
    () => {
        3600000
    };
}
/// See [`default_max_attempts!`].
#[doc(hidden)]
#[macro_export]
macro_rules! default_lease_ttl_ms {
    () => {
        30000
    };
}

/// Attempt budget of a job whose queue sets none.
///
/// This and the other queue defaults, for a queue without a row or a new
/// one:
/// - PostgreSQL writes them into its statements' text from the macros
///   above (`tether_postgres::sql::enqueue::INSERT_JOBS`,
///   `tether_postgres::sql::queues::QUEUE_STATS` (and `LIST_QUEUES`),
///   `tether_postgres::sql::queues::CONFIGURE_QUEUE` and the claims of
///   `tether_postgres::sql::attempts`);
/// - SQLite binds [`crate::QueueConfig::default`] into
///   `tether_sqlite::sql::enqueue::REGISTER_QUEUES`,
///   `tether_sqlite::sql::enqueue::insert_jobs_sql`,
///   `tether_sqlite::sql::queues::SET_PAUSED` and
///   `tether_sqlite::sql::queues::CONFIGURE_QUEUE`, and fills them in with
///   `tether_sqlite::rows::queue_stats`;
/// - both bind them to tell a queue at its defaults when removing empty
///   ones: `tether_postgres::sql::maintenance::EMPTY_QUEUES` (and
///   `DELETE_EMPTY_QUEUES`), `tether_sqlite::sql::maintenance::PRUNE_EMPTY_QUEUES`.
pub const DEFAULT_MAX_ATTEMPTS: i32 = default_max_attempts!();
/// Backoff base of a queue that sets none (where it is written: see
/// [`DEFAULT_MAX_ATTEMPTS`]).
pub const DEFAULT_BACKOFF_BASE_MS: i64 = default_backoff_base_ms!();
/// Backoff cap of a queue that sets none (where it is written: see
/// [`DEFAULT_MAX_ATTEMPTS`]).
pub const DEFAULT_BACKOFF_CAP_MS: i64 = default_backoff_cap_ms!();
/// Lease length of a claim that sets none, on a queue that sets none.
///
/// Written into the claims of `tether_postgres::sql::attempts` from
/// [`default_lease_ttl_ms!`], bound into
/// `tether_sqlite::sql::attempts::CLAIM` and
/// `tether_sqlite::sql::attempts::HEARTBEAT` (a lease without a recorded
/// TTL); for queue rows, see [`DEFAULT_MAX_ATTEMPTS`].
pub const DEFAULT_LEASE_TTL_MS: i64 = default_lease_ttl_ms!();
/// How many characters of an error message are kept (the tail): see
/// [`error_tail`].
pub const ERROR_TAIL_CHARS: usize = 2_000;
/// Name of the lease that elects the maintenance leader. Named leases are
/// taken, renewed and given up by `sql::maintenance::ACQUIRE_LEASE`,
/// `sql::maintenance::RENEW_LEASE` and `sql::maintenance::RELEASE_LEASE`,
/// the same names in both backends.
pub const MAINTENANCE_LEASE: &str = "maintenance";

/// The delay before retry number `attempt` (1 = after the first failure):
/// `min(base * 2^(attempt-1), cap) * jitter`, with jitter in [1.0, 1.5).
///
/// Mirrored by the `delay_ms` column of
/// `tether_postgres::sql::attempts::FAIL` (its `$8` is the jitter). SQLite
/// calls this function in `tether_sqlite::attempts::fail` and writes the
/// delay with `tether_sqlite::sql::attempts::FAIL_WRITE`.
pub fn backoff_delay_ms(backoff: Backoff, attempt: i32, jitter: f64) -> i64 {
    let exponent = (attempt.max(1) - 1).min(62) as u32;
    let raw = backoff
        .base_ms
        .saturating_mul(1_i64.checked_shl(exponent).unwrap_or(i64::MAX));
    let capped = raw.min(backoff.cap_ms);
    (capped as f64 * jitter) as i64
}

/// A fresh jitter factor in [1.0, 1.5).
pub fn jitter() -> f64 {
    1.0 + rand::random::<f64>() * 0.5
}

/// Where a running job goes after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Queued again after a delay (`retry_scheduled`).
    Retry,
    /// Failed for good: fatal, or no attempts left.
    Failed,
    /// Cancelled: the worker acknowledged a cancel request.
    Cancelled,
}

impl FailOutcome {
    /// The job's state after this outcome.
    pub fn state(self) -> JobState {
        match self {
            FailOutcome::Retry => JobState::Queued,
            FailOutcome::Failed => JobState::Failed,
            FailOutcome::Cancelled => JobState::Cancelled,
        }
    }
}

/// Decides where a failed attempt goes. A fatal error or an exhausted budget
/// fails the job; a worker that stopped for a cancel request (or any failure
/// while cancellation is pending) cancels it; otherwise it is retried.
///
/// Mirrored by the `next_state` column of
/// `tether_postgres::sql::attempts::FAIL`. SQLite reads what it needs with
/// `tether_sqlite::sql::attempts::FAIL_READ`, calls this function in
/// `tether_sqlite::attempts::fail`, and writes the outcome with
/// `tether_sqlite::sql::attempts::FAIL_WRITE`.
pub fn fail_outcome(
    attempt: i32,
    max_attempts: i32,
    cancel_requested: bool,
    failure: &Failure,
) -> FailOutcome {
    if failure.cancelled || (cancel_requested && !failure.fatal) {
        FailOutcome::Cancelled
    } else if failure.fatal || attempt >= max_attempts {
        FailOutcome::Failed
    } else {
        FailOutcome::Retry
    }
}

/// A worker's report that ends an attempt — `complete`, `fail` or `snooze` —
/// with the arguments that make it this report.
///
/// Every report is exact (invariant 20 of `docs/DESIGN.md`). The token that
/// ended an attempt stays on the job until the next claim, the reaper or a
/// replay replaces it, and the transition records the report's
/// [`Report::digest`] beside it. A report whose fence finds the job no longer
/// running under its token is answered by [`Report::answer`] from the job as
/// read under its row's lock:
/// - the job still carries the token: the same report again (its answer was
///   lost, or it raced its own retry) is answered with the job as it stands,
///   changing nothing and recording nothing; a different report is
///   [`Error::report_conflict`] (`invalid_state`), changing nothing;
/// - the job carries another token, or none: something else ended or took
///   the claim, and the report is `lease_lost` (recorded in the history).
///
/// The fenced writes are `sql::attempts::COMPLETE`,
/// `sql::attempts::COMPLETE_MANY` and `sql::attempts::SNOOZE` in both
/// backends, with `tether_postgres::sql::attempts::FAIL` and
/// `tether_sqlite::sql::attempts::FAIL_WRITE`; each writes the digest. A
/// report they did not apply is read back under the row's lock:
/// - on PostgreSQL by `tether_postgres::sql::attempts::SETTLE`, for single
///   reports and the items of a batch alike, in a statement of its own
///   after the fenced one: it locks the rows in id order, so a report
///   racing its own retry reads what the retry committed, not its first
///   statement's snapshot; it records `lease_lost` where [`Report::answer`]
///   answers it;
/// - on SQLite, in the fenced write's own transaction (which holds the
///   write lock), by `tether_sqlite::sql::attempts::STANDING` (and
///   `LEASE_LOST`, `LEASE_LOST_MANY`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Report<'a> {
    /// `complete`: the job succeeded, with this result.
    Complete(Option<&'a serde_json::Value>),
    /// `fail`: retried, failed or cancelled.
    Fail(&'a Failure),
    /// `snooze`: queued again after this delay (ms), or cancelled when that
    /// was requested.
    Snooze(i64),
}

impl Report<'_> {
    /// Its name, as history's `lease_lost` detail says it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Report::Complete(_) => "complete",
            Report::Fail(_) => "fail",
            Report::Snooze(_) => "snooze",
        }
    }

    /// The states this report can leave a job in.
    pub fn outcomes(&self) -> &'static [JobState] {
        match self {
            Report::Complete(_) => &[JobState::Succeeded],
            Report::Fail(_) => &[JobState::Queued, JobState::Failed, JobState::Cancelled],
            Report::Snooze(_) => &[JobState::Queued, JobState::Cancelled],
        }
    }

    /// What the job records of the report that ended its attempt, to tell a
    /// repeat from a different report: `<name>:<32 hex digits>`, the name
    /// and the first 128 bits of the SHA-256 of the arguments that make the
    /// report this one. Those are: `complete`, the result (no result and a
    /// JSON `null` are the same; objects compare whatever the order of
    /// their keys); `fail`, the error as kept ([`error_tail`]),
    /// `retry_after_ms`, `fatal` and `cancelled` (the jitter is the
    /// store's, not the report's); `snooze`, the delay.
    pub fn digest(&self) -> String {
        // The arguments as a JSON array, streamed into the hash (a result
        // may be large: it is neither copied nor rendered to a string).
        let mut hash = HashWriter(Sha256::new());
        let written = match self {
            Report::Complete(result) => serde_json::to_writer(
                &mut hash,
                &(Canonical(result.unwrap_or(&serde_json::Value::Null)),),
            ),
            Report::Fail(f) => serde_json::to_writer(
                &mut hash,
                &(error_tail(&f.error), f.retry_after_ms, f.fatal, f.cancelled),
            ),
            Report::Snooze(delay_ms) => serde_json::to_writer(&mut hash, &(delay_ms,)),
        };
        written.expect("serialising JSON values into a hash cannot fail");
        let digest = hash.0.finalize();
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}:{hex}", self.as_str())
    }

    /// Answers this report, sent with `token`, on job `id`, which its fence
    /// did not find running under that token; `standing` is the job as read
    /// under its row's lock afterwards (`None`: no such job in the tenant).
    /// `Ok` is a repeat of the report that ended the attempt: it is answered
    /// with the job as it stands and changes nothing. Otherwise the error:
    /// `JobNotFound`; `LeaseLost` when the job carries another token or
    /// none (another claim, the reaper or a replay took it over; the store
    /// records `lease_lost`); or a conflict (see [`Report::settle`]), which
    /// records nothing.
    pub fn answer(
        &self,
        id: Uuid,
        token: LeaseToken,
        standing: Option<&Standing>,
    ) -> Result<(), Error> {
        match standing {
            None => Err(Error::JobNotFound(id)),
            // Still running under the token is not a case: the fence, which
            // ran first, would have applied the report.
            Some(s) if s.lease_token != Some(token) || s.state == JobState::Running => {
                Err(Error::LeaseLost(id))
            }
            Some(s) => self.settle(id, s.state, s.report_digest.as_deref()),
        }
    }

    /// Answers this report when its token is the one that ended job `id`'s
    /// last attempt (the job carries it and is no longer running under it):
    /// `Ok` for a repeat of the report that did, to be answered with the job
    /// as it stands; [`Error::report_conflict`] for a different report.
    /// `recorded` is the digest the ending transition wrote; a job that
    /// ended before digests were recorded (an upgraded database) has none,
    /// and then any report that can lead to its `state` counts as a repeat.
    pub fn settle(&self, id: Uuid, state: JobState, recorded: Option<&str>) -> Result<(), Error> {
        let same = match recorded {
            Some(digest) => digest == self.digest(),
            None => self.outcomes().contains(&state),
        };
        if same {
            Ok(())
        } else {
            let ended_by = recorded.and_then(|d| d.split(':').next());
            Err(Error::report_conflict(id, state, self.as_str(), ended_by))
        }
    }
}

/// A job as a report whose fence did not apply finds it, read under the
/// job row's lock (see [`Report::answer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// Its state.
    pub state: JobState,
    /// The token it carries: the running claim's, or the one that ended the
    /// last attempt; none after the reaper or a replay.
    pub lease_token: Option<LeaseToken>,
    /// The [`Report::digest`] of the report that ended the attempt of
    /// `lease_token` (none before digests were recorded, or when no report
    /// ended it).
    pub report_digest: Option<String>,
}

/// A JSON value that serialises with the keys of every object in order, so
/// that two objects that differ only in the order of their keys serialise
/// alike (whatever `serde_json`'s map keeps).
struct Canonical<'a>(&'a serde_json::Value);

impl serde::Serialize for Canonical<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            serde_json::Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    out.serialize_entry(k, &Canonical(&map[k]))?;
                }
                out.end()
            }
            serde_json::Value::Array(items) => {
                let mut out = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Canonical(item))?;
                }
                out.end()
            }
            other => other.serialize(s),
        }
    }
}

/// Feeds what is written into a hash.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where a running job whose lease lapsed goes: on a cancel request it ends
/// cancelled; on its last attempt it fails (never claimed again); otherwise it
/// is queued again.
///
/// Mirrored by the `state` CASE of `tether_postgres::sql::maintenance::REAP`
/// and `tether_sqlite::sql::maintenance::REAP`.
pub fn lapse_outcome(attempt: i32, max_attempts: i32, cancel_requested: bool) -> JobState {
    if cancel_requested {
        JobState::Cancelled
    } else if attempt >= max_attempts {
        JobState::Failed
    } else {
        JobState::Queued
    }
}

/// Keeps the last [`ERROR_TAIL_CHARS`] characters of an error message: the
/// end of a stack trace or a chain of causes is where the cause usually is.
///
/// [`crate::Engine`] applies it before a failure reaches the store, so the
/// `$4` of `tether_postgres::sql::attempts::FAIL` is already a tail; SQLite
/// applies it once more in `tether_sqlite::attempts::fail` before
/// `FAIL_WRITE`. No statement truncates by itself.
pub fn error_tail(message: &str) -> String {
    let chars = message.chars().count();
    let tail = message.chars().skip(chars.saturating_sub(ERROR_TAIL_CHARS));
    // U+0000 cannot be stored in a PostgreSQL text column; an error message
    // is kept, not refused, so it is replaced.
    tail.map(|c| {
        if c == '\0' {
            char::REPLACEMENT_CHARACTER
        } else {
            c
        }
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_then_caps() {
        let b = Backoff {
            base_ms: 1_000,
            cap_ms: 10_000,
        };
        assert_eq!(backoff_delay_ms(b, 1, 1.0), 1_000);
        assert_eq!(backoff_delay_ms(b, 2, 1.0), 2_000);
        assert_eq!(backoff_delay_ms(b, 4, 1.0), 8_000);
        assert_eq!(backoff_delay_ms(b, 5, 1.0), 10_000);
        assert_eq!(backoff_delay_ms(b, 500, 1.0), 10_000);
        assert_eq!(backoff_delay_ms(b, 2, 1.25), 2_500);
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..10_000 {
            let j = jitter();
            assert!((1.0..1.5).contains(&j), "{j}");
        }
    }

    #[test]
    fn failure_routing() {
        let plain = Failure::default();
        assert_eq!(fail_outcome(1, 3, false, &plain), FailOutcome::Retry);
        assert_eq!(fail_outcome(3, 3, false, &plain), FailOutcome::Failed);
        let fatal = Failure {
            fatal: true,
            ..Failure::default()
        };
        assert_eq!(fail_outcome(1, 3, false, &fatal), FailOutcome::Failed);
        assert_eq!(fail_outcome(1, 3, true, &fatal), FailOutcome::Failed);
        assert_eq!(fail_outcome(1, 3, true, &plain), FailOutcome::Cancelled);
        let ack = Failure {
            cancelled: true,
            ..Failure::default()
        };
        assert_eq!(fail_outcome(3, 3, false, &ack), FailOutcome::Cancelled);
    }

    #[test]
    fn the_same_report_is_told_from_another() {
        use serde_json::json;
        let result = json!({"a": 1, "b": {"y": [1, 2], "x": null}});
        let reordered = json!({"b": {"x": null, "y": [1, 2]}, "a": 1});
        let complete = Report::Complete(Some(&result));
        assert_eq!(
            complete.digest(),
            Report::Complete(Some(&reordered)).digest()
        );
        assert_eq!(
            Report::Complete(None).digest(),
            Report::Complete(Some(&serde_json::Value::Null)).digest()
        );
        assert_ne!(complete.digest(), Report::Complete(None).digest());
        assert!(complete.digest().starts_with("complete:"));
        assert_eq!(complete.digest().len(), "complete:".len() + 32);
        // The format is stored: a change would turn every repeat of a report
        // made before it into a conflict. The arguments as a compact JSON
        // array, keys in order; the first 128 bits of their SHA-256.
        let hex = |text: &str| -> String {
            Sha256::digest(text.as_bytes())[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let unordered = json!({"b": 2, "a": {"d": null, "c": [true]}});
        assert_eq!(
            Report::Complete(Some(&unordered)).digest(),
            format!("complete:{}", hex(r#"[{"a":{"c":[true],"d":null},"b":2}]"#))
        );
        let retry = Failure {
            error: "x".into(),
            retry_after_ms: Some(5),
            ..Failure::default()
        };
        assert_eq!(
            Report::Fail(&retry).digest(),
            format!("fail:{}", hex(r#"["x",5,false,false]"#))
        );
        assert_eq!(Report::Snooze(7).digest(), format!("snooze:{}", hex("[7]")));

        let retry = Failure {
            error: "boom".into(),
            ..Failure::default()
        };
        let fail = Report::Fail(&retry);
        let others = [
            Failure {
                fatal: true,
                ..retry.clone()
            },
            Failure {
                retry_after_ms: Some(0),
                ..retry.clone()
            },
            Failure {
                cancelled: true,
                ..retry.clone()
            },
            Failure {
                error: "bang".into(),
                ..retry.clone()
            },
        ];
        for other in &others {
            assert_ne!(fail.digest(), Report::Fail(other).digest(), "{other:?}");
        }
        // The error is compared as kept: its tail.
        let long = Failure {
            error: format!("{}END", "x".repeat(ERROR_TAIL_CHARS + 10)),
            ..Failure::default()
        };
        let kept = Failure {
            error: error_tail(&long.error),
            ..Failure::default()
        };
        assert_eq!(Report::Fail(&long).digest(), Report::Fail(&kept).digest());
        assert_ne!(Report::Snooze(0).digest(), Report::Snooze(1).digest());
        // The same arguments under another name are another report.
        assert_ne!(
            Report::Snooze(0).digest(),
            Report::Complete(Some(&json!(0))).digest()
        );
    }

    #[test]
    fn a_report_is_answered_by_what_the_job_carries() {
        let id = Uuid::now_v7();
        let mine = LeaseToken(Uuid::new_v4());
        let retry = Failure {
            error: "boom".into(),
            ..Failure::default()
        };
        let fail = Report::Fail(&retry);
        let ended = |state, token, digest: Option<String>| Standing {
            state,
            lease_token: token,
            report_digest: digest,
        };
        let by_fail = ended(JobState::Queued, Some(mine), Some(fail.digest()));
        assert!(fail.answer(id, mine, Some(&by_fail)).is_ok());
        // Cancelled since (a queued job): still the repeat of what ended it.
        let cancelled = ended(JobState::Cancelled, Some(mine), Some(fail.digest()));
        assert!(fail.answer(id, mine, Some(&cancelled)).is_ok());
        for other in [Report::Snooze(0), Report::Complete(None)] {
            let e = other.answer(id, mine, Some(&by_fail)).unwrap_err();
            assert_eq!(e.code(), crate::ErrorCode::InvalidState, "{e}");
            assert!(e.to_string().contains("with a fail"), "{e}");
        }
        // Another token, none, or still running: something else took it.
        let other = LeaseToken(Uuid::new_v4());
        for s in [
            ended(JobState::Running, Some(other), None),
            ended(JobState::Queued, None, None),
            ended(JobState::Running, Some(mine), None),
        ] {
            assert!(matches!(
                fail.answer(id, mine, Some(&s)),
                Err(Error::LeaseLost(_))
            ));
        }
        assert!(matches!(
            fail.answer(id, mine, None),
            Err(Error::JobNotFound(_))
        ));
        // Ended before digests were recorded: judged by the state.
        let old = ended(JobState::Queued, Some(mine), None);
        assert!(fail.answer(id, mine, Some(&old)).is_ok());
        assert!(Report::Snooze(5).answer(id, mine, Some(&old)).is_ok());
        let e = Report::Complete(None)
            .answer(id, mine, Some(&old))
            .unwrap_err();
        assert!(e.to_string().contains("another report"), "{e}");
    }

    #[test]
    fn error_keeps_the_tail() {
        let long = format!("{}END", "x".repeat(5_000));
        let kept = error_tail(&long);
        assert_eq!(kept.chars().count(), ERROR_TAIL_CHARS);
        assert!(kept.ends_with("END"));
        assert_eq!(error_tail("short"), "short");
    }
}
