//! The state of a database's schema against the migrations a build knows,
//! and the decisions both backends take on it: refuse an edited migration,
//! refuse a schema newer than the build, and (when migrations are not to be
//! applied) refuse anything but the exact current schema.
//!
//! Each backend keeps its own migrations and migrations table; it reads the
//! rows it recorded ([`Recorded`]) and hands them here with its list, so the
//! rules are written once.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The checksum recorded for a migration: the SHA-256 of its SQL, in hex.
///
/// Line endings are normalised first, so that a checkout that turned `\n`
/// into `\r\n` (git on Windows) builds the same checksums.
pub fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.replace("\r\n", "\n").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// One row of a backend's migrations table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The version applied.
    pub version: i64,
    /// Its name as recorded.
    pub name: String,
    /// When it was applied (the database's clock).
    pub applied_at: DateTime<Utc>,
    /// The checksum recorded with it; `None` for a row written by a tether
    /// from before checksums, until the runner fills it in.
    pub checksum: Option<String>,
}

/// Whether a known migration has been applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationState {
    /// Recorded in the database.
    Applied,
    /// Not yet applied: `tether migrate` (or opening with migrations) will.
    Pending,
}

/// How an applied migration's recorded checksum compares with the build's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecksumState {
    /// The same SQL was applied.
    Matches,
    /// The recorded checksum is another: the migration was edited after it
    /// was applied (or the row was changed).
    Differs,
    /// No checksum recorded (written by a tether from before checksums).
    NotRecorded,
}

/// One migration this build knows, as the database has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationStatus {
    /// Its version (applied in increasing order).
    pub version: i64,
    /// Its name.
    pub name: &'static str,
    /// Applied or pending.
    pub state: MigrationState,
    /// When it was applied; `None` while pending.
    pub applied_at: Option<DateTime<Utc>>,
    /// How the recorded checksum compares; `None` while pending.
    pub checksum: Option<ChecksumState>,
    /// The checksum of this build's SQL.
    pub expected_checksum: String,
    /// The checksum the database recorded, if any.
    pub recorded_checksum: Option<String>,
}

/// A version recorded in the database that this build does not know: a
/// newer tether applied it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnknownMigration {
    /// Its version.
    pub version: i64,
    /// Its name as recorded.
    pub name: String,
    /// When it was applied.
    pub applied_at: DateTime<Utc>,
}

/// A database's schema against the migrations this build knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaStatus {
    /// The backend (`postgres`, `sqlite`).
    pub backend: &'static str,
    /// The newest version this build knows.
    pub latest_known: i64,
    /// Every migration this build knows, oldest first.
    pub migrations: Vec<MigrationStatus>,
    /// Versions the database has that this build does not know, oldest
    /// first (empty unless a newer tether migrated it).
    pub unknown: Vec<UnknownMigration>,
}

impl SchemaStatus {
    /// Compares `known` — this build's migrations as (version, name, SQL),
    /// oldest first — with the rows the database recorded.
    pub fn new<'a>(
        backend: &'static str,
        known: impl IntoIterator<Item = (i64, &'static str, &'a str)>,
        recorded: Vec<Recorded>,
    ) -> SchemaStatus {
        let mut migrations = Vec::new();
        let mut latest_known = 0;
        for (version, name, sql) in known {
            latest_known = latest_known.max(version);
            let expected_checksum = checksum(sql);
            let row = recorded.iter().find(|r| r.version == version);
            let recorded_checksum = row.and_then(|r| r.checksum.clone());
            migrations.push(MigrationStatus {
                version,
                name,
                state: match row {
                    Some(_) => MigrationState::Applied,
                    None => MigrationState::Pending,
                },
                applied_at: row.map(|r| r.applied_at),
                checksum: row.map(|r| match &r.checksum {
                    None => ChecksumState::NotRecorded,
                    Some(c) if *c == expected_checksum => ChecksumState::Matches,
                    Some(_) => ChecksumState::Differs,
                }),
                expected_checksum,
                recorded_checksum,
            });
        }
        let mut unknown: Vec<UnknownMigration> = recorded
            .into_iter()
            .filter(|r| !migrations.iter().any(|m| m.version == r.version))
            .map(|r| UnknownMigration {
                version: r.version,
                name: r.name,
                applied_at: r.applied_at,
            })
            .collect();
        unknown.sort_by_key(|u| u.version);
        SchemaStatus {
            backend,
            latest_known,
            migrations,
            unknown,
        }
    }

    /// The newest version recorded in the database (0 when none is).
    pub fn current_version(&self) -> i64 {
        let applied = self
            .migrations
            .iter()
            .filter(|m| m.state == MigrationState::Applied)
            .map(|m| m.version);
        applied
            .chain(self.unknown.iter().map(|u| u.version))
            .max()
            .unwrap_or(0)
    }

    /// The versions this build knows that the database has not applied.
    pub fn pending(&self) -> Vec<i64> {
        self.migrations
            .iter()
            .filter(|m| m.state == MigrationState::Pending)
            .map(|m| m.version)
            .collect()
    }

    /// What running on this schema needs, whether or not pending migrations
    /// are then applied: no version newer than this build, and every
    /// recorded checksum the build's.
    pub fn verify(&self) -> Result<(), SchemaError> {
        if let Some(newest) = self.unknown.last() {
            return Err(SchemaError::Newer {
                found: newest.version.max(self.current_version()),
                known: self.latest_known,
            });
        }
        if let Some(m) = self
            .migrations
            .iter()
            .find(|m| m.checksum == Some(ChecksumState::Differs))
        {
            return Err(SchemaError::ChecksumMismatch {
                version: m.version,
                name: m.name.to_owned(),
                recorded: m.recorded_checksum.clone().unwrap_or_default(),
                expected: m.expected_checksum.clone(),
            });
        }
        Ok(())
    }

    /// What running without applying migrations needs: [`verify`](Self::verify),
    /// every checksum recorded, and nothing pending.
    pub fn require_current(&self) -> Result<(), SchemaError> {
        self.verify()?;
        let unrecorded: Vec<i64> = self
            .migrations
            .iter()
            .filter(|m| m.checksum == Some(ChecksumState::NotRecorded))
            .map(|m| m.version)
            .collect();
        if !unrecorded.is_empty() {
            return Err(SchemaError::ChecksumsNotRecorded {
                versions: unrecorded,
            });
        }
        let pending = self.pending();
        if !pending.is_empty() {
            return Err(SchemaError::Pending { versions: pending });
        }
        Ok(())
    }
}

/// Why a database's schema is not one this build may run on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The database has a version this build does not know: a newer tether
    /// migrated it, and this one could misread what it wrote.
    #[error(
        "database schema is at version {found}, this tether knows up to {known}; upgrade tether"
    )]
    Newer {
        /// The newest version in the database.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// An applied migration's recorded checksum is not the build's: a
    /// released migration was edited, so the schema may not be what this
    /// build's code expects.
    #[error(
        "migration {version} ({name}) was applied with checksum {recorded}, but this tether's \
         migration {version} has checksum {expected}: a released migration was edited; \
         refusing to run on a schema that may not be the one this tether expects"
    )]
    ChecksumMismatch {
        /// The migration's version.
        version: i64,
        /// Its name.
        name: String,
        /// The checksum the database recorded.
        recorded: String,
        /// The checksum of this build's SQL.
        expected: String,
    },
    /// Migrations were not to be applied, and some are pending.
    #[error(
        "the database schema is not current: migration{} {} {} pending; run `tether migrate`",
        plural(versions),
        list(versions),
        if versions.len() == 1 { "is" } else { "are" }
    )]
    Pending {
        /// The pending versions, oldest first.
        versions: Vec<i64>,
    },
    /// Migrations were not to be applied, and some applied ones have no
    /// checksum yet (recorded by a tether from before checksums; applying
    /// migrations records them).
    #[error(
        "migration{} {} {} recorded by an older tether without checksums; run `tether migrate` \
         to record them",
        plural(versions),
        list(versions),
        if versions.len() == 1 { "was" } else { "were" }
    )]
    ChecksumsNotRecorded {
        /// The versions without a checksum.
        versions: Vec<i64>,
    },
}

fn plural(versions: &[i64]) -> &'static str {
    if versions.len() == 1 {
        ""
    } else {
        "s"
    }
}

/// `1, 2, 3`, for the messages above.
fn list(versions: &[i64]) -> String {
    let versions: Vec<String> = versions.iter().map(i64::to_string).collect();
    versions.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: [(i64, &str, &str); 3] = [(1, "one", "A;"), (2, "two", "B;"), (3, "three", "C;")];

    fn row(version: i64, sql: Option<&str>) -> Recorded {
        Recorded {
            version,
            name: format!("m{version}"),
            applied_at: DateTime::UNIX_EPOCH,
            checksum: sql.map(checksum),
        }
    }

    #[test]
    fn checksums_are_sha256_hex_whatever_the_line_endings() {
        assert_eq!(
            checksum(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(checksum("a;\r\nb;\n"), checksum("a;\nb;\n"));
        assert_ne!(checksum("a;"), checksum("b;"));
    }

    #[test]
    fn a_current_schema_passes_both_checks() {
        let s = SchemaStatus::new(
            "x",
            KNOWN,
            vec![row(1, Some("A;")), row(2, Some("B;")), row(3, Some("C;"))],
        );
        assert_eq!((s.current_version(), s.latest_known), (3, 3));
        assert!(s.pending().is_empty());
        assert_eq!(s.require_current(), Ok(()));
    }

    #[test]
    fn pending_versions_pass_verify_but_not_require_current() {
        let s = SchemaStatus::new("x", KNOWN, vec![row(1, Some("A;"))]);
        assert_eq!(s.pending(), vec![2, 3]);
        assert_eq!(s.verify(), Ok(()));
        let err = s.require_current().unwrap_err();
        assert_eq!(
            err,
            SchemaError::Pending {
                versions: vec![2, 3]
            }
        );
        assert_eq!(
            err.to_string(),
            "the database schema is not current: migrations 2, 3 are pending; run `tether migrate`"
        );
        let fresh = SchemaStatus::new("x", KNOWN, vec![]);
        assert_eq!(fresh.current_version(), 0);
        assert_eq!(
            fresh.require_current(),
            Err(SchemaError::Pending {
                versions: vec![1, 2, 3]
            })
        );
    }

    #[test]
    fn an_edited_migration_is_named() {
        let s = SchemaStatus::new(
            "x",
            KNOWN,
            vec![row(1, Some("A;")), row(2, Some("B changed;"))],
        );
        assert_eq!(s.migrations[1].checksum, Some(ChecksumState::Differs));
        match s.verify() {
            Err(SchemaError::ChecksumMismatch { version, name, .. }) => {
                assert_eq!((version, name.as_str()), (2, "two"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_newer_schema_is_refused_first() {
        let s = SchemaStatus::new(
            "x",
            KNOWN,
            vec![row(1, Some("changed")), row(999, Some("Z;"))],
        );
        assert_eq!(s.unknown.len(), 1);
        let err = s.verify().unwrap_err();
        assert_eq!(
            err,
            SchemaError::Newer {
                found: 999,
                known: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "database schema is at version 999, this tether knows up to 3; upgrade tether"
        );
    }

    #[test]
    fn unrecorded_checksums_pass_verify_but_not_require_current() {
        let s = SchemaStatus::new(
            "x",
            KNOWN,
            vec![row(1, None), row(2, Some("B;")), row(3, Some("C;"))],
        );
        assert_eq!(s.migrations[0].checksum, Some(ChecksumState::NotRecorded));
        assert_eq!(s.verify(), Ok(()));
        let err = s.require_current().unwrap_err();
        assert_eq!(err, SchemaError::ChecksumsNotRecorded { versions: vec![1] });
        assert_eq!(
            err.to_string(),
            "migration 1 was recorded by an older tether without checksums; run `tether migrate` to record them"
        );
    }
}
