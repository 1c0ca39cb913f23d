//! What every job does, decided by the run's seed and the job's number
//! alone, so that the worker processes (which run the handlers) and the
//! checker (which judges the outcomes) agree without talking to each other.

use std::time::Duration;

use tether_core::{Backoff, RateLimit};

/// The main queue.
pub const QUEUE: &str = "chaos";
/// The queue of handlers that run longer than their lease.
pub const SLOW_QUEUE: &str = "chaos-slow";
/// The queue that runs with flow-control limits (see [`LIMITS`]).
pub const LIMITED_QUEUE: &str = "chaos-limited";
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
/// Handlers per worker process on the limited queue: 5–6 processes give
/// 20–24 slots, far more than its `max_running`.
pub const LIMITED_CONCURRENCY: usize = 4;
/// Lease of the limited queue's claims (as the main queue's).
pub const LIMITED_LEASE: Duration = LEASE;
/// Retry backoff of every job (short, so retries finish within the run).
pub const BACKOFF: Backoff = Backoff {
    base_ms: 100,
    cap_ms: 1_000,
};
/// A job whose `run_at` is this close to its `created_at` was never moved
/// (not snoozed, retried or reaped yet).
pub const UNMOVED_SLACK_MS: i64 = 50;

/// The flow-control limits of [`LIMITED_QUEUE`], chosen so that each one
/// binds during a run:
///
/// - `max_running` 6 against 20–24 worker slots on the queue: whenever 6 or
///   more of its jobs are ready, the claims would take more than 6;
/// - `key_max_running` 2 against a hot key that has 40 % of the queue's
///   keyed jobs ([`concurrency_key`]): it has more than 2 ready jobs after
///   every large batch, and more than 2 of the 6 slots free;
/// - `rate_limit` 20 per second against a load of about 14 claims per
///   second on average ([`LIMITED_CLAIMS_PER_S`]) that comes in bursts: a
///   batch of 200 jobs carries about 30 of the queue's jobs, and a
///   PostgreSQL restart or a replica kill lets seconds of them pile up,
///   while 6 slots of jobs that take 0–300 ms could claim far more than 20
///   a second. On average it stays below the limit, so the queue keeps up
///   with the producers and the drain stays short.
///
/// Claims are `fair` (round-robin over keys) too, so that the fair claim
/// runs under the faults; fairness itself (an order) is not checked, but a
/// key it starved would leave jobs stuck, which fails the run.
pub const LIMITS: Limits = Limits {
    max_running: 6,
    key_max_running: 2,
    rate: RateLimit {
        count: 20,
        period_ms: 1_000,
    },
    fair: true,
};

/// A queue's flow-control limits, as the chaos run sets and checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `running` jobs of the queue at any instant.
    pub max_running: i32,
    /// `running` jobs of one concurrency key at any instant.
    pub key_max_running: i32,
    /// Claims in any window of `period_ms`.
    pub rate: RateLimit,
    /// Round-robin claims over keys.
    pub fair: bool,
}

/// Claims per second the limited queue gets on average (its jobs times
/// about 1.4 claims each, over the producers' window), whatever the size of
/// the run: see [`limited_per_mille`].
pub const LIMITED_CLAIMS_PER_S: f64 = 14.0;

/// The hot key of the limited queue.
pub const HOT_KEY: &str = "chaos-key-hot";

/// Which share (per mille, at most 150) of the jobs go to the limited
/// queue in a run of `jobs` jobs produced over `produce_s` seconds, so that
/// it gets about [`LIMITED_CLAIMS_PER_S`] claims a second: 15 % in a quick
/// run, 2 % in the full one.
pub fn limited_per_mille(jobs: u64, produce_s: f64) -> u64 {
    let claims = jobs.max(1) as f64 * 1.4;
    let share = LIMITED_CLAIMS_PER_S * produce_s.max(1.0) / claims;
    ((share * 1000.0).round() as u64).clamp(1, 150)
}

/// Whether job `n` goes to the limited queue, given the share (per mille).
/// Slow jobs never do: they stay on [`SLOW_QUEUE`] with its short lease.
pub fn is_limited(seed: u64, n: u64, per_mille: u64) -> bool {
    let h = mix(seed ^ mix(n ^ 0x0011_1417_ed00));
    h % 1000 < per_mille && plan(seed, n).queue() == QUEUE
}

/// The queue of job `n`.
pub fn queue(seed: u64, n: u64, per_mille: u64) -> &'static str {
    if is_limited(seed, n, per_mille) {
        LIMITED_QUEUE
    } else {
        plan(seed, n).queue()
    }
}

/// The concurrency key of job `n` of the limited queue: none for 10 %,
/// [`HOT_KEY`] for 36 % (40 % of the keyed), the rest over 8 other keys.
pub fn concurrency_key(seed: u64, n: u64) -> Option<String> {
    let h = mix(seed ^ mix(n ^ 0x6b65_7973));
    match h % 100 {
        0..=9 => None,
        10..=45 => Some(HOT_KEY.to_owned()),
        _ => Some(format!("chaos-key-{}", (h >> 8) % 8)),
    }
}

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
            retry_after_ms: r.is_multiple_of(3).then_some(150 + r % 100),
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
    fn the_limited_queue_gets_its_share_and_keys() {
        assert_eq!(limited_per_mille(5_000, 76.5), 150);
        assert_eq!(limited_per_mille(100_000, 204.0), 20);
        let pm = limited_per_mille(5_000, 76.5);
        let limited: Vec<u64> = (0..5_000).filter(|&n| is_limited(1, n, pm)).collect();
        assert!((600..900).contains(&limited.len()), "{}", limited.len());
        assert!(limited.iter().all(|&n| queue(1, n, pm) == LIMITED_QUEUE));
        assert!(limited
            .iter()
            .all(|&n| !matches!(plan(1, n), Plan::Slow { .. })));
        let keys: Vec<Option<String>> = limited.iter().map(|&n| concurrency_key(1, n)).collect();
        let hot = keys
            .iter()
            .filter(|k| k.as_deref() == Some(HOT_KEY))
            .count();
        let none = keys.iter().filter(|k| k.is_none()).count();
        let distinct: std::collections::HashSet<_> = keys.iter().flatten().collect();
        assert_eq!(distinct.len(), 9);
        assert!(hot * 100 / keys.len() > 30 && none > 0, "{hot} {none}");
        for k in distinct {
            tether_core::validate::name("concurrency_key", k).unwrap();
        }
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
