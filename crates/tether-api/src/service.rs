//! `service`: the health answer and who a key is.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[cfg(feature = "openapi")]
use crate::NameSchema;

/// The answer of `GET /v1/whoami`: who the request's key is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoamiResponse {
    /// The tenant the key acts for.
    pub tenant: TenantRef,
    /// The key's id (never its secret).
    pub key_id: Uuid,
    /// Whether the key has admin scope.
    pub admin: bool,
}

/// A tenant by id and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantRef {
    /// Its id.
    pub id: Uuid,
    /// Its unique name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
}

#[cfg(feature = "openapi")]
pub use self::openapi::HealthSchema;

/// The health answer's schema (the server writes that body itself).
#[cfg(feature = "openapi")]
mod openapi {
    use utoipa::openapi::schema::{ObjectBuilder, Type};

    use crate::schemas::string_enum;

    schema_of!(
        /// Schema of the answer of `/healthz` and `/readyz`: `{"status": "ok"}`.
        HealthSchema as "Health" =>
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("status", string_enum("Always `ok`.", ["ok"]))
            .required("status")
            .description(Some("The service is up (`/healthz`) or ready (`/readyz`)."))
    );
}
