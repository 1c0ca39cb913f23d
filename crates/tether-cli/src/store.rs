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

/// A database URL with any password replaced by `***`: the one in the
/// user info and any query parameter named like one (`password`,
/// `sslpassword`).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if name.to_ascii_lowercase().ends_with("password") => {
                    format!("{name}=***")
                }
                _ => param.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
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
        assert_eq!(
            redact("postgres://me@db/app?sslmode=require&password=hunter2&sslpassword=x"),
            "postgres://me@db/app?sslmode=require&password=***&sslpassword=***"
        );
        assert_eq!(
            redact("postgres://me:a@b@db?Password=c"),
            "postgres://me:***@db?Password=***"
        );
    }
}
