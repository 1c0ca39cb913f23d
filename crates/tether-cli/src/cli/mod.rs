//! The operator commands of the `tether` binary: `enqueue`, `jobs`,
//! `workflows`, `queues`, `dlq`, `schedules`, `tenants`, `keys`, `stats` and
//! `workers`
//! (docs/cli.md describes each). They talk to
//! a tether server over its HTTP API through the Rust SDK
//! ([`tether_client::HttpClient`]), never to the database.
//!
//! The server is `--url` / `TETHER_URL` (default `http://127.0.0.1:7070`),
//! the key `--key` / `TETHER_KEY`, or else the `admin.key` file a local
//! server wrote under `--data-dir` / `TETHER_DATA_DIR` (default
//! `./tether-data`). Read commands print human tables, or with `--json` the
//! API's JSON as one document. Exit codes: 0 ok, 1 the operation failed (an
//! API or transport error), 2 a usage error.

mod dlq;
mod enqueue;
mod events;
mod format;
mod jobs;
mod queues;
mod schedules;
mod stats;
mod tenants;
mod workers;
mod workflows;

use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::Subcommand;
use serde::Serialize;
use tether_client::HttpClient;

/// The server the client commands talk to when no `--url` is given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7070";

/// The client commands (flattened into the binary's top-level commands).
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Enqueue a job.
    Enqueue(enqueue::EnqueueArgs),
    /// List, inspect, cancel and replay jobs.
    Jobs(jobs::JobsArgs),
    /// Workflows (graphs of jobs): list, show the graph, wait, cancel and retry whole.
    Workflows(workflows::WorkflowsArgs),
    /// The history as it is committed, one line per event, until Ctrl-C.
    Events(events::EventsArgs),
    /// Queue health, settings and throughput; pause, resume and remove.
    Queues(queues::QueuesArgs),
    /// The dead-letter queue (failed jobs): list and replay.
    Dlq(dlq::DlqArgs),
    /// Cron schedules: list, add, remove, runs, preview, enable, disable, trigger.
    Schedules(schedules::SchedulesArgs),
    /// Tenants (admin key).
    Tenants(tenants::TenantsArgs),
    /// API keys (admin key).
    Keys(tenants::KeysArgs),
    /// Per-queue health at a glance, optionally refreshing.
    Stats(stats::StatsArgs),
    /// Who holds running jobs now: worker, queues, running, last heartbeat.
    Workers(workers::WorkersArgs),
}

/// Where the server is, which key to use, and how to print: accepted by
/// every client command, before or after its subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct Conn {
    /// The server's base URL.
    #[arg(long, env = "TETHER_URL", default_value = DEFAULT_URL, global = true, help_heading = HEADING)]
    url: String,
    /// API key [default: the admin.key file under --data-dir].
    #[arg(long, env = "TETHER_KEY", hide_env_values = true, global = true, help_heading = HEADING)]
    key: Option<String>,
    /// With an admin key: act for this tenant (name or id) [default: the key's own].
    #[arg(long, env = "TETHER_TENANT", global = true, help_heading = HEADING)]
    tenant: Option<String>,
    /// Data directory of a local server: its admin.key is used when no key is given.
    #[arg(
        long,
        env = "TETHER_DATA_DIR",
        default_value = "./tether-data",
        global = true,
        help_heading = HEADING
    )]
    data_dir: PathBuf,
    /// Print the API's JSON (one document) instead of human tables.
    #[arg(long, global = true, help_heading = HEADING)]
    json: bool,
}

/// The client commands' flags that are the same for all of them, with
/// whether each takes a value.
const CLIENT_FLAGS: [(&str, bool); 5] = [
    ("--url", true),
    ("--key", true),
    ("--tenant", true),
    ("--data-dir", true),
    ("--json", false),
];

/// Moves the client flags written before a client command's name to just
/// after it (`tether --json --tenant acme jobs ls` reads as `tether jobs
/// --json --tenant acme ls`), so that they work before or after the
/// subcommand. They belong to the client commands, not to the binary:
/// `serve` and `migrate` have flags of their own (`--data-dir` among them).
/// Anything else is left where it is, for the parser to judge.
pub fn hoist_client_flags(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let args: Vec<OsString> = args.into_iter().collect();
    let mut hoisted = Vec::new();
    let mut i = 1;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        let Some((_, takes_value)) = CLIENT_FLAGS
            .iter()
            .find(|(flag, _)| arg == *flag || arg.starts_with(&format!("{flag}=")))
        else {
            break;
        };
        let with_value = *takes_value && !arg.contains('=');
        let end = (i + 1 + usize::from(with_value)).min(args.len());
        hoisted.extend_from_slice(&args[i..end]);
        i = end;
    }
    let is_client_command = args
        .get(i)
        .is_some_and(|name| ClientCommand::has_subcommand(&name.to_string_lossy()));
    if hoisted.is_empty() || !is_client_command {
        return args;
    }
    let mut out = Vec::with_capacity(args.len());
    out.push(args[0].clone());
    out.push(args[i].clone());
    out.extend(hoisted);
    out.extend_from_slice(&args[i + 1..]);
    out
}

/// The help heading of the [`Conn`] flags. Set on each flag, not as the
/// struct's `next_help_heading`, which would also file the command's own
/// arguments (positionals included) under it.
const HEADING: &str = "Server and output";

/// Runs one client command.
pub async fn run(command: ClientCommand) -> Result<(), CliError> {
    match command {
        ClientCommand::Enqueue(args) => enqueue::run(args).await,
        ClientCommand::Jobs(args) => jobs::run(args).await,
        ClientCommand::Workflows(args) => workflows::run(args).await,
        ClientCommand::Events(args) => events::run(args).await,
        ClientCommand::Queues(args) => queues::run(args).await,
        ClientCommand::Dlq(args) => dlq::run(args).await,
        ClientCommand::Schedules(args) => schedules::run(args).await,
        ClientCommand::Tenants(args) => tenants::run_tenants(args).await,
        ClientCommand::Keys(args) => tenants::run_keys(args).await,
        ClientCommand::Stats(args) => stats::run(args).await,
        ClientCommand::Workers(args) => workers::run(args).await,
    }
}

/// Why a client command failed; its `Display` is the line printed after
/// `error: `.
#[derive(Debug)]
pub enum CliError {
    /// A call to the server failed (exit code 1, or 2 when the request was
    /// refused before it was sent, e.g. a malformed `--url`).
    Api {
        /// The server's URL, for transport errors.
        url: String,
        /// What the client reported.
        error: tether_client::Error,
    },
    /// The command line or its input cannot be used (exit code 2).
    Usage(String),
    /// Anything else that failed (exit code 1).
    Failed(String),
}

impl CliError {
    /// The process exit code: 1 for a failed operation, 2 for a usage error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Api {
                error: tether_client::Error::Invalid { .. },
                ..
            }
            | CliError::Usage(_) => 2,
            CliError::Api { .. } | CliError::Failed(_) => 1,
        }
    }
}

/// The message is made `format::visible` (line breaks kept): it holds
/// what the server said (an API error's message and code), which is
/// printed to the terminal.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format::visible_lines(&self.raw_message()))
    }
}

impl CliError {
    /// The message as it was made, before it is made safe to print.
    fn raw_message(&self) -> String {
        use tether_client::Error;
        match self {
            CliError::Api { url, error } => match error {
                Error::Api { code, message, .. } => format!("{code}: {message}"),
                Error::UnknownCode { code, message, .. } => format!("{code}: {message}"),
                Error::Transport(e) if e.is_timeout() => {
                    format!("the server at {url} did not answer in time")
                }
                Error::Transport(e) => format!(
                    "the server could not be reached at {url}: {}",
                    root_cause(e)
                ),
                Error::Decode { route, source } => format!(
                    "unexpected answer to {route} from {url} (is it a tether server of this version?): {source}"
                ),
                Error::Invalid { .. } => error.to_string(),
            },
            CliError::Usage(m) | CliError::Failed(m) => m.clone(),
        }
    }
}

impl std::error::Error for CliError {}

/// The innermost cause of a transport error ("Connection refused (os error
/// 111)" rather than "error sending request").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// What every command needs: the client, the URL (for messages) and the
/// output mode.
pub(crate) struct Ctx {
    pub(crate) client: HttpClient,
    pub(crate) url: String,
    pub(crate) json: bool,
    /// The tenant `--tenant` names, if any.
    pub(crate) tenant: Option<String>,
}

impl Ctx {
    /// Builds the client from the connection options.
    pub(crate) fn new(conn: &Conn) -> Result<Ctx, CliError> {
        let key = match conn.key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
            Some(key) => key.to_owned(),
            None => match tether_server::admin_key::read_key_file(&conn.data_dir) {
                Ok(key) if !key.is_empty() => key,
                Ok(_) | Err(_) => {
                    return Err(CliError::Usage(format!(
                        "no API key: pass --key or set TETHER_KEY, or point --data-dir at the data \
                         directory of a local server ({} was not found)",
                        conn.data_dir
                            .join(tether_server::admin_key::ADMIN_KEY_FILE)
                            .display()
                    )))
                }
            },
        };
        let url = conn.url.trim().to_owned();
        // The routes add /v1 themselves: a --url copied from an API path
        // would ask for /v1/v1/... and read as "not found".
        if let Some(base) = url.strip_suffix("/v1/").or_else(|| url.strip_suffix("/v1")) {
            return Err(CliError::Usage(format!(
                "--url is the server's base URL, without /v1 (try --url {base})"
            )));
        }
        let mut client = HttpClient::builder(&url, &key)
            .user_agent(concat!("tether-cli/", env!("CARGO_PKG_VERSION")));
        let tenant = conn
            .tenant
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        if let Some(tenant) = tenant {
            client = client.tenant(tenant);
        }
        let client = client.build().map_err(|error| CliError::Api {
            url: url.clone(),
            error,
        })?;
        Ok(Ctx {
            client,
            url,
            json: conn.json,
            tenant: tenant.map(str::to_owned),
        })
    }

    /// Awaits one client call, attaching the URL to its error.
    pub(crate) async fn call<T>(
        &self,
        call: impl Future<Output = tether_client::Result<T>>,
    ) -> Result<T, CliError> {
        call.await.map_err(|error| CliError::Api {
            url: self.url.clone(),
            error,
        })
    }

    /// Prints `{"<key>": value}` as one pretty JSON document (the API's
    /// envelope, fields in the API's order).
    pub(crate) fn print_doc<T: Serialize + ?Sized>(
        &self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CliError> {
        self.print_json(&Doc(key, value))
    }

    /// Prints `value` as one pretty JSON document, with the characters
    /// a terminal could obey escaped ([`format::json_text`]: the same JSON).
    pub(crate) fn print_json<T: Serialize + ?Sized>(&self, value: &T) -> Result<(), CliError> {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| CliError::Failed(format!("cannot write JSON: {e}")))?;
        out(&format!("{}\n", format::json_text(&text)));
        Ok(())
    }
}

/// A one-field JSON object, `{"<key>": value}`, serialized without going
/// through `serde_json::Value` (which would sort the fields).
pub(crate) struct Doc<'a, T: ?Sized>(pub(crate) &'static str, pub(crate) &'a T);

impl<T: Serialize + ?Sized> Doc<'_, T> {
    /// The document on one line, safe to print ([`format::json_text`]).
    pub(crate) fn compact(key: &'static str, value: &T) -> String {
        let text = serde_json::to_string(&Doc(key, value)).unwrap_or_default();
        format::json_text(&text).into_owned()
    }
}

impl<T: Serialize + ?Sized> Serialize for Doc<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(self.0, self.1)?;
        map.end()
    }
}

/// Writes to stdout, made [`format::visible`] but for its line breaks:
/// whatever a command prints, no control character of the server's text
/// reaches the terminal. A closed pipe (`tether jobs ls | head`) is not an
/// error worth a panic.
pub(crate) fn out(text: &str) {
    out_raw(&format::visible_lines(text));
}

/// Writes `text` to stdout as it is: only for the terminal controls tether
/// writes itself (`stats --watch` redrawing in place) around text that was
/// made safe already.
pub(crate) fn out_raw(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Writes a line to stderr (never to stdout, which may be piped), made
/// [`format::visible`] like [`out`].
pub(crate) fn note(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{}", format::visible_lines(text));
}

/// Writes a warning line to stderr.
pub(crate) fn warn(text: &str) {
    note(&format!("warning: {text}"));
}

/// Whether stdout is a terminal (tables fit its width; bars and in-place
/// refreshes are drawn only then).
pub(crate) fn stdout_is_tty() -> bool {
    std::io::stdout().is_terminal()
}

/// Parses a duration option (`500ms`, `30s`, `5m`, `2h`, `7d`) into
/// milliseconds.
pub(crate) fn millis(text: &str) -> Result<i64, String> {
    let d = crate::duration::parse(text)?;
    i64::try_from(d.as_millis()).map_err(|_| format!("{text:?} is too long"))
}

/// Parses a JSON option or argument.
pub(crate) fn json_value(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))
}

/// Parses a job state (`waiting`, `queued`, `running`, `succeeded`,
/// `failed`, `cancelled`).
pub(crate) fn job_state(text: &str) -> Result<tether_client::JobState, String> {
    text.parse().map_err(|_| {
        format!(
            "unknown state {text:?} (use waiting, queued, running, succeeded, failed or cancelled)"
        )
    })
}
