//! The checks of flow control: `max_running`, rate limits and per-key
//! limits, from the history's claim and end episodes.

use super::*;

/// The limited queue's jobs are the ones sent there, and its history kept
/// its limits: attempts are half-open intervals `[claimed.at, end.at)` on
/// the database clock (an attempt still open at the end runs forever), and
/// at no instant do more of them overlap than `max_running`, nor more of
/// one key than `key_max_running`; no half-open window of `period_ms` holds
/// more than `count` `claimed` events.
pub(super) fn check_limits(
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
        // A job cancelled by a dependency is judged by `dependency_cancel`.
        let cancelled_by_dependency = job.state == "cancelled" && !job.depends_on.is_empty();
        if !matches!(job.state.as_str(), "succeeded" | "failed") && !cancelled_by_dependency {
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
pub(super) struct Episode {
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
pub(super) fn at_us(t: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t).unwrap_or_default()
}
