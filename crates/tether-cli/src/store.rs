//! Where `tether serve` and `tether migrate` keep their data.

use std::path::{Path, PathBuf};

/// The database a command uses: PostgreSQL when a URL is given, else the
/// SQLite file `tether.db` under the data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
    /// The SQLite file.
    Sqlite(PathBuf),
}

/// Name of the SQLite file inside the data directory.
pub const SQLITE_FILE: &str = "tether.db";

impl Database {
    /// Chooses the database from the command line.
    pub fn choose(database_url: Option<&str>, data_dir: &Path) -> Result<Database, String> {
        match database_url.map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Database::Postgres(url.to_owned()))
            }
            Some(url) => match url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
            {
                Some(path) if !path.is_empty() => Ok(Database::Sqlite(PathBuf::from(path))),
                _ => Err(format!(
                    "--database-url must start with postgres://, postgresql:// or sqlite:, got {:?}",
                    redact(url)
                )),
            },
            None => Ok(Database::Sqlite(data_dir.join(SQLITE_FILE))),
        }
    }

    /// The URL `tether::Client::connect` takes.
    pub fn url(&self) -> String {
        match self {
            Database::Postgres(url) => url.clone(),
            Database::Sqlite(path) => format!("sqlite://{}", path.display()),
        }
    }

    /// For humans and logs: the backend and where, without a password.
    pub fn describe(&self) -> String {
        match self {
            Database::Postgres(url) => format!("postgres ({})", redact(url)),
            Database::Sqlite(path) => format!("sqlite ({})", path.display()),
        }
    }
}

/// A database URL with any password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice() {
        let dir = Path::new("./tether-data");
        assert_eq!(
            Database::choose(None, dir),
            Ok(Database::Sqlite(dir.join("tether.db")))
        );
        assert_eq!(
            Database::choose(Some(""), dir),
            Ok(Database::Sqlite(dir.join("tether.db")))
        );
        assert_eq!(
            Database::choose(Some("postgres://u@h/db"), dir),
            Ok(Database::Postgres("postgres://u@h/db".into()))
        );
        assert_eq!(
            Database::choose(Some("sqlite:///tmp/x.db"), dir),
            Ok(Database::Sqlite("/tmp/x.db".into()))
        );
        assert!(Database::choose(Some("mysql://u:secret@h/db"), dir)
            .unwrap_err()
            .contains("u:***@h"));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://me:hunter2@db:5432/app?sslmode=require"),
            "postgres://me:***@db:5432/app?sslmode=require"
        );
        assert_eq!(redact("postgres://me@db/app"), "postgres://me@db/app");
        assert_eq!(redact("postgres://db/app"), "postgres://db/app");
    }
}
