//! The server secret at start-up: `TETHER_SERVER_SECRET` when set (64 hex
//! digits), else `<data-dir>/server.secret`, made at the first start (32
//! random bytes as hex, mode 0600, written in one step and never replaced).
//!
//! It is the HMAC key of operator keys (`TETHER_ADMIN_KEY`), kept out of
//! the database so that a copy of the database alone does not let a weak
//! operator key be guessed offline. Every process serving one database must
//! use the same secret: PostgreSQL replicas on several machines share it
//! through `TETHER_SERVER_SECRET` (or a copy of the file). A process with
//! another secret is refused at start (see `serve`).

use std::path::{Path, PathBuf};

use tether_core::ServerSecret;

use crate::data_dir;

/// Name of the secret file inside the data directory.
pub const SERVER_SECRET_FILE: &str = "server.secret";

/// Where the secret came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `TETHER_SERVER_SECRET`.
    Env,
    /// The file, read or made now.
    File(PathBuf),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Env => f.write_str("TETHER_SERVER_SECRET"),
            SecretSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Why the server secret could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ServerSecretError {
    /// `TETHER_SERVER_SECRET` or the file does not hold a secret.
    #[error("{source_name} is not a server secret: {why}")]
    Invalid {
        /// Where it came from.
        source_name: SecretSource,
        /// What is wrong with it.
        why: String,
    },
    /// The file could not be read or written.
    #[error(
        "cannot use the server secret file {path}: {source} \
         (or set TETHER_SERVER_SECRET to 64 hex digits)"
    )]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The server secret: from `env_secret` (the value of
/// `TETHER_SERVER_SECRET`) when given, else from the file under `data_dir`,
/// which is made if missing. An existing file with a wider mode than 0600
/// is tightened.
pub fn load(
    env_secret: Option<&str>,
    data_dir: &Path,
) -> Result<(ServerSecret, SecretSource), ServerSecretError> {
    if let Some(text) = env_secret.filter(|s| !s.trim().is_empty()) {
        let secret = ServerSecret::from_hex(text).map_err(|why| ServerSecretError::Invalid {
            source_name: SecretSource::Env,
            why,
        })?;
        return Ok((secret, SecretSource::Env));
    }
    let path = data_dir.join(SERVER_SECRET_FILE);
    let secret = match read(&path)? {
        Some(secret) => secret,
        None => create(data_dir, &path)?,
    };
    Ok((secret, SecretSource::File(path)))
}

fn io_error(path: &Path, source: std::io::Error) -> ServerSecretError {
    ServerSecretError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The secret in the file at `path` (tightened to 0600 if it was wider);
/// `None` when there is no file.
fn read(path: &Path) -> Result<Option<ServerSecret>, ServerSecretError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    data_dir::tighten_file(path).map_err(|e| io_error(path, e))?;
    ServerSecret::from_hex(&text)
        .map(Some)
        .map_err(|why| ServerSecretError::Invalid {
            source_name: SecretSource::File(path.to_owned()),
            why,
        })
}

/// Makes a new secret file at `path` (and a private `data_dir` for it),
/// unless another process made one at the same moment: then that one is
/// read and used, so processes starting together on one data directory
/// agree. The file appears whole or not at all (written aside, then linked
/// into place, which never replaces a file).
fn create(data_dir: &Path, path: &Path) -> Result<ServerSecret, ServerSecretError> {
    data_dir::ensure_private_dir(data_dir).map_err(|e| io_error(path, e))?;
    let secret = ServerSecret::generate();
    let tmp = data_dir::write_private_temp(path, &format!("{}\n", secret.to_hex()))
        .map_err(|e| io_error(path, e))?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(secret),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read(path)?.ok_or_else(|| io_error(path, std::io::ErrorKind::NotFound.into()))
        }
        Err(e) => Err(io_error(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> PathBuf {
        std::env::temp_dir().join(format!(
            "tether-secret-test-{}",
            uuid::Uuid::new_v4().simple()
        ))
    }

    #[test]
    fn the_file_is_made_once_and_read_back() {
        let dir = temp_dir();
        let (made, source) = load(None, &dir).unwrap();
        let path = dir.join(SERVER_SECRET_FILE);
        assert_eq!(source, SecretSource::File(path.clone()));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", made.to_hex())
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(&dir), 0o700);
            // A file made wider by hand is tightened when read.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let (again, _) = load(None, &dir).unwrap();
            assert_eq!(again, made);
            assert_eq!(mode(&path), 0o600);
        }
        let (again, _) = load(Some(""), &dir).unwrap();
        assert_eq!(again, made, "an empty TETHER_SERVER_SECRET is unset");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(SERVER_SECRET_FILE)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn processes_starting_together_agree_on_one_file() {
        let dir = temp_dir();
        let loads: Vec<_> = (0..8)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || load(None, &dir).unwrap().0)
            })
            .collect();
        let secrets: Vec<ServerSecret> = loads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(secrets.iter().all(|s| *s == secrets[0]));
        assert_eq!(load(None, &dir).unwrap().0, secrets[0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_environment_wins_and_bad_secrets_are_refused() {
        let dir = temp_dir();
        let hex = "ab".repeat(32);
        let (secret, source) = load(Some(&hex), &dir).unwrap();
        assert_eq!(source, SecretSource::Env);
        assert_eq!(secret.to_hex(), hex);
        assert!(
            !dir.exists(),
            "nothing is written with TETHER_SERVER_SECRET"
        );

        let e = load(Some("too short"), &dir).unwrap_err();
        assert!(e.to_string().contains("TETHER_SERVER_SECRET"), "{e}");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SERVER_SECRET_FILE), "not hex\n").unwrap();
        let e = load(None, &dir).unwrap_err();
        assert!(e.to_string().contains(SERVER_SECRET_FILE), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
