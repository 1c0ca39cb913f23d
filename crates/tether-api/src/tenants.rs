//! The `admin` tag (the tenants topic): tenants and API keys.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_core::{ApiKeyInfo, TenantStatus};
use uuid::Uuid;

use crate::time;
#[cfg(feature = "openapi")]
use crate::NameSchema;

/// A tenant: the wall around a set of jobs, queues and keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tenant {
    /// Its id.
    pub id: Uuid,
    /// Its unique name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
    /// When it was created.
    #[serde(serialize_with = "time::ser")]
    pub created_at: DateTime<Utc>,
    /// When an admin suspended it; `null` while it is active. While it is
    /// suspended its keys are refused (403), its schedules do not fire, and
    /// an admin acting for it may only read.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub suspended_at: Option<DateTime<Utc>>,
}

impl From<tether_core::Tenant> for Tenant {
    fn from(t: tether_core::Tenant) -> Self {
        TenantStatus {
            tenant: t,
            suspended_at: None,
        }
        .into()
    }
}

impl From<TenantStatus> for Tenant {
    fn from(s: TenantStatus) -> Self {
        Tenant {
            id: s.tenant.id,
            name: s.tenant.name,
            created_at: s.tenant.created_at,
            suspended_at: s.suspended_at,
        }
    }
}

/// An API key as listed: what it is and when it was used, never its
/// secret or hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiKey {
    /// The key id (the middle part of an issued key; for
    /// `DELETE /v1/keys/{key_id}`).
    pub id: Uuid,
    /// Its label, if any; the operator's key is `TETHER_ADMIN_KEY`.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub name: Option<String>,
    /// Whether it has admin scope.
    pub admin: bool,
    /// When it was issued.
    #[serde(serialize_with = "time::ser")]
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request, to within a minute (it is
    /// written at most once a minute); `null` if never.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked; `null` while it is valid.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiKeyInfo> for ApiKey {
    fn from(k: ApiKeyInfo) -> Self {
        ApiKey {
            id: k.id,
            name: k.name,
            admin: k.admin,
            created_at: k.created_at,
            last_used_at: k.last_used_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// `POST /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    /// The new tenant's unique name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
}

/// `POST /v1/tenants/{tenant_id}/keys` (the body may be omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateKeyBody {
    /// A label for humans: 1–128 characters, no control characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Admin scope; only for the `default` tenant, else 400 (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = false))]
    pub admin: Option<bool>,
}

/// The answer of `POST /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateTenantResponse {
    /// The new tenant.
    pub tenant: Tenant,
    /// Its first (non-admin) API key, shown this once.
    pub api_key: String,
}

/// `{tenant}`: the answer of `POST /v1/tenants/{tenant_id}/suspend` and
/// `/resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantResponse {
    /// The tenant after the operation.
    pub tenant: Tenant,
}

/// The answer of `GET /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantListResponse {
    /// Every tenant.
    pub tenants: Vec<Tenant>,
}

/// The answer of `GET /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyListResponse {
    /// The tenant's keys, revoked ones included, oldest first.
    pub keys: Vec<ApiKey>,
}

/// The answer of `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateKeyResponse {
    /// The key's id (for `DELETE /v1/keys/{key_id}`).
    pub key_id: Uuid,
    /// The key, shown this once.
    pub api_key: String,
}

/// The bounds of this topic's fields (see `bounds.rs`).
#[cfg(feature = "openapi")]
pub(crate) fn field_bounds() -> Vec<crate::bounds::FieldBound> {
    use crate::bounds::{field, length};
    use tether_core::validate::MAX_NAME_LEN;
    vec![(field!(CreateKeyBody.name), length(1..=MAX_NAME_LEN))]
}
