//! The HTTP client: one method per route of `docs/API.md`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderValue, AUTHORIZATION};
use reqwest::{Method, RequestBuilder, Url};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tether_core::{
    CarriedReports, Completion, Failure, Heartbeat, JobArgs, LeaseToken, NewJob, QueueConfigPatch,
    SchedulePatch, ScheduleSpec,
};
use uuid::Uuid;

use crate::error::{Error, ErrorCode, Result};
use crate::wire::{self, *};

/// Default limit of one request (a long-poll claim gets its `wait_ms` on top).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default limit of establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle on a tether server, acting with one API key (and so for that
/// key's tenant). Cheap to clone: clones share one connection pool.
#[derive(Clone)]
pub struct HttpClient {
    http: reqwest::Client,
    base: Url,
    auth: HeaderValue,
    tenant: Option<HeaderValue>,
    timeout: Duration,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the API key.
        f.debug_struct("HttpClient")
            .field("base_url", &self.base.as_str())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Configures an [`HttpClient`]; start from [`HttpClient::builder`].
pub struct HttpClientBuilder {
    base_url: String,
    api_key: String,
    timeout: Duration,
    connect_timeout: Duration,
    user_agent: String,
    tenant: Option<String>,
    http: Option<reqwest::Client>,
}

impl std::fmt::Debug for HttpClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClientBuilder")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("user_agent", &self.user_agent)
            .finish_non_exhaustive()
    }
}

impl HttpClientBuilder {
    /// Limit of one request, from connecting to the end of the answer
    /// (default 30 s). A long-poll claim may take its `wait_ms` longer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Limit of establishing a connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The `User-Agent` header (default `tether-client/<version>`).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// With an admin key: act for the tenant named (by name or id), as
    /// its own key would (`X-Tether-Tenant` on every request). The server
    /// refuses it (403 `permission_denied`) for any other key.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Sends requests through this `reqwest` client (its own timeouts,
    /// proxies, TLS roots, ...) instead of building one; the connect timeout
    /// and user agent set here are then not applied.
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// Checks the settings and builds the client. Nothing is sent yet.
    pub fn build(self) -> Result<HttpClient> {
        let mut base = Url::parse(&self.base_url)
            .map_err(|e| Error::invalid("base_url", format!("{:?}: {e}", self.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::invalid(
                "base_url",
                format!("{:?} is not an http:// or https:// URL", self.base_url),
            ));
        }
        base.set_query(None);
        base.set_fragment(None);
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", self.api_key.trim()))
            .map_err(|_| Error::invalid("api_key", "not a valid HTTP header value"))?;
        auth.set_sensitive(true);
        let tenant = self
            .tenant
            .map(|t| {
                HeaderValue::from_str(t.trim())
                    .map_err(|_| Error::invalid("tenant", "not a valid HTTP header value"))
            })
            .transpose()?;
        let http = match self.http {
            Some(http) => http,
            None => reqwest::Client::builder()
                .connect_timeout(self.connect_timeout)
                // Below the server's idle timeout (60 s by default), so a
                // pooled connection is dropped here before the server closes
                // it under a request being sent.
                .pool_idle_timeout(Duration::from_secs(30))
                .user_agent(self.user_agent)
                .build()
                .map_err(Error::Transport)?,
        };
        Ok(HttpClient {
            http,
            base,
            auth,
            tenant,
            timeout: self.timeout,
        })
    }
}

/// A request in the making: method, route (for error messages), URL.
struct Call {
    method: Method,
    route: String,
    url: Url,
}

impl HttpClient {
    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:7070`;
    /// a path prefix such as `https://host/tether/` is kept) that
    /// authenticates with `api_key`, with default settings.
    pub fn new(base_url: &str, api_key: &str) -> Result<HttpClient> {
        HttpClient::builder(base_url, api_key).build()
    }

    /// Starts configuring a client (timeouts, user agent, own `reqwest`
    /// client).
    pub fn builder(base_url: &str, api_key: &str) -> HttpClientBuilder {
        HttpClientBuilder {
            base_url: base_url.to_owned(),
            api_key: api_key.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            user_agent: concat!("tether-client/", env!("CARGO_PKG_VERSION")).to_owned(),
            tenant: None,
            http: None,
        }
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// The limit of one request (see [`HttpClientBuilder::timeout`]).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    // ----- plumbing -------------------------------------------------------

    /// `segments` appended to the base URL, each percent-encoded as one
    /// path segment.
    fn call(&self, method: Method, segments: &[&str]) -> Result<Call> {
        if let Some(s) = segments.iter().find(|s| matches!(**s, "" | "." | "..")) {
            return Err(Error::invalid(
                "path",
                format!("{s:?} cannot be sent as a path segment"),
            ));
        }
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|_| Error::invalid("base_url", "cannot be a base"))?
            .pop_if_empty()
            .extend(segments);
        let route = format!("{method} /{}", segments.join("/"));
        Ok(Call { method, route, url })
    }

    fn request(&self, call: &Call, auth: bool) -> RequestBuilder {
        let mut req = self
            .http
            .request(call.method.clone(), call.url.clone())
            .timeout(self.timeout);
        if auth {
            req = req.header(AUTHORIZATION, self.auth.clone());
            if let Some(tenant) = &self.tenant {
                req = req.header("x-tether-tenant", tenant.clone());
            }
        }
        req
    }

    /// Sends a prepared request; answers the body of a success,
    /// or the typed error of a failure.
    async fn send(&self, req: RequestBuilder) -> Result<Vec<u8>> {
        let resp = req.send().await.map_err(Error::Transport)?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(Error::Transport)?;
        if (200..300).contains(&status) {
            return Ok(bytes.to_vec());
        }
        Err(api_error(status, &bytes))
    }

    async fn json<T: DeserializeOwned>(&self, call: Call, body: Option<&Value>) -> Result<T> {
        let mut req = self.request(&call, true);
        if let Some(body) = body {
            req = req.json(body);
        }
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T> {
        let call = self.call(Method::GET, segments)?;
        self.json(call, None).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: Option<&Value>,
    ) -> Result<T> {
        let call = self.call(Method::POST, segments)?;
        self.json(call, body).await
    }

    // ----- producing --------------------------------------------------------

    /// `POST /v1/jobs`: enqueues one job. [`Enqueued::created`] is `false`
    /// when an existing job with the same idempotency key (or active unique
    /// key) was returned instead.
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let call = self.call(Method::POST, &["v1", "jobs"])?;
        self.json(call, Some(&wire::enqueue_body(&job))).await
    }

    /// Enqueues a typed job on its kind's default queue. For other settings
    /// build it with [`NewJob::for_args`] and call [`HttpClient::enqueue`].
    pub async fn enqueue_args<J: JobArgs>(&self, args: &J) -> Result<Enqueued> {
        let job = NewJob::for_args(args).map_err(|e| Error::invalid("payload", e.to_string()))?;
        self.enqueue(job).await
    }

    /// `POST /v1/jobs/batch`: enqueues 1–1000 jobs all-or-nothing; answers
    /// in request order.
    pub async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let jobs: Vec<Value> = jobs.iter().map(wire::enqueue_body).collect();
        let env: ResultsEnvelope<Enqueued> = self
            .post(&["v1", "jobs", "batch"], Some(&json!({ "jobs": jobs })))
            .await?;
        Ok(env.results)
    }

    // ----- working ----------------------------------------------------------

    /// `POST /v1/queues/{queue}/claim`: claims up to `limit` ready jobs. With
    /// `wait_ms`, an empty queue holds the request until a job becomes ready
    /// or the wait ends (then the answer is empty); this request's timeout
    /// is extended by the wait.
    pub async fn claim(&self, queue: &str, opts: &ClaimOptions) -> Result<Vec<ClaimedJob>> {
        let claimed = self
            .report_and_claim(queue, opts, &CarriedReports::default())
            .await?;
        Ok(claimed.jobs)
    }

    /// `POST /v1/queues/{queue}/claim` carrying the last batch's reports
    /// (completions, then failures; at most 1 000 together): the server
    /// applies them in the claim's transaction and answers each, as
    /// [`HttpClient::complete_batch`] does, beside the claimed jobs. A refused
    /// report never fails the claim. With `wait_ms`, the reports are applied
    /// at once but answered with the claim, after its wait.
    pub async fn report_and_claim(
        &self,
        queue: &str,
        opts: &ClaimOptions,
        reports: &CarriedReports,
    ) -> Result<Claimed> {
        let call = self.call(Method::POST, &["v1", "queues", queue, "claim"])?;
        let mut body = Map::new();
        body.insert("worker_id".into(), opts.worker_id.clone().into());
        if let Some(n) = opts.limit {
            body.insert("limit".into(), n.into());
        }
        if let Some(ms) = opts.lease_ttl_ms {
            body.insert("lease_ttl_ms".into(), ms.into());
        }
        let wait = opts.wait_ms.unwrap_or(0).max(0);
        if let Some(ms) = opts.wait_ms {
            body.insert("wait_ms".into(), ms.into());
        }
        if !reports.complete.is_empty() {
            let items = reports.complete.iter().map(completion_body).collect();
            body.insert("complete".into(), Value::Array(items));
        }
        if !reports.fail.is_empty() {
            let items = reports.fail.iter().map(|f| {
                let mut v = failure_body(f.lease_token, &f.failure);
                v["id"] = json!(f.id);
                v
            });
            body.insert("fail".into(), Value::Array(items.collect()));
        }
        let req = self
            .request(&call, true)
            .timeout(self.timeout + Duration::from_millis(wait as u64))
            .json(&Value::Object(body));
        let bytes = self.send(req).await?;
        let env: JobsEnvelope = decode(&call, &bytes)?;
        Ok(Claimed {
            jobs: env.jobs,
            reports: env.reports.into_iter().map(BatchItem::into_unit).collect(),
        })
    }

    /// `POST /v1/jobs/{id}/heartbeat`: extends the lease to now +
    /// `lease_ttl_ms` (or + the TTL given at claim) and stores the progress;
    /// the answer says whether a cancel was requested.
    pub async fn heartbeat(&self, hb: &Heartbeat) -> Result<HeartbeatAck> {
        let id = hb.id.to_string();
        self.post(
            &["v1", "jobs", &id, "heartbeat"],
            Some(&heartbeat_body(hb, false)),
        )
        .await
    }

    /// `POST /v1/jobs/heartbeat`: heartbeats 1–1000 jobs in one round trip
    /// (the batch route of `docs/http.md`); one answer per item, in order.
    pub async fn heartbeat_batch(
        &self,
        items: &[Heartbeat],
    ) -> Result<Vec<ItemResult<HeartbeatAck>>> {
        let items: Vec<Value> = items.iter().map(|h| heartbeat_body(h, true)).collect();
        let env: ResultsEnvelope<BatchItem> = self
            .post(
                &["v1", "jobs", "heartbeat"],
                Some(&json!({ "items": items })),
            )
            .await?;
        Ok(env
            .results
            .into_iter()
            .map(|item| {
                let result = match (item.ok, item.lease_expires_at) {
                    (true, Some(lease_expires_at)) => Ok(HeartbeatAck {
                        lease_expires_at,
                        cancel_requested: item.cancel_requested.unwrap_or(false),
                    }),
                    _ => Err(item_error(item.error)),
                };
                ItemResult {
                    id: item.id,
                    result,
                }
            })
            .collect())
    }

    /// `POST /v1/jobs/{id}/complete`: the job succeeded with `result`.
    pub async fn complete(
        &self,
        id: Uuid,
        lease_token: LeaseToken,
        result: Option<Value>,
    ) -> Result<Job> {
        let mut body = json!({ "lease_token": lease_token });
        if let Some(r) = result {
            body["result"] = r;
        }
        let id = id.to_string();
        let env: JobEnvelope = self
            .post(&["v1", "jobs", &id, "complete"], Some(&body))
            .await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/complete`: completes 1–1000 jobs; one answer per item,
    /// in order.
    pub async fn complete_batch(&self, items: &[Completion]) -> Result<Vec<ItemResult<()>>> {
        let items: Vec<Value> = items.iter().map(completion_body).collect();
        let env: ResultsEnvelope<BatchItem> = self
            .post(
                &["v1", "jobs", "complete"],
                Some(&json!({ "items": items })),
            )
            .await?;
        Ok(env.results.into_iter().map(BatchItem::into_unit).collect())
    }

    /// `POST /v1/jobs/cancel`: cancels 1–500 jobs, each as
    /// [`HttpClient::cancel`] would; one answer per id, in order.
    pub async fn cancel_jobs(&self, ids: &[Uuid]) -> Result<Vec<ItemResult<Job>>> {
        self.bulk(&["v1", "jobs", "cancel"], json!({ "ids": ids }))
            .await
    }

    /// `POST /v1/jobs/replay`: replays 1–500 finished jobs, each as
    /// [`HttpClient::replay`] would; one answer per id, in order.
    pub async fn replay_jobs(&self, ids: &[Uuid]) -> Result<Vec<ItemResult<Job>>> {
        self.bulk(&["v1", "jobs", "replay"], json!({ "ids": ids }))
            .await
    }

    async fn bulk(&self, route: &[&str], body: Value) -> Result<Vec<ItemResult<Job>>> {
        let env: ResultsEnvelope<BatchItem> = self.post(route, Some(&body)).await?;
        Ok(env
            .results
            .into_iter()
            .map(|item| ItemResult {
                id: item.id,
                result: match (item.ok, item.job) {
                    (true, Some(job)) => Ok(*job),
                    _ => Err(item_error(item.error)),
                },
            })
            .collect())
    }

    /// `POST /v1/jobs/{id}/fail`: the attempt failed. The job is queued
    /// again (after its jittered backoff, or exactly `retry_after_ms`), or
    /// `failed` when fatal or out of attempts, or `cancelled` when
    /// `failure.cancelled` acknowledges a cancel request.
    pub async fn fail(&self, id: Uuid, lease_token: LeaseToken, failure: &Failure) -> Result<Job> {
        let body = failure_body(lease_token, failure);
        let id = id.to_string();
        let env: JobEnvelope = self.post(&["v1", "jobs", &id, "fail"], Some(&body)).await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/{id}/snooze`: "not now" — back to `queued` at now +
    /// `delay_ms` with the attempt given back.
    pub async fn snooze(&self, id: Uuid, lease_token: LeaseToken, delay_ms: i64) -> Result<Job> {
        let body = json!({ "lease_token": lease_token, "delay_ms": delay_ms });
        let id = id.to_string();
        let env: JobEnvelope = self
            .post(&["v1", "jobs", &id, "snooze"], Some(&body))
            .await?;
        Ok(env.job)
    }

    // ----- managing ---------------------------------------------------------

    /// `GET /v1/jobs/{id}`.
    pub async fn get_job(&self, id: Uuid) -> Result<Job> {
        let id = id.to_string();
        let env: JobEnvelope = self.get(&["v1", "jobs", &id]).await?;
        Ok(env.job)
    }

    /// `GET /v1/jobs?...`: one page of jobs, newest first. Follow
    /// [`JobPage::next_cursor`] for the next one.
    pub async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        let call = self.call(Method::GET, &["v1", "jobs"])?;
        let req = self.request(&call, true).query(&query.pairs());
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// `GET /v1/jobs/{id}/events?...`: one page of the job's history,
    /// oldest first. Follow [`EventPage::next_cursor`] for the next one.
    pub async fn events_page(&self, id: Uuid, query: &EventQuery) -> Result<EventPage> {
        let id = id.to_string();
        let call = self.call(Method::GET, &["v1", "jobs", &id, "events"])?;
        let req = self.request(&call, true).query(&query.pairs());
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// The job's whole history, oldest first, read page by page (1 000
    /// events a request).
    pub async fn events(&self, id: Uuid) -> Result<Vec<JobEvent>> {
        let mut query = EventQuery {
            limit: Some(1_000),
            cursor: None,
        };
        let mut events = Vec::new();
        loop {
            let page = self.events_page(id, &query).await?;
            events.extend(page.events);
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return Ok(events),
            }
        }
    }

    /// `POST /v1/jobs/{id}/cancel`: a queued job is cancelled at once, a
    /// running one gets `cancel_requested`; a finished one is 409
    /// `invalid_state`.
    pub async fn cancel(&self, id: Uuid) -> Result<Job> {
        let id = id.to_string();
        let env: JobEnvelope = self.post(&["v1", "jobs", &id, "cancel"], None).await?;
        Ok(env.job)
    }

    /// `POST /v1/jobs/{id}/replay`: a finished job (failed, cancelled or
    /// succeeded: it runs again) is queued again with a fresh attempt budget (same id) and no `expires_at`.
    pub async fn replay(&self, id: Uuid) -> Result<Job> {
        self.replay_with(id, None).await
    }

    /// `POST /v1/jobs/{id}/replay` with `expires_at` as the job's new
    /// expiry (`None`: none).
    pub async fn replay_with(&self, id: Uuid, expires_at: Option<DateTime<Utc>>) -> Result<Job> {
        let id = id.to_string();
        let body = expires_at.map(|at| json!({ "expires_at": wire::time(&at) }));
        let env: JobEnvelope = self
            .post(&["v1", "jobs", &id, "replay"], body.as_ref())
            .await?;
        Ok(env.job)
    }

    /// `POST /v1/queues/{queue}/replay`: one round of bulk replay of the
    /// dead-letter queue (or of cancelled jobs); answers how many were
    /// replayed.
    pub async fn replay_queue(&self, queue: &str, filter: &BulkReplay) -> Result<u64> {
        Ok(self.replay_queue_round(queue, filter).await?.replayed)
    }

    /// `POST /v1/queues/{queue}/replay`: one round of bulk replay, with
    /// where the next round starts. Pass [`BulkReplayed::next_cursor`] as
    /// [`BulkReplay::cursor`] until it is `None` to go through every
    /// matching job once.
    pub async fn replay_queue_round(
        &self,
        queue: &str,
        filter: &BulkReplay,
    ) -> Result<BulkReplayed> {
        let mut body = Map::new();
        if let Some(s) = filter.state {
            body.insert("state".into(), s.as_str().into());
        }
        if let Some(k) = &filter.kind {
            body.insert("kind".into(), k.clone().into());
        }
        if let Some(n) = filter.limit {
            body.insert("limit".into(), n.into());
        }
        if let Some(cursor) = &filter.cursor {
            body.insert("cursor".into(), cursor.clone().into());
        }
        if let Some(at) = filter.expires_at {
            body.insert("expires_at".into(), wire::time(&at).into());
        }
        self.post(
            &["v1", "queues", queue, "replay"],
            Some(&Value::Object(body)),
        )
        .await
    }

    /// `GET /v1/queues`: every queue of the tenant with its stats.
    pub async fn list_queues(&self) -> Result<Vec<Queue>> {
        let env: QueuesEnvelope = self.get(&["v1", "queues"]).await?;
        Ok(env.queues)
    }

    /// `GET /v1/queues/{queue}`: one queue's stats and settings (any valid
    /// name; an unused queue shows zero counts).
    pub async fn get_queue(&self, queue: &str) -> Result<Queue> {
        let env: QueueEnvelope = self.get(&["v1", "queues", queue]).await?;
        Ok(env.queue)
    }

    /// `POST /v1/queues/{queue}/pause`: the queue hands out no claims
    /// (enqueues are still accepted).
    pub async fn pause(&self, queue: &str) -> Result<Queue> {
        let env: QueueEnvelope = self.post(&["v1", "queues", queue, "pause"], None).await?;
        Ok(env.queue)
    }

    /// `DELETE /v1/queues/{queue}`: removes an empty queue's row (its
    /// pause flag and settings); `invalid_state` while it holds jobs.
    pub async fn delete_queue(&self, queue: &str) -> Result<()> {
        let call = self.call(Method::DELETE, &["v1", "queues", queue])?;
        let req = self.request(&call, true);
        self.send(req).await?;
        Ok(())
    }

    /// `GET /v1/workers`: who holds the tenant's running jobs now.
    pub async fn list_workers(&self) -> Result<Vec<WorkerInfo>> {
        let env: WorkersEnvelope = self.get(&["v1", "workers"]).await?;
        Ok(env.workers)
    }

    /// `GET /v1/queues/{queue}/throughput?minutes=N`: per-minute outcome
    /// counts of the last `minutes` minutes (1–1440; `None`: the server's
    /// default, 60) and the wait and run percentiles of the jobs that
    /// finished in them.
    pub async fn throughput(&self, queue: &str, minutes: Option<u32>) -> Result<Throughput> {
        let call = self.call(Method::GET, &["v1", "queues", queue, "throughput"])?;
        let query: Vec<(&str, String)> = minutes
            .map(|m| ("minutes", m.to_string()))
            .into_iter()
            .collect();
        let req = self.request(&call, true).query(&query);
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }

    /// `POST /v1/queues/{queue}/resume`.
    pub async fn resume(&self, queue: &str) -> Result<Queue> {
        let env: QueueEnvelope = self.post(&["v1", "queues", queue, "resume"], None).await?;
        Ok(env.queue)
    }

    /// `PATCH /v1/queues/{queue}`: changes the settings later jobs copy and
    /// the queue's limits; unset fields stay as they are.
    pub async fn configure_queue(&self, queue: &str, patch: &QueueConfigPatch) -> Result<Queue> {
        let mut body = Map::new();
        if let Some(n) = patch.max_attempts {
            body.insert("max_attempts".into(), n.into());
        }
        if let Some(b) = patch.backoff {
            body.insert(
                "backoff".into(),
                json!({ "base_ms": b.base_ms, "cap_ms": b.cap_ms }),
            );
        }
        if let Some(ms) = patch.default_lease_ttl_ms {
            body.insert("default_lease_ttl_ms".into(), ms.into());
        }
        // `Some(None)` is sent as `null`, which removes the limit.
        if let Some(limit) = patch.max_running {
            body.insert("max_running".into(), limit.into());
        }
        if let Some(rate) = patch.rate_limit {
            let rate = rate.map(|r| json!({ "count": r.count, "period_ms": r.period_ms }));
            body.insert("rate_limit".into(), rate.unwrap_or(Value::Null));
        }
        if let Some(limit) = patch.key_max_running {
            body.insert("key_max_running".into(), limit.into());
        }
        if let Some(fair) = patch.fair {
            body.insert("fair".into(), fair.into());
        }
        let call = self.call(Method::PATCH, &["v1", "queues", queue])?;
        let env: QueueEnvelope = self.json(call, Some(&Value::Object(body))).await?;
        Ok(env.queue)
    }

    // ----- schedules --------------------------------------------------------

    /// `POST /v1/schedules`: creates a schedule; its first run is the first
    /// fire instant after now. A name the tenant already uses is 409
    /// `already_exists`; a bad expression or time zone is 400.
    pub async fn create_schedule(&self, spec: &ScheduleSpec) -> Result<Schedule> {
        let env: ScheduleEnvelope = self
            .post(&["v1", "schedules"], Some(&wire::schedule_body(spec)))
            .await?;
        Ok(env.schedule)
    }

    /// `GET /v1/schedules`: every schedule of the tenant, by name.
    pub async fn list_schedules(&self) -> Result<Vec<Schedule>> {
        let env: SchedulesEnvelope = self.get(&["v1", "schedules"]).await?;
        Ok(env.schedules)
    }

    /// `GET /v1/schedules/{id}`.
    pub async fn get_schedule(&self, id: Uuid) -> Result<Schedule> {
        let id = id.to_string();
        let env: ScheduleEnvelope = self.get(&["v1", "schedules", &id]).await?;
        Ok(env.schedule)
    }

    /// `PATCH /v1/schedules/{id}`: changes the fields the patch sets
    /// (`payload: Some(Value::Null)` sets the payload to `null`); the server
    /// recomputes `next_run_at` from now.
    pub async fn patch_schedule(&self, id: Uuid, patch: &SchedulePatch) -> Result<Schedule> {
        let id = id.to_string();
        let call = self.call(Method::PATCH, &["v1", "schedules", &id])?;
        let env: ScheduleEnvelope = self
            .json(call, Some(&wire::schedule_patch_body(patch)))
            .await?;
        Ok(env.schedule)
    }

    /// `DELETE /v1/schedules/{id}`: deletes a schedule and its runs (the
    /// jobs it enqueued stay).
    pub async fn delete_schedule(&self, id: Uuid) -> Result<()> {
        let id = id.to_string();
        let call = self.call(Method::DELETE, &["v1", "schedules", &id])?;
        let req = self.request(&call, true);
        self.send(req).await?;
        Ok(())
    }

    /// `GET /v1/schedules/{id}/runs`: the newest runs, newest first.
    pub async fn schedule_runs(&self, id: Uuid) -> Result<Vec<ScheduleRun>> {
        let id = id.to_string();
        let env: RunsEnvelope = self.get(&["v1", "schedules", &id, "runs"]).await?;
        Ok(env.runs)
    }

    /// `POST /v1/schedules/{id}/trigger`: runs the schedule now, outside its
    /// timetable; answers the job it enqueued.
    pub async fn trigger_schedule(&self, id: Uuid) -> Result<Job> {
        let id = id.to_string();
        let env: JobEnvelope = self
            .post(&["v1", "schedules", &id, "trigger"], None)
            .await?;
        Ok(env.job)
    }

    /// `GET /v1/cron/preview`: the next fire instants of an expression,
    /// strictly after [`CronPreview::from`] (default now), computed by the
    /// scheduler's own code.
    pub async fn cron_preview(&self, preview: &CronPreview) -> Result<Vec<DateTime<Utc>>> {
        let call = self.call(Method::GET, &["v1", "cron", "preview"])?;
        let req = self.request(&call, true).query(&preview.pairs());
        let bytes = self.send(req).await?;
        let env: TimesEnvelope = decode(&call, &bytes)?;
        Ok(env.times)
    }

    // ----- tenants and keys (admin scope) -----------------------------------

    /// `POST /v1/tenants` (admin): creates a tenant and its first key.
    pub async fn create_tenant(&self, name: &str) -> Result<CreatedTenant> {
        self.post(&["v1", "tenants"], Some(&json!({ "name": name })))
            .await
    }

    /// `GET /v1/tenants` (admin).
    pub async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        let env: TenantsEnvelope = self.get(&["v1", "tenants"]).await?;
        Ok(env.tenants)
    }

    /// `POST /v1/tenants/{tenant_id}/suspend` (admin): stops the tenant —
    /// its keys are refused (403), its schedules do not fire, an admin
    /// acting for it may only read — until [`HttpClient::resume_tenant`].
    pub async fn suspend_tenant(&self, tenant_id: Uuid) -> Result<Tenant> {
        let id = tenant_id.to_string();
        let env: TenantEnvelope = self.post(&["v1", "tenants", &id, "suspend"], None).await?;
        Ok(env.tenant)
    }

    /// `POST /v1/tenants/{tenant_id}/resume` (admin): a suspended tenant's
    /// keys work again and its schedules fire from their next instant.
    pub async fn resume_tenant(&self, tenant_id: Uuid) -> Result<Tenant> {
        let id = tenant_id.to_string();
        let env: TenantEnvelope = self.post(&["v1", "tenants", &id, "resume"], None).await?;
        Ok(env.tenant)
    }

    /// `POST /v1/tenants/{tenant_id}/keys` (admin): issues a key for a
    /// tenant (`admin: true` only for the `default` tenant).
    pub async fn create_key(&self, tenant_id: Uuid, key: &NewKey) -> Result<CreatedKey> {
        let mut body = Map::new();
        if let Some(name) = &key.name {
            body.insert("name".into(), name.clone().into());
        }
        if key.admin {
            body.insert("admin".into(), true.into());
        }
        let id = tenant_id.to_string();
        self.post(&["v1", "tenants", &id, "keys"], Some(&Value::Object(body)))
            .await
    }

    /// `GET /v1/tenants/{tenant_id}/keys` (admin): the tenant's keys,
    /// revoked ones included, oldest first.
    pub async fn list_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKey>> {
        let id = tenant_id.to_string();
        let env: KeysEnvelope = self.get(&["v1", "tenants", &id, "keys"]).await?;
        Ok(env.keys)
    }

    /// `GET /v1/whoami`: the key's tenant, id and scope, to check a key
    /// before starting work with it.
    pub async fn whoami(&self) -> Result<Whoami> {
        self.get(&["v1", "whoami"]).await
    }

    /// `DELETE /v1/keys/{key_id}` (admin): revokes a key at once.
    pub async fn revoke_key(&self, key_id: Uuid) -> Result<()> {
        let id = key_id.to_string();
        let call = self.call(Method::DELETE, &["v1", "keys", &id])?;
        let req = self.request(&call, true);
        self.send(req).await?;
        Ok(())
    }

    // ----- outside /v1 ------------------------------------------------------

    /// `GET /healthz` (no key): `Ok` while the server process is alive.
    pub async fn healthz(&self) -> Result<()> {
        self.probe("healthz").await
    }

    /// `GET /readyz` (no key): `Ok` while the server reaches its database;
    /// 503 `unavailable` otherwise.
    pub async fn readyz(&self) -> Result<()> {
        self.probe("readyz").await
    }

    async fn probe(&self, route: &str) -> Result<()> {
        let call = self.call(Method::GET, &[route])?;
        let req = self.request(&call, false);
        self.send(req).await?;
        Ok(())
    }

    /// `GET /metrics` (admin key): the Prometheus text of every tenant's
    /// queues.
    pub async fn metrics(&self) -> Result<String> {
        let call = self.call(Method::GET, &["metrics"])?;
        let req = self.request(&call, true);
        let bytes = self.send(req).await?;
        String::from_utf8(bytes).map_err(|e| Error::Decode {
            route: call.route,
            source: serde::de::Error::custom(e),
        })
    }

    /// `GET /openapi.json` (no key): the machine-readable description of
    /// the API.
    pub async fn openapi(&self) -> Result<Value> {
        let call = self.call(Method::GET, &["openapi.json"])?;
        let req = self.request(&call, false);
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }
}

/// The wire form of one heartbeat (`with_id` for the batch route).
fn heartbeat_body(hb: &Heartbeat, with_id: bool) -> Value {
    let mut v = json!({ "lease_token": hb.lease_token });
    if with_id {
        v["id"] = hb.id.to_string().into();
    }
    if let Some(ms) = hb.lease_ttl_ms {
        v["lease_ttl_ms"] = ms.into();
    }
    if let Some(p) = &hb.progress {
        v["progress"] = p.clone();
    }
    v
}

fn decode<T: DeserializeOwned>(call: &Call, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| Error::Decode {
        route: call.route.clone(),
        source,
    })
}

/// The typed error of an answer with a non-2xx status.
fn api_error(status: u16, body: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorEnvelope>(body) {
        Ok(env) => match ErrorCode::parse(&env.error.code) {
            Some(code) => Error::Api {
                status,
                code,
                message: env.error.message,
            },
            None => Error::UnknownCode {
                status,
                code: env.error.code,
                message: env.error.message,
            },
        },
        Err(_) => {
            // Not the API's shape (a proxy, a server of another kind): keep
            // a bounded excerpt of the body as the message.
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            let message = if text.is_empty() {
                format!("HTTP {status} without an error body")
            } else {
                text.chars().take(500).collect()
            };
            match crate::error::code_of_status(status) {
                Some(code) => Error::Api {
                    status,
                    code,
                    message,
                },
                None => Error::UnknownCode {
                    status,
                    code: format!("http_{status}"),
                    message,
                },
            }
        }
    }
}

/// The error of a failed batch item.
impl BatchItem {
    /// The answer of an item that carries nothing but its outcome.
    fn into_unit(self) -> ItemResult<()> {
        ItemResult {
            id: self.id,
            result: if self.ok {
                Ok(())
            } else {
                Err(item_error(self.error))
            },
        }
    }
}

fn item_error(body: Option<ErrorBody>) -> Error {
    match body {
        Some(b) => match ErrorCode::parse(&b.code) {
            Some(code) => Error::Api {
                status: code.status(),
                code,
                message: b.message,
            },
            None => Error::UnknownCode {
                status: 500,
                code: b.code,
                message: b.message,
            },
        },
        None => Error::Api {
            status: 500,
            code: ErrorCode::Internal,
            message: "a batch item failed without an error".to_owned(),
        },
    }
}

/// One completion as `POST /v1/jobs/complete` and a claim's `complete` take it.
fn completion_body(c: &Completion) -> Value {
    let mut v = json!({ "id": c.id, "lease_token": c.lease_token });
    if let Some(r) = &c.result {
        v["result"] = r.clone();
    }
    v
}

/// A failure as `POST /v1/jobs/{id}/fail` takes it (a claim's `fail` items
/// add the `id`).
fn failure_body(lease_token: LeaseToken, failure: &Failure) -> Value {
    let mut body = json!({ "lease_token": lease_token, "error": failure.error });
    if let Some(ms) = failure.retry_after_ms {
        body["retry_after_ms"] = ms.into();
    }
    if failure.fatal {
        body["fatal"] = true.into();
    }
    if failure.cancelled {
        body["cancelled"] = true.into();
    }
    body
}
