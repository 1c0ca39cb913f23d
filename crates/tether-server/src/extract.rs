//! Extractors whose rejections speak the API's error shape: JSON bodies
//! (content type, size limit, unknown fields, field-naming messages), query
//! strings, and the authenticated caller.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use tether_core::{ApiKeyInfo, Error};
use tracing::Instrument;

use crate::error::ApiError;
use crate::observe::RequestContext;
use crate::AppState;

/// A JSON request body, deserialized strictly.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

/// A JSON request body that may also be absent (empty, no content type):
/// then `T::default()`.
#[derive(Debug)]
pub struct OptionalJson<T>(pub T);

fn is_json(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// How far past the body limit a declared body is still read (and dropped)
/// so that its sender sees the 413 (see `read_body`).
const DRAIN_FACTOR: u64 = 4;

async fn read_body(req: Request, limit: usize) -> Result<Bytes, ApiError> {
    let too_large =
        || ApiError::too_large(format!("request body is above the limit of {limit} bytes"));
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            // A body a little over the limit is read and dropped before the
            // answer: a client that is still sending it would otherwise see
            // its write fail (EPIPE) instead of reading the 413. A much
            // larger one is not worth reading.
            if len <= DRAIN_FACTOR * limit as u64 {
                let _ = axum::body::to_bytes(req.into_body(), DRAIN_FACTOR as usize * limit).await;
            }
            return Err(too_large());
        }
    }
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| too_large())
}

/// Deserializes a JSON object, naming the offending field in the message.
/// Every request body of the API is an object; serde would also take a
/// struct from an array of its fields, which the API does not allow.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{') {
        return Err(ApiError::invalid(
            "malformed JSON body: the body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            ApiError::invalid(format!("malformed JSON body: {inner}"))
        } else {
            ApiError::invalid(format!("invalid {path}: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::invalid(format!("malformed JSON body: {e}")))?;
    Ok(value)
}

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::unsupported_media_type());
        }
        let bytes = read_body(req, state.config.max_body_bytes).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

impl<T: DeserializeOwned + Default> FromRequest<AppState> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let declared_json = is_json(req.headers());
        let has_type = req.headers().contains_key(CONTENT_TYPE);
        let bytes = read_body(req, state.config.max_body_bytes).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) && !declared_json {
            return Ok(OptionalJson(T::default()));
        }
        if !declared_json || !has_type {
            return Err(ApiError::unsupported_media_type());
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        parse_json(&bytes).map(OptionalJson)
    }
}

/// A query string, deserialized with API-shaped rejections.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| ApiQuery(q.0))
            .map_err(|e| {
                tracing::debug!(query, "bad query string");
                ApiError::invalid(format!("invalid query string: {}", e.body_text()))
            })
    }
}

/// The caller, authenticated by `Authorization: Bearer <key>`.
#[derive(Debug, Clone)]
pub struct Caller(pub ApiKeyInfo);

impl Caller {
    /// The tenant name the caller's jobs are filed under.
    pub fn tenant(&self) -> &str {
        &self.0.tenant
    }

    /// Fails with 403 unless the key has admin scope.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.0.admin {
            Ok(())
        } else {
            Err(ApiError::permission_denied("this route needs an admin key"))
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        let key = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .ok_or_else(|| ApiError::from(Error::Unauthenticated))?;
        let mut info = state.engine.authenticate(key).await?;
        if info.use_is_due(chrono::Utc::now()) {
            record_use(state, info.id);
        }
        let targets: Vec<&axum::http::HeaderValue> =
            parts.headers.get_all(TENANT_HEADER).iter().collect();
        if !targets.is_empty() {
            let suspended = act_for(state, &mut info, &targets).await?;
            if suspended && !reads_only(&parts.method, parts.uri.path()) {
                return Err(Error::tenant_suspended_read_only(&info.tenant).into());
            }
        }
        if let Some(request) = parts.extensions.get::<RequestContext>() {
            request.set_tenant(&info.tenant);
        }
        let caller = Caller(info);
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// Whether a request acting for a suspended tenant leaves it as it is: a
/// read, or an admin route (tenants and keys), which is about no tenant's
/// data and takes no part in acting for one (resuming the tenant is one).
fn reads_only(method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    matches!(*method, Method::GET | Method::HEAD)
        || path.starts_with("/v1/tenants")
        || path.starts_with("/v1/keys")
}

/// The header with which an admin key acts for another tenant (its name or
/// id). A header rather than a query parameter: it applies to every route
/// the same way, including those whose query strings refuse unknown fields.
pub const TENANT_HEADER: &str = "x-tether-tenant";

/// Makes an admin caller act for the tenant `targets` (the values of every
/// `X-Tether-Tenant` header of the request) names: every tenant-scoped
/// route then reads and writes that tenant's jobs, queues and schedules.
/// Only admin keys may (403 for any other, even naming its own tenant);
/// an unknown tenant is 404. More than one header, or one value listing
/// several (a proxy may join repeated headers with commas), is 400: which
/// one counts would depend on who reads the request (this server took the
/// first, a proxy in front may take the last). Answers whether that tenant
/// is suspended.
async fn act_for(
    state: &AppState,
    info: &mut ApiKeyInfo,
    targets: &[&axum::http::HeaderValue],
) -> Result<bool, ApiError> {
    if !info.admin {
        return Err(ApiError::permission_denied(format!(
            "only an admin key may act for another tenant ({TENANT_HEADER})"
        )));
    }
    let [target] = targets else {
        return Err(ApiError::invalid(format!(
            "{TENANT_HEADER} is sent {} times; send it once, naming one tenant",
            targets.len()
        )));
    };
    let target = target
        .to_str()
        .map(str::trim)
        .ok()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "{TENANT_HEADER} must name a tenant (its name or id)"
            ))
        })?;
    if target.contains(',') {
        return Err(ApiError::invalid(format!(
            "{TENANT_HEADER} must name one tenant, got a list: {target:?}"
        )));
    }
    let status = state.engine.find_tenant_status(target).await?;
    let suspended = status.is_suspended();
    info.tenant_id = status.tenant.id;
    info.tenant = status.tenant.name;
    Ok(suspended)
}

/// Records that a key authenticated a request, off the request's path: the
/// answer does not wait for the write, and a failure loses only a
/// timestamp. Called only when the key's `last_used_at` is over a minute
/// old ([`ApiKeyInfo::use_is_due`]), so a busy key costs about one write a
/// minute, not one per request; the store's conditional update (on the
/// database clock) keeps concurrent requests and replicas that all found it
/// due to one write between them.
fn record_use(state: &AppState, key_id: uuid::Uuid) {
    let engine = state.engine.clone();
    // In the request's span, so that its log line names the request.
    tokio::spawn(
        async move {
            if let Err(e) = engine.record_key_use(key_id).await {
                tracing::debug!(error = %e, %key_id, "could not record the use of an API key");
            }
        }
        .instrument(tracing::Span::current()),
    );
}
