//! `GET /v1/events`: the caller's tenant's history as it is committed, as
//! server-sent events. Streams in step with the process's one reader of the
//! feed take its reads from memory; a stream resuming from further back
//! reads the store until it is in step (`crate::feed`).

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use tether_core::turns::Turn;
use tether_core::{ErrorCode, EventKind, FeedCursor, FeedEvent, FeedFilter};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, BadRequest};
use crate::extract::Caller;
use crate::feed::{message, Listener};
use crate::AppState;
use tether_api::{ErrorBody, FeedEventData, FeedQuery};

/// Events one read of the store returns to a stream catching up.
const READ: u32 = 200;
/// A comment line at least this often keeps proxies from closing an idle
/// stream.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// Stream the history as it is committed.
///
/// Server-sent events (`text/event-stream`), one per history event of the
/// caller's tenant: `id:` a cursor (opaque; resume with it as `after` or
/// `Last-Event-ID`), `event:` the event's name, `data:` the event as JSON
/// with its job's queue, kind, workflow and the state it left the job in.
/// Without a cursor the stream starts with what is committed from now on;
/// with one it starts right after it, and a client that resumes from the
/// last id it saw receives every committed event exactly once, each job's
/// in order. If retention removed events after the cursor first, the first
/// message is `event: gap` with `data: {"oldest": cursor}`. A comment line
/// comes at least every 15 s. Each tenant may hold a limited number of
/// streams open (`max_event_streams_per_tenant`, default 64): past it, 429.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "jobs",
    params(FeedQuery, ("Last-Event-ID" = Option<String>, Header, description = "A cursor to resume after (as `after`).")),
    responses(
        (status = 200, description = "A stream of server-sent events.", content_type = "text/event-stream", body = FeedEventData),
        (status = 400, response = BadRequest),
        (status = 429, description = "`too_many_requests`: the tenant has as many event streams open as the server allows.", body = ErrorBody),
    )
)]
pub(crate) async fn events(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let tenant = caller.tenant().to_owned();
    let (filter, after) = parse(&tenant, raw.as_deref().unwrap_or(""), &headers)?;
    let Some(turn) = st.tenant_streams.try_take(tenant.clone()) else {
        return Err(ApiError::new(
            ErrorCode::TooManyRequests,
            format!(
                "this tenant has {} event streams open, the most allowed; close one first",
                st.config.max_event_streams_per_tenant
            ),
        ));
    };
    let listener = st.feed.listen();
    let cursor = match after {
        Some(cursor) => cursor,
        None => match listener.position() {
            Some(position) => position,
            None => st.engine.feed_head().await?,
        },
    };
    let stream = Stream {
        st,
        listener,
        filter,
        cursor,
        pending: Vec::new(),
        sent: tokio::time::Instant::now(),
        _turn: turn,
    };
    let chunks = futures_util::stream::unfold(stream, |mut s| async move {
        let chunk = s.next().await?;
        Some((Ok::<_, Infallible>(chunk), s))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}

fn parse(
    tenant: &str,
    raw: &str,
    headers: &HeaderMap,
) -> ApiResult<(FeedFilter, Option<FeedCursor>)> {
    let mut filter = FeedFilter {
        tenant: Some(tenant.to_owned()),
        ..FeedFilter::default()
    };
    let mut after = None;
    let uuid = |field: &str, v: &str| {
        Uuid::parse_str(v).map_err(|_| ApiError::invalid_field(field, "not a UUID"))
    };
    for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
        if value.is_empty() {
            continue;
        }
        match &*key {
            "queue" => filter.queue = Some(value.into_owned()),
            "job_id" => filter.job_id = Some(uuid("job_id", &value)?),
            "workflow_id" => filter.workflow_id = Some(uuid("workflow_id", &value)?),
            "event" => {
                for name in value.split(',') {
                    let kind = name.parse::<EventKind>().map_err(|_| {
                        ApiError::invalid_field("event", format!("{name:?} is not an event name"))
                    })?;
                    filter.events.push(kind);
                }
            }
            "after" => after = Some(cursor("after", &value)?),
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}"
                )))
            }
        }
    }
    if after.is_none() {
        if let Some(id) = headers.get("last-event-id") {
            let id = id
                .to_str()
                .map_err(|_| ApiError::invalid_field("Last-Event-ID", "not text"))?;
            if !id.is_empty() {
                after = Some(cursor("Last-Event-ID", id)?);
            }
        }
    }
    Ok((filter, after))
}

fn cursor(field: &str, text: &str) -> ApiResult<FeedCursor> {
    text.parse()
        .map_err(|_| ApiError::invalid_field(field, "not a cursor this stream handed out"))
}

/// One open stream: where it stands and the text read but not yet sent
/// (at most about [`CHUNK`] bytes, one chunk: a reader that does not take
/// it is sent no more, and nothing queues up for it).
struct Stream {
    st: AppState,
    listener: Listener,
    filter: FeedFilter,
    cursor: FeedCursor,
    pending: Vec<u8>,
    /// When the stream last sent something: a heartbeat is due
    /// [`HEARTBEAT`] after it, however many events others' filters took.
    sent: tokio::time::Instant,
    _turn: Turn,
}

/// A chunk stops growing past this many bytes: what a stream holds for a
/// slow reader, and what one write to it carries.
const CHUNK: usize = 256 * 1024;

impl Stream {
    /// The next chunk of messages (every message ready, up to about
    /// [`CHUNK`] bytes, in one write), a heartbeat comment after
    /// [`HEARTBEAT`] without one, or `None` to end the stream (the server
    /// stops, or the store failed: the client resumes from its last id).
    async fn next(&mut self) -> Option<Bytes> {
        let chunk = self.chunk().await;
        self.sent = tokio::time::Instant::now();
        chunk
    }

    async fn chunk(&mut self) -> Option<Bytes> {
        loop {
            if !self.pending.is_empty() {
                return Some(Bytes::from(std::mem::take(&mut self.pending)));
            }
            if self.st.shutdown.is_cancelled() {
                return None;
            }
            if self.listener.position().as_ref() == Some(&self.cursor) {
                // In step and nothing new: wait for the tail's next read.
                tokio::select! {
                    _ = self.listener.changed() => {}
                    _ = self.st.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep_until(self.sent + HEARTBEAT) => return Some(Bytes::from_static(b":\n\n")),
                }
                continue;
            }
            if let Some(segments) = self.listener.segments_from(&self.cursor) {
                for segment in segments {
                    if self.pending.len() >= CHUNK {
                        break;
                    }
                    if let Some(past) = &segment.gap {
                        self.pending.extend_from_slice(&gap(past));
                    }
                    // Messages are made only for a segment some stream
                    // takes an event of: a worker's stream of its
                    // cancellations makes none for the rest.
                    for (i, e) in segment.events.iter().enumerate() {
                        if behind(e, &self.cursor) || !self.filter.admits(e) {
                            continue;
                        }
                        self.pending.extend_from_slice(&segment.messages()[i]);
                    }
                    self.cursor = segment.next.clone();
                }
                continue;
            }
            match self.read_store().await {
                Ok(true) => {}
                Ok(false) => return Some(Bytes::from_static(b":\n\n")),
                Err(e) => {
                    tracing::warn!(error = %e, "event stream: a read failed; ending the stream");
                    return None;
                }
            }
        }
    }

    /// One read of the store from the stream's cursor: up to the snapshot
    /// the tail last reached when it can (then the stream is in step), else
    /// up to now. Waits for the tail when the read found nothing new;
    /// answers false when that wait was long enough for a heartbeat.
    async fn read_store(&mut self) -> tether_core::Result<bool> {
        let from = match (&self.cursor, self.listener.boundary()) {
            (
                FeedCursor::Snapshots { seen, batch: None },
                Some(FeedCursor::Snapshots {
                    seen: reached,
                    batch: None,
                }),
            ) if reached != *seen && reached.includes(seen) => FeedCursor::Snapshots {
                seen: seen.clone(),
                batch: Some((reached, 0)),
            },
            _ => self.cursor.clone(),
        };
        let page = self.st.engine.feed_read(&from, &self.filter, READ).await?;
        if let Some(past) = &page.gap {
            self.pending.extend_from_slice(&gap(past));
        }
        for e in &page.events {
            self.pending.extend_from_slice(&message(e));
        }
        let moved = page.next != self.cursor;
        self.cursor = page.next;
        if !page.more && self.pending.is_empty() && !moved {
            tokio::select! {
                _ = self.listener.changed() => {}
                _ = self.st.shutdown.cancelled() => {}
                _ = tokio::time::sleep_until(self.sent + HEARTBEAT) => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// Whether `e` is at or before `cursor` (SQLite's ordered cursors: a kept
/// segment may begin before the stream's cursor).
fn behind(e: &FeedEvent, cursor: &FeedCursor) -> bool {
    match (&e.cursor, cursor) {
        (FeedCursor::Seq(e), FeedCursor::Seq(c)) => e <= c,
        _ => false,
    }
}

/// The message that events after the stream's cursor were removed before
/// it read them; `past` is where it goes on from.
fn gap(past: &FeedCursor) -> Bytes {
    let data = serde_json::json!({ "oldest": past.to_string() });
    Bytes::from(format!("id: {past}\nevent: gap\ndata: {data}\n\n"))
}
