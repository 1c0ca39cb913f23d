//! Invariant 13, the keys to the walls: tenants and their API keys. Keys are
//! stored only as the SHA-256 of their secret, compared in constant time,
//! and revocation takes effect at once.

use chrono::Utc;
use sha2::{Digest, Sha256};
use tether_core::{ApiKeyInfo, ApiKeySecret, Error, Tenant, DEFAULT_TENANT};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

async fn tenant(db: &TestDb, name: &str) -> Tenant {
    ok(db.engine.create_tenant(name).await)
}

async fn issue(
    db: &TestDb,
    tenant: &Tenant,
    name: Option<&str>,
    admin: bool,
) -> (ApiKeyInfo, String) {
    ok(db.engine.issue_api_key(tenant.id, name, admin).await)
}

/// Asserts `Unauthenticated`.
#[track_caller]
fn expect_unauthenticated<T: std::fmt::Debug>(r: tether_core::Result<T>) {
    let e = expect_code(r, "unauthenticated");
    assert!(matches!(e, Error::Unauthenticated), "{e:?}");
}

/// Asserts `NotFound` (code `not_found`) for a tenant or key.
#[track_caller]
fn expect_missing<T: std::fmt::Debug>(r: tether_core::Result<T>) {
    let e = expect_code(r, "not_found");
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
}

/// The secret part of a key string (after the last `_`).
fn secret_of(key: &str) -> &str {
    key.rsplit('_').next().expect("key has a secret part")
}

/// Tenants get fresh ids and database timestamps, are listed by name and
/// fetched by id; an unknown id is `not_found`; bad names are refused.
pub async fn tenants_are_created_listed_and_fetched(db: &TestDb) {
    let before = Utc::now();
    let beta = tenant(db, "beta").await;
    let acme = tenant(db, "acme").await;
    let gamma = tenant(db, "gamma.prod:eu-1").await;
    assert_eq!(acme.name, "acme");
    assert_ne!(acme.id, beta.id);
    assert_ne!(acme.id, gamma.id);
    let skew = chrono::Duration::seconds(60);
    assert!(acme.created_at > before - skew && acme.created_at < Utc::now() + skew);

    let listed = ok(db.engine.list_tenants().await);
    assert_eq!(listed, vec![acme.clone(), beta.clone(), gamma.clone()]);
    assert_eq!(ok(db.engine.get_tenant(beta.id).await), beta);
    expect_missing(db.engine.get_tenant(Uuid::new_v4()).await);

    for bad in ["", "has space", "ünïcode", &"a".repeat(129)] {
        expect_invalid(db.engine.create_tenant(bad).await);
        expect_invalid(db.engine.ensure_tenant(bad).await);
    }
    assert_eq!(ok(db.engine.list_tenants().await).len(), 3);
}

/// A taken name is `already_exists`, and nothing changes.
pub async fn duplicate_tenant_name_is_already_exists(db: &TestDb) {
    let acme = tenant(db, "acme").await;
    let e = expect_code(db.engine.create_tenant("acme").await, "already_exists");
    assert!(matches!(e, Error::AlreadyExists(_)), "{e:?}");
    assert_eq!(ok(db.engine.list_tenants().await), vec![acme]);
}

/// `ensure_tenant` creates once and then returns the same tenant, also when
/// called concurrently and for a tenant made by `create_tenant`.
pub async fn ensure_tenant_is_idempotent(db: &TestDb) {
    let calls = (0..8).map(|_| db.engine.ensure_tenant(DEFAULT_TENANT));
    let answers = futures_util::future::join_all(calls).await;
    let first = ok(db.engine.ensure_tenant(DEFAULT_TENANT).await);
    assert_eq!(first.name, DEFAULT_TENANT);
    for answer in answers {
        assert_eq!(ok(answer), first);
    }
    let acme = tenant(db, "acme").await;
    assert_eq!(ok(db.engine.ensure_tenant("acme").await), acme);
    assert_eq!(ok(db.engine.list_tenants().await), vec![acme, first]);
}

/// An issued key authenticates as its tenant with its admin flag, and the
/// answer is the info returned at issue.
pub async fn issued_key_authenticates_as_its_tenant(db: &TestDb) {
    let default = ok(db.engine.ensure_tenant(DEFAULT_TENANT).await);
    let acme = tenant(db, "acme").await;
    let (admin, admin_key) = issue(db, &default, Some("bootstrap"), true).await;
    let (plain, plain_key) = issue(db, &acme, None, false).await;

    assert!(admin_key.starts_with("tth_"));
    assert_eq!(admin_key.len(), tether_core::keys::KEY_LEN);
    assert_eq!(admin.tenant_id, default.id);
    assert_eq!(admin.tenant, DEFAULT_TENANT);
    assert_eq!(admin.name.as_deref(), Some("bootstrap"));
    assert!(admin.admin);
    assert_eq!(admin.revoked_at, None);
    assert_eq!(plain.tenant, "acme");
    assert_eq!(plain.name, None);
    assert!(!plain.admin);

    assert_eq!(ok(db.engine.authenticate(&admin_key).await), admin);
    assert_eq!(ok(db.engine.authenticate(&plain_key).await), plain);
    // A plain key in the default tenant is allowed too.
    let (_, default_plain) = issue(db, &default, Some("reader"), false).await;
    let who = ok(db.engine.authenticate(&default_plain).await);
    assert_eq!(who.tenant, DEFAULT_TENANT);
    assert!(!who.admin);
}

/// Wrong secret, unknown id, malformed key and revoked key all give the same
/// `unauthenticated`.
pub async fn bad_keys_are_unauthenticated(db: &TestDb) {
    let acme = tenant(db, "acme").await;
    let (info, key) = issue(db, &acme, None, false).await;
    let (_, other_key, _) = ApiKeySecret::generate();

    // Right id, someone else's secret.
    let forged = format!("tth_{}_{}", info.id.simple(), secret_of(&other_key));
    expect_unauthenticated(db.engine.authenticate(&forged).await);
    // Right id, secret off by one digit.
    let mut flipped = key.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    expect_unauthenticated(db.engine.authenticate(&flipped).await);
    // A well-formed key that was never stored.
    expect_unauthenticated(db.engine.authenticate(&other_key).await);
    // Malformed.
    for bad in [
        String::new(),
        "tth_".to_owned(),
        "not a key".to_owned(),
        format!("{key}0"),
        key[..key.len() - 1].to_owned(),
        key.to_uppercase(),
        format!("Bearer {key}"),
        format!("tth_{}_{}", info.id.hyphenated(), secret_of(&key)),
    ] {
        expect_unauthenticated(db.engine.authenticate(&bad).await);
    }
    // Revoked.
    ok(db.engine.revoke_api_key(info.id).await);
    expect_unauthenticated(db.engine.authenticate(&key).await);
}

/// The store holds the SHA-256 of the secret and nothing from which the key
/// could be rebuilt; a key stored with a caller's id and hash (the bootstrap
/// path) round-trips.
pub async fn only_the_hash_of_the_secret_is_stored(db: &TestDb) {
    let acme = tenant(db, "acme").await;
    let (info, key) = issue(db, &acme, Some("ci"), false).await;
    let (found, hash) = ok(db.engine.find_api_key(info.id).await).expect("key is stored");
    assert_eq!(found, info);
    let secret = secret_of(&key);
    let expected: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    assert_eq!(hash, expected, "stored hash is not SHA-256 of the secret");
    assert_ne!(&hash[..], &secret.as_bytes()[..32]);
    let of_key: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    assert_ne!(hash, of_key);
    assert_eq!(ok(db.engine.find_api_key(Uuid::new_v4()).await), None);

    let (key_id, key, hash) = ApiKeySecret::generate();
    let made = ok(db
        .engine
        .create_api_key(acme.id, None, false, key_id, hash)
        .await);
    assert_eq!(made.id, key_id);
    assert_eq!(
        ok(db.engine.find_api_key(key_id).await),
        Some((made.clone(), hash))
    );
    assert_eq!(ok(db.engine.authenticate(&key).await), made);
}

/// Admin keys exist only in the default tenant; keys need an existing tenant
/// and a sane name. Nothing is stored when refused.
pub async fn bad_key_requests_are_refused(db: &TestDb) {
    let acme = tenant(db, "acme").await;
    let e = expect_invalid(db.engine.issue_api_key(acme.id, None, true).await);
    assert!(
        matches!(&e, Error::Invalid { field, .. } if field == "admin"),
        "{e:?}"
    );
    expect_missing(db.engine.issue_api_key(Uuid::new_v4(), None, false).await);
    expect_missing(db.engine.issue_api_key(Uuid::new_v4(), None, true).await);
    let long = "n".repeat(129);
    for bad in ["", "line\nbreak", "tab\t", long.as_str()] {
        expect_invalid(db.engine.issue_api_key(acme.id, Some(bad), false).await);
    }
    assert!(ok(db.engine.list_api_keys(acme.id).await).is_empty());
    // Names may be any printable text up to 128 characters.
    let (ok_key, _) = issue(db, &acme, Some(&"ü".repeat(128)), false).await;
    assert_eq!(ok_key.name.as_deref().map(|n| n.chars().count()), Some(128));
    let (spaced, _) = issue(db, &acme, Some("deploy bot #2"), false).await;
    assert_eq!(spaced.name.as_deref(), Some("deploy bot #2"));
}

/// A tenant's keys are listed under it only, oldest first; an unknown
/// tenant is `not_found`, a tenant without keys lists none.
pub async fn keys_are_listed_only_under_their_tenant(db: &TestDb) {
    let a = tenant(db, "a").await;
    let b = tenant(db, "b").await;
    let c = tenant(db, "c").await;
    let (a1, _) = issue(db, &a, Some("one"), false).await;
    let (b1, _) = issue(db, &b, None, false).await;
    let (a2, _) = issue(db, &a, Some("two"), false).await;

    let listed_a = ok(db.engine.list_api_keys(a.id).await);
    let mut ids: Vec<Uuid> = listed_a.iter().map(|k| k.id).collect();
    ids.sort();
    let mut want = vec![a1.id, a2.id];
    want.sort();
    assert_eq!(ids, want);
    assert!(listed_a
        .iter()
        .all(|k| k.tenant_id == a.id && k.tenant == "a"));
    assert!(listed_a[0].created_at <= listed_a[1].created_at);
    assert_eq!(ok(db.engine.list_api_keys(b.id).await), vec![b1]);
    assert!(ok(db.engine.list_api_keys(c.id).await).is_empty());
    expect_missing(db.engine.list_api_keys(Uuid::new_v4()).await);
}

/// A revoked key is refused by the very next authentication; the revocation
/// is visible in find and list, repeating it keeps the first instant, and
/// the tenant's other keys keep working.
pub async fn revocation_takes_effect_at_once(db: &TestDb) {
    let acme = tenant(db, "acme").await;
    let (doomed, doomed_key) = issue(db, &acme, Some("doomed"), false).await;
    let (kept, kept_key) = issue(db, &acme, Some("kept"), false).await;
    ok(db.engine.authenticate(&doomed_key).await);

    ok(db.engine.revoke_api_key(doomed.id).await);
    expect_unauthenticated(db.engine.authenticate(&doomed_key).await);
    let (found, _) = ok(db.engine.find_api_key(doomed.id).await).expect("revoked key is kept");
    let revoked_at = found.revoked_at.expect("revoked_at is set");
    assert!(revoked_at >= found.created_at);
    assert!(found.is_revoked());

    ok(db.engine.revoke_api_key(doomed.id).await);
    let (again, _) = ok(db.engine.find_api_key(doomed.id).await).unwrap();
    assert_eq!(
        again.revoked_at,
        Some(revoked_at),
        "second revoke moved revoked_at"
    );
    expect_unauthenticated(db.engine.authenticate(&doomed_key).await);

    assert_eq!(ok(db.engine.authenticate(&kept_key).await), kept);
    let listed = ok(db.engine.list_api_keys(acme.id).await);
    let by_id = |id| listed.iter().find(|k: &&ApiKeyInfo| k.id == id).unwrap();
    assert_eq!(by_id(doomed.id).revoked_at, Some(revoked_at));
    assert_eq!(by_id(kept.id).revoked_at, None);

    expect_missing(db.engine.revoke_api_key(Uuid::new_v4()).await);
}
