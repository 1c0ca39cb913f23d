//! What every request leaves behind: a request id (the client's
//! `X-Request-Id` when it is sane, else a fresh one) echoed in the answer
//! and carried by a tracing span around the request, so every log line of
//! the request names it; one access line on the target [`ACCESS_TARGET`];
//! and a sample of `tether_http_request_duration_seconds`.
//!
//! The access line holds the method, the route template (`/v1/jobs/{id}`,
//! never the path with its ids, nor the query string), the status, the
//! latency and the authenticated tenant; never a key, a header or a body.
//! Probes (`/healthz`, `/readyz`, `/metrics`) that succeed log it at DEBUG,
//! so that a scraper or load balancer does not fill the log; every other
//! answer, and a probe that fails, at INFO.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use tracing::{Instrument, Span};

/// The request id header, read and answered.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest client request id taken; a longer one is replaced.
pub const MAX_REQUEST_ID: usize = 128;

/// The target of the access lines, to filter them by (`TETHER_LOG`), e.g.
/// `info,tether::access=warn` to turn them off.
pub const ACCESS_TARGET: &str = "tether::access";

/// The route label of a request that matched no route (a 404).
const UNMATCHED: &str = "unmatched";

/// What the request learns on its way that its access line reports: the
/// tenant, once a key authenticated it (set by the [`crate::Caller`]
/// extractor, which also records it on the request's span).
#[derive(Debug, Clone)]
pub(crate) struct RequestContext {
    tenant: Arc<OnceLock<String>>,
    span: Span,
}

impl RequestContext {
    /// Records the authenticated tenant (the first one stays).
    pub(crate) fn set_tenant(&self, tenant: &str) {
        if self.tenant.set(tenant.to_owned()).is_ok() {
            self.span.record("tenant", tenant);
        }
    }
}

/// The client's request id if it is 1 to [`MAX_REQUEST_ID`] visible ASCII
/// characters (no spaces, no control characters, so it cannot break a log
/// line), else a fresh UUID.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(&REQUEST_ID)
        .map(HeaderValue::as_bytes)
        .filter(|id| {
            (1..=MAX_REQUEST_ID).contains(&id.len()) && id.iter().all(u8::is_ascii_graphic)
        })
        .and_then(|id| std::str::from_utf8(id).ok())
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
}

/// The method as a label: the standard ones by name, any other as `other`,
/// so invented methods cannot add series.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// `2xx`, `4xx`...
fn status_class(status: u16) -> &'static str {
    match status / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        _ => "5xx",
    }
}

/// Routes whose successful answers log at DEBUG.
fn is_probe(route: &str) -> bool {
    matches!(route, "/healthz" | "/readyz" | "/metrics")
}

/// The middleware (outermost, so it sees time-limited and refused
/// requests too).
pub(crate) async fn observe(mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(req.headers());
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |p| p.as_str().to_owned());
    // At ERROR level so that it is enabled whenever anything of this crate
    // logs at all: a WARN line of the request must name it under
    // `TETHER_LOG=warn` too. A span's level is not printed.
    let span = tracing::error_span!(
        "request",
        request_id = %id,
        tenant = tracing::field::Empty
    );
    let context = RequestContext {
        tenant: Arc::default(),
        span: span.clone(),
    };
    req.extensions_mut().insert(context.clone());
    let mut response = next.run(req).instrument(span.clone()).await;
    let latency = started.elapsed();
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let status = response.status().as_u16();
    metrics::histogram!(
        "tether_http_request_duration_seconds",
        "method" => method,
        "route" => route.clone(),
        "status" => status_class(status)
    )
    .record(latency.as_secs_f64());
    let _in_request = span.enter();
    let tenant = context.tenant.get().map(String::as_str);
    // Milliseconds with microseconds.
    let latency_ms = (latency.as_secs_f64() * 1e6).round() / 1e3;
    macro_rules! access {
        ($level:ident) => {
            tracing::$level!(
                target: ACCESS_TARGET,
                method,
                route = route.as_str(),
                status,
                latency_ms,
                tenant,
                "answered"
            )
        };
    }
    if is_probe(&route) && status < 400 {
        access!(debug);
    } else {
        access!(info);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(value: &[u8]) -> String {
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_bytes(value).unwrap());
        request_id(&headers)
    }

    #[test]
    fn a_sane_client_request_id_is_kept_and_others_replaced() {
        assert_eq!(id_of(b"abc-123_x:y/z=+"), "abc-123_x:y/z=+");
        let longest = "a".repeat(MAX_REQUEST_ID);
        assert_eq!(id_of(longest.as_bytes()), longest);
        for bad in [
            "a".repeat(MAX_REQUEST_ID + 1).into_bytes(),
            b"has space".to_vec(),
            b"tab\there".to_vec(),
            "caf\u{e9}".as_bytes().to_vec(),
            Vec::new(),
        ] {
            let id = id_of(&bad);
            assert_ne!(id.as_bytes(), bad.as_slice());
            assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
        }
        let fresh = request_id(&HeaderMap::new());
        assert!(uuid::Uuid::parse_str(&fresh).is_ok(), "{fresh}");
        assert_ne!(fresh, request_id(&HeaderMap::new()));
    }

    #[test]
    fn labels_are_bounded() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
        assert_eq!(status_class(204), "2xx");
        assert_eq!(status_class(404), "4xx");
        assert_eq!(status_class(503), "5xx");
    }
}
