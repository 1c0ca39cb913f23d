//! The operator's admin key at start-up: `TETHER_ADMIN_KEY` when set (a
//! new value revokes the operator key stored from the previous one), else
//! one generated at the first start, shown once and saved to
//! `<data-dir>/admin.key` (mode 0600) where the CLI finds it.

use std::io::Write;
use std::path::{Path, PathBuf};

use tether_core::{Engine, DEFAULT_TENANT};
use uuid::Uuid;

use crate::data_dir;

/// Name of the key file inside the data directory.
pub const ADMIN_KEY_FILE: &str = "admin.key";

/// What start-up did about the admin key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminKey {
    /// `TETHER_ADMIN_KEY` is an admin key (stored now or earlier).
    FromEnv {
        /// It was revoked (through the API, or by a later
        /// `TETHER_ADMIN_KEY`); it authenticates nothing.
        revoked: bool,
        /// The operator keys of earlier `TETHER_ADMIN_KEY` values that were
        /// revoked now, because this one replaced them.
        rotated: Vec<Uuid>,
    },
    /// First start: a new key, to show once; it was saved to `path`.
    Generated {
        /// The key.
        key: String,
        /// Where it was saved.
        path: PathBuf,
    },
    /// The default tenant already has an admin key; nothing was created.
    Existing {
        /// The key file, when there is one.
        path: Option<PathBuf>,
    },
}

/// Why the admin key could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AdminKeyError {
    /// The store refused (e.g. `TETHER_ADMIN_KEY` too short) or failed.
    #[error("{0}")]
    Store(#[from] tether_core::Error),
    /// The key file could not be written.
    #[error("cannot write the admin key to {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Sets up the admin key of the default tenant (see the module docs).
pub async fn bootstrap(
    engine: &Engine,
    env_key: Option<&str>,
    data_dir: &Path,
) -> Result<AdminKey, AdminKeyError> {
    if let Some(key) = env_key {
        let setup = engine.ensure_operator_admin_key(key).await?;
        return Ok(AdminKey::FromEnv {
            revoked: setup.key.is_revoked(),
            rotated: setup.revoked,
        });
    }
    let tenant = engine.ensure_tenant(DEFAULT_TENANT).await?;
    let path = data_dir.join(ADMIN_KEY_FILE);
    let keys = engine.list_api_keys(tenant.id).await?;
    if keys.iter().any(|k| k.admin && !k.is_revoked()) {
        return Ok(AdminKey::Existing {
            path: path.exists().then_some(path),
        });
    }
    let (_, key) = engine
        .issue_api_key(tenant.id, Some("admin (generated at first start)"), true)
        .await?;
    write_key_file(&path, &key).map_err(|source| AdminKeyError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(AdminKey::Generated { key, path })
}

/// Writes the key readable by its owner only, replacing any older file
/// in one step (a stale file from a wiped database must not linger).
fn write_key_file(path: &Path, key: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        data_dir::ensure_private_dir(dir)?;
    }
    let tmp = path.with_extension("key.tmp");
    let mut file = data_dir::create_private_file(&tmp)?;
    file.write_all(key.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Reads a key file written by [`bootstrap`] (for the CLI and tests).
pub fn read_key_file(data_dir: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(data_dir.join(ADMIN_KEY_FILE))?
        .trim()
        .to_owned())
}
