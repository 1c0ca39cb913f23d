//! The live event stream's reader: one `GET /v1/events` of the run's
//! tenant, opened at a cursor taken before the first job and read through
//! every fault by the client's [`EventStream`], which resumes by itself;
//! [`crate::check`] then compares what it saw with the history.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tether_client::{EventStream, HttpClient, StreamFilter, StreamItem};
use tether_core::{FeedCursor, Snapshot};
use tokio::time::Instant;

use crate::check::{StreamRun, StreamedEvent};
use crate::leadership;

/// The feed's head as a cursor of the stream: the database's current
/// snapshot, exactly what a server answers a stream opened without one
/// with. Taken before the first job, so the stream misses none of the run.
pub async fn head(pool: &PgPool) -> Result<String, String> {
    let text: String = sqlx::query_scalar("SELECT pg_current_snapshot()::text")
        .fetch_one(pool)
        .await
        .map_err(|e| format!("cannot read the feed's head: {e}"))?;
    let seen: Snapshot = text
        .parse()
        .map_err(|e| format!("the feed's head {text:?}: {e}"))?;
    Ok(FeedCursor::Snapshots { seen, batch: None }.to_string())
}

/// The running reader; dropping it stops it.
pub struct StreamReader {
    seen: Arc<Mutex<StreamRun>>,
    task: tokio::task::JoinHandle<()>,
}

impl StreamReader {
    /// Starts reading every event of the tenant of `client` after `after`.
    pub fn start(client: HttpClient, after: String) -> StreamReader {
        let seen = Arc::new(Mutex::new(StreamRun::default()));
        let task = tokio::spawn(read(client, after, seen.clone()));
        StreamReader { seen, task }
    }

    /// Events seen so far.
    pub fn count(&self) -> usize {
        self.lock().events.len()
    }

    /// Waits until the reader has seen `events` events, at most `timeout`;
    /// how long that took, or `None` if it had not by then.
    pub async fn catch_up(&self, events: usize, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        while self.count() < events {
            if started.elapsed() > timeout {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(started.elapsed())
    }

    /// Stops the reader; what it saw.
    pub fn stop(self) -> StreamRun {
        self.task.abort();
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StreamRun> {
        lock(&self.seen)
    }
}

impl Drop for StreamReader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read(client: HttpClient, after: String, seen: Arc<Mutex<StreamRun>>) {
    let open = |after: String| -> EventStream {
        client.stream_events(&StreamFilter {
            after: Some(after),
            ..StreamFilter::default()
        })
    };
    let mut cursor = after;
    let mut stream = open(cursor.clone());
    loop {
        let item = match stream.next().await {
            Ok(item) => item,
            Err(e) => {
                // The stream gives up only on what a reconnect cannot cure:
                // a failure of the check, but the reader goes on from where
                // it stood so that the rest of the run is still compared.
                lock(&seen).errors.push(e.to_string());
                tokio::time::sleep(Duration::from_secs(1)).await;
                stream = open(cursor.clone());
                continue;
            }
        };
        cursor = item.cursor().to_owned();
        let mut seen = lock(&seen);
        match item {
            // The --partitions schedule's job is no producer's; the history
            // the check reads leaves it out too.
            StreamItem::Event(e) if e.queue == leadership::CRON_QUEUE => {}
            StreamItem::Event(e) => seen.events.push(StreamedEvent {
                job_id: e.job_id,
                event: e.event,
                attempt: e.attempt,
                at: e.at,
                worker_id: e.worker_id,
                detail: e.detail,
            }),
            StreamItem::Gap { .. } => seen.gaps += 1,
        }
    }
}

fn lock(seen: &Mutex<StreamRun>) -> std::sync::MutexGuard<'_, StreamRun> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}
