//! The lifecycle rules that need no database: defaults, the backoff formula,
//! where a failed attempt goes, and how error messages are kept.
//!
//! Backends evaluate the same rules inside their SQL (so that each transition
//! stays one atomic statement); the behaviour suite checks them against these
//! functions.

use crate::model::{Backoff, Failure, JobState};

/// Attempt budget of a job whose queue sets none.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;
/// Backoff base of a queue that sets none.
pub const DEFAULT_BACKOFF_BASE_MS: i64 = 1_000;
/// Backoff cap of a queue that sets none.
pub const DEFAULT_BACKOFF_CAP_MS: i64 = 3_600_000;
/// Lease length of a claim that sets none, on a queue that sets none.
pub const DEFAULT_LEASE_TTL_MS: i64 = 30_000;
/// How many characters of an error message are kept (the tail).
pub const ERROR_TAIL_CHARS: usize = 2_000;
/// Name of the lease that elects the maintenance leader.
pub const MAINTENANCE_LEASE: &str = "maintenance";

/// The delay before retry number `attempt` (1 = after the first failure):
/// `min(base * 2^(attempt-1), cap) * jitter`, with jitter in [1.0, 1.5).
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
