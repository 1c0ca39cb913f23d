//! The one error type of the HTTP API: a status code plus
//! `{"error": {"code", "message"}}`, and the error parts of the OpenAPI
//! document. Codes, statuses and meanings come from [`ErrorCode`], the one
//! error table (in `tether-core`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tether_api::{ErrorBody, ErrorDetail, ItemFailure};
use tether_core::ErrorCode;
use utoipa::openapi::response::{Response as DocResponse, ResponseBuilder};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{ToResponse, ToSchema};
use uuid::Uuid;

/// An error answer: status, stable machine-readable code, human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (the code's).
    pub status: StatusCode,
    /// Machine-readable code.
    pub code: ErrorCode,
    /// For humans.
    pub message: String,
}

impl ApiError {
    /// An error with `code` and the status that comes with it.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::from_u16(code.status())
                .expect("the error table holds valid statuses"),
            code,
            message: message.into(),
        }
    }

    /// 400 `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// 400 `invalid_argument` naming a field.
    pub fn invalid_field(field: &str, message: impl std::fmt::Display) -> Self {
        Self::invalid(format!("invalid {field}: {message}"))
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// 403 `permission_denied`.
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PermissionDenied, message)
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PayloadTooLarge, message)
    }

    /// 415 `unsupported_media_type`.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            ErrorCode::UnsupportedMediaType,
            "the request body must be application/json",
        )
    }

    /// 503 `unavailable`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    /// The `{"code", "message"}` object (also used per item in batch answers).
    pub(crate) fn detail(&self) -> ErrorDetail {
        ErrorDetail {
            code: self.code.as_str().to_owned(),
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
        ApiError::new(code, message)
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

/// The failed item about job `id` of a batch answer: the error the item
/// would have had alone.
pub(crate) fn item_failure(id: Uuid, e: tether_core::Error) -> ItemFailure {
    ItemFailure {
        id,
        ok: false,
        error: ApiError::from(e).detail(),
    }
}

/// Declares unit types that stand for the error answers every route shares
/// (`#/components/responses/...` in the OpenAPI document), each described
/// by its code's meaning in the error table.
macro_rules! error_responses {
    ($($name:ident => $code:ident;)*) => {$(
        #[doc = concat!("The `", stringify!($code), "` error answer.")]
        pub(crate) struct $name;

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<DocResponse>) {
                let code = ErrorCode::$code;
                let description = format!("`{code}`: {}.", code.meaning());
                (stringify!($name), error_response(&description).into())
            }
        }

        impl $name {
            /// This answer's status and a reference to it, as an operation
            /// lists it.
            pub(crate) fn by_ref() -> (String, RefOr<DocResponse>) {
                let status = ErrorCode::$code.status().to_string();
                (status, Ref::from_response_name(stringify!($name)).into())
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
    BadRequest => InvalidArgument;
    Unauthenticated => Unauthenticated;
    PermissionDenied => PermissionDenied;
    PayloadTooLarge => PayloadTooLarge;
    UnsupportedMediaType => UnsupportedMediaType;
    Internal => Internal;
    Unavailable => Unavailable;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::{Error, JobState};

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
        let status = |code| ApiError::new(code, "x").status.as_u16();
        assert_eq!(status(ErrorCode::MethodNotAllowed), 405);
        assert_eq!(status(ErrorCode::UnsupportedMediaType), 415);
        assert_eq!(status(ErrorCode::PermissionDenied), 403);
    }
}
