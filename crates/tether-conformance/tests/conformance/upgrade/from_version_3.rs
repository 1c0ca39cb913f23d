//! Upgrading a database that an older tether (schema version 3) left
//! behind, on both backends: migration 4 marks and revokes the operator key
//! stored the old way (unsalted SHA-256, id from a plain SHA-256) and leaves
//! issued keys alone; the same `TETHER_ADMIN_KEY` is then stored anew under
//! the server secret and works.

use chrono::{DateTime, TimeZone, Utc};
use sha2::{Digest, Sha256};
use tether_conformance::TestDb;
use tether_core::{ApiKeySecret, ServerSecret, DEFAULT_TENANT};
use uuid::Uuid;

/// The operator key the old tether stored.
const OPERATOR_KEY: &str = "an-operator-key-from-before";

/// The rows an old tether left: a default tenant with its operator key (the
/// old way), an earlier operator key that was revoked, an issued admin key
/// that happens to carry the same name, and a tenant with an issued key.
struct Old {
    default_id: Uuid,
    acme_id: Uuid,
    operator_id: Uuid,
    operator_hash: [u8; 32],
    revoked_operator_id: Uuid,
    revoked_at: DateTime<Utc>,
    admin: (Uuid, String, [u8; 32]),
    acme: (Uuid, String, [u8; 32]),
}

/// The key id the old tether derived for an operator key.
fn old_operator_id(key: &str) -> Uuid {
    let mut label = Sha256::new();
    label.update(b"tether operator key id\0");
    label.update(key.as_bytes());
    let digest = label.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(id).into_uuid()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Old {
    fn new() -> Old {
        Old {
            default_id: Uuid::new_v4(),
            acme_id: Uuid::new_v4(),
            operator_id: old_operator_id(OPERATOR_KEY),
            operator_hash: Sha256::digest(OPERATOR_KEY.as_bytes()).into(),
            revoked_operator_id: old_operator_id("an-older-operator-key"),
            revoked_at: Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).unwrap(),
            admin: ApiKeySecret::generate(),
            acme: ApiKeySecret::generate(),
        }
    }

    /// The rows in schema version 3 of PostgreSQL.
    fn postgres_seed(&self) -> String {
        let o = self;
        format!(
            "INSERT INTO tether.tenants (id, name, created_at) VALUES
                 ('{d}', 'default', now()), ('{a}', 'acme', now());
             INSERT INTO tether.api_keys (id, tenant_id, name, hash, admin, created_at, revoked_at)
             VALUES
                 ('{op}', '{d}', 'TETHER_ADMIN_KEY', '\\x{oph}', true, now(), NULL),
                 ('{rop}', '{d}', 'TETHER_ADMIN_KEY', '\\x{oph}', true, now(), '{rat}'),
                 ('{ad}', '{d}', 'TETHER_ADMIN_KEY', '\\x{adh}', true, now(), NULL),
                 ('{ak}', '{a}', NULL, '\\x{akh}', false, now(), NULL);",
            d = o.default_id,
            a = o.acme_id,
            op = o.operator_id,
            oph = hex(&o.operator_hash),
            rop = o.revoked_operator_id,
            rat = o.revoked_at.to_rfc3339(),
            ad = o.admin.0,
            adh = hex(&o.admin.2),
            ak = o.acme.0,
            akh = hex(&o.acme.2),
        )
    }

    /// The same rows in schema version 3 of SQLite.
    fn sqlite_seed(&self) -> String {
        let o = self;
        let now = Utc::now().timestamp_millis();
        format!(
            "INSERT INTO tether_tenants (id, name, created_at) VALUES
                 ('{d}', 'default', {now}), ('{a}', 'acme', {now});
             INSERT INTO tether_api_keys (id, tenant_id, name, hash, admin, created_at, revoked_at)
             VALUES
                 ('{op}', '{d}', 'TETHER_ADMIN_KEY', X'{oph}', 1, {now}, NULL),
                 ('{rop}', '{d}', 'TETHER_ADMIN_KEY', X'{oph}', 1, {now}, {rat}),
                 ('{ad}', '{d}', 'TETHER_ADMIN_KEY', X'{adh}', 1, {now}, NULL),
                 ('{ak}', '{a}', NULL, X'{akh}', 0, {now}, NULL);",
            d = o.default_id,
            a = o.acme_id,
            op = o.operator_id,
            oph = hex(&o.operator_hash),
            rop = o.revoked_operator_id,
            rat = o.revoked_at.timestamp_millis(),
            ad = o.admin.0,
            adh = hex(&o.admin.2),
            ak = o.acme.0,
            akh = hex(&o.acme.2),
        )
    }
}

async fn upgraded_keys_behave(db: TestDb, old: Old) {
    let engine = db
        .engine
        .clone()
        .with_server_secret(ServerSecret::generate());
    let default = engine.ensure_tenant(DEFAULT_TENANT).await.unwrap();
    assert_eq!(default.id, old.default_id);
    let keys = engine.list_api_keys(old.default_id).await.unwrap();
    assert_eq!(keys.len(), 3, "{keys:?}");
    let by_id = |id| keys.iter().find(|k| k.id == id).unwrap();

    // The old operator key is revoked by the migration (it could never
    // authenticate again); one revoked earlier keeps its instant.
    let operator = by_id(old.operator_id);
    assert!(operator.is_revoked(), "{operator:?}");
    assert_eq!(
        by_id(old.revoked_operator_id).revoked_at,
        Some(old.revoked_at)
    );
    // Issued keys are untouched and still work, whatever their name.
    for (id, key, _) in [&old.admin, &old.acme] {
        let info = engine.authenticate(key).await.unwrap();
        assert_eq!(info.id, *id);
        assert_eq!((info.revoked_at, info.last_used_at), (None, None));
    }
    assert_eq!(by_id(old.admin.0).name.as_deref(), Some("TETHER_ADMIN_KEY"));

    // The operator key names nothing until it is stored anew, under the
    // server secret; then it works, and the old row stays revoked.
    assert!(engine.authenticate(OPERATOR_KEY).await.is_err());
    let setup = engine
        .ensure_operator_admin_key(OPERATOR_KEY)
        .await
        .unwrap();
    assert_ne!(setup.key.id, old.operator_id);
    assert_eq!(setup.key.revoked_at, None);
    let info = engine.authenticate(OPERATOR_KEY).await.unwrap();
    assert!(info.admin);
    let (_, hash) = engine.find_api_key(info.id).await.unwrap().unwrap();
    assert_ne!(hash, old.operator_hash);
    // A later rotation finds the re-stored key an operator key, and the
    // issued admin key named alike still is not one.
    let next = engine
        .ensure_operator_admin_key("the-next-operator-key")
        .await
        .unwrap();
    assert_eq!(next.revoked, vec![setup.key.id]);
    engine.authenticate(&old.admin.1).await.unwrap();
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_3_upgrades() {
    let old = Old::new();
    let db = tether_conformance::postgres_upgraded_from(3, &old.postgres_seed()).await;
    upgraded_keys_behave(db, old).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_3_upgrades() {
    let old = Old::new();
    let db = tether_conformance::sqlite_upgraded_from(3, &old.sqlite_seed()).await;
    upgraded_keys_behave(db, old).await;
}
