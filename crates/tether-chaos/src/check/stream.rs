//! The check of the live event stream (`GET /v1/events`, invariant 17):
//! one reader ran through the whole run, faults included, resuming by
//! itself; what it saw must be the history, every event exactly once and
//! each job's in history order.

use super::*;

/// One event as the stream delivered it, the fields the check compares
/// with the history's row (the stream carries no `seq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedEvent {
    /// The job.
    pub job_id: Uuid,
    /// What.
    pub event: String,
    /// The job's attempt after the event.
    pub attempt: i32,
    /// When (the wire carries milliseconds).
    pub at: DateTime<Utc>,
    /// Who.
    pub worker_id: Option<String>,
    /// Context.
    pub detail: Option<String>,
}

/// What the run's stream reader saw, and how far it had to get.
#[derive(Debug, Default, Clone)]
pub struct StreamRun {
    /// Every event in the order the stream delivered it.
    pub events: Vec<StreamedEvent>,
    /// `gap` items (retention removed events before the reader read
    /// them; the run's retention keeps its whole history, so none may come).
    pub gaps: u64,
    /// Errors that a reconnect does not cure (the reader then resumed from
    /// its last cursor itself; any is a failure).
    pub errors: Vec<String>,
    /// By job, the last `seq` of the history when the reader was given time
    /// to catch up: every event up to it must have been seen. Events written
    /// later (a late report fenced while the processes stopped) may be seen.
    pub required: HashMap<Uuid, i64>,
    /// How long the reader took to catch up at the end; `None`: it had not
    /// within the time it was given.
    pub caught_up: Option<std::time::Duration>,
}

/// What the stream check counted.
#[derive(Debug, Default, Clone)]
pub struct StreamStats {
    /// Events the reader saw.
    pub seen: u64,
    /// History events it had to see.
    pub required: u64,
    /// History events written after it caught up, and of those, seen.
    pub later: u64,
    /// ... of them seen.
    pub later_seen: u64,
    /// Jobs whose events it saw.
    pub jobs: u64,
    /// History events it had to see and did not.
    pub missing: u64,
    /// Events it saw more often than the history holds them.
    pub duplicated: u64,
    /// Events it saw that the history does not hold at all.
    pub unknown: u64,
    /// Jobs whose events came out of history order.
    pub out_of_order: u64,
    /// `gap` items.
    pub gaps: u64,
    /// See [`StreamRun::caught_up`].
    pub caught_up: Option<std::time::Duration>,
}

/// The check's name.
pub const STREAM_CHECK: &str = "event_stream";

/// What identifies an event on both sides: all but the `seq`, the time cut
/// to the wire's milliseconds.
type Key<'a> = (&'a str, i32, i64, Option<&'a str>, Option<&'a str>);

fn row_key(e: &EventRow) -> Key<'_> {
    (
        &e.event,
        e.attempt,
        e.at.timestamp_millis(),
        e.worker_id.as_deref(),
        e.detail.as_deref(),
    )
}

fn seen_key(e: &StreamedEvent) -> Key<'_> {
    (
        &e.event,
        e.attempt,
        e.at.timestamp_millis(),
        e.worker_id.as_deref(),
        e.detail.as_deref(),
    )
}

/// Compares what the reader saw with the history (`events`, ordered by job
/// and `seq`): per job, the events seen must be the history's in its order,
/// at least up to [`StreamRun::required`] and at most all of it.
pub(super) fn check_stream(f: &mut Findings, events: &[EventRow], cx: &Context) {
    let Some(run) = &cx.stream else {
        return;
    };
    let mut history: HashMap<Uuid, Vec<&EventRow>> = HashMap::new();
    for e in events {
        history.entry(e.job_id).or_default().push(e);
    }
    let mut seen: HashMap<Uuid, Vec<&StreamedEvent>> = HashMap::new();
    for e in &run.events {
        seen.entry(e.job_id).or_default().push(e);
    }
    let mut s = StreamStats {
        seen: run.events.len() as u64,
        jobs: seen.len() as u64,
        gaps: run.gaps,
        caught_up: run.caught_up,
        ..StreamStats::default()
    };
    let mut ids: Vec<&Uuid> = history.keys().chain(seen.keys()).collect();
    ids.sort();
    ids.dedup();
    let empty_h = Vec::new();
    let empty_s = Vec::new();
    for id in ids {
        let h = history.get(id).unwrap_or(&empty_h);
        let got = seen.get(id).unwrap_or(&empty_s);
        let through = run.required.get(id).copied().unwrap_or(i64::MIN);
        let required = h.iter().filter(|e| e.seq <= through).count();
        s.required += required as u64;
        s.later += (h.len() - required) as u64;
        s.later_seen += got.len().saturating_sub(required).min(h.len() - required) as u64;
        let prefix = got.len() <= h.len()
            && got
                .iter()
                .zip(h.iter())
                .all(|(g, e)| seen_key(g) == row_key(e));
        if prefix && got.len() >= required {
            continue;
        }
        // Not the history's prefix: say how. As multisets first (what was
        // lost, what came twice or from nowhere), then the order.
        let mut left: HashMap<Key<'_>, i64> = HashMap::new();
        for e in h {
            *left.entry(row_key(e)).or_default() += 1;
        }
        let (mut duplicated, mut unknown) = (0, 0);
        for g in got {
            match left.get_mut(&seen_key(g)) {
                Some(n) if *n > 0 => *n -= 1,
                Some(_) => duplicated += 1,
                None => unknown += 1,
            }
        }
        let missing = h
            .iter()
            .take(required)
            .filter(|e| {
                let n = left.get_mut(&row_key(e)).expect("counted");
                // Still unmatched: not seen (matched ones were taken off).
                let unseen = *n > 0;
                if unseen {
                    *n -= 1;
                }
                unseen
            })
            .count() as u64;
        s.missing += missing;
        s.duplicated += duplicated;
        s.unknown += unknown;
        let disordered = missing + duplicated + unknown == 0;
        s.out_of_order += u64::from(disordered);
        let story = |list: Vec<String>| list.join(", ");
        f.flag(STREAM_CHECK, || {
            format!(
                "job {id}: history [{}] (the first {required} required), the stream [{}]: \
                 {missing} missing, {duplicated} more than once, {unknown} not in the history{}",
                story(h.iter().map(|e| format!("{}#{}", e.event, e.seq)).collect()),
                story(got.iter().map(|e| e.event.clone()).collect()),
                if disordered { ", out of order" } else { "" }
            )
        });
    }
    if run.gaps > 0 {
        f.flag(STREAM_CHECK, || {
            format!(
                "{} gap item(s), yet the run's retention removes nothing",
                run.gaps
            )
        });
    }
    for e in &run.errors {
        f.flag(STREAM_CHECK, || {
            format!("the reader got an error a reconnect does not cure: {e}")
        });
    }
    if run.caught_up.is_none() {
        f.flag(STREAM_CHECK, || {
            format!(
                "the reader had not seen the run's {} history events when it was stopped",
                s.required
            )
        });
    }
    f.stats.stream = Some(s);
}
