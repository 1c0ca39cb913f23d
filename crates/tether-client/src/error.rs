//! Typed errors: the API's error codes, and everything else that can go
//! wrong between the client and the server.

use tether_core::JobState;
use uuid::Uuid;

/// Result alias of the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use tether_core::ErrorCode;

/// The code for an error answer whose body carried none (e.g. a proxy's
/// error page), guessed from its status: the one code of the error table
/// with that status, `unavailable` for any gateway error, else none.
pub(crate) fn code_of_status(status: u16) -> Option<ErrorCode> {
    if matches!(status, 502..=504) {
        return Some(ErrorCode::Unavailable);
    }
    let mut with_status = ErrorCode::ALL.iter().filter(|c| c.status() == status);
    match (with_status.next(), with_status.next()) {
        (Some(&code), None) => Some(code),
        _ => None,
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
    /// The server answered with an error whose code is not in the error
    /// table (a newer server), or with a body that is not the API's whose
    /// status names no single code (`http_<status>`).
    #[error("{message} ({code}, HTTP {status})")]
    UnknownCode {
        /// HTTP status of the answer.
        status: u16,
        /// The code as the server spelled it, or `http_<status>`.
        code: String,
        /// Human message, or an excerpt of the body.
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

    /// The API error code, when the server answered with one of the table.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The HTTP status, when the server answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::UnknownCode { status, .. } => Some(*status),
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
            Error::UnknownCode { status, .. } => matches!(status, 502..=504),
            Error::Transport(_) => true,
            Error::Decode { .. } | Error::Invalid { .. } => false,
        }
    }

    fn has_code(&self, want: ErrorCode) -> bool {
        self.code() == Some(want)
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
/// | `too_many_requests` | `Unavailable` |
/// | `internal`, [`Error::UnknownCode`], [`Error::Decode`] | `Storage` (`Unavailable` for 502–504) |
impl From<Error> for tether_core::Error {
    fn from(e: Error) -> Self {
        use tether_core::Error as Core;
        let (status, code, message) = match e {
            Error::Invalid { field, message } => return Core::Invalid { field, message },
            Error::Transport(_) => return Core::Unavailable(Box::new(e)),
            Error::Decode { .. } => return Core::Storage(Box::new(e)),
            Error::UnknownCode {
                status: 502..=504, ..
            } => return Core::Unavailable(Box::new(e)),
            Error::UnknownCode { .. } => return Core::Storage(Box::new(e)),
            Error::Api {
                status,
                code,
                ref message,
            } => (status, code, message.clone()),
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
            // Too many event streams open: nothing wrong with the request,
            // it may succeed once one closes.
            ErrorCode::Unavailable | ErrorCode::TooManyRequests => Core::Unavailable(Box::new(e)),
            _ if matches!(status, 502..=504) => Core::Unavailable(Box::new(e)),
            ErrorCode::Internal => Core::Storage(Box::new(e)),
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
        match ErrorCode::parse(code) {
            Some(code) => Error::Api {
                status: code.status(),
                code,
                message: message.to_owned(),
            },
            None => Error::UnknownCode {
                status: 500,
                code: code.to_owned(),
                message: message.to_owned(),
            },
        }
    }

    #[test]
    fn codes_of_statuses() {
        assert_eq!(code_of_status(502), Some(ErrorCode::Unavailable));
        assert_eq!(code_of_status(404), Some(ErrorCode::NotFound));
        assert_eq!(code_of_status(500), Some(ErrorCode::Internal));
        // Three codes share 409: a bare 409 names none of them.
        assert_eq!(code_of_status(409), None);
        assert_eq!(code_of_status(418), None);
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
            let back = Core::from(api(code.as_str(), &message));
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
        let gateway = Error::UnknownCode {
            status: 502,
            code: "http_502".into(),
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
