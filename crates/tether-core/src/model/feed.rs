//! The feed: every committed history event, of every tenant, in an order
//! that a reader can resume exactly (invariant 17). What `GET /v1/events`
//! streams and what a waiting request is woken by.
//!
//! The order is commit order per job. A sequence number alone cannot give
//! it on PostgreSQL: `seq` is drawn when an event is written and becomes
//! visible when its transaction commits, so a transaction that drew 7 can
//! commit after one that drew 8, and a reader that asked for `seq > 8` would
//! never see 7. PostgreSQL's cursor is therefore a pair of snapshots (see
//! [`FeedCursor::Snapshots`]); SQLite's single writer commits in `seq`
//! order, so its cursor is the last `seq` read.

use super::*;

/// Where a reader of the feed stands. Opaque to clients: the HTTP API
/// writes it with [`fmt::Display`] and reads it back with [`FromStr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedCursor {
    /// SQLite: every event up to this `seq` was read.
    Seq(i64),
    /// PostgreSQL: every event whose transaction `seen` shows as committed
    /// was read; and, when `batch` is set, so were the events that the
    /// batch's snapshot shows and `seen` does not, up to `seq` (a read that
    /// stopped in the middle of one batch).
    Snapshots {
        /// The snapshot every event of which was read.
        seen: Snapshot,
        /// The batch being read: its snapshot and the last `seq` read of it.
        batch: Option<(Snapshot, i64)>,
    },
}

/// A PostgreSQL snapshot (`pg_snapshot`): transactions below `xmin` are
/// over, those from `xmax` on had not begun, `xip` were in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The oldest transaction still in progress.
    pub xmin: u64,
    /// One past the newest transaction begun.
    pub xmax: u64,
    /// The transactions in progress, ascending, each in `xmin..xmax`.
    pub xip: Vec<u64>,
}

impl Snapshot {
    /// Whether the transaction `xid` had committed (or aborted: its rows
    /// are never read) for this snapshot.
    pub fn sees(&self, xid: u64) -> bool {
        xid < self.xmin || (xid < self.xmax && self.xip.binary_search(&xid).is_err())
    }
}

impl Snapshot {
    /// Whether this snapshot sees every transaction `other` sees (it was
    /// taken later, or no earlier: a read from `other` up to this one
    /// misses nothing).
    pub fn includes(&self, other: &Snapshot) -> bool {
        let newer = other.xmax <= self.xmax
            || (self.xmax..other.xmax).all(|x| other.xip.binary_search(&x).is_ok());
        newer
            && self
                .xip
                .iter()
                .all(|x| *x >= other.xmax || other.xip.binary_search(x).is_ok())
    }

    /// This snapshot, made to see every transaction up to `xid` as well:
    /// where a reader stands once told that events of transactions up to
    /// `xid` were removed (a gap).
    pub fn seeing_through(&self, xid: u64) -> Snapshot {
        let xmax = self.xmax.max(xid + 1);
        let xip: Vec<u64> = self.xip.iter().copied().filter(|x| *x > xid).collect();
        let xmin = xip.first().copied().unwrap_or(xmax);
        Snapshot { xmin, xmax, xip }
    }
}

impl fmt::Display for Snapshot {
    /// PostgreSQL's text form, `xmin:xmax:xip,…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:", self.xmin, self.xmax)?;
        for (i, x) in self.xip.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{x}")?;
        }
        Ok(())
    }
}

impl FromStr for Snapshot {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownName::new("snapshot", s);
        let number = |t: &str| -> Result<u64, UnknownName> {
            match t.parse::<u64>() {
                Ok(n) if !t.starts_with('+') => Ok(n),
                _ => Err(bad()),
            }
        };
        let mut parts = s.split(':');
        let (Some(xmin), Some(xmax), Some(xip), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let (xmin, xmax) = (number(xmin)?, number(xmax)?);
        let xip = match xip {
            "" => Vec::new(),
            list => list.split(',').map(number).collect::<Result<Vec<_>, _>>()?,
        };
        let ordered = xip.windows(2).all(|w| w[0] < w[1]);
        let inside = xip.iter().all(|x| (xmin..xmax).contains(x));
        if xmin == 0 || xmin > xmax || !ordered || !inside {
            return Err(bad());
        }
        Ok(Snapshot { xmin, xmax, xip })
    }
}

impl fmt::Display for FeedCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FeedCursor::Seq(seq) => write!(f, "s.{seq}"),
            FeedCursor::Snapshots { seen, batch: None } => write!(f, "p.{seen}"),
            FeedCursor::Snapshots {
                seen,
                batch: Some((batch, seq)),
            } => write!(f, "p.{seen}.{batch}.{seq}"),
        }
    }
}

impl FromStr for FeedCursor {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownName::new("event cursor", s);
        let seq = |t: &str| match t.parse::<i64>() {
            Ok(n) if n >= 0 && !t.starts_with('+') => Ok(n),
            _ => Err(bad()),
        };
        let parts: Vec<&str> = s.split('.').collect();
        match parts[..] {
            ["s", n] => Ok(FeedCursor::Seq(seq(n)?)),
            ["p", seen] => Ok(FeedCursor::Snapshots {
                seen: seen.parse().map_err(|_| bad())?,
                batch: None,
            }),
            ["p", seen, batch, n] => Ok(FeedCursor::Snapshots {
                seen: seen.parse().map_err(|_| bad())?,
                batch: Some((batch.parse().map_err(|_| bad())?, seq(n)?)),
            }),
            _ => Err(bad()),
        }
    }
}

/// Which events a read of the feed returns. Every field narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedFilter {
    /// Only this tenant's events (the HTTP API always sets it).
    pub tenant: Option<String>,
    /// Only the events of jobs of this queue.
    pub queue: Option<String>,
    /// Only this job's events.
    pub job_id: Option<Uuid>,
    /// Only the events of this workflow's jobs.
    pub workflow_id: Option<Uuid>,
    /// Only these events (empty: all).
    pub events: Vec<EventKind>,
}

impl FeedFilter {
    /// Whether `event` passes the filter (what the backends' reads ask in
    /// SQL, for a reader that filters events it already holds).
    pub fn admits(&self, event: &FeedEvent) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == event.tenant)
            && self.queue.as_ref().is_none_or(|q| *q == event.queue)
            && self.job_id.is_none_or(|id| id == event.job_id)
            && self
                .workflow_id
                .is_none_or(|id| Some(id) == event.workflow_id)
            && (self.events.is_empty() || self.events.contains(&event.event.event))
    }
}

/// One event of the feed: a history event with the job it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    /// Where a reader stands once it has this event.
    pub cursor: FeedCursor,
    /// The job's tenant.
    pub tenant: String,
    /// The job.
    pub job_id: Uuid,
    /// The job's workflow, if any.
    pub workflow_id: Option<Uuid>,
    /// The job's queue.
    pub queue: String,
    /// The job's kind.
    pub kind: String,
    /// The job's state right after the event (see [`state_after`]).
    pub state: JobState,
    /// The event itself.
    pub event: JobEvent,
}

/// One read of the feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedPage {
    /// Set when events after the cursor read from were removed by
    /// retention before they were read: the events returned (and `next`)
    /// follow this cursor instead, and what lay between is lost.
    pub gap: Option<FeedCursor>,
    /// The events, in commit order per job (and in `seq` order within one
    /// read).
    pub events: Vec<FeedEvent>,
    /// Where the next read starts: after the last event returned, or after
    /// everything the read looked at when it returned fewer than asked.
    pub next: FeedCursor,
    /// More may be ready at once: the read stopped at its limit, or it
    /// finished a batch begun by an earlier read (see the backends). When
    /// false the reader has every event committed before the read began.
    pub more: bool,
}

impl FeedPage {
    /// The answer of a read that found events after its cursor removed by
    /// retention: no events, and go on from `past` at once.
    pub fn gap(past: FeedCursor) -> FeedPage {
        FeedPage {
            gap: Some(past.clone()),
            events: Vec::new(),
            next: past,
            more: true,
        }
    }
}

/// The state an event left its job in, where the event says it: a claim
/// leaves it running, a success succeeded, a lapsed lease wherever its
/// detail says; a new or replayed job without dependencies is queued.
/// Where the event does not say (`enqueued`, `replayed` or
/// `workflow_created` of a job with dependencies, which may have waited or
/// not; `lease_lost` and `workflow_finished`, which change nothing) it is
/// `current`, the job's state when read.
pub fn state_after(
    event: EventKind,
    detail: Option<&str>,
    has_dependencies: bool,
    current: JobState,
) -> JobState {
    match event {
        EventKind::Claimed | EventKind::CancelRequested => JobState::Running,
        EventKind::RetryScheduled | EventKind::Snoozed | EventKind::Released => JobState::Queued,
        EventKind::Succeeded => JobState::Succeeded,
        EventKind::Failed | EventKind::Expired => JobState::Failed,
        EventKind::Cancelled => JobState::Cancelled,
        EventKind::LeaseExpired => detail.and_then(|d| d.parse().ok()).unwrap_or(current),
        EventKind::Enqueued | EventKind::Replayed | EventKind::WorkflowCreated
            if !has_dependencies =>
        {
            JobState::Queued
        }
        EventKind::Enqueued
        | EventKind::Replayed
        | EventKind::WorkflowCreated
        | EventKind::LeaseLost
        | EventKind::WorkflowFinished => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_as_written() {
        for text in [
            "s.0",
            "s.42",
            "p.10:10:",
            "p.10:20:12,15",
            "p.10:20:12.12:25:12,21.7",
        ] {
            let cursor: FeedCursor = text.parse().expect(text);
            assert_eq!(cursor.to_string(), text);
        }
    }

    #[test]
    fn malformed_cursors_are_refused() {
        for text in [
            "",
            "s.",
            "s.-1",
            "s.+1",
            "x.1",
            "p.",
            "p.10:5:",
            "p.0:5:",
            "p.10:20:25",
            "p.10:20:15,12",
            "p.10:20:12,12",
            "p.1:2:.1:2:",
            "p.1:2:.1:2:.x",
            "p.1:2:3:4",
        ] {
            assert!(text.parse::<FeedCursor>().is_err(), "{text:?} was accepted");
        }
    }

    #[test]
    fn a_snapshot_sees_what_ended_before_it() {
        let s: Snapshot = "10:20:12,15".parse().unwrap();
        assert!(s.sees(9));
        assert!(s.sees(11));
        assert!(!s.sees(12));
        assert!(!s.sees(15));
        assert!(s.sees(19));
        assert!(!s.sees(20));
    }

    #[test]
    fn includes_is_seeing_at_least_as_much() {
        let all: Vec<Snapshot> = [
            "10:20:12,15",
            "10:20:",
            "10:25:12,15,21",
            "12:25:12,21",
            "16:30:",
            "10:12:10,11",
            "10:20:12",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        for a in &all {
            for b in &all {
                let sees_more = (1..40).all(|x| !b.sees(x) || a.sees(x));
                assert_eq!(a.includes(b), sees_more, "{a} includes {b}");
            }
        }
    }

    #[test]
    fn seeing_through_adds_exactly_what_ended_by_then() {
        let s: Snapshot = "10:20:12,15".parse().unwrap();
        for through in [5, 12, 13, 15, 19, 25] {
            let t = s.seeing_through(through);
            for x in 1..40 {
                assert_eq!(t.sees(x), x <= through || s.sees(x), "{t} at {x}");
            }
            assert_eq!(t.to_string().parse::<Snapshot>().unwrap(), t);
        }
    }

    #[test]
    fn state_after_reads_the_event_first() {
        let q = JobState::Queued;
        assert_eq!(
            state_after(EventKind::Claimed, None, false, q),
            JobState::Running
        );
        assert_eq!(
            state_after(EventKind::LeaseExpired, Some("failed"), false, q),
            JobState::Failed
        );
        assert_eq!(
            state_after(EventKind::Enqueued, None, false, JobState::Succeeded),
            JobState::Queued
        );
        assert_eq!(
            state_after(EventKind::Enqueued, None, true, JobState::Waiting),
            JobState::Waiting
        );
    }
}
