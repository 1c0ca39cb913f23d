//! Tenants and keys: the options of a new key.

use tether_api::CreateKeyBody;

/// Options of `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewKey {
    /// A label for humans.
    pub name: Option<String>,
    /// Admin scope (only for keys of the `default` tenant).
    pub admin: bool,
}

impl NewKey {
    /// The request's body: only what is set.
    pub(crate) fn body(&self) -> CreateKeyBody {
        CreateKeyBody {
            name: self.name.clone(),
            admin: self.admin.then_some(true),
        }
    }
}
