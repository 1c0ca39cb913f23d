//! The data directory is private: the SQLite file holds every job's payload,
//! and beside it lie `admin.key` and `server.secret`. The directory is made
//! (or tightened to) mode 0700, the files in it 0600, whatever the umask.
//! On other platforms than Unix this module changes nothing.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::admin_key::ADMIN_KEY_FILE;
use tether::Database;

/// Mode of the data directory (owner only).
#[cfg(unix)]
const DIR_MODE: u32 = 0o700;
/// Mode of every file tether writes there (owner read and write only).
#[cfg(unix)]
const FILE_MODE: u32 = 0o600;

/// Makes what a command keeps on disk private before it opens the database:
/// the data directory when it exists (else it is made when something is
/// written to it), the SQLite file's directory when it is the data directory
/// or is missing (an existing other directory, say `/tmp`, is left alone),
/// and the SQLite file, its `-wal` and `-shm` files and `admin.key` when
/// they exist. (A new SQLite file is made 0600 by the store, and SQLite
/// gives its `-wal` and `-shm` files the database file's mode.) Returns
/// what was tightened.
pub fn secure(data_dir: &Path, database: &Database) -> std::io::Result<Vec<PathBuf>> {
    let mut tightened = Vec::new();
    if data_dir.is_dir() && ensure_private_dir(data_dir)? {
        tightened.push(data_dir.to_owned());
    }
    if let Database::Sqlite(path) = database {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if (dir == data_dir || !dir.exists()) && ensure_private_dir(dir)? {
                tightened.push(dir.to_owned());
            }
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.clone().into_os_string();
            file.push(suffix);
            let file = PathBuf::from(file);
            if tighten_file(&file)? {
                tightened.push(file);
            }
        }
    }
    let key = data_dir.join(ADMIN_KEY_FILE);
    if tighten_file(&key)? {
        tightened.push(key);
    }
    Ok(tightened)
}

/// Creates `dir` (and missing parents) with mode 0700, or takes an existing
/// one's group and other permissions away. Returns whether an existing
/// directory was tightened.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<bool> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(DIR_MODE);
    }
    let existed = dir.is_dir();
    builder.create(dir)?;
    if existed {
        tighten(dir, 0o077)
    } else {
        Ok(false)
    }
}

/// Takes group and other permissions away from `path` if it exists and has
/// any; returns whether it changed anything.
pub fn tighten_file(path: &Path) -> std::io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => tighten(path, 0o077),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Clears the `mask` bits of `path`'s mode; whether any were set.
#[cfg(unix)]
fn tighten(path: &Path, mask: u32) -> std::io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & mask == 0 {
        return Ok(false);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !mask))?;
    Ok(true)
}

#[cfg(not(unix))]
fn tighten(_: &Path, _: u32) -> std::io::Result<bool> {
    Ok(false)
}

/// Opens `path` for writing as a new or truncated file readable by its
/// owner only (also when it existed with a wider mode).
pub fn create_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE);
    }
    let file = options.open(path)?;
    #[cfg(unix)]
    {
        // The mode above only applies to a new file.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(file)
}

/// Writes `text` to a private temporary file beside `path` and syncs it;
/// returns the temporary file's path, for the caller to move into place.
pub fn write_private_temp(path: &Path, text: &str) -> std::io::Result<PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let write = || {
        let mut file = create_private_file(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()
    };
    match write() {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn directories_and_files_are_made_and_tightened_private() {
        let base = std::env::temp_dir().join(format!(
            "tether-data-dir-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let dir = base.join("a").join("b");
        assert!(!ensure_private_dir(&dir).unwrap(), "a new directory");
        assert_eq!(mode(&dir), 0o700);
        assert!(!ensure_private_dir(&dir).unwrap(), "already private");

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(ensure_private_dir(&dir).unwrap());
        assert_eq!(mode(&dir), 0o700);

        let file = dir.join("f");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(tighten_file(&file).unwrap());
        assert_eq!(mode(&file), 0o600);
        assert!(!tighten_file(&file).unwrap());
        assert!(!tighten_file(&dir.join("missing")).unwrap());

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        drop(create_private_file(&file).unwrap());
        assert_eq!(mode(&file), 0o600);
        let tmp = write_private_temp(&file, "secret").unwrap();
        assert_eq!(mode(&tmp), 0o600);
        assert_eq!(std::fs::read_to_string(&tmp).unwrap(), "secret");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
