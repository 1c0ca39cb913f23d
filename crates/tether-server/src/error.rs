//! The one error type of the HTTP API: a status code plus
//! `{"error": {"code", "message"}}`, as in the error table of `docs/API.md`,
//! and the error parts of the OpenAPI document.

use std::borrow::Cow;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::response::{Response as DocResponse, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{PartialSchema, ToResponse, ToSchema};

/// Every error code with its status: the error table of `docs/API.md`,
/// `internal` (500) included, the answer to an unexpected storage failure.
const CODES: [(&str, StatusCode); 12] = [
    ("invalid_argument", StatusCode::BAD_REQUEST),
    ("unauthenticated", StatusCode::UNAUTHORIZED),
    ("permission_denied", StatusCode::FORBIDDEN),
    ("not_found", StatusCode::NOT_FOUND),
    ("method_not_allowed", StatusCode::METHOD_NOT_ALLOWED),
    ("already_exists", StatusCode::CONFLICT),
    ("lease_lost", StatusCode::CONFLICT),
    ("invalid_state", StatusCode::CONFLICT),
    ("payload_too_large", StatusCode::PAYLOAD_TOO_LARGE),
    ("unsupported_media_type", StatusCode::UNSUPPORTED_MEDIA_TYPE),
    ("unavailable", StatusCode::SERVICE_UNAVAILABLE),
    ("internal", StatusCode::INTERNAL_SERVER_ERROR),
];

/// An error answer: status, stable machine-readable code, human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code (`invalid_argument`, `not_found`, ...).
    pub code: &'static str,
    /// For humans.
    pub message: String,
}

impl ApiError {
    /// An error with an explicit status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    /// 400 `invalid_argument` naming a field.
    pub fn invalid_field(field: &str, message: impl std::fmt::Display) -> Self {
        Self::invalid(format!("invalid {field}: {message}"))
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 403 `permission_denied`.
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "permission_denied", message)
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// The status that goes with an error code (500 for an unknown one).
    pub fn status_of(code: &str) -> StatusCode {
        CODES
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(StatusCode::INTERNAL_SERVER_ERROR, |(_, status)| *status)
    }

    /// The `{"code", "message"}` object (also used per item in batch answers).
    pub(crate) fn detail(&self) -> ErrorDetail {
        ErrorDetail {
            code: self.code,
            message: self.message.clone(),
        }
    }
}

impl From<tether_core::Error> for ApiError {
    fn from(e: tether_core::Error) -> Self {
        let code = e.code();
        let message = match &e {
            // Do not leak driver details of internal failures to clients.
            tether_core::Error::Storage(_) => {
                tracing::error!(error = %e, "storage error");
                "internal error".to_owned()
            }
            tether_core::Error::Unavailable(_) => {
                tracing::warn!(error = %e, "database unavailable");
                "database unavailable; retry later".to_owned()
            }
            _ => e.to_string(),
        };
        ApiError::new(ApiError::status_of(code), code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.detail(),
        };
        (self.status, axum::Json(body)).into_response()
    }
}

/// Result alias of the handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// The body of every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// An error: a stable machine-readable code and a message for humans.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// Machine-readable; the HTTP status follows from it.
    #[schema(value_type = ErrorCode)]
    pub code: &'static str,
    /// For humans; not stable.
    pub message: String,
}

/// Schema of the error codes (the `code` of [`ErrorDetail`]), made from
/// [`CODES`] so the document lists exactly the codes the server knows.
pub(crate) struct ErrorCode;

impl PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        let table: Vec<String> = CODES
            .iter()
            .map(|(code, status)| format!("`{code}` ({})", status.as_u16()))
            .collect();
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(CODES.iter().map(|(code, _)| *code)))
            .description(Some(format!(
                "A machine-readable error code and the status it comes with: {}.",
                table.join(", ")
            )))
            .into()
    }
}

impl ToSchema for ErrorCode {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ErrorCode")
    }
}

/// Declares unit types that stand for the error answers every route shares
/// (`#/components/responses/...` in the OpenAPI document).
macro_rules! error_responses {
    ($($(#[$doc:meta])* $name:ident => $description:literal;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<DocResponse>) {
                (stringify!($name), error_response($description).into())
            }
        }
    )*};
}

/// An error answer with `description` and the [`ErrorBody`] schema.
pub(crate) fn error_response(description: &str) -> DocResponse {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(ErrorBody::name())))
        .build();
    ResponseBuilder::new()
        .description(description)
        .content("application/json", content)
        .build()
}

error_responses! {
    /// 400 `invalid_argument`.
    BadRequest => "`invalid_argument`: malformed JSON, an unknown field, or a value out of range or pattern; the message names the field.";
    /// 401 `unauthenticated`.
    Unauthenticated => "`unauthenticated`: the `Authorization: Bearer` key is missing, unknown or revoked.";
    /// 403 `permission_denied`.
    PermissionDenied => "`permission_denied`: the route needs an admin key.";
    /// 413 `payload_too_large`.
    PayloadTooLarge => "`payload_too_large`: the body, a payload, a result or a progress value is above the configured limit (default 1 MiB).";
    /// 415 `unsupported_media_type`.
    UnsupportedMediaType => "`unsupported_media_type`: a body that is not `application/json` (or `application/*+json`).";
    /// 500 `internal`.
    Internal => "`internal`: an unexpected storage failure; the details are in the server log only.";
    /// 503 `unavailable`.
    Unavailable => "`unavailable`: the database is unreachable or the request took longer than the server's time limit; safe to retry.";
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::{Error, JobState};
    use uuid::Uuid;

    #[test]
    fn every_core_error_maps_to_the_api_table() {
        let io =
            || Box::new(std::io::Error::other("down")) as Box<dyn std::error::Error + Send + Sync>;
        let id = Uuid::nil();
        let cases: Vec<(Error, u16, &str)> = vec![
            (Error::invalid("queue", "bad"), 400, "invalid_argument"),
            (
                Error::TooLarge {
                    field: "payload".into(),
                    size: 2,
                    limit: 1,
                },
                413,
                "payload_too_large",
            ),
            (Error::JobNotFound(id), 404, "not_found"),
            (Error::NotFound("tenant x".into()), 404, "not_found"),
            (
                Error::AlreadyExists("tenant x".into()),
                409,
                "already_exists",
            ),
            (Error::Unauthenticated, 401, "unauthenticated"),
            (Error::LeaseLost(id), 409, "lease_lost"),
            (
                Error::InvalidState {
                    id,
                    state: JobState::Succeeded,
                    message: "no".into(),
                },
                409,
                "invalid_state",
            ),
            (
                Error::Conflict("unique key held".into()),
                409,
                "invalid_state",
            ),
            (Error::too_many_queues(3), 409, "invalid_state"),
            (Error::too_many_schedules(3), 409, "invalid_state"),
            (Error::Unavailable(io()), 503, "unavailable"),
            (Error::Storage(io()), 500, "internal"),
        ];
        for (e, status, code) in cases {
            let api = ApiError::from(e);
            assert_eq!(api.status.as_u16(), status, "{api:?}");
            assert_eq!(api.code, code);
            assert!(!api.message.is_empty());
        }
    }

    #[test]
    fn internal_details_are_not_shown() {
        let e = Error::Storage(Box::new(std::io::Error::other("password=hunter2")));
        assert!(!ApiError::from(e).message.contains("hunter2"));
    }

    #[test]
    fn statuses_of_request_problems() {
        assert_eq!(ApiError::status_of("method_not_allowed").as_u16(), 405);
        assert_eq!(ApiError::status_of("unsupported_media_type").as_u16(), 415);
        assert_eq!(ApiError::status_of("permission_denied").as_u16(), 403);
    }
}
