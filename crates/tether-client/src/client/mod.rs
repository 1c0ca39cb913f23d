//! The HTTP client: one method per route of `docs/API.md`, in one file per
//! topic (named as the backends' files are); this one holds the client,
//! its builder and the transport every method shares.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderValue, AUTHORIZATION};
use reqwest::{Method, RequestBuilder, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tether_core::{
    CarriedReports, Completion, Failure, Heartbeat, JobArgs, LeaseToken, NewJob, NewWorkflow,
    PutOutcome, QueueConfigPatch, RetryMode, SchedulePatch, ScheduleSpec, WorkerAnnouncement,
};
use uuid::Uuid;

use crate::error::{Error, ErrorCode, Result};
use crate::wire::{self, *};
use crate::{
    BulkReplayed, CreatedKey, CreatedTenant, Enqueued, EventPage, HeartbeatAck, JobPage,
    Throughput, Whoami, WorkflowCancelled, WorkflowGraph, WorkflowPage,
};
use tether_api::*;

mod attempts;
mod enqueue;
mod feed;
mod jobs;
mod queues;
mod schedules;
mod service;
mod tenants;
mod workflows;

pub use feed::{EventStream, StreamFilter, StreamItem};

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
}

/// A request body as JSON (the API's bodies always are).
fn body(b: &impl Serialize) -> Value {
    serde_json::to_value(b).expect("a request body serializes to JSON")
}

fn decode<T: DeserializeOwned>(call: &Call, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| Error::Decode {
        route: call.route.clone(),
        source,
    })
}

/// The typed error of an answer with a non-2xx status.
fn api_error(status: u16, body: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(body) {
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

fn item_error(body: Option<ErrorDetail>) -> Error {
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
