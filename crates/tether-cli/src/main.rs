//! The `tether` binary: see the `tether_cli` library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tether::Signals;
use tether_cli::cli::ClientCommand;
use tether_cli::serve::ServeArgs;
use tether_server::Secrets;

/// The environment of `tether serve`, shown by `tether serve --help`.
const SERVE_ENV_HELP: &str = "\
Environment (read from the environment only, never from the command line):
  TETHER_ADMIN_KEY      The operator's admin key (16-256 printable ASCII
                        characters, not starting with tth_). Without it, the
                        first start issues one and saves it to
                        <data-dir>/admin.key. Starting with a new value
                        revokes the operator key stored from the previous one.
  TETHER_SERVER_SECRET  The server secret: 64 hex digits (e.g. the output of
                        `openssl rand -hex 32`). The operator key is stored as
                        an HMAC under it, so a copy of the database alone does
                        not let it be guessed. Without it, the secret is
                        <data-dir>/server.secret, made at the first start (mode
                        0600). Every process serving one database needs the
                        same secret: set it on PostgreSQL replicas on several
                        machines. A process with another secret than the one
                        the database was first served with refuses to start.
  TETHER_LOG            Log filter (default info), e.g. warn,tether_worker=debug;
                        one access line per request is logged on the target
                        tether::access (tether::access=warn turns them off).";

/// tether: durable background jobs whose system of record is the database.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP service (SQLite under --data-dir unless --database-url).
    #[command(after_help = SERVE_ENV_HELP)]
    Serve(ServeCommand),
    /// Apply the database migrations and exit; `tether migrate status`
    /// shows them.
    Migrate(MigrateCommand),
    #[command(flatten)]
    Client(ClientCommand),
    /// Print a shell completion script: `tether completions bash >
    /// /etc/bash_completion.d/tether` (or zsh, fish).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `tether serve`: how it logs, and the service's own options.
#[derive(Debug, clap::Args)]
struct ServeCommand {
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    serve: ServeArgs,
}

/// How the commands that log (serve, migrate) write their log lines.
#[derive(Debug, clap::Args)]
struct LogArgs {
    /// Log lines on stderr as `text` (for people) or `json` (one JSON
    /// object a line, for log collectors).
    #[arg(long, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// `tether migrate [status]`: how it logs, and which database.
#[derive(Debug, clap::Args)]
struct MigrateCommand {
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    migrate: tether_cli::migrate::MigrateArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(tether_cli::cli::hoist_client_flags(std::env::args_os()));
    let log_format = match &cli.command {
        Command::Serve(ServeCommand { log, .. }) | Command::Migrate(MigrateCommand { log, .. }) => {
            init_logging(log.log_format);
            Some(log.log_format)
        }
        Command::Client(_) => None,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            use std::io::Write;
            // Made whole first: a closed pipe (`| head`) is then no panic.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "tether", &mut script);
            let _ = std::io::stdout().write_all(&script);
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        let result = match cli.command {
            Command::Serve(ServeCommand { serve, .. }) => run_serve(serve).await,
            Command::Migrate(args) => match tether_cli::migrate::run(args.migrate).await {
                Ok(0) => Ok(()),
                Ok(code) => return Err(ExitCode::from(code)),
                Err(message) => Err(message),
            },
            Command::Client(command) => {
                return tether_cli::cli::run(command).await.map_err(|e| {
                    eprintln!("error: {e}");
                    ExitCode::from(e.exit_code())
                })
            }
            Command::Completions { .. } => unreachable!("answered before the runtime starts"),
        };
        result.map_err(|message| {
            // In JSON, the reason the process stops is a log line like the
            // others, so that every line of stderr parses.
            if log_format == Some(LogFormat::Json) {
                tracing::error!(error = %message, "stopped");
            } else {
                eprintln!("error: {message}");
            }
            ExitCode::FAILURE
        })
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// Logs go to stderr, filtered by `TETHER_LOG` (or `RUST_LOG`), default
/// `info`, e.g. `TETHER_LOG=warn,tether_worker=debug`, as text or as one
/// JSON object a line: the event's fields at the top level beside
/// `timestamp`, `level`, `target` and `message`, and the innermost span's
/// fields under `span` (a request's `request_id` and `tenant`).
fn init_logging(format: LogFormat) {
    let spec = std::env::var("TETHER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_owned());
    // A filter that does not parse is reported once logging is set up, in
    // the chosen format.
    let (filter, bad_filter) = match spec.parse::<tracing_subscriber::filter::Targets>() {
        Ok(filter) => (filter, None),
        Err(e) => (
            tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO),
            Some(e),
        ),
    };
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(lines.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())))
            .with(filter)
            .init(),
        // The span list is left out: a request has one span, whose fields
        // `span` already carries.
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                lines
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false),
            )
            .with(filter)
            .init(),
    }
    if let Some(e) = bad_filter {
        tracing::warn!(filter = %spec, error = %e, "ignoring the log filter; logging at info");
    }
}

async fn run_serve(args: ServeArgs) -> Result<(), String> {
    let secrets = Secrets::from_env();
    let mut signals =
        Signals::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let config: tether_server::ServeConfig = args.into();
    let recorder = tether_server::install_recorder(config.metrics_max_queues)
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let upkeep = recorder.clone();
    tokio::spawn(async move {
        // Histograms are summarised by the upkeep; without it they only grow.
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    let metrics = tether_server::Metrics::with_recorder(recorder);
    let running = tether_server::start(&config, &secrets, metrics)
        .await
        .map_err(|e| e.to_string())?;
    print!("{}", running.banner());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = signals.next().await;
    tracing::info!("signal received: stopping gracefully (a second signal exits at once)");
    tokio::spawn(async move {
        let _ = signals.next().await;
        tracing::warn!("second signal: exiting without waiting");
        std::process::exit(1);
    });
    running
        .stop()
        .await
        .map_err(|e| format!("serving failed: {e}"))
}
