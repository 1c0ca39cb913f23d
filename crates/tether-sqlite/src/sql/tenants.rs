//! Statements of `tenants.rs`.

/// Creates a tenant unless the name is taken: `?1` name. No row: taken.
pub(crate) const CREATE_TENANT: &str = concat!(
    "INSERT INTO tether_tenants (id, name, created_at) VALUES (",
    new_token!(),
    ", ?1, ",
    now_ms!(),
    ") ON CONFLICT (name) DO NOTHING RETURNING id, name, created_at"
);

pub(crate) const TENANT_BY_NAME: &str =
    "SELECT id, name, created_at FROM tether_tenants WHERE name = ?1";

pub(crate) const LIST_TENANTS: &str =
    "SELECT id, name, created_at FROM tether_tenants ORDER BY name";

pub(crate) const GET_TENANT: &str = "SELECT id, name, created_at FROM tether_tenants WHERE id = ?1";

/// `?1` key id, `?2` tenant id, `?3` name, `?4` hash, `?5` admin, `?6` the
/// tenant's name (read in the same transaction), echoed back.
pub(crate) const INSERT_API_KEY: &str = concat!(
    "INSERT INTO tether_api_keys (id, tenant_id, name, hash, admin, created_at) ",
    "VALUES (?1, ?2, ?3, ?4, ?5, ",
    now_ms!(),
    ") RETURNING id, tenant_id, name, admin, created_at, last_used_at, revoked_at, ",
    "?6 AS tenant"
);

pub(crate) const FIND_API_KEY: &str =
    "SELECT k.id, k.tenant_id, t.name AS tenant, k.name, k.admin, \
     k.created_at, k.last_used_at, k.revoked_at, k.hash, t.suspended_at AS tenant_suspended_at \
     FROM tether_api_keys k JOIN tether_tenants t ON t.id = k.tenant_id WHERE k.id = ?1";

/// Tenant `?1` with its standing.
pub(crate) const TENANT_STATUS: &str =
    "SELECT id, name, created_at, suspended_at FROM tether_tenants WHERE id = ?1";

/// Suspends tenant `?1`; a suspended one keeps its first instant.
pub(crate) const SUSPEND_TENANT: &str = concat!(
    "UPDATE tether_tenants SET suspended_at = coalesce(suspended_at, ",
    now_ms!(),
    ") WHERE id = ?1"
);

/// Clears the next run of each schedule of the tenant named `?1`.
pub(crate) const CLEAR_NEXT_RUNS: &str =
    "UPDATE tether_schedules SET next_run_at = NULL WHERE tenant = ?1";

/// Sets the next runs of a resumed tenant's enabled schedules: `?1` the
/// tenant's name, `?2` a JSON array of `[id, next run in ms or null]`.
pub(crate) const RESUME_SCHEDULES: &str = "UPDATE tether_schedules
    SET next_run_at = (SELECT u.value ->> 1 FROM json_each(?2) u WHERE u.value ->> 0 = tether_schedules.id)
    WHERE tenant = ?1 AND enabled = 1
      AND id IN (SELECT u.value ->> 0 FROM json_each(?2) u)";

/// Resumes tenant `?1`.
pub(crate) const RESUME_TENANT: &str =
    "UPDATE tether_tenants SET suspended_at = NULL WHERE id = ?1";

pub(crate) const SUSPENDED_TENANTS: &str =
    "SELECT id, suspended_at FROM tether_tenants WHERE suspended_at IS NOT NULL";

/// Revokes `?1`; a second revocation keeps the first instant.
pub(crate) const REVOKE_API_KEY: &str = concat!(
    "UPDATE tether_api_keys SET revoked_at = COALESCE(revoked_at, ",
    now_ms!(),
    ") WHERE id = ?1"
);

/// A tenant's keys, oldest first; one row with a NULL key id for a tenant
/// with none, no row for no tenant. Key ids are random and `created_at` has
/// millisecond resolution here, so keys made in one millisecond are ordered
/// by the row's insertion order (`rowid`).
pub(crate) const LIST_API_KEYS: &str =
    "SELECT k.id, t.id AS tenant_id, t.name AS tenant, k.name, k.admin, \
     k.created_at, k.last_used_at, k.revoked_at \
     FROM tether_tenants t LEFT JOIN tether_api_keys k ON k.tenant_id = t.id \
     WHERE t.id = ?1 ORDER BY k.created_at, k.rowid";

/// Records a use of key `?1` unless it is revoked or was used less than
/// `?2` ms ago (database clock): at most one write per key and interval.
pub(crate) const TOUCH_API_KEY: &str = concat!(
    "UPDATE tether_api_keys SET last_used_at = ",
    now_ms!(),
    " WHERE id = ?1 AND revoked_at IS NULL AND (last_used_at IS NULL OR last_used_at <= ",
    now_ms!(),
    " - ?2)"
);

/// Stores operator key `?1` in tenant `?2` with name `?3`, hash `?4`, unless
/// the id exists.
pub(crate) const INSERT_OPERATOR_KEY: &str = concat!(
    "INSERT INTO tether_api_keys (id, tenant_id, name, hash, admin, operator, created_at) ",
    "VALUES (?1, ?2, ?3, ?4, 1, 1, ",
    now_ms!(),
    ") ON CONFLICT (id) DO NOTHING"
);

/// Revokes every unrevoked operator key but `?1`.
pub(crate) const REVOKE_OTHER_OPERATOR_KEYS: &str = concat!(
    "UPDATE tether_api_keys SET revoked_at = ",
    now_ms!(),
    " WHERE operator = 1 AND revoked_at IS NULL AND id <> ?1 RETURNING id"
);

/// Stores the server-secret check value `?1` unless one is stored.
pub(crate) const RECORD_SERVER_SECRET_CHECK: &str = concat!(
    "INSERT INTO tether_server_secret (id, check_hmac, created_at) VALUES (1, ?1, ",
    now_ms!(),
    ") ON CONFLICT (id) DO NOTHING"
);

pub(crate) const READ_SERVER_SECRET_CHECK: &str =
    "SELECT check_hmac FROM tether_server_secret WHERE id = 1";
