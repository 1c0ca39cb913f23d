use std::fmt;

use uuid::Uuid;

use crate::keys::DEFAULT_TENANT;
use crate::model::JobState;

/// Declares [`ErrorCode`] from one row per code: variant, wire code, HTTP
/// status and meaning. The only place these facts are written down.
macro_rules! error_codes {
    ($($variant:ident = $code:literal, $status:literal, $meaning:literal;)*) => {
        /// A machine-readable API error code: what `{"error": {"code"}}`
        /// carries, with the HTTP status it always comes with. The server,
        /// the clients, the OpenAPI document and the chaos checker all take
        /// the codes from here, so a misspelled code does not compile.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $(
                #[doc = concat!("`", $code, "` (", stringify!($status), "): ", $meaning)]
                $variant,
            )*
        }

        impl ErrorCode {
            /// Every code, in the order of the table.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as it appears on the wire (`invalid_argument`, ...).
            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// The HTTP status that comes with the code.
            pub const fn status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status,)* }
            }

            /// What the code means, for humans (docs and the OpenAPI document).
            pub const fn meaning(self) -> &'static str {
                match self { $(ErrorCode::$variant => $meaning,)* }
            }
        }
    };
}

error_codes! {
    InvalidArgument = "invalid_argument", 400,
        "malformed JSON, an unknown field, or a value out of range or pattern; the message names the field";
    Unauthenticated = "unauthenticated", 401,
        "the `Authorization: Bearer` key is missing, unknown or revoked";
    PermissionDenied = "permission_denied", 403,
        "the route needs an admin key, or the key's tenant is suspended (the message says which)";
    NotFound = "not_found", 404,
        "no such job, schedule, tenant or key in this tenant, or no such route";
    MethodNotAllowed = "method_not_allowed", 405,
        "a known route with a method it does not take";
    AlreadyExists = "already_exists", 409,
        "the name to create is taken (a tenant, a schedule)";
    LeaseLost = "lease_lost", 409,
        "the lease token no longer owns the job: another owner took it, or it already ended";
    InvalidState = "invalid_state", 409,
        "the job or tenant is not in a state that allows this (or a tenant limit is reached)";
    PayloadTooLarge = "payload_too_large", 413,
        "the body, a payload, a result or a progress value is above the configured limit (default 1 MiB)";
    UnsupportedMediaType = "unsupported_media_type", 415,
        "a body that is not `application/json` (or `application/*+json`)";
    TooManyRequests = "too_many_requests", 429,
        "the tenant holds as many event streams open as the server allows; close one, or retry later";
    Unavailable = "unavailable", 503,
        "the database is unreachable or the request took longer than the server's time limit; safe to retry";
    Internal = "internal", 500,
        "an unexpected storage failure; the details are in the server log only";
}

impl ErrorCode {
    /// The code with this wire spelling, if it is one.
    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_str() == code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with a wire spelling (`code == "lease_lost"`).
impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Result alias used across tether.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a tether operation.
///
/// Each variant maps to one stable machine-readable code ([`Error::code`]),
/// which the HTTP API exposes unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input broke a rule; nothing was written.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The offending field, e.g. `jobs[3].queue`.
        field: String,
        /// What is wrong with it, for humans.
        message: String,
    },
    /// A payload, result or other blob is above its size limit; nothing was written.
    #[error("{field} is {size} bytes, above the limit of {limit} bytes")]
    TooLarge {
        /// The offending field.
        field: String,
        /// Its size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// No such job (in this tenant).
    #[error("job {0} not found")]
    JobNotFound(Uuid),
    /// No such tenant, API key or other named thing (the message says which).
    /// Jobs keep their own [`Error::JobNotFound`].
    #[error("{0} not found")]
    NotFound(String),
    /// The thing to create exists already, e.g. a tenant name that is taken.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A missing, malformed, unknown or revoked API key. Deliberately says
    /// nothing about which.
    #[error("missing, unknown or revoked API key")]
    Unauthenticated,
    /// A valid key of a suspended tenant (named here), or an admin's write
    /// for one: nothing happens until an admin resumes the tenant.
    #[error("tenant {0:?} is suspended: {1}")]
    TenantSuspended(String, &'static str),
    /// The lease token no longer owns the job: another owner took it over, or
    /// the job already left `running`. Nothing was changed.
    #[error("lease lost on job {0}: the token no longer owns the job")]
    LeaseLost(Uuid),
    /// A named lease (e.g. the maintenance leader's) was taken over by
    /// another holder; the old holder must stop acting as its owner.
    #[error("lease {0:?} lost: another holder took it over")]
    NamedLeaseLost(String),
    /// The operation does not apply to the job's current state.
    #[error("job {id} is {state}: {message}")]
    InvalidState {
        /// The job.
        id: Uuid,
        /// Its current state.
        state: JobState,
        /// Why the operation does not apply.
        message: String,
    },
    /// The operation would break a uniqueness rule (e.g. replaying a job whose
    /// unique key is held by another active job).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The tenant already has as many of something (queues, schedules) as
    /// the operator allows; nothing was written. Valid input, refused in the
    /// tenant's current state, so it shares `invalid_state` (409).
    #[error("the tenant already has {limit} {what}, the most allowed{hint}")]
    LimitReached {
        /// What is counted (`queues`, `schedules`).
        what: &'static str,
        /// The limit in force.
        limit: u32,
        /// How room is made, for humans (starts with `; ` or is empty).
        hint: &'static str,
    },
    /// The database could not be reached; the operation may be retried.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Any other storage failure.
    #[error("storage error: {0}")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database's schema is not one this build may run on (an edited
    /// migration, a newer schema, or pending migrations when they were not
    /// to be applied). Found when a store is opened, never mid-operation.
    #[error(transparent)]
    Schema(#[from] crate::migrations::SchemaError),
}

impl Error {
    /// The stable machine-readable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Invalid { .. } => ErrorCode::InvalidArgument,
            Error::TooLarge { .. } => ErrorCode::PayloadTooLarge,
            Error::JobNotFound(_) | Error::NotFound(_) => ErrorCode::NotFound,
            Error::AlreadyExists(_) => ErrorCode::AlreadyExists,
            Error::Unauthenticated => ErrorCode::Unauthenticated,
            Error::TenantSuspended(..) => ErrorCode::PermissionDenied,
            Error::LeaseLost(_) | Error::NamedLeaseLost(_) => ErrorCode::LeaseLost,
            Error::InvalidState { .. } | Error::Conflict(_) | Error::LimitReached { .. } => {
                ErrorCode::InvalidState
            }
            Error::Unavailable(_) => ErrorCode::Unavailable,
            Error::Storage(_) | Error::Schema(_) => ErrorCode::Internal,
        }
    }

    /// The tenant has `limit` queues and the operation would make another.
    pub fn too_many_queues(limit: u32) -> Self {
        Error::LimitReached {
            what: "queues",
            limit,
            hint: "; a queue with no jobs and default settings is removed by maintenance, \
                   and the operator may raise --max-queues-per-tenant",
        }
    }

    /// The tenant has `limit` schedules and the operation would make another.
    pub fn too_many_schedules(limit: u32) -> Self {
        Error::LimitReached {
            what: "schedules",
            limit,
            hint: "; delete one first, or the operator may raise --max-schedules-per-tenant",
        }
    }

    /// The tenant has `limit` workers announced and not yet forgotten, and
    /// another announces itself.
    pub fn too_many_workers(limit: u32) -> Self {
        Error::LimitReached {
            what: "announced workers",
            limit,
            hint: "; a worker not seen for 5 minutes is forgotten",
        }
    }

    /// No tenant with this id.
    pub fn tenant_not_found(id: Uuid) -> Self {
        Error::NotFound(format!("tenant {id}"))
    }

    /// A tenant with this name exists already.
    pub fn tenant_name_taken(name: &str) -> Self {
        Error::AlreadyExists(format!("tenant {name:?}"))
    }

    /// A valid key of the suspended tenant `tenant`.
    pub fn tenant_suspended(tenant: &str) -> Self {
        Error::TenantSuspended(
            tenant.to_owned(),
            "its keys act for nothing until an admin resumes it",
        )
    }

    /// An admin's write for the suspended tenant `tenant`.
    pub fn tenant_suspended_read_only(tenant: &str) -> Self {
        Error::TenantSuspended(
            tenant.to_owned(),
            "an admin acting for it may only read (GET); resume it first \
             (POST /v1/tenants/{tenant_id}/resume)",
        )
    }

    /// No API key with this id.
    pub fn api_key_not_found(id: Uuid) -> Self {
        Error::NotFound(format!("api key {id}"))
    }

    /// An admin key asked for in a tenant other than [`DEFAULT_TENANT`].
    pub fn admin_key_outside_default_tenant() -> Self {
        Error::invalid(
            "admin",
            format!("admin keys exist only in the {DEFAULT_TENANT:?} tenant"),
        )
    }

    /// The tenant has no schedule with this id.
    pub fn schedule_not_found(id: Uuid) -> Self {
        Error::NotFound(format!("schedule {id}"))
    }

    /// The tenant has a schedule with this name already.
    pub fn schedule_name_taken(name: &str) -> Self {
        Error::AlreadyExists(format!("schedule {name:?}"))
    }

    /// A cancel of job `id`, which is `state` (neither queued nor running).
    pub fn not_cancellable(id: Uuid, state: JobState) -> Self {
        Error::InvalidState {
            id,
            state,
            message: "only queued or running jobs can be cancelled".into(),
        }
    }

    /// A replay of job `id`, which is `state` (neither failed nor cancelled).
    pub fn not_replayable(id: Uuid, state: JobState) -> Self {
        Error::InvalidState {
            id,
            state,
            message: "only finished jobs (succeeded, failed or cancelled) can be replayed".into(),
        }
    }

    /// Why the row of queue `queue` could not be removed: it holds `jobs`
    /// jobs, or it has no row (`has_row` false).
    pub fn queue_not_deletable(queue: &str, jobs: i64, has_row: bool) -> Self {
        if jobs > 0 {
            Error::Conflict(format!(
                "queue {queue} holds {jobs} job(s); only an empty queue can be removed"
            ))
        } else if !has_row {
            Error::NotFound(format!("queue {queue}"))
        } else {
            Error::Conflict(format!("queue {queue} changed meanwhile; try again"))
        }
    }

    /// A report (`report`: complete, fail, snooze) with the lease token that
    /// already ended job `id`'s attempt (`ended_by` that report, when
    /// known), which is not the same report: a repeat must be exactly the
    /// first (see `lifecycle::Report::settle`). Nothing changed.
    pub fn report_conflict(
        id: Uuid,
        state: JobState,
        report: &str,
        ended_by: Option<&str>,
    ) -> Self {
        let first = match ended_by {
            Some(first) if first == report => format!("a {first} with other arguments"),
            Some(first) => format!("a {first}"),
            None => "another report".to_owned(),
        };
        Error::InvalidState {
            id,
            state,
            message: format!(
                "this lease token already ended the attempt with {first}; \
                 only the same report may be sent again ({report} refused, nothing changed)"
            ),
        }
    }

    /// A replay of job `id` while another active job holds its unique key.
    pub fn replay_unique_key_held(id: Uuid) -> Self {
        Error::Conflict(format!(
            "job {id} cannot be replayed: another active job holds its unique key"
        ))
    }

    /// A bulk replay lost a unique key to an enqueue running at the same
    /// time; nothing was replayed, and trying again is safe.
    pub fn replay_raced() -> Self {
        Error::Conflict("a concurrent enqueue took a unique key being replayed".into())
    }

    /// `jobs` entries of an enqueue kept losing their keys to concurrent
    /// enqueues (the enqueue is refused; trying again is safe).
    pub fn enqueue_kept_racing(jobs: usize) -> Self {
        Error::Conflict(format!(
            "{jobs} job(s) kept racing with concurrent enqueues for the same keys"
        ))
    }

    /// The error as a single job's enqueue reports it: a field of the
    /// batch's only entry (`jobs[0].depends_on`) is named as the job's own
    /// (`depends_on`). Other errors are unchanged.
    pub fn of_single_job(self) -> Self {
        match self {
            Error::Invalid { field, message } => Error::Invalid {
                field: field
                    .strip_prefix("jobs[0].")
                    .map(str::to_owned)
                    .unwrap_or(field),
                message,
            },
            other => other,
        }
    }

    /// Shorthand for an [`Error::Invalid`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_keep_their_statuses() {
        assert_eq!(ErrorCode::ALL.len(), 13);
        for &c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
            assert!(!c.meaning().is_empty());
        }
        assert_eq!(ErrorCode::parse("lease_lots"), None);
        assert_eq!(ErrorCode::LeaseLost.status(), 409);
        assert_eq!(ErrorCode::Internal.status(), 500);
        assert_eq!(ErrorCode::TooManyRequests.status(), 429);
        assert!(ErrorCode::Unavailable == "unavailable");
    }
}
