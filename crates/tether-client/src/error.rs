//! Typed errors: the API's error codes, and everything else that can go
//! wrong between the client and the server.

use std::fmt;
use std::str::FromStr;

use tether_core::JobState;
use uuid::Uuid;

/// Result alias of the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The machine-readable `error.code` of an API error (the error table of
/// `docs/API.md`, `internal` included) and a catch-all for codes added later.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 400: malformed JSON, unknown field, bad value.
    InvalidArgument,
    /// 401: missing, unknown or revoked key.
    Unauthenticated,
    /// 403: the key lacks the scope (e.g. admin routes).
    PermissionDenied,
    /// 404: no such job, schedule, tenant or key in this tenant; unknown route.
    NotFound,
    /// 405: known route, wrong method.
    MethodNotAllowed,
    /// 409: e.g. a tenant or schedule name that is taken.
    AlreadyExists,
    /// 409: the lease token no longer owns the job.
    LeaseLost,
    /// 409: the operation does not apply to the job's state.
    InvalidState,
    /// 413: body, payload or result above the configured limit.
    PayloadTooLarge,
    /// 415: a body that is not `application/json`.
    UnsupportedMediaType,
    /// 503: the database is unreachable (or the request took too long);
    /// safe to retry.
    Unavailable,
    /// 500: any other server failure (details only in the server's log).
    Internal,
    /// A code this client does not know (a newer server), kept verbatim.
    Other(String),
}

impl ErrorCode {
    /// The code as it appears on the wire (`invalid_argument`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::LeaseLost => "lease_lost",
            ErrorCode::InvalidState => "invalid_state",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::Other(code) => code,
        }
    }

    /// The HTTP status the API pairs with this code (500 for unknown codes).
    pub fn status(&self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::AlreadyExists | ErrorCode::LeaseLost | ErrorCode::InvalidState => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal | ErrorCode::Other(_) => 500,
        }
    }

    /// The code for an answer whose body carried none (e.g. a proxy's error
    /// page), guessed from its status.
    pub(crate) fn from_status(status: u16) -> ErrorCode {
        match status {
            400 => ErrorCode::InvalidArgument,
            401 => ErrorCode::Unauthenticated,
            403 => ErrorCode::PermissionDenied,
            404 => ErrorCode::NotFound,
            405 => ErrorCode::MethodNotAllowed,
            413 => ErrorCode::PayloadTooLarge,
            415 => ErrorCode::UnsupportedMediaType,
            502..=504 => ErrorCode::Unavailable,
            500 => ErrorCode::Internal,
            other => ErrorCode::Other(format!("http_{other}")),
        }
    }
}

impl FromStr for ErrorCode {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "invalid_argument" => ErrorCode::InvalidArgument,
            "unauthenticated" => ErrorCode::Unauthenticated,
            "permission_denied" => ErrorCode::PermissionDenied,
            "not_found" => ErrorCode::NotFound,
            "method_not_allowed" => ErrorCode::MethodNotAllowed,
            "already_exists" => ErrorCode::AlreadyExists,
            "lease_lost" => ErrorCode::LeaseLost,
            "invalid_state" => ErrorCode::InvalidState,
            "payload_too_large" => ErrorCode::PayloadTooLarge,
            "unsupported_media_type" => ErrorCode::UnsupportedMediaType,
            "unavailable" => ErrorCode::Unavailable,
            "internal" => ErrorCode::Internal,
            other => ErrorCode::Other(other.to_owned()),
        })
    }
}

impl From<&str> for ErrorCode {
    fn from(s: &str) -> Self {
        match s.parse() {
            Ok(code) => code,
            Err(never) => match never {},
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can go wrong in a call to a tether server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error (`{"error": {"code", "message"}}`);
    /// also used for one failed item of a batch answer, with the status the
    /// API pairs with its code.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// HTTP status of the answer.
        status: u16,
        /// Machine-readable code.
        code: ErrorCode,
        /// Human message from the server.
        message: String,
    },
    /// The request did not get an answer: connection refused or reset, DNS,
    /// TLS, timeout. Whether the server acted on it is unknown; every
    /// worker operation is safe to retry (a repeated outcome report is
    /// fenced by its lease token).
    #[error("transport error: {0}")]
    Transport(#[source] reqwest::Error),
    /// The server answered with success, but the body is not what the API
    /// promises (a server of another version, or not a tether server).
    #[error("cannot decode the answer of {route}: {source}")]
    Decode {
        /// The route, e.g. `POST /v1/jobs`.
        route: String,
        /// What did not fit.
        #[source]
        source: serde_json::Error,
    },
    /// The request or the client's configuration was refused before anything
    /// was sent (bad base URL, an API key that cannot be a header, a queue
    /// named `.` or `..`, which no URL can carry).
    #[error("invalid {field}: {message}")]
    Invalid {
        /// What was refused.
        field: String,
        /// Why.
        message: String,
    },
}

impl Error {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The API error code, when the server answered with one.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, when the server answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether trying again later may succeed: `unavailable` (the database
    /// was unreachable, or the request hit the server's time limit), a
    /// gateway error (502/503/504), or a transport failure.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api { status, code, .. } => {
                *code == ErrorCode::Unavailable || matches!(status, 502..=504)
            }
            Error::Transport(_) => true,
            Error::Decode { .. } | Error::Invalid { .. } => false,
        }
    }

    fn has_code(&self, want: ErrorCode) -> bool {
        self.code() == Some(&want)
    }

    /// 404 `not_found`: no such job, tenant or key in the caller's tenant.
    pub fn is_not_found(&self) -> bool {
        self.has_code(ErrorCode::NotFound)
    }

    /// 409 `lease_lost`: the lease token no longer owns the job.
    pub fn is_lease_lost(&self) -> bool {
        self.has_code(ErrorCode::LeaseLost)
    }

    /// 409 `invalid_state`: the operation does not apply to the job's state.
    pub fn is_invalid_state(&self) -> bool {
        self.has_code(ErrorCode::InvalidState)
    }

    /// 409 `already_exists`.
    pub fn is_already_exists(&self) -> bool {
        self.has_code(ErrorCode::AlreadyExists)
    }

    /// 400 `invalid_argument` from the server, or a request refused before
    /// it was sent ([`Error::Invalid`]).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::Invalid { .. }) || self.has_code(ErrorCode::InvalidArgument)
    }

    /// 401 `unauthenticated`: missing, unknown or revoked key.
    pub fn is_unauthenticated(&self) -> bool {
        self.has_code(ErrorCode::Unauthenticated)
    }

    /// 403 `permission_denied`: the key lacks the scope (admin routes).
    pub fn is_permission_denied(&self) -> bool {
        self.has_code(ErrorCode::PermissionDenied)
    }

    /// The [`tether_core::Error`] for this error when it concerns job `id`:
    /// `not_found` becomes `JobNotFound(id)` and `lease_lost`
    /// `LeaseLost(id)` without reading the message. The plain
    /// [`From`] conversion recovers the id from the server's message when
    /// it can.
    pub fn into_core_for_job(self, id: Uuid) -> tether_core::Error {
        match &self {
            Error::Api {
                code: ErrorCode::NotFound,
                ..
            } => tether_core::Error::JobNotFound(id),
            Error::Api {
                code: ErrorCode::LeaseLost,
                ..
            } => tether_core::Error::LeaseLost(id),
            _ => self.into(),
        }
    }
}

/// `"job <uuid> …"` → the uuid and the rest.
fn job_prefix(message: &str) -> Option<(Uuid, &str)> {
    let rest = message.strip_prefix("job ")?;
    let (id, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    Some((Uuid::try_parse(id).ok()?, rest))
}

/// Maps a client error onto the engine's error type, so code written
/// against [`tether_core`] (e.g. the worker runtime) treats a remote server
/// like an embedded store:
///
/// | client error | `tether_core::Error` |
/// |---|---|
/// | `invalid_argument`, [`Error::Invalid`] | `Invalid` (field parsed from `invalid <field>: …` when present) |
/// | `payload_too_large` | `TooLarge` when the message names sizes, else `Invalid` |
/// | `not_found` | `JobNotFound(id)` when the message is `job <id> not found`, else `NotFound` |
/// | `already_exists` | `AlreadyExists` |
/// | `unauthenticated` | `Unauthenticated` |
/// | `permission_denied`, `method_not_allowed`, `unsupported_media_type` | `Invalid` (the engine has no such notions; none is worth retrying) |
/// | `lease_lost` | `LeaseLost(id)` (id from the message; nil if absent — prefer [`Error::into_core_for_job`]) |
/// | `invalid_state` | `InvalidState` when the message names job and state, else `Conflict` |
/// | `unavailable`, 502–504, [`Error::Transport`] | `Unavailable` (retried by the worker runtime) |
/// | `internal`, other codes, [`Error::Decode`] | `Storage` |
impl From<Error> for tether_core::Error {
    fn from(e: Error) -> Self {
        use tether_core::Error as Core;
        let (status, code, message) = match e {
            Error::Invalid { field, message } => return Core::Invalid { field, message },
            Error::Transport(_) => return Core::Unavailable(Box::new(e)),
            Error::Decode { .. } => return Core::Storage(Box::new(e)),
            Error::Api {
                status,
                ref code,
                ref message,
            } => (status, code.clone(), message.clone()),
        };
        match code {
            ErrorCode::InvalidArgument => parse_invalid(&message, "request"),
            ErrorCode::PayloadTooLarge => {
                parse_too_large(&message).unwrap_or_else(|| Core::invalid("request body", message))
            }
            ErrorCode::NotFound => match job_prefix(&message) {
                Some((id, "not found")) => Core::JobNotFound(id),
                _ => Core::NotFound(
                    message
                        .strip_suffix(" not found")
                        .unwrap_or(&message)
                        .to_owned(),
                ),
            },
            ErrorCode::AlreadyExists => Core::AlreadyExists(
                message
                    .strip_suffix(" already exists")
                    .unwrap_or(&message)
                    .to_owned(),
            ),
            ErrorCode::Unauthenticated => Core::Unauthenticated,
            ErrorCode::PermissionDenied => Core::invalid("api_key", message),
            ErrorCode::MethodNotAllowed | ErrorCode::UnsupportedMediaType => {
                Core::invalid("request", message)
            }
            ErrorCode::LeaseLost => {
                let id = message
                    .strip_prefix("lease lost on job ")
                    .and_then(|rest| rest.split([':', ' ']).next())
                    .and_then(|id| Uuid::try_parse(id).ok())
                    .unwrap_or(Uuid::nil());
                Core::LeaseLost(id)
            }
            ErrorCode::InvalidState => {
                // "job <id> is <state>: <message>"
                let parsed = job_prefix(&message).and_then(|(id, rest)| {
                    let rest = rest.strip_prefix("is ")?;
                    let (state, why) = rest.split_once(": ")?;
                    Some(Core::InvalidState {
                        id,
                        state: state.parse::<JobState>().ok()?,
                        message: why.to_owned(),
                    })
                });
                parsed.unwrap_or_else(|| {
                    Core::Conflict(
                        message
                            .strip_prefix("conflict: ")
                            .unwrap_or(&message)
                            .to_owned(),
                    )
                })
            }
            ErrorCode::Unavailable => Core::Unavailable(Box::new(e)),
            _ if matches!(status, 502..=504) => Core::Unavailable(Box::new(e)),
            ErrorCode::Internal | ErrorCode::Other(_) => Core::Storage(Box::new(e)),
        }
    }
}

/// `invalid <field>: <message>` → that field and message.
fn parse_invalid(message: &str, default_field: &str) -> tether_core::Error {
    message
        .strip_prefix("invalid ")
        .and_then(|rest| rest.split_once(": "))
        .filter(|(field, _)| !field.is_empty() && !field.contains(' '))
        .map(|(field, why)| tether_core::Error::invalid(field, why))
        .unwrap_or_else(|| tether_core::Error::invalid(default_field, message))
}

/// `<field> is <size> bytes, above the limit of <limit> bytes`.
fn parse_too_large(message: &str) -> Option<tether_core::Error> {
    let (field, rest) = message.split_once(" is ")?;
    let (size, rest) = rest.split_once(" bytes, above the limit of ")?;
    let limit = rest.strip_suffix(" bytes")?;
    Some(tether_core::Error::TooLarge {
        field: field.to_owned(),
        size: size.parse().ok()?,
        limit: limit.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::Error as Core;

    fn api(code: &str, message: &str) -> Error {
        let code = ErrorCode::from(code);
        Error::Api {
            status: code.status(),
            code,
            message: message.to_owned(),
        }
    }

    #[test]
    fn codes_round_trip() {
        for s in [
            "invalid_argument",
            "unauthenticated",
            "permission_denied",
            "not_found",
            "method_not_allowed",
            "already_exists",
            "lease_lost",
            "invalid_state",
            "payload_too_large",
            "unsupported_media_type",
            "unavailable",
            "internal",
            "brand_new",
        ] {
            assert_eq!(ErrorCode::from(s).as_str(), s);
        }
        assert_eq!(
            ErrorCode::from("brand_new"),
            ErrorCode::Other("brand_new".into())
        );
        assert_eq!(ErrorCode::from_status(502), ErrorCode::Unavailable);
    }

    #[test]
    fn core_errors_survive_the_round_trip_through_their_messages() {
        let id = Uuid::now_v7();
        let cases: Vec<Core> = vec![
            Core::invalid("jobs[2].queue", "must match [A-Za-z0-9._:-]"),
            Core::TooLarge {
                field: "payload".into(),
                size: 20,
                limit: 10,
            },
            Core::JobNotFound(id),
            Core::NotFound("tenant acme".into()),
            Core::AlreadyExists("tenant acme".into()),
            Core::Unauthenticated,
            Core::LeaseLost(id),
            Core::InvalidState {
                id,
                state: JobState::Succeeded,
                message: "only failed or cancelled jobs can be replayed".into(),
            },
            Core::Conflict("unique key held".into()),
        ];
        for core in cases {
            let (code, message) = (core.code(), core.to_string());
            let back = Core::from(api(code, &message));
            assert_eq!(back.code(), code, "{message}");
            assert_eq!(back.to_string(), message);
        }
    }

    #[test]
    fn mapping_of_the_other_codes() {
        assert!(matches!(
            Core::from(api("unavailable", "database unavailable")),
            Core::Unavailable(_)
        ));
        assert!(matches!(
            Core::from(api("internal", "internal error")),
            Core::Storage(_)
        ));
        assert!(matches!(
            Core::from(api("brand_new", "?")),
            Core::Storage(_)
        ));
        let gateway = Error::Api {
            status: 502,
            code: ErrorCode::Other("http_502".into()),
            message: "bad gateway".into(),
        };
        assert!(gateway.is_retryable());
        assert!(matches!(Core::from(gateway), Core::Unavailable(_)));
        assert!(matches!(
            Core::from(api("permission_denied", "this route needs an admin key")),
            Core::Invalid { .. }
        ));
        assert!(matches!(
            Core::from(api(
                "payload_too_large",
                "request body is above the limit of 5 bytes"
            )),
            Core::Invalid { .. }
        ));
        let id = Uuid::now_v7();
        assert!(matches!(
            api("not_found", "no such route").into_core_for_job(id),
            Core::JobNotFound(x) if x == id
        ));
        assert!(matches!(
            api("lease_lost", "gone").into_core_for_job(id),
            Core::LeaseLost(x) if x == id
        ));
        assert!(!api("invalid_argument", "x").is_retryable());
        assert!(api("unavailable", "x").is_retryable());
    }
}
