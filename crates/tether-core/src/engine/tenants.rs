//! Tenants and their API keys.

use super::*;

impl Engine {
    /// Creates a tenant; its name follows the queue-name rules and is not a
    /// UUID ([`validate::tenant_name`]).
    pub async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        validate::tenant_name("name", name)?;
        self.store.create_tenant(name).await
    }

    /// Every tenant, by name.
    pub async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        self.store.list_tenants().await
    }

    /// One tenant by id.
    pub async fn get_tenant(&self, id: Uuid) -> Result<Tenant> {
        self.store.get_tenant(id).await
    }

    /// The tenant named `name_or_id`, or whose id it is (an admin acting
    /// for a tenant names it either way); `NotFound` if there is none.
    ///
    /// New tenant names cannot read as ids ([`validate::tenant_name`]), but
    /// a tenant created before that rule may be named like another
    /// tenant's id. A value that is one tenant's id and another's name is
    /// refused (`Invalid`): picking either could act on the tenant the
    /// caller did not mean. Each stays reachable by its other handle.
    pub async fn find_tenant(&self, name_or_id: &str) -> Result<Tenant> {
        let by_id = match Uuid::try_parse(name_or_id) {
            Ok(id) => match self.store.get_tenant(id).await {
                Ok(tenant) => Some(tenant),
                Err(Error::NotFound(_)) => None,
                Err(e) => return Err(e),
            },
            Err(_) => None,
        };
        let by_name = self
            .store
            .list_tenants()
            .await?
            .into_iter()
            .find(|t| t.name == name_or_id);
        match (by_id, by_name) {
            (Some(a), Some(b)) if a.id != b.id => Err(Error::invalid(
                "tenant",
                format!(
                    "{name_or_id:?} is the id of tenant {:?} and the name of tenant {} \
                     (named before tenant names could not be UUIDs); name the first by \
                     its name or the second by its id",
                    a.name, b.id
                ),
            )),
            (Some(t), _) | (None, Some(t)) => Ok(t),
            (None, None) => Err(Error::NotFound(format!("tenant {name_or_id}"))),
        }
    }

    /// Every tenant, by name, with its standing.
    pub async fn tenant_statuses(&self) -> Result<Vec<TenantStatus>> {
        let suspended: HashMap<Uuid, DateTime<Utc>> =
            self.store.suspended_tenants().await?.into_iter().collect();
        Ok(self
            .store
            .list_tenants()
            .await?
            .into_iter()
            .map(|tenant| TenantStatus {
                suspended_at: suspended.get(&tenant.id).copied(),
                tenant,
            })
            .collect())
    }

    /// [`Engine::find_tenant`] with the tenant's standing.
    pub async fn find_tenant_status(&self, name_or_id: &str) -> Result<TenantStatus> {
        let tenant = self.find_tenant(name_or_id).await?;
        let suspended_at = self
            .store
            .suspended_tenants()
            .await?
            .into_iter()
            .find_map(|(id, at)| (id == tenant.id).then_some(at));
        Ok(TenantStatus {
            tenant,
            suspended_at,
        })
    }

    /// Suspends tenant `id`: from now on its keys authenticate nothing
    /// ([`Error::TenantSuspended`], 403) and its schedules do not fire; its
    /// jobs, queues, schedules and keys stay. The [`DEFAULT_TENANT`] holds
    /// the operator's admin keys and cannot be suspended (`Invalid`).
    /// Suspending a suspended tenant changes nothing.
    pub async fn suspend_tenant(&self, id: Uuid) -> Result<TenantStatus> {
        let tenant = self.store.get_tenant(id).await?;
        if tenant.name == DEFAULT_TENANT {
            return Err(Error::invalid(
                "tenant_id",
                format!(
                    "the {DEFAULT_TENANT:?} tenant holds the operator's admin keys and \
                     cannot be suspended"
                ),
            ));
        }
        self.store.suspend_tenant(id).await
    }

    /// Resumes a suspended tenant: its keys work again and its enabled
    /// schedules fire from their first instant after now (the instants of
    /// the suspension are not made up, as when a schedule is enabled
    /// again). Resuming an active tenant changes nothing.
    pub async fn resume_tenant(&self, id: Uuid) -> Result<TenantStatus> {
        let tenant = self.store.get_tenant(id).await?;
        let mut next_runs = Vec::new();
        for s in self.store.list_schedules(&tenant.name).await? {
            if !s.spec.enabled {
                continue;
            }
            // A stored definition that no longer parses cannot fire: it
            // keeps no next run, as the scheduler would leave it.
            let Ok(cron) = CronSchedule::parse(&s.spec.cron, &s.spec.timezone) else {
                next_runs.push((s.id, None));
                continue;
            };
            let next = Self::first_run(&s.spec, &cron).and_then(|next| match s.last_run_at {
                Some(last) if next <= last => cron.next_after(last),
                _ => Some(next),
            });
            next_runs.push((s.id, next));
        }
        self.store.resume_tenant(id, &next_runs).await
    }

    /// The tenant named `name`, created if missing (e.g. `default` at start);
    /// a new name follows [`validate::tenant_name`].
    pub async fn ensure_tenant(&self, name: &str) -> Result<Tenant> {
        validate::tenant_name("name", name)?;
        self.store.ensure_tenant(name).await
    }

    /// Stores a key minted elsewhere (e.g. `TETHER_ADMIN_KEY` at bootstrap):
    /// its id and the SHA-256 of its secret. Prefer [`Engine::issue_api_key`].
    pub async fn create_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<ApiKeyInfo> {
        if let Some(name) = name {
            validate::key_name("name", name)?;
        }
        self.store
            .create_api_key(tenant_id, name, admin, key_id, hash)
            .await
    }

    /// The server secret, or `Invalid` when none was set.
    fn server_secret(&self) -> Result<&ServerSecret> {
        self.server_secret.as_deref().ok_or_else(|| {
            Error::invalid(
                "server_secret",
                "no server secret is set; operator keys need one",
            )
        })
    }

    /// Whether the server secret is the one this database's operator keys
    /// were stored under. With `record` (a process about to store an
    /// operator key), the first call on a database stores the secret's
    /// check value (never the secret); without, a database that has none
    /// yet accepts any secret, so replicas that never use operator keys
    /// need not share one. A process whose secret differs must not serve:
    /// the operator key it stores or looks up would be another row than the
    /// other replicas', and each would revoke the other's at start.
    /// `Invalid` when no secret is set.
    pub async fn check_server_secret(&self, record: bool) -> Result<bool> {
        let check = self.server_secret()?.check_value();
        let stored = self.store.server_secret_check(check, record).await?;
        Ok(stored.is_none_or(|stored| stored == check))
    }

    /// Makes an operator-chosen string (e.g. `TETHER_ADMIN_KEY`) the
    /// operator key: an admin key of the [`DEFAULT_TENANT`], stored unless
    /// it is already there, so every replica can run this at start. Storing
    /// a new one revokes the earlier operator keys: rotating
    /// `TETHER_ADMIN_KEY` retires the old value (replicas starting with the
    /// same value derive the same key id, so they never revoke each other's).
    /// A key that was revoked stays revoked and revokes nothing (the answer
    /// shows it): revocation is never undone behind an operator's back, and
    /// an old value coming back cannot retire the newer one.
    pub async fn ensure_operator_admin_key(&self, key: &str) -> Result<OperatorKeySetup> {
        let (key_id, secret) = ApiKeySecret::operator(key, self.server_secret()?)
            .map_err(|why| Error::invalid("TETHER_ADMIN_KEY", why))?;
        let tenant = self.ensure_tenant(DEFAULT_TENANT).await?;
        self.store
            .store_operator_key(tenant.id, key_id, secret.hash())
            .await
    }

    /// Mints and stores a new key for a tenant. Returns the key's info and
    /// the full key string, which is shown once and stored nowhere.
    pub async fn issue_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
    ) -> Result<(ApiKeyInfo, String)> {
        let (key_id, key, hash) = ApiKeySecret::generate();
        let info = self
            .create_api_key(tenant_id, name, admin, key_id, hash)
            .await?;
        Ok((info, key))
    }

    /// A key by id with its stored hash (revoked keys included).
    pub async fn find_api_key(&self, key_id: Uuid) -> Result<Option<(ApiKeyInfo, [u8; 32])>> {
        Ok(self
            .store
            .find_api_key(key_id)
            .await?
            .map(|k| (k.info, k.hash)))
    }

    /// Revokes a key; it authenticates nothing from now on.
    pub async fn revoke_api_key(&self, key_id: Uuid) -> Result<()> {
        self.store.revoke_api_key(key_id).await
    }

    /// A tenant's keys, oldest first.
    pub async fn list_api_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>> {
        self.store.list_api_keys(tenant_id).await
    }

    /// The key's info if `key` is a well-formed, known, unrevoked key whose
    /// secret matches (compared in constant time); else `Unauthenticated`,
    /// without saying why. (The hashing is done while parsing, before the
    /// lookup, so an unknown id is not told apart by timing.) A valid key
    /// of a suspended tenant is [`Error::TenantSuspended`].
    ///
    /// It writes nothing: the caller records the use with
    /// [`Engine::record_key_use`] when [`ApiKeyInfo::use_is_due`].
    pub async fn authenticate(&self, key: &str) -> Result<ApiKeyInfo> {
        let Some((key_id, secret)) = ApiKeySecret::parse(key, self.server_secret.as_deref()) else {
            return Err(Error::Unauthenticated);
        };
        match self.store.find_api_key(key_id).await? {
            Some(k) if secret.verify(&k.hash) && !k.info.is_revoked() => {
                if k.tenant_suspended_at.is_some() {
                    return Err(Error::tenant_suspended(&k.info.tenant));
                }
                Ok(k.info)
            }
            Some(_) | None => Err(Error::Unauthenticated),
        }
    }

    /// Sets the key's `last_used_at` to now unless it was set less than
    /// [`KEY_USE_INTERVAL_MS`] ago (or the key is revoked); whether it
    /// wrote. A conditional update: replicas and concurrent requests that
    /// race here write once per interval between them.
    pub async fn record_key_use(&self, key_id: Uuid) -> Result<bool> {
        self.store.touch_api_key(key_id, KEY_USE_INTERVAL_MS).await
    }
}
