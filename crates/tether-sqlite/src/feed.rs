//! The feed on SQLite: every committed history event, exactly once, in
//! `seq` order. The single writer commits in the order `seq` values are
//! drawn and never reuses one (migration 15), so a reader that resumes
//! after the last `seq` it read misses nothing and reads nothing twice.

use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use tether_core::{
    state_after, Error, FeedCursor, FeedEvent, FeedFilter, FeedPage, JobState, Result,
};

use crate::rows::{self, Db};
use crate::sql::feed::{HEAD, READ};
use crate::SqliteStore;

pub(crate) async fn feed_head(store: &SqliteStore) -> Result<FeedCursor> {
    let head: i64 = sqlx::query_scalar(HEAD)
        .fetch_one(&store.reader)
        .await
        .db()?;
    Ok(FeedCursor::Seq(head))
}

pub(crate) async fn feed_read(
    store: &SqliteStore,
    after: &FeedCursor,
    filter: &FeedFilter,
    limit: u32,
) -> Result<FeedPage> {
    let FeedCursor::Seq(after) = *after else {
        return Err(Error::invalid(
            "after",
            "not a cursor of this server's event stream",
        ));
    };
    let events = (!filter.events.is_empty()).then(|| {
        serde_json::Value::from(filter.events.iter().map(|e| e.as_str()).collect::<Vec<_>>())
            .to_string()
    });
    let found: Vec<SqliteRow> = sqlx::query(READ)
        .bind(after)
        .bind(filter.tenant.as_deref())
        .bind(filter.queue.as_deref())
        .bind(filter.job_id.map(|id| id.to_string()))
        .bind(filter.workflow_id.map(|id| id.to_string()))
        .bind(events)
        .bind(i64::from(limit))
        .fetch_all(&store.reader)
        .await
        .db()?;
    let first = found
        .first()
        .ok_or_else(|| Error::Storage("the feed's read returned no row".into()))?;
    let head: i64 = first.try_get("head").db()?;
    let pruned: i64 = first.try_get("pruned").db()?;
    if pruned > after {
        // Events after the cursor were removed before it read them.
        return Ok(FeedPage::gap(FeedCursor::Seq(pruned)));
    }
    let mut events = Vec::with_capacity(found.len());
    for row in &found {
        let seq: Option<i64> = row.try_get("seq").db()?;
        if let Some(seq) = seq {
            events.push(event(row, seq)?);
        }
    }
    let more = events.len() == limit as usize;
    let next = match (more, events.last()) {
        (true, Some(last)) => last.cursor.clone(),
        _ => FeedCursor::Seq(head.max(after)),
    };
    Ok(FeedPage {
        gap: None,
        events,
        next,
        more,
    })
}

fn event(row: &SqliteRow, seq: i64) -> Result<FeedEvent> {
    let event = rows::event(row)?;
    let current: &str = row.try_get("state").db()?;
    let current: JobState = current
        .parse()
        .map_err(|e| Error::Storage(format!("{e}").into()))?;
    let workflow: Option<&str> = row.try_get("workflow_id").db()?;
    Ok(FeedEvent {
        cursor: FeedCursor::Seq(seq),
        tenant: row.try_get("tenant").db()?,
        job_id: rows::uuid(row.try_get("job_id").db()?)?,
        workflow_id: workflow.map(rows::uuid).transpose()?,
        queue: row.try_get("queue").db()?,
        kind: row.try_get("kind").db()?,
        state: state_after(
            event.event,
            event.detail.as_deref(),
            row.try_get("has_dependencies").db()?,
            current,
        ),
        event,
    })
}
