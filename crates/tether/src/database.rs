//! Which database a URL names: the one parser of database URLs, shared by
//! [`Client::connect`](crate::Client::connect) and `tether serve`.

use std::path::PathBuf;

use tether_core::{Error, Result};

/// A database tether can keep its jobs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
    /// A SQLite file.
    Sqlite(PathBuf),
}

impl Database {
    /// The database a URL names by its scheme: `postgres://…` /
    /// `postgresql://…` for PostgreSQL, `sqlite://PATH` or `sqlite:PATH` for
    /// SQLite. `None` when the URL has none of these schemes; an empty
    /// SQLite path is a [`Database::Sqlite`] with an empty path.
    pub fn from_url(url: &str) -> Option<Database> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Some(Database::Postgres(url.to_owned()));
        }
        url.strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .map(|path| Database::Sqlite(PathBuf::from(path)))
    }

    /// What [`Client::connect`](crate::Client::connect) takes: a URL as
    /// [`Database::from_url`] reads it, or else a plain SQLite file path.
    /// An empty SQLite path is refused.
    pub fn parse(url: &str) -> Result<Database> {
        let database =
            Database::from_url(url).unwrap_or_else(|| Database::Sqlite(PathBuf::from(url)));
        match &database {
            Database::Sqlite(path) if path.as_os_str().is_empty() => {
                Err(Error::invalid("database_url", "no SQLite file path given"))
            }
            _ => Ok(database),
        }
    }

    /// The URL [`Client::connect`](crate::Client::connect) takes.
    pub fn url(&self) -> String {
        match self {
            Database::Postgres(url) => url.clone(),
            Database::Sqlite(path) => format!("sqlite://{}", path.display()),
        }
    }

    /// The backend's name, as [`Store::backend`](tether_core::Store::backend)
    /// and the cargo feature spell it: `postgres` or `sqlite`.
    pub fn backend(&self) -> &'static str {
        match self {
            Database::Postgres(_) => "postgres",
            Database::Sqlite(_) => "sqlite",
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
    fn urls() {
        assert_eq!(
            Database::from_url("postgres://u@h/db"),
            Some(Database::Postgres("postgres://u@h/db".into()))
        );
        assert_eq!(
            Database::from_url("postgresql://u@h/db"),
            Some(Database::Postgres("postgresql://u@h/db".into()))
        );
        assert_eq!(
            Database::from_url("sqlite:///tmp/x.db"),
            Some(Database::Sqlite("/tmp/x.db".into()))
        );
        assert_eq!(
            Database::from_url("sqlite:x.db"),
            Some(Database::Sqlite("x.db".into()))
        );
        assert_eq!(Database::from_url("mysql://u@h/db"), None);
        assert_eq!(Database::from_url("/tmp/x.db"), None);
        assert_eq!(
            Database::parse("/tmp/x.db").unwrap(),
            Database::Sqlite("/tmp/x.db".into())
        );
        assert!(Database::parse("sqlite://").is_err());
        assert!(Database::parse("").is_err());
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
