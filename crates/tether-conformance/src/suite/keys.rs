//! Invariant 13, the keys to the walls: tenants and their API keys. Issued
//! keys are stored only as the SHA-256 of their secret, operator keys as an
//! HMAC under the server secret; both are compared in constant time, and
//! revocation takes effect at once. A new operator key revokes the earlier
//! ones; `last_used_at` is written at most once per interval.

use chrono::Utc;
use sha2::{Digest, Sha256};
use tether_core::{
    ApiKeyInfo, ApiKeySecret, Engine, Error, JobFilter, ScheduleSpec, ServerSecret, Tenant,
    DEFAULT_TENANT,
};
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

    let id = Uuid::new_v4();
    for bad in [
        "",
        "has space",
        "ünïcode",
        &"a".repeat(129),
        // A name that reads as an id: `X-Tether-Tenant` takes both.
        &id.to_string(),
        &id.simple().to_string(),
        &id.urn().to_string(),
        &acme.id.to_string().to_uppercase(),
    ] {
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

/// The engine of `db` with a server secret, as `tether serve` makes it.
fn with_secret(db: &TestDb, secret: &ServerSecret) -> Engine {
    db.engine.clone().with_server_secret(secret.clone())
}

/// An operator key (`TETHER_ADMIN_KEY`) is stored under an id and hash that
/// are HMACs under the server secret: not the plain SHA-256 of the key, so a
/// copied database alone gives nothing to test guesses against. It
/// authenticates only with that secret.
pub async fn operator_key_is_keyed_by_the_server_secret(db: &TestDb) {
    let key = "weak-but-long-operator-key";
    let secret = ServerSecret::generate();
    let engine = with_secret(db, &secret);
    let setup = ok(engine.ensure_operator_admin_key(key).await);
    assert_eq!(setup.revoked, Vec::<Uuid>::new());
    let info = setup.key;
    assert!(info.admin);
    assert_eq!(info.tenant, DEFAULT_TENANT);
    assert_eq!(info.name.as_deref(), Some("TETHER_ADMIN_KEY"));
    assert_eq!(info.revoked_at, None);

    let (expected_id, expected) = ApiKeySecret::operator(key, &secret).unwrap();
    assert_eq!(info.id, expected_id);
    let (_, stored) = ok(engine.find_api_key(info.id).await).expect("stored");
    assert_eq!(stored, expected.hash());
    let plain: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    assert_ne!(
        stored, plain,
        "the operator key is stored as a plain SHA-256"
    );
    let mut legacy_id = Sha256::new();
    legacy_id.update(b"tether operator key id\0");
    legacy_id.update(key.as_bytes());
    assert_ne!(info.id.as_bytes()[..6], legacy_id.finalize()[..6]);

    assert_eq!(ok(engine.authenticate(key).await), info);
    // Without the secret, or with another one, it is no key at all.
    expect_unauthenticated(db.engine.authenticate(key).await);
    let other = with_secret(db, &ServerSecret::generate());
    expect_unauthenticated(other.authenticate(key).await);
    // And an engine without a secret cannot store one.
    let e = expect_invalid(db.engine.ensure_operator_admin_key(key).await);
    assert!(
        matches!(&e, Error::Invalid { field, .. } if field == "server_secret"),
        "{e:?}"
    );
    let e = expect_invalid(engine.ensure_operator_admin_key("short").await);
    assert!(
        matches!(&e, Error::Invalid { field, .. } if field == "TETHER_ADMIN_KEY"),
        "{e:?}"
    );
}

/// Starting with a new `TETHER_ADMIN_KEY` revokes the earlier operator keys
/// and nothing else; the old value coming back stays revoked and does not
/// revoke the newer one; starting again with the current one changes
/// nothing.
pub async fn rotating_the_operator_key_revokes_the_old_one(db: &TestDb) {
    let engine = with_secret(db, &ServerSecret::generate());
    let default = ok(engine.ensure_tenant(DEFAULT_TENANT).await);
    let acme = tenant(db, "acme").await;
    let (issued_admin, issued_admin_key) = issue(db, &default, Some("ops"), true).await;
    // An issued key may carry the same name: it is no operator key.
    let (named_alike, _) = issue(db, &default, Some("TETHER_ADMIN_KEY"), true).await;
    let (_, acme_key) = issue(db, &acme, None, false).await;

    let old = ok(engine.ensure_operator_admin_key("first-operator-key").await).key;
    let again = ok(engine.ensure_operator_admin_key("first-operator-key").await);
    assert_eq!(again.key, old);
    assert!(again.revoked.is_empty(), "{again:?}");

    let new = ok(engine
        .ensure_operator_admin_key("second-operator-key")
        .await);
    assert_eq!(new.revoked, vec![old.id]);
    assert_eq!(new.key.revoked_at, None);
    expect_unauthenticated(engine.authenticate("first-operator-key").await);
    ok(engine.authenticate("second-operator-key").await);
    let (found, _) = ok(engine.find_api_key(old.id).await).unwrap();
    let revoked_at = found.revoked_at.expect("the old operator key is revoked");

    // The old value again (a replica not yet updated): it stays revoked and
    // the newer key keeps working.
    let back = ok(engine.ensure_operator_admin_key("first-operator-key").await);
    assert_eq!(back.key.id, old.id);
    assert_eq!(back.key.revoked_at, Some(revoked_at));
    assert!(back.revoked.is_empty(), "{back:?}");
    ok(engine.authenticate("second-operator-key").await);

    // The current value again: nothing changes.
    let same = ok(engine
        .ensure_operator_admin_key("second-operator-key")
        .await);
    assert_eq!(same.key, new.key);
    assert!(same.revoked.is_empty(), "{same:?}");

    // Issued keys, admin or not, are untouched.
    assert_eq!(
        ok(engine.authenticate(&issued_admin_key).await),
        issued_admin
    );
    ok(engine.authenticate(&acme_key).await);
    let listed = ok(engine.list_api_keys(default.id).await);
    let unrevoked: Vec<Uuid> = listed
        .iter()
        .filter(|k| !k.is_revoked())
        .map(|k| k.id)
        .collect();
    let mut want = vec![issued_admin.id, named_alike.id, new.key.id];
    want.sort();
    let mut unrevoked_sorted = unrevoked.clone();
    unrevoked_sorted.sort();
    assert_eq!(unrevoked_sorted, want);
}

/// Replicas starting at once with the same `TETHER_ADMIN_KEY` (and secret)
/// all end up with the one key, valid; with two different keys at once,
/// exactly one of them is left valid, never both and never neither.
pub async fn replicas_starting_at_once_agree_on_the_operator_key(db: &TestDb) {
    let secret = ServerSecret::generate();
    let engines: Vec<Engine> = (0..8).map(|_| with_secret(db, &secret)).collect();
    let starts = engines
        .iter()
        .map(|e| e.ensure_operator_admin_key("shared-operator-key"));
    let answers = futures_util::future::join_all(starts).await;
    let mut ids = Vec::new();
    for answer in answers {
        let setup = ok(answer);
        assert_eq!(setup.key.revoked_at, None, "{setup:?}");
        assert!(setup.revoked.is_empty(), "{setup:?}");
        ids.push(setup.key.id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ok(engines[0].authenticate("shared-operator-key").await);
    let default = ok(db.engine.ensure_tenant(DEFAULT_TENANT).await);
    assert_eq!(ok(db.engine.list_api_keys(default.id).await).len(), 1);

    // Two new values at once (a rotation racing itself): one wins. A race,
    // so a few rounds.
    let mut before = "shared-operator-key".to_owned();
    for round in 0..5 {
        let (a_key, b_key) = (
            format!("rotated-operator-key-{round}-a"),
            format!("rotated-operator-key-{round}-b"),
        );
        let a = engines[0].ensure_operator_admin_key(&a_key);
        let b = engines[1].ensure_operator_admin_key(&b_key);
        let (a, b) = tokio::join!(a, b);
        let (a, b) = (ok(a), ok(b));
        let mut alive = Vec::new();
        for key in [&a_key, &b_key] {
            if engines[2].authenticate(key).await.is_ok() {
                alive.push(key.clone());
            }
        }
        assert_eq!(alive.len(), 1, "round {round}: a: {a:?}, b: {b:?}");
        expect_unauthenticated(engines[2].authenticate(&before).await);
        before = alive.remove(0);
    }
}

/// The first server secret a database sees is the one it keeps: its check
/// value is stored once (also when replicas race), a replica with another
/// secret is told apart, and the secret itself is never stored.
pub async fn the_first_server_secret_is_kept(db: &TestDb) {
    let secrets: Vec<ServerSecret> = (0..6).map(|_| ServerSecret::generate()).collect();
    let engines: Vec<Engine> = secrets.iter().map(|s| with_secret(db, s)).collect();
    // Only reading: a database with no check value yet accepts any secret
    // and stores nothing.
    for engine in &engines {
        assert!(ok(engine.check_server_secret(false).await));
    }
    let checks = engines.iter().map(|e| e.check_server_secret(true));
    let answers: Vec<bool> = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .map(ok)
        .collect();
    assert_eq!(answers.iter().filter(|a| **a).count(), 1, "{answers:?}");
    let first = answers.iter().position(|a| *a).unwrap();
    for (i, engine) in engines.iter().enumerate() {
        assert_eq!(ok(engine.check_server_secret(true).await), i == first);
        assert_eq!(ok(engine.check_server_secret(false).await), i == first);
    }
    // The store keeps the check value, not the secret.
    let stored = ok(db
        .engine
        .store()
        .server_secret_check(secrets[first].check_value(), false)
        .await);
    assert_eq!(stored, Some(secrets[first].check_value()));
    let e = expect_invalid(db.engine.check_server_secret(true).await);
    assert!(
        matches!(&e, Error::Invalid { field, .. } if field == "server_secret"),
        "{e:?}"
    );
}

/// `last_used_at` starts empty, is set by the first recorded use, and is
/// written again only once the interval has passed; revoked and unknown
/// keys are not touched. Listing and lookup show it.
pub async fn key_use_is_recorded_at_most_once_per_interval(db: &TestDb) {
    let acme = tenant(db, "acme").await;
    let (info, key) = issue(db, &acme, None, false).await;
    let (other, _) = issue(db, &acme, None, false).await;
    assert_eq!(info.last_used_at, None);
    let who = ok(db.engine.authenticate(&key).await);
    assert!(who.use_is_due(Utc::now()));
    assert_eq!(who.last_used_at, None, "authenticating writes nothing");

    assert!(ok(db.engine.record_key_use(info.id).await));
    let (found, _) = ok(db.engine.find_api_key(info.id).await).unwrap();
    let first = found.last_used_at.expect("last_used_at is set");
    let skew = chrono::Duration::seconds(60);
    assert!(first >= found.created_at && first < Utc::now() + skew);
    assert!(!found.use_is_due(first));
    assert_eq!(
        ok(db.engine.authenticate(&key).await).last_used_at,
        Some(first)
    );

    // Within the interval: nothing is written.
    assert!(!ok(db.engine.record_key_use(info.id).await));
    let (found, _) = ok(db.engine.find_api_key(info.id).await).unwrap();
    assert_eq!(found.last_used_at, Some(first));
    // Once it has passed (an interval of 0 here), it is written again.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert!(ok(db.engine.store().touch_api_key(info.id, 0).await));
    let (found, _) = ok(db.engine.find_api_key(info.id).await).unwrap();
    assert!(found.last_used_at.unwrap() > first, "{found:?}");

    let listed = ok(db.engine.list_api_keys(acme.id).await);
    let by_id = |id| listed.iter().find(|k: &&ApiKeyInfo| k.id == id).unwrap();
    assert_eq!(by_id(info.id).last_used_at, found.last_used_at);
    assert_eq!(by_id(other.id).last_used_at, None);

    ok(db.engine.revoke_api_key(other.id).await);
    assert!(!ok(db.engine.store().touch_api_key(other.id, 0).await));
    let (found, _) = ok(db.engine.find_api_key(other.id).await).unwrap();
    assert_eq!(found.last_used_at, None);
    assert!(!ok(db.engine.record_key_use(Uuid::new_v4()).await));
}

/// A suspended tenant: its valid keys are `TenantSuspended` (403
/// `permission_denied`), and its schedules do not fire, not even one made
/// while it is suspended, while another tenant's do. Resuming it makes its
/// keys work and its schedules fire from the first instant after the
/// resume (the suspended instants are not made up). The default tenant
/// cannot be suspended; an unknown one is `not_found`; suspending twice
/// keeps the first instant, and resuming an active tenant changes nothing.
pub async fn suspended_tenants_authenticate_and_fire_nothing(db: &TestDb) {
    let e = &db.engine;
    let default = ok(e.ensure_tenant(DEFAULT_TENANT).await);
    let acme = tenant(db, "acme").await;
    let beta = tenant(db, "beta").await;
    let (_, acme_key) = issue(db, &acme, None, false).await;
    let every_second = |name: &str| ScheduleSpec::new(name, "* * * * * *", "ticks", "tick");
    let a = ok(e.create_schedule("acme", &every_second("a")).await);
    ok(e.create_schedule("beta", &every_second("b")).await);

    let suspended = ok(e.suspend_tenant(acme.id).await);
    assert_eq!(suspended.tenant, acme);
    assert!(suspended.is_suspended());
    let again = ok(e.suspend_tenant(acme.id).await);
    assert_eq!(
        again.suspended_at, suspended.suspended_at,
        "the first instant stays"
    );
    let refused = expect_code(e.authenticate(&acme_key).await, "permission_denied");
    assert!(matches!(refused, Error::TenantSuspended(..)), "{refused:?}");
    assert!(
        refused.to_string().contains("\"acme\" is suspended"),
        "{refused}"
    );
    assert_eq!(ok(e.get_schedule("acme", a.id).await).next_run_at, None);
    // The engine does not refuse a schedule made meanwhile; it does not fire.
    let late = ok(e.create_schedule("acme", &every_second("late")).await);
    let standing: Vec<(String, bool)> = ok(e.tenant_statuses().await)
        .into_iter()
        .map(|s| (s.tenant.name.clone(), s.is_suspended()))
        .collect();
    assert_eq!(
        standing,
        [
            ("acme".to_owned(), true),
            ("beta".to_owned(), false),
            (DEFAULT_TENANT.to_owned(), false)
        ]
    );
    assert!(ok(e.find_tenant_status("acme").await).is_suspended());

    let ticks = |tenant: &'static str| async move {
        let filter = JobFilter {
            queue: Some("ticks".into()),
            limit: Some(500),
            ..JobFilter::default()
        };
        ok(e.list(tenant, &filter).await).jobs.len()
    };
    for _ in 0..4 {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        ok(e.fire_due_schedules(100, std::time::Duration::ZERO).await);
    }
    assert_eq!(
        ticks("acme").await,
        0,
        "a suspended tenant's schedules fire nothing"
    );
    assert!(ticks("beta").await > 0, "another tenant's fire");

    let resumed_at = Utc::now();
    let resumed = ok(e.resume_tenant(acme.id).await);
    assert_eq!((resumed.tenant, resumed.suspended_at), (acme.clone(), None));
    assert_eq!(ok(e.authenticate(&acme_key).await).tenant, "acme");
    for id in [a.id, late.id] {
        let next = ok(e.get_schedule("acme", id).await).next_run_at;
        assert!(next.is_some_and(|n| n > resumed_at), "{next:?}");
    }
    for _ in 0..3 {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        ok(e.fire_due_schedules(100, std::time::Duration::ZERO).await);
    }
    let runs = ok(e.schedule_runs("acme", a.id).await);
    assert!(!runs.is_empty(), "fires again after the resume");
    assert!(
        runs.iter().all(|r| r.fire_at > resumed_at),
        "no instant of the suspension is made up: {runs:?}"
    );
    assert!(ticks("acme").await > 0);

    expect_invalid(e.suspend_tenant(default.id).await);
    expect_missing(e.suspend_tenant(Uuid::new_v4()).await);
    expect_missing(e.resume_tenant(Uuid::new_v4()).await);
    let before: Vec<_> = ok(e.list_schedules("beta").await);
    let active = ok(e.resume_tenant(beta.id).await);
    assert_eq!((active.tenant, active.suspended_at), (beta, None));
    assert_eq!(
        ok(e.list_schedules("beta").await),
        before,
        "nothing changed"
    );
}
