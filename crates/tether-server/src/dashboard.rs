//! The web dashboard: three static files (`dashboard/`) compiled into the
//! binary and served without a key at `GET /`, `GET /assets/app.js` and
//! `GET /assets/style.css`. The page asks for an API key and then calls
//! `/v1` like any other client, so it can do nothing the key cannot.
//!
//! Every answer carries a strict Content-Security-Policy (only this origin's
//! script, style and fetches; no inline script; no framing) and
//! `X-Content-Type-Options: nosniff`. The script builds its DOM with
//! `textContent` only, so job data (attacker-controlled) is never parsed as
//! HTML; the policy is the second wall behind that.
//!
//! These are not API routes: they are not in the OpenAPI document.

use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The page itself.
pub const INDEX_HTML: &str = include_str!("../dashboard/index.html");
/// The whole client: routing, views, live updates (`GET /v1/events`) and
/// refreshing.
pub const APP_JS: &str = include_str!("../dashboard/app.js");
/// The stylesheet.
pub const STYLE_CSS: &str = include_str!("../dashboard/style.css");

/// The policy every dashboard answer carries.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The dashboard's routes, to merge into the service's router.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/style.css", get(style_css))
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

/// One static file with the security headers. `no-cache` makes a browser
/// revalidate, so an upgraded server's page is picked up at once.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
