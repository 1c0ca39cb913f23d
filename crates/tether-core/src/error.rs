use uuid::Uuid;

use crate::model::JobState;

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
}

impl Error {
    /// The stable machine-readable code of this error (see the error table in `docs/API.md`).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Invalid { .. } => "invalid_argument",
            Error::TooLarge { .. } => "payload_too_large",
            Error::JobNotFound(_) | Error::NotFound(_) => "not_found",
            Error::AlreadyExists(_) => "already_exists",
            Error::Unauthenticated => "unauthenticated",
            Error::LeaseLost(_) | Error::NamedLeaseLost(_) => "lease_lost",
            Error::InvalidState { .. } | Error::Conflict(_) | Error::LimitReached { .. } => {
                "invalid_state"
            }
            Error::Unavailable(_) => "unavailable",
            Error::Storage(_) => "internal",
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

    /// Shorthand for an [`Error::Invalid`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}
