//! Statements of `tenants.rs`.

/// Creates a tenant unless the name is taken: `$1` name. No row: taken.
pub(crate) const CREATE_TENANT: &str = "INSERT INTO tether.tenants (id, name, created_at)
    VALUES (gen_random_uuid(), $1, now())
    ON CONFLICT (name) DO NOTHING
    RETURNING id, name, created_at";

/// The tenant named `$1`, created if missing. The no-op update on conflict
/// makes the row come back even when a concurrent caller inserted it.
pub(crate) const ENSURE_TENANT: &str = "INSERT INTO tether.tenants AS t (id, name, created_at)
    VALUES (gen_random_uuid(), $1, now())
    ON CONFLICT (name) DO UPDATE SET name = t.name
    RETURNING id, name, created_at";

pub(crate) const LIST_TENANTS: &str =
    "SELECT id, name, created_at FROM tether.tenants ORDER BY name";

pub(crate) const GET_TENANT: &str = "SELECT id, name, created_at FROM tether.tenants WHERE id = $1";

/// Inserts a key if its tenant exists and the admin rule allows it: `$1` key
/// id, `$2` tenant id, `$3` name, `$4` hash, `$5` admin, `$6` the default
/// tenant's name. No row: no such tenant; a row with a NULL id: an admin key
/// outside the default tenant (nothing inserted).
pub(crate) const CREATE_API_KEY: &str = "WITH t AS (
        SELECT id, name FROM tether.tenants WHERE id = $2
    ),
    k AS (
        INSERT INTO tether.api_keys (id, tenant_id, name, hash, admin, created_at)
        SELECT $1, t.id, $3, $4, $5, now() FROM t
        WHERE NOT $5 OR t.name = $6
        RETURNING id, tenant_id, name, admin, created_at, last_used_at, revoked_at
    )
    SELECT k.id, t.id AS tenant_id, t.name AS tenant, k.name, k.admin, k.created_at,
           k.last_used_at, k.revoked_at
    FROM t LEFT JOIN k ON true";

pub(crate) const FIND_API_KEY: &str = "SELECT k.id, k.tenant_id, t.name AS tenant, k.name, k.admin,
        k.created_at, k.last_used_at, k.revoked_at, k.hash, t.suspended_at AS tenant_suspended_at
    FROM tether.api_keys k JOIN tether.tenants t ON t.id = k.tenant_id
    WHERE k.id = $1";

/// Suspends tenant `$1` (a suspended one keeps its first instant) and
/// clears the next run of each of its schedules, in one statement. No row:
/// no such tenant.
pub(crate) const SUSPEND_TENANT: &str = "WITH t AS (
        UPDATE tether.tenants SET suspended_at = COALESCE(suspended_at, now())
        WHERE id = $1
        RETURNING id, name, created_at, suspended_at
    ),
    s AS (
        UPDATE tether.schedules x SET next_run_at = NULL FROM t WHERE x.tenant = t.name
    )
    SELECT id, name, created_at, suspended_at FROM t";

/// Tenant `$1` with its standing, its row locked until the transaction ends.
pub(crate) const LOCK_TENANT: &str =
    "SELECT id, name, created_at, suspended_at FROM tether.tenants WHERE id = $1 FOR UPDATE";

/// Sets the next runs of a resumed tenant's enabled schedules: `$1` the
/// tenant's name, `$2` schedule ids, `$3` their next runs (NULL: none).
pub(crate) const RESUME_SCHEDULES: &str = "UPDATE tether.schedules x SET next_run_at = u.next
    FROM UNNEST($2::uuid[], $3::timestamptz[]) AS u(id, next)
    WHERE x.id = u.id AND x.tenant = $1 AND x.enabled";

/// Resumes tenant `$1`.
pub(crate) const RESUME_TENANT: &str = "UPDATE tether.tenants SET suspended_at = NULL WHERE id = $1
    RETURNING id, name, created_at, suspended_at";

pub(crate) const SUSPENDED_TENANTS: &str =
    "SELECT id, suspended_at FROM tether.tenants WHERE suspended_at IS NOT NULL";

/// Revokes `$1`; a second revocation keeps the first instant.
pub(crate) const REVOKE_API_KEY: &str =
    "UPDATE tether.api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1";

/// A tenant's keys; one row with a NULL key id for a tenant with none, no
/// row for no tenant.
pub(crate) const LIST_API_KEYS: &str =
    "SELECT k.id, t.id AS tenant_id, t.name AS tenant, k.name, k.admin,
        k.created_at, k.last_used_at, k.revoked_at
    FROM tether.tenants t LEFT JOIN tether.api_keys k ON k.tenant_id = t.id
    WHERE t.id = $1
    ORDER BY k.created_at, k.id";

/// Records a use of key `$1` unless it is revoked or was used less than
/// `$2` ms ago (database clock): at most one write per key and interval,
/// whichever replica or request gets here first.
pub(crate) const TOUCH_API_KEY: &str = "UPDATE tether.api_keys SET last_used_at = now()
    WHERE id = $1 AND revoked_at IS NULL
      AND (last_used_at IS NULL OR last_used_at <= now() - $2 * interval '1 millisecond')";

/// Serialises `Store::store_operator_key` across replicas: without it, two
/// replicas storing two different keys at once would each miss the other's
/// uncommitted row and both keys would stay valid.
pub(crate) const LOCK_OPERATOR_KEYS: &str =
    "SELECT pg_advisory_xact_lock(hashtext('tether.operator_key'))";

/// Stores operator key `$1` in tenant `$2` with name `$3`, hash `$4`, unless
/// the id exists.
pub(crate) const INSERT_OPERATOR_KEY: &str = "INSERT INTO tether.api_keys
        (id, tenant_id, name, hash, admin, operator, created_at)
    VALUES ($1, $2, $3, $4, true, true, now())
    ON CONFLICT (id) DO NOTHING";

/// Revokes every unrevoked operator key but `$1`.
pub(crate) const REVOKE_OTHER_OPERATOR_KEYS: &str = "UPDATE tether.api_keys SET revoked_at = now()
    WHERE operator AND revoked_at IS NULL AND id <> $1
    RETURNING id";

/// Stores the server-secret check value `$1` unless one is stored; the
/// stored one comes back either way (the no-op update on conflict returns
/// the existing row, also when a concurrent caller inserted it).
pub(crate) const RECORD_SERVER_SECRET_CHECK: &str =
    "INSERT INTO tether.server_secret AS s (id, check_hmac, created_at)
    VALUES (1, $1, now())
    ON CONFLICT (id) DO UPDATE SET check_hmac = s.check_hmac
    RETURNING check_hmac";

pub(crate) const READ_SERVER_SECRET_CHECK: &str =
    "SELECT check_hmac FROM tether.server_secret WHERE id = 1";
