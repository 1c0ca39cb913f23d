//! `service`: the health answer and who a key is.

use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{schema_of, string_enum, NameSchema};

schema_of!(
    /// Schema of the answer of `/healthz` and `/readyz`: `{"status": "ok"}`.
    HealthSchema as "Health" => ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("status", string_enum("Always `ok`.", ["ok"]))
        .required("status")
        .description(Some("The service is up (`/healthz`) or ready (`/readyz`)."))
);

/// The answer of `GET /v1/whoami`: who the request's key is.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WhoamiResponse {
    /// The tenant the key acts for.
    pub tenant: TenantRef,
    /// The key's id (never its secret).
    pub key_id: Uuid,
    /// Whether the key has admin scope.
    pub admin: bool,
}

/// A tenant by id and name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantRef {
    /// Its id.
    pub id: Uuid,
    /// Its unique name.
    #[schema(value_type = NameSchema)]
    pub name: String,
}
