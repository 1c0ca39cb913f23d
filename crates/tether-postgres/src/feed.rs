//! The feed on PostgreSQL: every committed history event, exactly once, by
//! snapshots (migration 18 says why `seq` cannot do it).
//!
//! A reader holds the snapshot `seen` whose every event it has read. One
//! read takes a new snapshot (the statement's own) and returns, in `seq`
//! order, the events that snapshot sees and `seen` does not: that set is
//! fixed once both snapshots are, so a read that stops at its limit
//! resumes inside it (the cursor keeps the batch's snapshot and the last
//! `seq` read), and one that reaches its end makes the batch's snapshot
//! the new `seen`. An event is in exactly one batch: the first whose
//! snapshot sees its transaction. Per job the order is the order of
//! commits: events of one job are written under its row lock, so a later
//! one's transaction began writing after the earlier one's committed, which
//! every later snapshot then sees; in one batch, its `seq` was drawn later.

use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::{
    state_after, Error, FeedCursor, FeedEvent, FeedFilter, FeedPage, JobState, Result, Snapshot,
};

use crate::rows::{self, Db};
use crate::sql::feed::{HEAD, READ};
use crate::PgStore;

/// How many transactions whose events retention removed are kept one by
/// one for the gap check; older ones are folded into one bound (see
/// migration 18). Each is 8 bytes and an index entry.
pub(crate) const PRUNED_KEPT: i64 = 100_000;

pub(crate) async fn feed_head(store: &PgStore) -> Result<FeedCursor> {
    let text: String = sqlx::query_scalar(HEAD).fetch_one(&store.db).await.db()?;
    Ok(FeedCursor::Snapshots {
        seen: snapshot(&text)?,
        batch: None,
    })
}

pub(crate) async fn feed_read(
    store: &PgStore,
    after: &FeedCursor,
    filter: &FeedFilter,
    limit: u32,
) -> Result<FeedPage> {
    let FeedCursor::Snapshots { seen, batch } = after else {
        return Err(Error::invalid(
            "after",
            "not a cursor of this server's event stream",
        ));
    };
    let (batch_snapshot, from_seq) = match batch {
        Some((snapshot, seq)) => (Some(snapshot.to_string()), *seq),
        None => (None, 0),
    };
    let events = (!filter.events.is_empty()).then(|| {
        filter
            .events
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect::<Vec<_>>()
    });
    let found: Vec<PgRow> = sqlx::query(READ)
        .bind(seen.to_string())
        .bind(batch_snapshot)
        .bind(from_seq)
        .bind(filter.tenant.as_deref())
        .bind(filter.queue.as_deref())
        .bind(filter.job_id)
        .bind(filter.workflow_id)
        .bind(events)
        .bind(i64::from(limit))
        .fetch_all(&store.db)
        .await
        .db()?;
    let first = found
        .first()
        .ok_or_else(|| Error::Storage("the feed's read returned no row".into()))?;
    let read_by: String = first.try_get("batch").db()?;
    let read_by = snapshot(&read_by)?;
    let gap: bool = first.try_get("gap").db()?;
    let pruned: Option<String> = first.try_get("pruned").db()?;
    if let (true, Some(pruned)) = (gap, pruned) {
        // Events this reader had not read are gone: say so, and go on from
        // a snapshot that sees every transaction retention removed events
        // of as read.
        return Ok(FeedPage::gap(FeedCursor::Snapshots {
            seen: seen.seeing_through(xid(&pruned)?),
            batch: None,
        }));
    }
    let mut events = Vec::with_capacity(found.len());
    for row in &found {
        let seq: Option<i64> = row.try_get("seq").db()?;
        let Some(seq) = seq else { continue };
        events.push(event(row, seen, &read_by, seq).db()?);
    }
    let at_limit = events.len() == limit as usize;
    let next = match (at_limit, events.last()) {
        (true, Some(last)) => last.cursor.clone(),
        _ => FeedCursor::Snapshots {
            seen: read_by,
            batch: None,
        },
    };
    if !at_limit {
        if let Some(last) = events.last_mut() {
            last.cursor = next.clone();
        }
    }
    Ok(FeedPage {
        gap: None,
        events,
        next,
        // A batch begun earlier ended at an old snapshot: newer events
        // may be waiting for the next read's own.
        more: at_limit || batch.is_some(),
    })
}

fn event(
    row: &PgRow,
    seen: &Snapshot,
    batch: &Snapshot,
    seq: i64,
) -> Result<FeedEvent, sqlx::Error> {
    let event = rows::event(row)?;
    let current: String = row.try_get("state")?;
    let current: JobState = current
        .parse()
        .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    Ok(FeedEvent {
        cursor: FeedCursor::Snapshots {
            seen: seen.clone(),
            batch: Some((batch.clone(), seq)),
        },
        tenant: row.try_get("tenant")?,
        job_id: row.try_get("job_id")?,
        workflow_id: row.try_get("workflow_id")?,
        queue: row.try_get("queue")?,
        kind: row.try_get("kind")?,
        state: state_after(
            event.event,
            event.detail.as_deref(),
            row.try_get::<Option<bool>, _>("has_dependencies")?
                .unwrap_or(false),
            current,
        ),
        event,
    })
}

fn snapshot(text: &str) -> Result<Snapshot> {
    text.parse()
        .map_err(|e| Error::Storage(format!("PostgreSQL answered a snapshot of {e}").into()))
}

fn xid(text: &str) -> Result<u64> {
    text.parse()
        .map_err(|_| Error::Storage(format!("PostgreSQL answered a xid of {text:?}").into()))
}
