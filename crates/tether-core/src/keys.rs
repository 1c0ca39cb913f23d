//! Tenants and API keys (invariant 13: keys are stored hashed, compared in
//! constant time, and can be revoked).
//!
//! A key reads `tth_<key id>_<secret>`: the key id is a random UUID v4 as 32
//! lowercase hex digits (the primary key of its row, so a lookup is one index
//! probe and no prefix shared by all keys reveals anything), the secret is 32
//! random bytes as 64 lowercase hex digits. Only the SHA-256 of the secret is
//! stored; the key itself is shown once, when it is issued. The secret carries
//! 256 bits of entropy, so a fast hash is right (a slow KDF would only cap
//! request throughput; see FIELD-NOTES).

use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

/// The operator's tenant: the only one whose keys may be admin keys.
pub const DEFAULT_TENANT: &str = "default";

/// The fixed start of every API key.
pub const KEY_PREFIX: &str = "tth_";

/// Length of the secret part of a key, in hex digits (32 bytes).
const SECRET_HEX_LEN: usize = 64;

/// Length of a whole key: prefix, 32 hex digits of id, `_`, the secret.
pub const KEY_LEN: usize = KEY_PREFIX.len() + 32 + 1 + SECRET_HEX_LEN;
/// Lengths accepted for an operator-chosen key ([`ApiKeySecret::operator`]).
pub const OPERATOR_KEY_LEN: std::ops::RangeInclusive<usize> = 16..=256;

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
    /// When it was revoked; a revoked key authenticates nothing.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl ApiKeyInfo {
    /// Whether the key has been revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }
}

/// The secret part of an API key. Its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeySecret(String);

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
        let secret = ApiKeySecret(to_hex(&bytes));
        let key = format!("{KEY_PREFIX}{}_{}", id.simple(), secret.0);
        (id, key, secret.hash())
    }

    /// Splits a key string into its id and secret: an issued key (prefix,
    /// 32 then 64 lowercase hex digits), or else an operator-chosen key (see
    /// [`ApiKeySecret::operator`]); `None` when it is neither.
    pub fn parse(key: &str) -> Option<(Uuid, ApiKeySecret)> {
        Self::parse_issued(key).or_else(|| Self::operator(key).ok())
    }

    /// An operator-chosen key, such as `TETHER_ADMIN_KEY`: any string of
    /// [`OPERATOR_KEY_LEN`] printable ASCII characters not starting like an
    /// issued key. It has no id inside, so its id is derived from it (the
    /// first 16 bytes of a SHA-256 of the key under a fixed label, a UUID
    /// v8) and its "secret" is the whole string, hashed like any secret.
    /// Its strength is the operator's choice, hence the minimum length.
    pub fn operator(key: &str) -> Result<(Uuid, ApiKeySecret), String> {
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
        let mut label = Sha256::new();
        label.update(b"tether operator key id\0");
        label.update(key.as_bytes());
        let digest = label.finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        let id = uuid::Builder::from_custom_bytes(id).into_uuid();
        Ok((id, ApiKeySecret(key.to_owned())))
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
        Some((id, ApiKeySecret(secret.to_owned())))
    }

    /// The SHA-256 of the secret (of its hex text as it appears in the key):
    /// the only thing about a key that is stored.
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// Whether this secret matches a stored hash, compared in constant time.
    pub fn verify(&self, stored_hash: &[u8; 32]) -> bool {
        self.hash().ct_eq(stored_hash).into()
    }
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

    #[test]
    fn generated_keys_parse_back_and_verify() {
        let (id, key, hash) = ApiKeySecret::generate();
        assert_eq!(key.len(), KEY_LEN);
        assert!(key.starts_with("tth_"));
        assert_eq!(id.get_version_num(), 4);
        let (parsed_id, secret) = ApiKeySecret::parse(&key).expect("parses");
        assert_eq!(parsed_id, id);
        assert_eq!(secret.hash(), hash);
        assert!(secret.verify(&hash));
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
        let (_, other) = ApiKeySecret::parse(&other).unwrap();
        assert!(!other.verify(&hash));
        let (_, secret) = ApiKeySecret::parse(&key).unwrap();
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
        for k in &bad {
            assert!(ApiKeySecret::parse_issued(k).is_none(), "{k:?} parsed");
            // Whatever else parses is an operator key: its id is derived from
            // the whole string, never taken from inside it.
            if let Some((other, _)) = ApiKeySecret::parse(k) {
                assert_ne!(other, id, "{k:?}");
            }
        }
        assert!(ApiKeySecret::parse(&key).is_some());
    }

    #[test]
    fn debug_hides_the_secret() {
        let (_, key, _) = ApiKeySecret::generate();
        let (_, secret) = ApiKeySecret::parse(&key).unwrap();
        let shown = format!("{secret:?}");
        assert!(!shown.contains(key.rsplit('_').next().unwrap()));
    }

    #[test]
    fn hex_encoding() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }

    #[test]
    fn operator_keys_derive_a_stable_id_and_verify() {
        let key = "correct-horse-battery-staple-42";
        let (id, secret) = ApiKeySecret::parse(key).expect("an operator key parses");
        let (again, _) = ApiKeySecret::operator(key).unwrap();
        assert_eq!(id, again, "the id is derived from the key alone");
        assert_eq!(id.get_version_num(), 8);
        let hash: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        assert!(secret.verify(&hash));
        let (other, _) = ApiKeySecret::operator("correct-horse-battery-staple-43").unwrap();
        assert_ne!(id, other);
    }

    #[test]
    fn weak_or_odd_operator_keys_are_refused() {
        assert!(ApiKeySecret::operator("short").is_err());
        assert!(ApiKeySecret::operator(&"x".repeat(257)).is_err());
        assert!(ApiKeySecret::operator("has a space in the middle").is_err());
        assert!(ApiKeySecret::operator("tth_looks_like_an_issued_key").is_err());
        assert!(ApiKeySecret::parse("tth_looks_like_an_issued_key").is_none());
        assert!(ApiKeySecret::operator(&"k".repeat(16)).is_ok());
    }
}
