//! Tenants, API keys and `whoami`.

use super::*;

/// A tenant (`GET /v1/tenants`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its id (used by `POST /v1/tenants/{tenant_id}/keys`).
    pub id: Uuid,
    /// Its unique name.
    pub name: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When an admin suspended it; `None` while it is active (also from a
    /// server older than suspension).
    #[serde(default)]
    pub suspended_at: Option<DateTime<Utc>>,
}

/// The answer to `POST /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedTenant {
    /// The new tenant.
    pub tenant: Tenant,
    /// Its first API key, shown only now.
    pub api_key: String,
}

/// Options of `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewKey {
    /// A label for humans.
    pub name: Option<String>,
    /// Admin scope (only for keys of the `default` tenant).
    pub admin: bool,
}

/// The answer to `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedKey {
    /// The key's id (for `DELETE /v1/keys/{key_id}`).
    pub key_id: Uuid,
    /// The key, shown only now.
    pub api_key: String,
}

/// An API key as `GET /v1/tenants/{tenant_id}/keys` lists it: never its
/// secret or hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// The key id (for `DELETE /v1/keys/{key_id}`).
    pub id: Uuid,
    /// Its label, if any; the operator's key is `TETHER_ADMIN_KEY`.
    pub name: Option<String>,
    /// Whether it has admin scope.
    pub admin: bool,
    /// When it was issued.
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request, to within a minute.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Who a key is (`GET /v1/whoami`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whoami {
    /// The tenant the key acts for.
    pub tenant: TenantRef,
    /// The key's id.
    pub key_id: Uuid,
    /// Whether it has admin scope.
    pub admin: bool,
}

/// A tenant by id and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRef {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
}

#[derive(Deserialize)]
pub(crate) struct TenantsEnvelope {
    pub(crate) tenants: Vec<Tenant>,
}

#[derive(Deserialize)]
pub(crate) struct TenantEnvelope {
    pub(crate) tenant: Tenant,
}

#[derive(Deserialize)]
pub(crate) struct KeysEnvelope {
    pub(crate) keys: Vec<ApiKey>,
}
