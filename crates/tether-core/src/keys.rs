//! Tenants and API keys (invariant 13: keys are stored hashed, compared in
//! constant time, and can be revoked).
//!
//! An issued key reads `tth_<key id>_<secret>`: the key id is a random UUID
//! v4 as 32 lowercase hex digits (the primary key of its row, so a lookup is
//! one index probe and no prefix shared by all keys reveals anything), the
//! secret is 32 random bytes as 64 lowercase hex digits. Only the SHA-256 of
//! the secret is stored; the key itself is shown once, when it is issued.
//! The secret carries 256 bits of entropy, so a plain fast hash is right:
//! nobody can guess it offline from a copied database, a salt or key would
//! add nothing, and a slow KDF would only cap request throughput (one queue service that
//! ran bcrypt on every request managed a few requests per second).
//!
//! An operator-chosen key (`TETHER_ADMIN_KEY`) is as strong as the operator
//! made it, so both its key id and its stored hash are HMAC-SHA-256 under the
//! [`ServerSecret`], which is kept beside the data and never in the
//! database: a copied database alone gives nothing to test guesses of a weak
//! operator key against.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

/// The operator's tenant: the only one whose keys may be admin keys.
pub const DEFAULT_TENANT: &str = "default";

/// The fixed start of every API key.
pub const KEY_PREFIX: &str = "tth_";

/// The name an operator key is stored under.
pub const OPERATOR_KEY_NAME: &str = "TETHER_ADMIN_KEY";

/// Length of the secret part of a key, in hex digits (32 bytes).
const SECRET_HEX_LEN: usize = 64;

/// Length of a whole key: prefix, 32 hex digits of id, `_`, the secret.
pub const KEY_LEN: usize = KEY_PREFIX.len() + 32 + 1 + SECRET_HEX_LEN;
/// Lengths accepted for an operator-chosen key ([`ApiKeySecret::operator`]).
pub const OPERATOR_KEY_LEN: std::ops::RangeInclusive<usize> = 16..=256;

/// `last_used_at` is written at most this often per key (milliseconds), so
/// that authenticating is not a database write per request.
pub const KEY_USE_INTERVAL_MS: i64 = 60_000;

/// HMAC labels: each use of the server secret gets its own, so no output of
/// one use is ever an output of another.
const OPERATOR_ID_LABEL: &[u8] = b"tether operator key id\0";
const OPERATOR_HASH_LABEL: &[u8] = b"tether operator key hash\0";
const SECRET_CHECK_LABEL: &[u8] = b"tether server secret check\0";

/// A tenant: the wall around a set of jobs, queues, schedules and keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its id.
    pub id: Uuid,
    /// Its unique name (what jobs are filed under).
    pub name: String,
    /// When it was created (database clock).
    pub created_at: DateTime<Utc>,
}

/// A tenant and its standing: whether an admin suspended it. While it is
/// suspended its keys authenticate nothing, its schedules do not fire, and
/// an admin acting for it may only read (see `docs/API.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStatus {
    /// The tenant.
    #[serde(flatten)]
    pub tenant: Tenant,
    /// When it was suspended (database clock); `None` while it is active.
    pub suspended_at: Option<DateTime<Utc>>,
}

impl TenantStatus {
    /// Whether it is suspended.
    pub fn is_suspended(&self) -> bool {
        self.suspended_at.is_some()
    }
}

/// A stored key as authentication reads it: its info, the hash of its
/// secret, and whether its tenant is suspended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// The key.
    pub info: ApiKeyInfo,
    /// The SHA-256 of its secret (an HMAC for operator keys).
    pub hash: [u8; 32],
    /// When its tenant was suspended; `None` while the tenant is active.
    pub tenant_suspended_at: Option<DateTime<Utc>>,
}

/// What is known about an API key, without its secret or hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyInfo {
    /// The key id (also the middle part of the key string).
    pub id: Uuid,
    /// The tenant the key acts for.
    pub tenant_id: Uuid,
    /// That tenant's name.
    pub tenant: String,
    /// An optional label for humans.
    pub name: Option<String>,
    /// Whether the key has admin scope (only in [`DEFAULT_TENANT`]).
    pub admin: bool,
    /// When it was issued (database clock).
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request, to within
    /// [`KEY_USE_INTERVAL_MS`] (database clock); `None` if never.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked; a revoked key authenticates nothing.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl ApiKeyInfo {
    /// Whether the key has been revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// Whether its `last_used_at` is old enough to be worth writing again
    /// at `now`. Only a filter to skip needless writes: the store's
    /// conditional update decides, on the database clock.
    pub fn use_is_due(&self, now: DateTime<Utc>) -> bool {
        self.last_used_at.is_none_or(|last| {
            now.signed_duration_since(last).num_milliseconds() >= KEY_USE_INTERVAL_MS
        })
    }
}

/// What storing an operator key at start did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorKeySetup {
    /// The operator key, stored now or earlier. When it was revoked, it
    /// stays revoked and nothing else changed.
    pub key: ApiKeyInfo,
    /// The other operator keys (from an earlier `TETHER_ADMIN_KEY`) that
    /// were revoked now.
    pub revoked: Vec<Uuid>,
}

/// The server secret: 32 random bytes, the HMAC key of operator keys. It is
/// kept beside the data (a file, or `TETHER_SERVER_SECRET`), never in the
/// database. Its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerSecret([u8; 32]);

impl std::fmt::Debug for ServerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerSecret(<redacted>)")
    }
}

impl ServerSecret {
    /// A new random secret.
    pub fn generate() -> ServerSecret {
        let mut bytes = [0u8; 32];
        // ThreadRng is a CSPRNG seeded from the operating system.
        rand::rng().fill_bytes(&mut bytes);
        ServerSecret(bytes)
    }

    /// Reads a secret written as 64 hex digits (surrounding whitespace
    /// ignored), as [`ServerSecret::to_hex`] writes it or `openssl rand
    /// -hex 32` prints it.
    pub fn from_hex(text: &str) -> Result<ServerSecret, String> {
        let text = text.trim();
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "must be 64 hex digits (32 bytes), got {} characters",
                text.len()
            ));
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
                .map_err(|e| format!("must be 64 hex digits: {e}"))?;
        }
        Ok(ServerSecret(bytes))
    }

    /// The secret as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// A value derived from the secret that reveals nothing of it: stored in
    /// the database at the first start, so a replica given another secret
    /// can be refused before it stores keys the others cannot verify.
    pub fn check_value(&self) -> [u8; 32] {
        self.mac(SECRET_CHECK_LABEL, b"")
    }

    /// HMAC-SHA-256 of `label` then `data` under the secret.
    fn mac(&self, label: &[u8], data: &[u8]) -> [u8; 32] {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(label);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }
}

/// A presented key, reduced to what its stored row must hold: the hash of
/// its secret. Its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeySecret {
    hash: [u8; 32],
}

impl std::fmt::Debug for ApiKeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKeySecret(<redacted>)")
    }
}

impl ApiKeySecret {
    /// Mints a new key: a fresh random key id, the full key string (to show
    /// once) and the SHA-256 of its secret (to store).
    pub fn generate() -> (Uuid, String, [u8; 32]) {
        let id = Uuid::new_v4();
        let mut bytes = [0u8; 32];
        // ThreadRng is a CSPRNG seeded from the operating system.
        rand::rng().fill_bytes(&mut bytes);
        let secret = to_hex(&bytes);
        let key = format!("{KEY_PREFIX}{}_{secret}", id.simple());
        (id, key, sha256(&secret))
    }

    /// Splits a key string into its id and secret: an issued key (prefix,
    /// 32 then 64 lowercase hex digits), or else an operator-chosen key (see
    /// [`ApiKeySecret::operator`]), which needs the server secret; `None`
    /// when it is neither.
    pub fn parse(key: &str, server: Option<&ServerSecret>) -> Option<(Uuid, ApiKeySecret)> {
        Self::parse_issued(key).or_else(|| Self::operator(key, server?).ok())
    }

    /// An operator-chosen key, such as `TETHER_ADMIN_KEY`: any string of
    /// [`OPERATOR_KEY_LEN`] printable ASCII characters not starting like an
    /// issued key. It has no id inside, so its id is derived from it (the
    /// first 16 bytes of an HMAC of the key under the server secret, a UUID
    /// v8), and the stored hash is another HMAC of it (under its own
    /// label). Its strength is the operator's choice, hence the minimum
    /// length and the keyed hash.
    pub fn operator(key: &str, server: &ServerSecret) -> Result<(Uuid, ApiKeySecret), String> {
        if !OPERATOR_KEY_LEN.contains(&key.len()) {
            return Err(format!(
                "must be {} to {} characters long, got {}",
                OPERATOR_KEY_LEN.start(),
                OPERATOR_KEY_LEN.end(),
                key.len()
            ));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("must be printable ASCII without spaces".to_owned());
        }
        if key.starts_with(KEY_PREFIX) {
            return Err(format!(
                "must not start with {KEY_PREFIX:?}, which marks issued keys"
            ));
        }
        let digest = server.mac(OPERATOR_ID_LABEL, key.as_bytes());
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        let id = uuid::Builder::from_custom_bytes(id).into_uuid();
        let hash = server.mac(OPERATOR_HASH_LABEL, key.as_bytes());
        Ok((id, ApiKeySecret { hash }))
    }

    fn parse_issued(key: &str) -> Option<(Uuid, ApiKeySecret)> {
        if key.len() != KEY_LEN {
            return None;
        }
        let rest = key.strip_prefix(KEY_PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        if id.len() != 32 || !is_lower_hex(id) || !is_lower_hex(secret) {
            return None;
        }
        if secret.len() != SECRET_HEX_LEN {
            return None;
        }
        let id = Uuid::try_parse(id).ok()?;
        Some((
            id,
            ApiKeySecret {
                hash: sha256(secret),
            },
        ))
    }

    /// What the key's row must hold: for an issued key the SHA-256 of its
    /// secret (of its hex text as it appears in the key), for an operator
    /// key the HMAC of the whole string. The only thing about a key that is
    /// stored.
    pub fn hash(&self) -> [u8; 32] {
        self.hash
    }

    /// Whether this secret matches a stored hash, compared in constant time.
    pub fn verify(&self, stored_hash: &[u8; 32]) -> bool {
        self.hash.ct_eq(stored_hash).into()
    }
}

fn sha256(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> ServerSecret {
        ServerSecret::from_hex(&"5a".repeat(32)).unwrap()
    }

    fn hmac(secret: &ServerSecret, label: &[u8], data: &[u8]) -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret.0).unwrap();
        mac.update(label);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    #[test]
    fn generated_keys_parse_back_and_verify() {
        let (id, key, hash) = ApiKeySecret::generate();
        assert_eq!(key.len(), KEY_LEN);
        assert!(key.starts_with("tth_"));
        assert_eq!(id.get_version_num(), 4);
        for server in [None, Some(&server())] {
            let (parsed_id, secret) = ApiKeySecret::parse(&key, server).expect("parses");
            assert_eq!(parsed_id, id);
            assert_eq!(secret.hash(), hash);
            assert!(secret.verify(&hash));
        }
        // The hash is SHA-256 of the secret text, not the key, not the secret.
        let secret_text = key.rsplit('_').next().unwrap();
        assert_eq!(secret_text.len(), 64);
        let expected: [u8; 32] = Sha256::digest(secret_text.as_bytes()).into();
        assert_eq!(hash, expected);
        assert_ne!(&hash[..], secret_text.as_bytes());
    }

    #[test]
    fn keys_are_distinct() {
        let (id1, key1, hash1) = ApiKeySecret::generate();
        let (id2, key2, hash2) = ApiKeySecret::generate();
        assert_ne!(id1, id2);
        assert_ne!(key1, key2);
        assert_ne!(hash1, hash2);
        assert_ne!(key1.split('_').nth(2), key2.split('_').nth(2));
    }

    #[test]
    fn wrong_secret_does_not_verify() {
        let (_, key, hash) = ApiKeySecret::generate();
        let (_, other, _) = ApiKeySecret::generate();
        let (_, other) = ApiKeySecret::parse(&other, None).unwrap();
        assert!(!other.verify(&hash));
        let (_, secret) = ApiKeySecret::parse(&key, None).unwrap();
        let mut flipped = hash;
        flipped[31] ^= 1;
        assert!(!secret.verify(&flipped));
        assert!(!secret.verify(&[0; 32]));
    }

    #[test]
    fn malformed_keys_do_not_parse() {
        let (id, key, _) = ApiKeySecret::generate();
        let secret = key.rsplit('_').next().unwrap();
        let id_hex = id.simple().to_string();
        let bad = [
            String::new(),
            "tth_".to_owned(),
            "garbage".to_owned(),
            key[..key.len() - 1].to_owned(),
            format!("{key}0"),
            format!("ttx_{id_hex}_{secret}"),
            format!("tth_{id_hex}-{secret}"),
            format!("tth_{}_{secret}", id.hyphenated()),
            format!("tth_{}_{secret}", id_hex.to_uppercase()),
            format!("tth_{id_hex}_{}", secret.to_uppercase()),
            format!("tth_{id_hex}_{}", &secret[..63]),
            format!("tth_{id_hex}_{}g", &secret[..63]),
            format!("tth_{}_{secret}0", &id_hex[..31]),
            format!(" {key}"),
            format!("Bearer {key}"),
            format!("tth_{id_hex}_{}é", &secret[..62]),
        ];
        let server = server();
        for k in &bad {
            assert!(ApiKeySecret::parse_issued(k).is_none(), "{k:?} parsed");
            // Without a server secret, nothing else parses.
            assert!(ApiKeySecret::parse(k, None).is_none(), "{k:?} parsed");
            // Whatever else parses is an operator key: its id is derived from
            // the whole string, never taken from inside it.
            if let Some((other, _)) = ApiKeySecret::parse(k, Some(&server)) {
                assert_ne!(other, id, "{k:?}");
            }
        }
        assert!(ApiKeySecret::parse(&key, None).is_some());
    }

    #[test]
    fn debug_hides_the_secrets() {
        let (_, key, hash) = ApiKeySecret::generate();
        let (_, secret) = ApiKeySecret::parse(&key, None).unwrap();
        let shown = format!("{secret:?}");
        assert!(!shown.contains(key.rsplit('_').next().unwrap()));
        assert!(!shown.contains(&to_hex(&hash)));
        let server = ServerSecret::generate();
        let shown = format!("{server:?}");
        assert!(!shown.contains(&server.to_hex()), "{shown}");
    }

    #[test]
    fn hex_encoding() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }

    #[test]
    fn server_secrets_round_trip_as_hex_and_bad_ones_are_refused() {
        let secret = ServerSecret::generate();
        let hex = secret.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(ServerSecret::from_hex(&hex).unwrap(), secret);
        assert_eq!(
            ServerSecret::from_hex(&format!(" {hex}\n")).unwrap(),
            secret
        );
        assert_eq!(ServerSecret::from_hex(&hex.to_uppercase()).unwrap(), secret);
        assert_ne!(ServerSecret::generate(), secret);
        for bad in [
            String::new(),
            hex[..63].to_owned(),
            format!("{hex}0"),
            format!("{}g", &hex[..63]),
            format!("+{}", &hex[..63]),
            "correct horse battery staple".to_owned(),
        ] {
            assert!(ServerSecret::from_hex(&bad).is_err(), "{bad:?}");
        }
        let check = secret.check_value();
        assert_eq!(check, hmac(&secret, SECRET_CHECK_LABEL, b""));
        assert_ne!(check, ServerSecret::generate().check_value());
    }

    #[test]
    fn operator_keys_are_keyed_by_the_server_secret() {
        let key = "correct-horse-battery-staple-42";
        let server = server();
        let (id, secret) = ApiKeySecret::parse(key, Some(&server)).expect("an operator key parses");
        let (again, _) = ApiKeySecret::operator(key, &server).unwrap();
        assert_eq!(id, again, "the id is derived from the key and the secret");
        assert_eq!(id.get_version_num(), 8);
        // Both the id and the stored hash are HMACs under the server secret.
        let id_mac = hmac(&server, OPERATOR_ID_LABEL, key.as_bytes());
        assert_eq!(id.as_bytes()[..6], id_mac[..6]);
        let hash = hmac(&server, OPERATOR_HASH_LABEL, key.as_bytes());
        assert_eq!(secret.hash(), hash);
        assert!(secret.verify(&hash));
        // Nothing a copied database holds can be recomputed from the key
        // alone: not the plain SHA-256 the hash once was, nor the old id.
        let plain: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        assert!(!secret.verify(&plain));
        let mut old_id = Sha256::new();
        old_id.update(OPERATOR_ID_LABEL);
        old_id.update(key.as_bytes());
        assert_ne!(id.as_bytes()[..6], old_id.finalize()[..6]);
        // Another secret gives another id and hash.
        let (other_id, other) = ApiKeySecret::operator(key, &ServerSecret::generate()).unwrap();
        assert_ne!(other_id, id);
        assert!(!other.verify(&hash));
        let (next, _) = ApiKeySecret::operator("correct-horse-battery-staple-43", &server).unwrap();
        assert_ne!(id, next);
        // Without the server secret an operator key names no key at all.
        assert!(ApiKeySecret::parse(key, None).is_none());
    }

    #[test]
    fn weak_or_odd_operator_keys_are_refused() {
        let server = server();
        let operator = |k: &str| ApiKeySecret::operator(k, &server);
        assert!(operator("short").is_err());
        assert!(operator(&"x".repeat(257)).is_err());
        assert!(operator("has a space in the middle").is_err());
        assert!(operator("tth_looks_like_an_issued_key").is_err());
        assert!(ApiKeySecret::parse("tth_looks_like_an_issued_key", Some(&server)).is_none());
        assert!(operator(&"k".repeat(16)).is_ok());
    }

    #[test]
    fn use_is_due_once_a_minute() {
        let now = Utc::now();
        let (id, _, _) = ApiKeySecret::generate();
        let mut info = ApiKeyInfo {
            id,
            tenant_id: Uuid::new_v4(),
            tenant: "t".into(),
            name: None,
            admin: false,
            created_at: now,
            last_used_at: None,
            revoked_at: None,
        };
        assert!(info.use_is_due(now));
        info.last_used_at = Some(now - chrono::Duration::seconds(59));
        assert!(!info.use_is_due(now));
        info.last_used_at = Some(now - chrono::Duration::seconds(60));
        assert!(info.use_is_due(now));
    }
}
