//! What every job does, decided by the run's seed and the job's number
//! alone, so that the worker processes (which run the handlers) and the
//! checker (which judges the outcomes) agree without talking to each other.

use std::time::Duration;

use tether_core::Backoff;

/// The main queue.
pub const QUEUE: &str = "chaos";
/// The queue of handlers that run longer than their lease.
pub const SLOW_QUEUE: &str = "chaos-slow";
/// The one kind (handler name).
pub const KIND: &str = "chaos";
/// Lease of the main queue's claims (heartbeats every third of it).
pub const LEASE: Duration = Duration::from_secs(4);
/// Lease of the slow queue's claims: shorter than its handlers run.
pub const SLOW_LEASE: Duration = Duration::from_secs(2);
/// Snoozes up to this long are slept in-process; longer ones go back to the
/// queue (and are recorded as `snoozed`).
pub const MAX_IN_PROCESS_SNOOZE: Duration = Duration::from_millis(100);
/// Handlers per worker process on the main queue.
pub const CONCURRENCY: usize = 16;
/// Handlers per worker process on the slow queue.
pub const SLOW_CONCURRENCY: usize = 10;
/// Retry backoff of every job (short, so retries finish within the run).
pub const BACKOFF: Backoff = Backoff {
    base_ms: 100,
    cap_ms: 1_000,
};
/// A job whose `run_at` is this close to its `created_at` was never moved
/// (not snoozed, retried or reaped yet).
pub const UNMOVED_SLACK_MS: i64 = 50;

/// What a job's handler does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Succeeds after a short sleep.
    Ok {
        /// Handler time.
        sleep_ms: u64,
    },
    /// Fails retryably on attempts `1..=fails`, then succeeds; with
    /// `retry_after_ms` the failure names when to come back.
    Flaky {
        /// Failed attempts before the success.
        fails: i32,
        /// The upstream's Retry-After, if any.
        retry_after_ms: Option<u64>,
    },
    /// Fails retryably on every attempt: ends `failed` once exhausted.
    AlwaysRetry,
    /// Fails fatally: ends `failed` at once.
    Fatal,
    /// Snoozes back to the queue once (while its `run_at` was never moved),
    /// then succeeds.
    SnoozeQueue {
        /// The snooze (above [`MAX_IN_PROCESS_SNOOZE`]).
        delay_ms: u64,
    },
    /// Snoozes in-process once per claim (the runtime sleeps it while
    /// heartbeating), then succeeds.
    SnoozeInProcess {
        /// The snooze (at most [`MAX_IN_PROCESS_SNOOZE`]).
        delay_ms: u64,
    },
    /// Runs longer than its lease ([`SLOW_LEASE`]), kept alive by
    /// heartbeats, then succeeds.
    Slow {
        /// Handler time.
        sleep_ms: u64,
    },
}

/// SplitMix64: a well-mixed 64-bit hash.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The plan of job `n` in a run seeded `seed`.
pub fn plan(seed: u64, n: u64) -> Plan {
    let h = mix(seed ^ mix(n.wrapping_add(0x5eed)));
    let roll = h % 1000;
    let r = (h >> 16) % 1000;
    match roll {
        0..=549 => Plan::Ok { sleep_ms: r % 25 },
        550..=669 => Plan::Flaky {
            fails: 1 + (r % 2) as i32,
            retry_after_ms: (r % 3 == 0).then_some(150 + r % 100),
        },
        670..=699 => Plan::AlwaysRetry,
        700..=729 => Plan::Fatal,
        730..=829 => Plan::SnoozeQueue {
            delay_ms: 300 + r % 500,
        },
        830..=899 => Plan::SnoozeInProcess {
            delay_ms: 20 + r % 60,
        },
        900..=914 => Plan::Slow {
            sleep_ms: 2_600 + r % 900,
        },
        _ => Plan::Ok {
            sleep_ms: 100 + r % 200,
        },
    }
}

impl Plan {
    /// The queue the job goes to.
    pub fn queue(self) -> &'static str {
        match self {
            Plan::Slow { .. } => SLOW_QUEUE,
            _ => QUEUE,
        }
    }

    /// The job's `max_attempts`.
    pub fn max_attempts(self) -> i32 {
        match self {
            Plan::AlwaysRetry => 3,
            _ => 5,
        }
    }

    /// How the handler fails `attempt` (`Some((fatal, message))`), or `None`
    /// when it does not fail it (succeeds, possibly after snoozing).
    pub fn failure_on(self, attempt: i32) -> Option<(bool, String)> {
        match self {
            Plan::Flaky { fails, .. } if attempt <= fails => Some((false, retry_message(attempt))),
            Plan::AlwaysRetry => Some((false, retry_message(attempt))),
            Plan::Fatal => Some((true, FATAL_MESSAGE.to_owned())),
            _ => None,
        }
    }
}

/// The message of a planned retryable failure.
pub fn retry_message(attempt: i32) -> String {
    format!("chaos: planned failure on attempt {attempt}")
}

/// The message of a planned fatal failure.
pub const FATAL_MESSAGE: &str = "chaos: planned fatal failure";

/// The idempotency key of job `n`.
pub fn key(n: u64) -> String {
    format!("chaos:{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_deterministic_and_mixed() {
        let mut kinds = std::collections::BTreeMap::new();
        for n in 0..10_000u64 {
            let p = plan(7, n);
            assert_eq!(p, plan(7, n));
            let name = format!("{p:?}");
            let name = name.split([' ', '{']).next().unwrap().to_owned();
            *kinds.entry(name).or_insert(0u32) += 1;
        }
        assert_eq!(kinds.len(), 7, "{kinds:?}");
        assert!(kinds["Ok"] > 5_000 && kinds["Slow"] > 50, "{kinds:?}");
        assert!(
            (0..100).any(|n| plan(1, n) != plan(2, n)),
            "the seed matters"
        );
    }

    #[test]
    fn failures_follow_the_plan() {
        let flaky = Plan::Flaky {
            fails: 2,
            retry_after_ms: None,
        };
        assert!(flaky.failure_on(2).is_some() && flaky.failure_on(3).is_none());
        assert_eq!(Plan::Fatal.failure_on(4).map(|f| f.0), Some(true));
        assert!(Plan::Ok { sleep_ms: 0 }.failure_on(1).is_none());
    }
}
