//! Waiting for results (`?wait_ms=` on a job's or a workflow's read) and
//! the live event stream (`GET /v1/events`), read as server-sent events
//! and resumed by itself after a dropped connection.

use std::collections::VecDeque;

use super::*;

/// Longest wait one request asks the server for (its `max_wait_ms`
/// default); a longer wait is several requests.
const WAIT_PER_REQUEST: Duration = Duration::from_millis(30_000);
/// First pause before reconnecting a stream; doubled up to a few seconds.
const RECONNECT: Duration = Duration::from_millis(100);

impl HttpClient {
    /// `GET /v1/jobs/{id}?wait_ms=`: the job once it has finished, or as it
    /// is when `timeout` has passed (asking again every 30 s, the server's
    /// longest wait).
    pub async fn wait_job(&self, id: Uuid, timeout: Duration) -> Result<Job> {
        let id = id.to_string();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let env: JobResponse = self.get_waiting(&["v1", "jobs", &id], left).await?;
            if env.job.state.is_terminal() || left.is_zero() {
                return Ok(env.job);
            }
        }
    }

    /// `GET /v1/workflows/{id}?wait_ms=`: the workflow and its graph once
    /// it has finished (any state but `running`), or as it is when
    /// `timeout` has passed.
    pub async fn wait_workflow(&self, id: Uuid, timeout: Duration) -> Result<WorkflowGraph> {
        let id = id.to_string();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let graph: WorkflowGraph = self.get_waiting(&["v1", "workflows", &id], left).await?;
            if graph.workflow.state != tether_core::WorkflowState::Running || left.is_zero() {
                return Ok(graph);
            }
        }
    }

    /// One read with `wait_ms` of at most `left` (and 30 s), given time
    /// enough to wait that long.
    async fn get_waiting<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        left: Duration,
    ) -> Result<T> {
        let wait = left.min(WAIT_PER_REQUEST);
        let call = self.call(Method::GET, segments)?;
        let req = self
            .request(&call, true)
            .query(&[("wait_ms", wait.as_millis().to_string())])
            .timeout(self.timeout + wait);
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// `GET /v1/events`: the tenant's history as it is committed, from
    /// `filter.after` (or from now on without it). The stream reconnects by
    /// itself when the connection drops, resuming after the last event it
    /// returned, so every committed event comes exactly once; read it with
    /// [`EventStream::next`].
    pub fn stream_events(&self, filter: &StreamFilter) -> EventStream {
        EventStream {
            client: self.clone(),
            filter: filter.clone(),
            cursor: filter.after.clone(),
            response: None,
            buffer: Vec::new(),
            ready: VecDeque::new(),
            pause: RECONNECT,
        }
    }
}

/// What [`HttpClient::stream_events`] streams; every field narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamFilter {
    /// Only the events of jobs of this queue.
    pub queue: Option<String>,
    /// Only this job's events.
    pub job_id: Option<Uuid>,
    /// Only the events of this workflow's jobs.
    pub workflow_id: Option<Uuid>,
    /// Only these events (by name: `succeeded`, `failed`, ...).
    pub events: Vec<String>,
    /// Start right after this cursor (a [`StreamItem`]'s); `None`: from now
    /// on.
    pub after: Option<String>,
}

/// One message of the event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A history event.
    Event(FeedEventData),
    /// Retention removed events after the cursor before the stream read
    /// them; it goes on from `oldest`.
    Gap {
        /// Where the stream goes on from.
        oldest: String,
    },
}

impl StreamItem {
    /// The item's cursor: resume after it with [`StreamFilter::after`].
    pub fn cursor(&self) -> &str {
        match self {
            StreamItem::Event(e) => &e.cursor,
            StreamItem::Gap { oldest } => oldest,
        }
    }
}

/// An open event stream (see [`HttpClient::stream_events`]).
pub struct EventStream {
    client: HttpClient,
    filter: StreamFilter,
    cursor: Option<String>,
    response: Option<reqwest::Response>,
    buffer: Vec<u8>,
    ready: VecDeque<StreamItem>,
    pause: Duration,
}

impl EventStream {
    /// The next item, waiting for one as long as it takes. A failure that
    /// a reconnect may cure (the connection dropped, the server restarts,
    /// 503) is retried with a growing pause; one that it cannot (a bad
    /// filter, a refused key, too many streams open) is returned.
    pub async fn next(&mut self) -> Result<StreamItem> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                self.cursor = Some(item.cursor().to_owned());
                return Ok(item);
            }
            match self.fill().await {
                Ok(()) => {}
                Err(e) if e.is_retryable() => {
                    self.response = None;
                    self.buffer.clear();
                    tokio::time::sleep(self.pause).await;
                    self.pause = (self.pause * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads more of the stream (connecting first if needed) until at
    /// least one item is ready.
    async fn fill(&mut self) -> Result<()> {
        if self.response.is_none() {
            self.response = Some(self.connect().await?);
        }
        let response = self.response.as_mut().expect("connected");
        match response.chunk().await.map_err(Error::Transport)? {
            Some(bytes) => {
                self.pause = RECONNECT;
                // Bytes, not text, until a message is whole: a chunk may
                // end inside a character. One drain per chunk, not per
                // message: a chunk carries hundreds.
                self.buffer.extend_from_slice(&bytes);
                let mut start = 0;
                while let Some(len) = self.buffer[start..].windows(2).position(|w| w == b"\n\n") {
                    let block = String::from_utf8_lossy(&self.buffer[start..start + len]);
                    if let Some(item) = parse(&block)? {
                        self.ready.push_back(item);
                    }
                    start += len + 2;
                }
                self.buffer.drain(..start);
                Ok(())
            }
            // The server ended the stream (it is stopping): reconnect.
            None => Err(Error::Api {
                status: 503,
                code: ErrorCode::Unavailable,
                message: "the event stream ended".into(),
            }),
        }
    }

    async fn connect(&self) -> Result<reqwest::Response> {
        let c = &self.client;
        let call = c.call(Method::GET, &["v1", "events"])?;
        let f = &self.filter;
        let mut query: Vec<(&str, String)> = Vec::new();
        query.extend(f.queue.clone().map(|q| ("queue", q)));
        query.extend(f.job_id.map(|id| ("job_id", id.to_string())));
        query.extend(f.workflow_id.map(|id| ("workflow_id", id.to_string())));
        query.extend(f.events.iter().map(|e| ("event", e.clone())));
        query.extend(self.cursor.clone().map(|c| ("after", c)));
        // No overall time limit: the stream stays open (heartbeats keep
        // proxies from closing it); connecting has the client's own.
        let req = c
            .http
            .get(call.url.clone())
            .header(AUTHORIZATION, c.auth.clone())
            .query(&query);
        let req = match &c.tenant {
            Some(tenant) => req.header("x-tether-tenant", tenant.clone()),
            None => req,
        };
        let resp = req.send().await.map_err(Error::Transport)?;
        let status = resp.status().as_u16();
        if status != 200 {
            let bytes = resp.bytes().await.map_err(Error::Transport)?;
            return Err(api_error(status, &bytes));
        }
        Ok(resp)
    }
}

/// One message block of a server-sent event stream: an item, or `None`
/// for a comment (a heartbeat).
fn parse(block: &str) -> Result<Option<StreamItem>> {
    let (mut event, mut data) = (None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = Some(v.trim_start().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    let decode_error = |source| Error::Decode {
        route: "GET /v1/events".into(),
        source,
    };
    Ok(match event.as_deref() {
        None => None,
        Some("gap") => {
            let gap: serde_json::Value = serde_json::from_str(&data).map_err(decode_error)?;
            Some(StreamItem::Gap {
                oldest: gap["oldest"].as_str().unwrap_or_default().to_owned(),
            })
        }
        Some(_) => Some(StreamItem::Event(
            serde_json::from_str(&data).map_err(decode_error)?,
        )),
    })
}
