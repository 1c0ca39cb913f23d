//! The `admin` tag (the tenants topic): tenants and API keys.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_core::{ApiKeyInfo, Tenant, TenantStatus};
use utoipa::ToSchema;
use uuid::Uuid;

use tether_core::validate::MAX_NAME_LEN;

use super::bounds::{field, length, FieldBound};
use super::{ser_opt_time, ser_time, NameSchema};

/// A tenant: the wall around a set of jobs, queues and keys.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Tenant)]
pub struct TenantDto {
    /// Its id.
    pub id: Uuid,
    /// Its unique name.
    #[schema(value_type = NameSchema)]
    pub name: String,
    /// When it was created.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
    /// When an admin suspended it; `null` while it is active. While it is
    /// suspended its keys are refused (403), its schedules do not fire, and
    /// an admin acting for it may only read.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub suspended_at: Option<DateTime<Utc>>,
}

impl From<Tenant> for TenantDto {
    fn from(t: Tenant) -> Self {
        TenantStatus {
            tenant: t,
            suspended_at: None,
        }
        .into()
    }
}

impl From<TenantStatus> for TenantDto {
    fn from(s: TenantStatus) -> Self {
        TenantDto {
            id: s.tenant.id,
            name: s.tenant.name,
            created_at: s.tenant.created_at,
            suspended_at: s.suspended_at,
        }
    }
}

/// An API key as listed: what it is and when it was used, never its
/// secret or hash.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ApiKey)]
pub struct KeyDto {
    /// The key id (the middle part of an issued key; for
    /// `DELETE /v1/keys/{key_id}`).
    pub id: Uuid,
    /// Its label, if any; the operator's key is `TETHER_ADMIN_KEY`.
    #[schema(required)]
    pub name: Option<String>,
    /// Whether it has admin scope.
    pub admin: bool,
    /// When it was issued.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request, to within a minute (it is
    /// written at most once a minute); `null` if never.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked; `null` while it is valid.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiKeyInfo> for KeyDto {
    fn from(k: ApiKeyInfo) -> Self {
        KeyDto {
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
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    /// The new tenant's unique name.
    #[schema(value_type = NameSchema)]
    pub name: String,
}

/// `POST /v1/tenants/{tenant_id}/keys` (the body may be omitted).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyBody {
    /// A label for humans: 1–128 characters, no control characters.
    pub name: Option<String>,
    /// Admin scope; only for the `default` tenant, else 400 (default false).
    #[schema(default = false)]
    pub admin: Option<bool>,
}

/// The answer of `POST /v1/tenants`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateTenantResponse {
    /// The new tenant.
    pub tenant: TenantDto,
    /// Its first (non-admin) API key, shown this once.
    pub api_key: String,
}

/// `{tenant}`: the answer of `POST /v1/tenants/{tenant_id}/suspend` and
/// `/resume`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantResponse {
    /// The tenant after the operation.
    pub tenant: TenantDto,
}

/// The answer of `GET /v1/tenants`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantListResponse {
    /// Every tenant.
    pub tenants: Vec<TenantDto>,
}

/// The answer of `GET /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyListResponse {
    /// The tenant's keys, revoked ones included, oldest first.
    pub keys: Vec<KeyDto>,
}

/// The answer of `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateKeyResponse {
    /// The key's id (for `DELETE /v1/keys/{key_id}`).
    pub key_id: Uuid,
    /// The key, shown this once.
    pub api_key: String,
}

/// The bounds of this module's fields (see `bounds.rs`).
pub(super) fn field_bounds() -> Vec<FieldBound> {
    vec![(field!(CreateKeyBody.name), length(1..=MAX_NAME_LEN))]
}
