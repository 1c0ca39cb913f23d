//! Tenants and API keys (an admin key's routes), and `whoami`.

use super::*;

impl HttpClient {
    /// `POST /v1/tenants` (admin): creates a tenant and its first key.
    pub async fn create_tenant(&self, name: &str) -> Result<CreatedTenant> {
        let tenant = CreateTenantBody {
            name: name.to_owned(),
        };
        self.post(&["v1", "tenants"], Some(&body(&tenant))).await
    }

    /// `GET /v1/tenants` (admin).
    pub async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        let env: TenantListResponse = self.get(&["v1", "tenants"]).await?;
        Ok(env.tenants)
    }

    /// `POST /v1/tenants/{tenant_id}/suspend` (admin): stops the tenant —
    /// its keys are refused (403), its schedules do not fire, an admin
    /// acting for it may only read — until [`HttpClient::resume_tenant`].
    pub async fn suspend_tenant(&self, tenant_id: Uuid) -> Result<Tenant> {
        let id = tenant_id.to_string();
        let env: TenantResponse = self.post(&["v1", "tenants", &id, "suspend"], None).await?;
        Ok(env.tenant)
    }

    /// `POST /v1/tenants/{tenant_id}/resume` (admin): a suspended tenant's
    /// keys work again and its schedules fire from their next instant.
    pub async fn resume_tenant(&self, tenant_id: Uuid) -> Result<Tenant> {
        let id = tenant_id.to_string();
        let env: TenantResponse = self.post(&["v1", "tenants", &id, "resume"], None).await?;
        Ok(env.tenant)
    }

    /// `POST /v1/tenants/{tenant_id}/keys` (admin): issues a key for a
    /// tenant (`admin: true` only for the `default` tenant).
    pub async fn create_key(&self, tenant_id: Uuid, key: &NewKey) -> Result<CreatedKey> {
        let id = tenant_id.to_string();
        self.post(&["v1", "tenants", &id, "keys"], Some(&body(&key.body())))
            .await
    }

    /// `GET /v1/tenants/{tenant_id}/keys` (admin): the tenant's keys,
    /// revoked ones included, oldest first.
    pub async fn list_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKey>> {
        let id = tenant_id.to_string();
        let env: KeyListResponse = self.get(&["v1", "tenants", &id, "keys"]).await?;
        Ok(env.keys)
    }

    /// `GET /v1/whoami`: the key's tenant, id and scope, to check a key
    /// before starting work with it.
    pub async fn whoami(&self) -> Result<Whoami> {
        self.get(&["v1", "whoami"]).await
    }

    /// `DELETE /v1/keys/{key_id}` (admin): revokes a key at once.
    pub async fn revoke_key(&self, key_id: Uuid) -> Result<()> {
        let id = key_id.to_string();
        let call = self.call(Method::DELETE, &["v1", "keys", &id])?;
        let req = self.request(&call, true);
        self.send(req).await?;
        Ok(())
    }

    // ----- outside /v1 ------------------------------------------------------
}
