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

use crate::model::{Backoff, Failure, JobState};

/// Attempt budget of a job whose queue sets none.
///
/// This and the backoff defaults, for a queue without a row or a new one:
/// - PostgreSQL writes them out in
///   `tether_postgres::sql::enqueue::INSERT_JOBS`,
///   `tether_postgres::sql::queues::QUEUE_STATS` (and `LIST_QUEUES`) and
///   `tether_postgres::sql::queues::CONFIGURE_QUEUE`;
/// - SQLite binds [`crate::QueueConfig::default`] into
///   `tether_sqlite::sql::enqueue::REGISTER_QUEUES`,
///   `tether_sqlite::sql::enqueue::insert_jobs_sql`,
///   `tether_sqlite::sql::queues::SET_PAUSED` and
///   `tether_sqlite::sql::queues::CONFIGURE_QUEUE`, and fills them in with
///   `tether_sqlite::rows::queue_stats`;
/// - both bind them to tell a queue at its defaults when removing empty
///   ones: `tether_postgres::sql::maintenance::EMPTY_QUEUES` (and
///   `DELETE_EMPTY_QUEUES`), `tether_sqlite::sql::maintenance::PRUNE_EMPTY_QUEUES`.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;
/// Backoff base of a queue that sets none (where it is written: see
/// [`DEFAULT_MAX_ATTEMPTS`]).
pub const DEFAULT_BACKOFF_BASE_MS: i64 = 1_000;
/// Backoff cap of a queue that sets none (where it is written: see
/// [`DEFAULT_MAX_ATTEMPTS`]).
pub const DEFAULT_BACKOFF_CAP_MS: i64 = 3_600_000;
/// Lease length of a claim that sets none, on a queue that sets none.
///
/// Written out in `tether_postgres::sql::attempts::CLAIM`, bound into
/// `tether_sqlite::sql::attempts::CLAIM` and
/// `tether_sqlite::sql::attempts::HEARTBEAT` (a lease without a recorded
/// TTL); for queue rows, see [`DEFAULT_MAX_ATTEMPTS`].
pub const DEFAULT_LEASE_TTL_MS: i64 = 30_000;
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

/// A worker's report that ends an attempt: `complete`, `fail` or `snooze`.
///
/// Reports are safe to repeat. The token that ended an attempt stays on the
/// job until the next claim (or the reaper) replaces it, so a report sent
/// again with that token, because its answer was lost, finds the job still
/// carrying it in a state this report leads to, and is answered with the job
/// as it stands, changing nothing and recording no `lease_lost`. Any other
/// stale token is still `lease_lost`.
///
/// The fenced writes are `sql::attempts::COMPLETE`,
/// `sql::attempts::COMPLETE_MANY` and `sql::attempts::SNOOZE` in both
/// backends, with `tether_postgres::sql::attempts::FAIL` and
/// `tether_sqlite::sql::attempts::FAIL_WRITE`. A repeat is recognised:
/// - on PostgreSQL, by the `repeated` step of those statements (the
///   `settle_ctes!` tail of `COMPLETE`, `FAIL` and `SNOOZE`, bound to
///   [`Report::outcome_names`]; its own step in `COMPLETE_MANY`), whose
///   `lost` step records `lease_lost`;
/// - on SQLite, by `tether_sqlite::sql::attempts::REPEATED_REPORT` (bound to
///   [`Report::outcome_names`]) and
///   `tether_sqlite::sql::attempts::SUCCEEDED_TOKENS`, and `lease_lost` by
///   `tether_sqlite::sql::attempts::LEASE_LOST` (and `LEASE_LOST_MANY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// `complete`: the job succeeded.
    Complete,
    /// `fail`: retried, failed or cancelled.
    Fail,
    /// `snooze`: queued again, or cancelled when that was requested.
    Snooze,
}

impl Report {
    /// Its name, as history's `lease_lost` detail says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Report::Complete => "complete",
            Report::Fail => "fail",
            Report::Snooze => "snooze",
        }
    }

    /// The states this report can leave a job in.
    pub fn outcomes(self) -> &'static [JobState] {
        match self {
            Report::Complete => &[JobState::Succeeded],
            Report::Fail => &[JobState::Queued, JobState::Failed, JobState::Cancelled],
            Report::Snooze => &[JobState::Queued, JobState::Cancelled],
        }
    }

    /// [`Report::outcomes`] as the state names the database stores.
    pub fn outcome_names(self) -> Vec<&'static str> {
        self.outcomes().iter().map(|s| s.as_str()).collect()
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
    fn error_keeps_the_tail() {
        let long = format!("{}END", "x".repeat(5_000));
        let kept = error_tail(&long);
        assert_eq!(kept.chars().count(), ERROR_TAIL_CHARS);
        assert!(kept.ends_with("END"));
        assert_eq!(error_tail("short"), "short");
    }
}
