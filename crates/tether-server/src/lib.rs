//! tether's HTTP service: the `/v1` API of `docs/API.md` over an
//! [`Engine`], with API-key authentication, tenant walls and errors in the
//! API's shape.
//!
//! [`router`] builds the whole service; [`start`] runs it as `tether serve`
//! does (data directory, database, server secret, admin key, maintenance),
//! configured by a [`ServeConfig`].
//!
//! Decisions `docs/API.md` leaves to the server (also in `docs/http.md`):
//! - Every `/v1` route authenticates first (before body checks), so a
//!   request without a valid key is 401 whatever else is wrong with it.
//!   Unknown routes are 404 and wrong methods 405 even without a key.
//! - A path id that is not a UUID names nothing: 404 `not_found`.
//! - An absent `payload` is JSON `null`. Times are written with millisecond
//!   precision (`2026-11-29T23:00:00.123Z`); any RFC 3339 offset is accepted
//!   on input and converted to UTC.
//! - `wait_ms` above the configured maximum (30 000) is 400. A long-poll
//!   claims once more when its wait ends, so a job that became ready by time
//!   alone (a delay ending, which sends no hint) is still handed out.
//! - Bodies whose fields are all optional (bulk replay, key creation) may be
//!   omitted; `application/json` and `application/*+json` (any parameters)
//!   are JSON; anything else with a body is 415.
//! - Unknown query parameters of `GET /v1/jobs` are 400, empty ones unset.
//! - Storage failures other than unreachability are 500 `internal` with a
//!   generic message (details go to the log only).

pub mod admin_key;
mod connections;
mod dashboard;
pub mod data_dir;
mod error;
mod extract;
mod feed;
#[doc(hidden)]
pub mod fuzzing;
mod metrics;
mod observe;
mod openapi;
mod routes;
pub mod server_secret;
mod standalone;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tether_core::Engine;

pub use feed::FeedTail;

pub use connections::{serve, ConnectionLimits};
pub use error::{ApiError, ApiResult};
pub use extract::{ApiJson, ApiQuery, Caller, OptionalJson};
pub use metrics::{
    install_recorder, install_recorder_with, Family, Kind, Metrics, Source, FAMILIES, GAUGE_CACHE,
    SERIES_SWEEP,
};
pub use observe::{ACCESS_TARGET, MAX_REQUEST_ID, REQUEST_ID};
pub use openapi::{openapi, openapi_json};
pub use standalone::{
    choose_database, start, Running, Secrets, ServeConfig, ServeError, SQLITE_FILE,
};

/// The default longest `wait_ms` of a claim ([`ServerConfig::max_wait_ms`]).
pub(crate) const DEFAULT_MAX_WAIT_MS: i64 = tether_api::DEFAULT_MAX_WAIT_MS;

/// Settings of the HTTP service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Largest request body in bytes (default 1 MiB); above it → 413.
    pub max_body_bytes: usize,
    /// Longest `wait_ms` a claim may ask for (default 30 000).
    pub max_wait_ms: i64,
    /// Most claims waiting at once (default 1 024). A claim that finds every
    /// waiting place taken answers at once, as if it had asked for
    /// `wait_ms: 0`, so a flood of long-polls cannot pin the server.
    pub max_long_polls: usize,
    /// Most claims of one tenant waiting at once (default 256, a quarter of
    /// `max_long_polls`): one tenant's flood of long-polls leaves the other
    /// waiting places to other tenants. Past it, the tenant's claim answers
    /// at once, as with `wait_ms: 0`.
    pub max_long_polls_per_tenant: usize,
    /// Most event streams (`GET /v1/events`) one tenant may hold open at
    /// once (default 64); past it, 429 `too_many_requests`.
    pub max_event_streams_per_tenant: usize,
    /// Longest any request may take, long-polls included (default 60 s, so
    /// above `max_wait_ms`); past it the answer is 503 `unavailable`.
    pub request_timeout: std::time::Duration,
    /// Most queues (of all tenants) the per-queue gauges of `/metrics`
    /// cover (default 1 000); the ones with the fewest unfinished and failed
    /// jobs are left out first, and `tether_queue_series_omitted` says how
    /// many were. (`tether serve` also bounds the (tenant, queue) pairs of
    /// the recorded counters and histograms by it: [`install_recorder`].)
    pub metrics_max_queues: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_body_bytes: 1024 * 1024,
            max_wait_ms: DEFAULT_MAX_WAIT_MS,
            max_long_polls: 1_024,
            max_long_polls_per_tenant: 256,
            max_event_streams_per_tenant: 64,
            request_timeout: std::time::Duration::from_secs(60),
            metrics_max_queues: 1_000,
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The engine over the store.
    pub engine: Engine,
    /// The service settings.
    pub config: Arc<ServerConfig>,
    /// One permit per claim allowed to wait (see `max_long_polls`).
    pub long_polls: Arc<tokio::sync::Semaphore>,
    /// Each tenant's waiting claims (see `max_long_polls_per_tenant`).
    pub tenant_long_polls: Arc<tether_core::turns::Turns>,
    /// Each tenant's open event streams (see `max_event_streams_per_tenant`).
    pub tenant_streams: Arc<tether_core::turns::Turns>,
    /// Cancelled when the server begins to stop: waiting claims answer at
    /// once (empty) so a graceful shutdown does not wait out long-polls.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// What `/metrics` serves besides the queue gauges.
    pub metrics: Metrics,
    /// The feed's one reader in this process, which waiting requests and
    /// event streams listen to (`feed.rs`).
    pub feed: FeedTail,
}

impl AppState {
    /// State over `engine` with `config`.
    pub fn new(engine: Engine, config: ServerConfig) -> Self {
        AppState {
            feed: FeedTail::new(engine.clone()),
            engine,
            long_polls: Arc::new(tokio::sync::Semaphore::new(config.max_long_polls)),
            tenant_long_polls: tether_core::turns::Turns::new(config.max_long_polls_per_tenant),
            tenant_streams: tether_core::turns::Turns::new(config.max_event_streams_per_tenant),
            shutdown: tokio_util::sync::CancellationToken::new(),
            metrics: Metrics::gauges_only(),
            config: Arc::new(config),
        }
    }

    /// The same state serving `metrics` at `/metrics`.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }
}

/// The whole service: `/healthz`, `/readyz`, `/metrics`, `/openapi.json`,
/// the `/v1` API (the routes of `routes::api`, which the OpenAPI document
/// is made from too) and the dashboard at `/`. Every request gets a request
/// id, a span, an access line and a latency sample (`observe.rs`).
pub fn router(state: AppState) -> Router {
    let authenticate = axum::middleware::from_fn_with_state(state.clone(), authenticate);
    // The document made alongside is dropped here: `openapi()` makes it.
    let (api, _) = routes::api(|v1| v1.route_layer(authenticate)).split_for_parts();
    api.merge(dashboard::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            time_limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            nudge_feed,
        ))
        // Outside the time limit, so a request cut off is logged too; a
        // layer of the router (not around it) so it sees the matched route.
        .layer(axum::middleware::from_fn(observe::observe))
        .with_state(state)
}

/// Bounds every request by `request_timeout`. A request cut off mid-claim
/// loses nothing: the jobs it took come back when their lease lapses.
async fn time_limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(state.config.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            ApiError::unavailable("the request took too long; it is safe to retry").into_response()
        }
    }
}

/// After a request that may have written (any method but GET and HEAD),
/// nudges the feed's tail: whatever it committed reaches the event streams
/// and waiting reads at once, even when the feed was quiet (see `feed.rs`).
async fn nudge_feed(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let writes = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let response = next.run(req).await;
    if writes {
        state.feed.nudge();
    }
    response
}

/// Authenticates every `/v1` request before its handler runs and puts the
/// [`Caller`] in the request's extensions.
async fn authenticate(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (mut parts, body) = req.into_parts();
    let caller = <Caller as axum::extract::FromRequestParts<AppState>>::from_request_parts(
        &mut parts, &state,
    )
    .await?;
    parts.extensions.insert(caller);
    Ok(next.run(Request::from_parts(parts, body)).await)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        tether_core::ErrorCode::MethodNotAllowed,
        "this route does not accept that method",
    )
}
