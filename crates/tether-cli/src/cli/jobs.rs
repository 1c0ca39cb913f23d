//! `tether jobs ls | show | events | cancel | replay`.

use chrono::{DateTime, Utc};
use clap::Subcommand;
use tether_client::{Job, JobEvent, JobPage, JobQuery, JobState};
use uuid::Uuid;

use super::format::{self, Table};
use super::{out, CliError, Conn, Ctx};

/// `tether jobs …`.
#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: JobsCommand,
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// List jobs, newest first.
    Ls(ListArgs),
    /// One job: its fields, payload, result, progress and history.
    Show {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        id: String,
    },
    /// A job's history, oldest first.
    Events {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        id: String,
    },
    /// Cancel a job: a queued one at once, a running one is asked to stop.
    Cancel {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        id: String,
    },
    /// Queue a finished job again (a succeeded one runs again), with a fresh attempt budget.
    Replay {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        id: String,
    },
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only this state: queued, running, succeeded, failed or cancelled.
    #[arg(long, value_parser = super::job_state)]
    state: Option<JobState>,
    /// Only this kind.
    #[arg(long)]
    kind: Option<String>,
    /// Only jobs carrying this tag.
    #[arg(long)]
    tag: Option<String>,
    /// Only jobs whose id starts with these hex digits (dashes ignored).
    #[arg(long)]
    id_prefix: Option<String>,
    #[command(flatten)]
    page: PageArgs,
}

/// Paging options shared by `jobs ls` and `dlq ls`.
#[derive(Debug, clap::Args)]
pub(crate) struct PageArgs {
    /// Jobs per page, 1–500 [default: 50, or 500 with --all].
    #[arg(long)]
    limit: Option<u32>,
    /// Continue after a previous page (the cursor it printed).
    #[arg(long, conflicts_with = "all")]
    cursor: Option<String>,
    /// Follow every page to the end.
    #[arg(long)]
    all: bool,
}

pub(crate) async fn run(args: JobsArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    match args.command {
        JobsCommand::Ls(ls) => {
            let query = JobQuery {
                queue: ls.queue,
                state: ls.state,
                kind: ls.kind,
                tag: ls.tag,
                id_prefix: ls.id_prefix,
                ..JobQuery::default()
            };
            let page = list(&ctx, query, &ls.page).await?;
            if ctx.json {
                return ctx.print_json(&page);
            }
            print_jobs(&page);
            Ok(())
        }
        JobsCommand::Show { id } => {
            let id = resolve_id(&ctx, &id).await?;
            let job = ctx.call(ctx.client.get_job(id)).await?;
            let events = ctx.call(ctx.client.events(id)).await?;
            if ctx.json {
                #[derive(serde::Serialize)]
                struct JobWithHistory<'a> {
                    job: &'a Job,
                    events: &'a [JobEvent],
                }
                return ctx.print_json(&JobWithHistory {
                    job: &job,
                    events: &events,
                });
            }
            let now = Utc::now();
            let mut text = job_fields(&job, now);
            text.push_str("\nhistory:\n");
            text.push_str(&indent(&events_table(&events, now).render(width_less(2))));
            out(&text);
            Ok(())
        }
        JobsCommand::Events { id } => {
            let id = resolve_id(&ctx, &id).await?;
            let events = ctx.call(ctx.client.events(id)).await?;
            if ctx.json {
                return ctx.print_doc("events", &events);
            }
            events_table(&events, Utc::now()).print();
            Ok(())
        }
        JobsCommand::Cancel { id } => {
            let id = resolve_id(&ctx, &id).await?;
            let job = ctx.call(ctx.client.cancel(id)).await?;
            if ctx.json {
                return ctx.print_doc("job", &job);
            }
            if job.state == JobState::Cancelled {
                out(&format!("cancelled job {}\n", job.id));
            } else {
                out(&format!(
                    "cancel requested: job {} is {}; its worker is asked to stop\n",
                    job.id, job.state
                ));
            }
            Ok(())
        }
        JobsCommand::Replay { id } => {
            let id = resolve_id(&ctx, &id).await?;
            let job = ctx.call(ctx.client.replay(id)).await?;
            if ctx.json {
                return ctx.print_doc("job", &job);
            }
            out(&format!(
                "replayed job {}: {} on queue {} (attempt budget {})\n",
                job.id, job.state, job.queue, job.max_attempts
            ));
            Ok(())
        }
    }
}

/// One page (or, with `--all`, every page) of `query`.
pub(crate) async fn list(
    ctx: &Ctx,
    mut query: JobQuery,
    page: &PageArgs,
) -> Result<JobPage, CliError> {
    query.limit = page.limit.or(page.all.then_some(500));
    query.cursor = page.cursor.clone();
    let mut jobs = Vec::new();
    loop {
        let got = ctx.call(ctx.client.list_jobs(&query)).await?;
        jobs.extend(got.jobs);
        match got.next_cursor {
            Some(cursor) if page.all => query.cursor = Some(cursor),
            next_cursor => return Ok(JobPage { jobs, next_cursor }),
        }
    }
}

/// The jobs summary: id, queue, kind, state, attempts, age, last error.
fn print_jobs(page: &JobPage) {
    if page.jobs.is_empty() {
        out("no jobs\n");
    } else {
        let now = Utc::now();
        let mut t = Table::new(&[
            "ID",
            "QUEUE",
            "KIND",
            "STATE",
            "ATTEMPTS",
            "AGE",
            "LAST ERROR",
        ])
        .flex("LAST ERROR");
        for job in &page.jobs {
            t.row(vec![
                job.id.to_string(),
                job.queue.clone(),
                job.kind.clone(),
                state_label(job, now),
                format!("{}/{}", job.attempt, job.max_attempts),
                format::ago(job.created_at, now),
                job.last_error.clone().unwrap_or_default(),
            ]);
        }
        t.print();
    }
    more_hint(page);
}

/// Tells (on stderr, so stdout stays a table) how to get the next page.
pub(crate) fn more_hint(page: &JobPage) {
    if let Some(cursor) = &page.next_cursor {
        eprintln!("more jobs: add --cursor {cursor} (or --all)");
    }
}

/// The state, with when a scheduled job runs or that a cancel is pending.
pub(crate) fn state_label(job: &Job, now: DateTime<Utc>) -> String {
    match job.state {
        JobState::Queued if job.run_at > now => {
            format!("queued ({})", format::ago(job.run_at, now))
        }
        JobState::Running if job.cancel_requested => "running (cancel requested)".to_owned(),
        state => state.to_string(),
    }
}

fn job_fields(job: &Job, now: DateTime<Utc>) -> String {
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut pairs = vec![
        ("id", job.id.to_string()),
        ("queue", job.queue.clone()),
        ("kind", job.kind.clone()),
        ("state", state_label(job, now)),
        (
            "attempt",
            format!("{} of {}", job.attempt, job.max_attempts),
        ),
        ("priority", job.priority.to_string()),
        ("tags", job.tags.join(", ")),
        ("created", format::time_ago(Some(job.created_at), now)),
        ("run at", format::time_ago(Some(job.run_at), now)),
        ("started", format::time_ago(job.started_at, now)),
        ("finished", format::time_ago(job.finished_at, now)),
        ("updated", format::time_ago(Some(job.updated_at), now)),
        ("expires", format::time_ago(job.expires_at, now)),
        (
            "timeout",
            job.timeout_ms.map(format::duration_ms).unwrap_or_default(),
        ),
        ("worker", opt(&job.worker_id)),
        ("lease expires", format::time_ago(job.lease_expires_at, now)),
        ("heartbeat", format::time_ago(job.heartbeat_at, now)),
        (
            "cancel requested",
            if job.cancel_requested { "yes" } else { "" }.to_owned(),
        ),
        ("idempotency key", opt(&job.idempotency_key)),
        ("unique key", opt(&job.unique_key)),
        ("last error", opt(&job.last_error)),
    ];
    if let (Some(started), Some(finished)) = (job.started_at, job.finished_at) {
        let ms = (finished - started).num_milliseconds();
        pairs.push(("ran for", format::duration_ms(ms)));
    }
    pairs.push(("payload", format::pretty_json(&job.payload)));
    pairs.push((
        "result",
        job.result
            .as_ref()
            .map(format::pretty_json)
            .unwrap_or_default(),
    ));
    pairs.push((
        "progress",
        job.progress
            .as_ref()
            .map(format::pretty_json)
            .unwrap_or_default(),
    ));
    format::fields(&pairs)
}

fn events_table(events: &[JobEvent], now: DateTime<Utc>) -> Table {
    let mut t = Table::new(&["AT", "AGE", "EVENT", "ATTEMPT", "WORKER", "DETAIL"])
        .flex("DETAIL")
        .numeric(&["ATTEMPT"]);
    for e in events {
        t.row(vec![
            format::time(e.at),
            format::ago(e.at, now),
            e.event.clone(),
            e.attempt.to_string(),
            e.worker_id.clone().unwrap_or_default(),
            e.detail.clone().unwrap_or_default(),
        ]);
    }
    t
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn width_less(n: usize) -> Option<usize> {
    format::terminal_width().map(|w| w.saturating_sub(n))
}

/// Shortest id prefix taken (shorter ones match too many jobs to be useful).
const MIN_PREFIX: usize = 4;

/// The job `text` names: a whole id, or the first hex digits of exactly
/// one job's id (as copied from a narrow table or a log line).
async fn resolve_id(ctx: &Ctx, text: &str) -> Result<Uuid, CliError> {
    if let Ok(id) = Uuid::try_parse(text) {
        return Ok(id);
    }
    let digits = text.chars().filter(|c| *c != '-').count();
    if digits < MIN_PREFIX || !text.chars().all(|c| c == '-' || c.is_ascii_hexdigit()) {
        return Err(CliError::Usage(format!(
            "{text:?} is neither a job id nor the first {MIN_PREFIX} or more hex digits of one"
        )));
    }
    let query = JobQuery::new().id_prefix(text).limit(3);
    let page = ctx.call(ctx.client.list_jobs(&query)).await?;
    match page.jobs.as_slice() {
        [job] => Ok(job.id),
        [] => Err(CliError::Failed(format!("no job id starts with {text}"))),
        many => {
            let ids: Vec<String> = many.iter().map(|j| j.id.to_string()).collect();
            let more = if page.next_cursor.is_some() {
                ", ..."
            } else {
                ""
            };
            Err(CliError::Usage(format!(
                "ambiguous id prefix {text}: it matches {}{more}",
                ids.join(", ")
            )))
        }
    }
}
