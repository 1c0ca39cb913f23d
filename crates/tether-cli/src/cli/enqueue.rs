//! `tether enqueue <queue> <kind> [payload | - ] [options]`.

use std::io::Read;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tether_client::{Backoff, DependencyFailure, JobState, NewJob, RunAt};

use super::format;
use super::{out, CliError, Conn, Ctx};

/// `tether enqueue …`.
#[derive(Debug, clap::Args)]
pub struct EnqueueArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
    /// The job's kind (its handler's name).
    kind: String,
    /// The payload as JSON, or `-` to read it from stdin [default: none].
    #[arg(conflicts_with = "payload_file", allow_negative_numbers = true)]
    payload: Option<String>,
    /// Read the payload (JSON) from this file (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    payload_file: Option<PathBuf>,
    /// −100..100, higher runs first [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<i16>,
    /// Not before this long from now (e.g. 30s, 5m, 2h).
    #[arg(long, value_parser = super::millis, conflicts_with = "run_at", value_name = "DURATION")]
    delay: Option<i64>,
    /// Not before this instant (RFC 3339, e.g. 2026-11-29T23:00:00Z).
    #[arg(long, value_name = "TIME")]
    run_at: Option<DateTime<Utc>>,
    /// Attempts before the job fails for good [default: the queue's].
    #[arg(long)]
    max_attempts: Option<i32>,
    /// Time limit of one attempt (e.g. 30s, 10m).
    #[arg(long, value_parser = super::millis, value_name = "DURATION")]
    timeout: Option<i64>,
    /// Return the existing job with this key instead of a second one.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Return the active (queued or running) job with this key instead of a second one.
    #[arg(long)]
    unique_key: Option<String>,
    /// Group for the queue's flow control (`key_max_running`, `fair`).
    #[arg(long)]
    concurrency_key: Option<String>,
    /// A tag (repeat for more).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// A header carried to the worker with the job, `NAME=VALUE` (repeat
    /// for more): a request id, a W3C `traceparent`.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = header)]
    headers: Vec<(String, String)>,
    /// Fail the job (reason `expired`) if not claimed by this instant (RFC 3339).
    #[arg(long, value_name = "TIME")]
    expires_at: Option<DateTime<Utc>>,
    /// Delay before the first retry [default: the queue's].
    #[arg(long, value_parser = super::millis, value_name = "DURATION")]
    backoff_base: Option<i64>,
    /// Largest delay between retries [default: the queue's].
    #[arg(long, value_parser = super::millis, value_name = "DURATION")]
    backoff_cap: Option<i64>,
    /// Wait for this job (an id, or its first hex digits) to succeed first;
    /// repeat for more. The job is created `waiting` until they all did.
    #[arg(long = "after", value_name = "ID")]
    after: Vec<String>,
    /// What the job does when a job it waits for fails or is cancelled:
    /// `cancel` it too, or `run` once they all ended [default: cancel].
    #[arg(long, value_parser = dependency_failure, value_name = "cancel|run", requires = "after")]
    dependency_failure: Option<DependencyFailure>,
    /// Join this running workflow (its whole id): the job becomes part of
    /// its graph, as a handler fanning out at run time would add it.
    #[arg(long, value_name = "ID", value_parser = workflow_id)]
    workflow: Option<uuid::Uuid>,
}

fn workflow_id(text: &str) -> Result<uuid::Uuid, String> {
    uuid::Uuid::try_parse(text.trim())
        .map_err(|_| format!("{text:?} is not a workflow id (the whole id)"))
}

fn header(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE"))
}

fn dependency_failure(text: &str) -> Result<DependencyFailure, String> {
    text.parse()
        .map_err(|_| format!("unknown rule {text:?} (use cancel or run)"))
}

pub(crate) async fn run(args: EnqueueArgs) -> Result<(), CliError> {
    let payload = read_payload(args.payload.as_deref(), args.payload_file.as_ref())?;
    let ctx = Ctx::new(&args.conn)?;
    let mut job = NewJob::new(&args.queue, &args.kind, payload);
    if let Some(p) = args.priority {
        job = job.priority(p);
    }
    if let Some(ms) = args.delay {
        job = job.run_at(RunAt::Delay(ms));
    }
    if let Some(at) = args.run_at {
        job = job.run_at(RunAt::At(at));
    }
    if let Some(n) = args.max_attempts {
        job = job.max_attempts(n);
    }
    if let Some(ms) = args.timeout {
        job = job.timeout_ms(ms);
    }
    if let Some(k) = args.idempotency_key {
        job = job.idempotency_key(k);
    }
    if let Some(k) = args.unique_key {
        job = job.unique_key(k);
    }
    if let Some(k) = args.concurrency_key {
        job = job.concurrency_key(k);
    }
    if !args.tags.is_empty() {
        job = job.tags(args.tags);
    }
    for (name, value) in args.headers {
        job = job.header(name, value);
    }
    if let Some(at) = args.expires_at {
        job = job.expires_at(at);
    }
    if let Some(b) = backoff(&ctx, &args.queue, args.backoff_base, args.backoff_cap).await? {
        job = job.backoff(b);
    }
    for after in &args.after {
        job = job.after(super::jobs::resolve_id(&ctx, after).await?);
    }
    if let Some(rule) = args.dependency_failure {
        job = job.dependency_failure(rule);
    }
    if let Some(id) = args.workflow {
        job = job.workflow(id);
    }
    let answer = ctx.call(ctx.client.enqueue(job)).await?;
    if ctx.json {
        return ctx.print_json(&answer);
    }
    let job = &answer.job;
    let now = Utc::now();
    let when = if job.state == JobState::Waiting {
        format!(
            "waiting for {}",
            format::plural(job.depends_on.len() as u64, "job")
        )
    } else if job.run_at > now {
        format!(
            "runs {} ({})",
            format::time(job.run_at),
            format::ago(job.run_at, now)
        )
    } else {
        "ready now".to_owned()
    };
    let workflow = job
        .workflow_id
        .map(|w| format!(", in workflow {w}"))
        .unwrap_or_default();
    if answer.created {
        out(&format!(
            "enqueued job {} on queue {} (kind {}, {when}{workflow})\n",
            job.id, job.queue, job.kind
        ));
    } else {
        out(&format!(
            "existing job {} returned for this idempotency or unique key (state {}); nothing enqueued\n",
            job.id, job.state
        ));
    }
    Ok(())
}

/// The payload from the argument, the file, or stdin (`-`); none is `null`.
fn read_payload(arg: Option<&str>, file: Option<&PathBuf>) -> Result<Value, CliError> {
    let (text, origin) = match (arg, file) {
        (Some("-"), _) => (read_stdin()?, "stdin".to_owned()),
        (Some(text), _) => (text.to_owned(), "the payload argument".to_owned()),
        (None, Some(path)) if path.as_os_str() == "-" => (read_stdin()?, "stdin".to_owned()),
        (None, Some(path)) => (
            std::fs::read_to_string(path)
                .map_err(|e| CliError::Failed(format!("cannot read {}: {e}", path.display())))?,
            path.display().to_string(),
        ),
        (None, None) => return Ok(Value::Null),
    };
    super::json_value(&text).map_err(|e| CliError::Usage(format!("the payload in {origin} is {e}")))
}

fn read_stdin() -> Result<String, CliError> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| CliError::Failed(format!("cannot read the payload from stdin: {e}")))?;
    Ok(text)
}

/// A backoff from `--backoff-base` / `--backoff-cap`; the API takes both,
/// so a half given alone is completed from the queue's current setting.
pub(crate) async fn backoff(
    ctx: &Ctx,
    queue: &str,
    base_ms: Option<i64>,
    cap_ms: Option<i64>,
) -> Result<Option<Backoff>, CliError> {
    Ok(match (base_ms, cap_ms) {
        (None, None) => None,
        (Some(base_ms), Some(cap_ms)) => Some(Backoff { base_ms, cap_ms }),
        (base, cap) => {
            let current = ctx.call(ctx.client.get_queue(queue)).await?.backoff;
            Some(Backoff {
                base_ms: base.unwrap_or(current.base_ms),
                cap_ms: cap.unwrap_or(current.cap_ms),
            })
        }
    })
}
