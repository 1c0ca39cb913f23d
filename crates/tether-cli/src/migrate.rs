//! `tether migrate` (apply the pending migrations) and `tether migrate
//! status` (show them, change nothing).
//!
//! `status` exits with [`EXIT_CURRENT`] when the schema is exactly this
//! build's, [`EXIT_NEEDS_MIGRATE`] when `tether migrate` would bring it
//! there, [`EXIT_REFUSED`] when this build refuses the schema (a newer
//! tether migrated it, or a released migration was edited), and 1 when the
//! database cannot be read.

use std::path::PathBuf;

use serde_json::{json, Value};
use tether::migrations::{ChecksumState, MigrationState, SchemaError, SchemaStatus};
use tether::Database;

/// `tether migrate status`: the schema is exactly this build's.
pub const EXIT_CURRENT: u8 = 0;
/// `tether migrate status`: migrations are pending (or their checksums
/// unrecorded); `tether migrate` fixes it.
pub const EXIT_NEEDS_MIGRATE: u8 = 3;
/// `tether migrate status`: this build refuses the schema (newer than it,
/// or an applied migration edited); `tether migrate` refuses too.
pub const EXIT_REFUSED: u8 = 4;

/// `tether migrate [status]`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Without a subcommand, the pending migrations are applied.
    #[command(subcommand)]
    pub command: Option<MigrateCommand>,
    /// Which database.
    #[command(flatten)]
    pub target: Target,
}

/// What `tether migrate` can do besides applying.
#[derive(Debug, clap::Subcommand)]
pub enum MigrateCommand {
    /// Show each migration and any newer version, changing nothing.
    ///
    /// Lists each migration this tether knows (version, name, when it was
    /// applied or `pending`, its checksum: ok, mismatch or not_recorded) and
    /// any version a newer tether applied. Exit code 0: the schema is
    /// current; 3: `tether migrate` is needed; 4: this tether refuses the
    /// schema (newer than it, or an applied migration was edited); 1: the
    /// database cannot be read.
    Status {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// The database `tether migrate` works on: the one `tether serve` with the
/// same options would use.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// Directory of the SQLite file.
    #[arg(
        long,
        env = "TETHER_DATA_DIR",
        default_value = "./tether-data",
        global = true
    )]
    pub data_dir: PathBuf,
    /// `postgres://…` (or `sqlite:PATH`) instead of the SQLite file in the
    /// data directory.
    #[arg(
        long,
        env = "TETHER_DATABASE_URL",
        hide_env_values = true,
        global = true
    )]
    pub database_url: Option<String>,
    /// PostgreSQL: the URL goes through a transaction-pooling proxy
    /// (PgBouncer with pool_mode = transaction).
    #[arg(long, env = "TETHER_TRANSACTION_POOLER", global = true)]
    pub transaction_pooler: bool,
}

/// Runs `tether migrate [status]`; `Ok` holds the exit code, `Err` the
/// reason the database could not be reached or migrated.
pub async fn run(args: MigrateArgs) -> Result<u8, String> {
    let database =
        tether_server::choose_database(args.target.database_url.as_deref(), &args.target.data_dir)?;
    let options = tether::OpenOptions {
        transaction_pooler: args.target.transaction_pooler,
        ..tether::OpenOptions::default()
    };
    match args.command {
        None => apply(&args.target, &database, &options).await,
        Some(MigrateCommand::Status { json }) => {
            let status = tether::schema_status(&database, &options)
                .await
                .map_err(|e| format!("cannot read the schema of {}: {e}", database.describe()))?;
            if json {
                println!("{:#}", status_json(&database, &status));
            } else {
                print!("{}", status_text(&database, &status));
            }
            Ok(exit_code(&status))
        }
    }
}

/// Applies the pending migrations and says which.
async fn apply(
    target: &Target,
    database: &Database,
    options: &tether::OpenOptions,
) -> Result<u8, String> {
    tether_server::data_dir::secure(&target.data_dir, database).map_err(|e| {
        format!(
            "cannot make the data directory {} private: {e}",
            target.data_dir.display()
        )
    })?;
    let before = tether::schema_status(database, options)
        .await
        .map_err(|e| format!("cannot read the schema of {}: {e}", database.describe()))?;
    tether::Client::open_with(database, options)
        .await
        .map_err(|e| format!("cannot migrate {}: {e}", database.describe()))?;
    let pending = before.pending();
    if pending.is_empty() {
        println!(
            "schema current at version {}: {}",
            before.latest_known,
            database.describe()
        );
    } else {
        let versions: Vec<String> = pending.iter().map(i64::to_string).collect();
        println!(
            "migrations applied: {} (now at version {}): {}",
            versions.join(", "),
            before.latest_known,
            database.describe()
        );
    }
    Ok(EXIT_CURRENT)
}

/// Why the schema is not current, if it is not.
fn problem(status: &SchemaStatus) -> Option<SchemaError> {
    status.require_current().err()
}

fn exit_code(status: &SchemaStatus) -> u8 {
    match problem(status) {
        None => EXIT_CURRENT,
        Some(SchemaError::Pending { .. } | SchemaError::ChecksumsNotRecorded { .. }) => {
            EXIT_NEEDS_MIGRATE
        }
        Some(SchemaError::Newer { .. } | SchemaError::ChecksumMismatch { .. }) => EXIT_REFUSED,
    }
}

/// One word for the schema as a whole.
fn verdict(status: &SchemaStatus) -> &'static str {
    match exit_code(status) {
        EXIT_CURRENT => "current",
        EXIT_NEEDS_MIGRATE => "needs_migrate",
        _ => "refused",
    }
}

/// The checksum column: `ok`, `mismatch`, `not_recorded`, or `-` while
/// pending.
fn checksum_word(state: Option<ChecksumState>) -> &'static str {
    match state {
        Some(ChecksumState::Matches) => "ok",
        Some(ChecksumState::Differs) => "mismatch",
        Some(ChecksumState::NotRecorded) => "not_recorded",
        None => "-",
    }
}

fn time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn status_text(database: &Database, status: &SchemaStatus) -> String {
    let mut out = format!(
        "database: {}\nschema:   version {}; this tether knows up to {}: {}\n\n",
        database.describe(),
        status.current_version(),
        status.latest_known,
        verdict(status)
    );
    out.push_str(&format!(
        "{:<8} {:<20} {:<26} {}\n",
        "VERSION", "NAME", "APPLIED", "CHECKSUM"
    ));
    for m in &status.migrations {
        let applied = match (m.state, m.applied_at) {
            (MigrationState::Applied, Some(at)) => time(at),
            _ => "pending".to_owned(),
        };
        out.push_str(&format!(
            "{:<8} {:<20} {:<26} {}\n",
            m.version,
            m.name,
            applied,
            checksum_word(m.checksum)
        ));
    }
    for u in &status.unknown {
        out.push_str(&format!(
            "{:<8} {:<20} {:<26} unknown to this tether (newer)\n",
            u.version,
            u.name,
            time(u.applied_at)
        ));
    }
    if let Some(problem) = problem(status) {
        out.push_str(&format!("\n{problem}\n"));
    }
    out
}

fn status_json(database: &Database, status: &SchemaStatus) -> Value {
    let migrations: Vec<Value> = status
        .migrations
        .iter()
        .map(|m| {
            json!({
                "version": m.version,
                "name": m.name,
                "state": m.state,
                "applied_at": m.applied_at.map(time),
                "checksum": m.checksum.map(|c| checksum_word(Some(c))),
                "expected_checksum": m.expected_checksum,
                "recorded_checksum": m.recorded_checksum,
            })
        })
        .collect();
    let unknown: Vec<Value> = status
        .unknown
        .iter()
        .map(|u| json!({"version": u.version, "name": u.name, "applied_at": time(u.applied_at)}))
        .collect();
    json!({
        "database": database.describe(),
        "backend": status.backend,
        "status": verdict(status),
        "current_version": status.current_version(),
        "latest_known": status.latest_known,
        "problem": problem(status).map(|p| p.to_string()),
        "migrations": migrations,
        "unknown": unknown,
    })
}
