//! The one error type of the HTTP API: a status code plus
//! `{"error": {"code", "message"}}`, as in the table of `shared/API.md`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

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

    /// The status that goes with an error code.
    pub fn status_of(code: &str) -> StatusCode {
        match code {
            "invalid_argument" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "method_not_allowed" => StatusCode::METHOD_NOT_ALLOWED,
            "already_exists" | "lease_lost" | "invalid_state" => StatusCode::CONFLICT,
            "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
            "unsupported_media_type" => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `{"code", "message"}` object (also used per item in batch answers).
    pub fn body(&self) -> serde_json::Value {
        json!({ "code": self.code, "message": self.message })
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
        let body = json!({ "error": self.body() });
        (self.status, axum::Json(body)).into_response()
    }
}

/// Result alias of the handlers.
pub type ApiResult<T> = Result<T, ApiError>;

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
