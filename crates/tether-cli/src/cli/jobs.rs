//! `tether jobs ls | show | wait | events | cancel | replay`.

use chrono::{DateTime, Utc};
use clap::Subcommand;
use tether_client::{DependencyJob, Job, JobEvent, JobPage, JobQuery, JobState};
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
    /// One job: its fields, payload, result, progress, what it waits for,
    /// what waits for it, and its history.
    Show {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        id: String,
    },
    /// Wait until a job has finished (or --timeout has passed), then show it.
    /// Exits 0 if it succeeded, 1 otherwise (failed, cancelled, or not
    /// finished in time).
    Wait {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        id: String,
        /// How long to wait.
        #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::duration::parse)]
        timeout: std::time::Duration,
    },
    /// A job's history, oldest first.
    Events {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        id: String,
    },
    /// Cancel a job: a waiting or queued one at once, a running one is asked to stop.
    /// Without an id: every job the selection names (--queue, with
    /// --state, --kind, --tag), in batches, asking first when it is more than one.
    Cancel {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        #[arg(required_unless_present = "queue")]
        id: Option<String>,
        #[command(flatten)]
        select: Selection,
    },
    /// Queue a finished job again (a succeeded one runs again), with a fresh attempt budget.
    /// Without an id: every job the selection names (--queue, --state,
    /// --kind, --tag), in batches, asking first when it is more than one.
    Replay {
        /// The job's id, or its first hex digits (at least 4) if they name one job.
        #[arg(required_unless_present = "queue")]
        id: Option<String>,
        #[command(flatten)]
        select: Selection,
    },
}

/// The jobs a bulk cancel or replay acts on.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Many jobs at once (instead of an id)")]
struct Selection {
    /// Every job of this queue...
    #[arg(long, conflicts_with = "id")]
    queue: Option<String>,
    /// ...in this state (cancel: waiting, queued or running; replay: succeeded,
    /// failed or cancelled) [default: cancel queued, replay failed].
    #[arg(long, value_parser = super::job_state, requires = "queue")]
    state: Option<JobState>,
    /// ...of this kind.
    #[arg(long, requires = "queue")]
    kind: Option<String>,
    /// ...carrying this tag.
    #[arg(long, requires = "queue")]
    tag: Option<String>,
    /// Do not ask before acting on more than one job (needed when stdin is
    /// not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only this state: waiting, queued, running, succeeded, failed or cancelled.
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
    /// Only jobs created at or after this: an RFC 3339 time, or a duration
    /// meaning that long ago (e.g. 1h30m).
    #[arg(long, value_name = "TIME|AGO", value_parser = instant_or_ago)]
    created_after: Option<DateTime<Utc>>,
    /// Only jobs created before this (an RFC 3339 time, or a duration ago).
    #[arg(long, value_name = "TIME|AGO", value_parser = instant_or_ago)]
    created_before: Option<DateTime<Utc>>,
    /// Only the jobs that wait directly for this job (an id, or its first
    /// hex digits).
    #[arg(long, value_name = "ID")]
    depends_on: Option<String>,
    /// Only the jobs of this workflow (its whole id).
    #[arg(long, value_name = "ID", value_parser = workflow_id)]
    workflow: Option<Uuid>,
    #[command(flatten)]
    page: PageArgs,
}

fn workflow_id(text: &str) -> Result<Uuid, String> {
    Uuid::try_parse(text.trim())
        .map_err(|_| format!("{text:?} is not a workflow id (the whole id)"))
}

/// Paging options shared by `jobs ls` and `dlq ls`.
#[derive(Debug, Default, clap::Args)]
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

impl PageArgs {
    /// Every page, as `--all`.
    fn every() -> PageArgs {
        PageArgs {
            all: true,
            ..PageArgs::default()
        }
    }
}

pub(crate) async fn run(args: JobsArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    match args.command {
        JobsCommand::Ls(ls) => {
            let depends_on = match &ls.depends_on {
                Some(id) => Some(resolve_id(&ctx, id).await?),
                None => None,
            };
            let query = JobQuery {
                queue: ls.queue,
                state: ls.state,
                kind: ls.kind,
                tag: ls.tag,
                id_prefix: ls.id_prefix,
                created_after: ls.created_after,
                created_before: ls.created_before,
                depends_on,
                workflow_id: ls.workflow,
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
            let dependencies = if job.depends_on.is_empty() {
                Vec::new()
            } else {
                ctx.call(ctx.client.dependencies(id)).await?
            };
            let dependents_query = JobQuery::new().depends_on(id).limit(DEPENDENTS_SHOWN);
            let dependents = ctx.call(ctx.client.list_jobs(&dependents_query)).await?;
            let events = ctx.call(ctx.client.events(id)).await?;
            if ctx.json {
                #[derive(serde::Serialize)]
                struct JobWithHistory<'a> {
                    job: &'a Job,
                    dependencies: &'a [DependencyJob],
                    dependents: &'a [Job],
                    events: &'a [JobEvent],
                }
                return ctx.print_json(&JobWithHistory {
                    job: &job,
                    dependencies: &dependencies,
                    dependents: &dependents.jobs,
                    events: &events,
                });
            }
            let now = Utc::now();
            let mut text = job_fields(&job, now);
            if !job.depends_on.is_empty() {
                text.push_str(&format!(
                    "\nwaits for ({} if one fails):\n",
                    match job.dependency_failure {
                        tether_client::DependencyFailure::Cancel => "cancelled",
                        tether_client::DependencyFailure::Run => "runs anyway",
                    }
                ));
                let table = dependencies_table(&job.depends_on, &dependencies, now);
                text.push_str(&indent(&table.render(width_less(2))));
            }
            if !dependents.jobs.is_empty() {
                text.push_str("\nwaited for by:\n");
                let table = dependents_table(&dependents.jobs, now);
                text.push_str(&indent(&table.render(width_less(2))));
                if dependents.next_cursor.is_some() {
                    text.push_str(&format!(
                        "  ... and more: tether jobs ls --depends-on {id} --all\n"
                    ));
                }
            }
            text.push_str("\nhistory:\n");
            text.push_str(&indent(&events_table(&events, now).render(width_less(2))));
            out(&text);
            Ok(())
        }
        JobsCommand::Wait { id, timeout } => {
            let id = resolve_id(&ctx, &id).await?;
            let job = ctx.call(ctx.client.wait_job(id, timeout)).await?;
            if ctx.json {
                ctx.print_doc("job", &job)?;
            } else {
                out(&job_fields(&job, Utc::now()));
            }
            match job.state {
                JobState::Succeeded => Ok(()),
                state if state.is_terminal() => Err(CliError::Failed(format!("job {id} {state}"))),
                state => Err(CliError::Failed(format!(
                    "job {id} is still {state} after {}",
                    humantime::format_duration(timeout)
                ))),
            }
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
        JobsCommand::Cancel { id: None, select } => bulk(&ctx, Bulk::Cancel, select).await,
        JobsCommand::Replay { id: None, select } => bulk(&ctx, Bulk::Replay, select).await,
        JobsCommand::Cancel { id: Some(id), .. } => {
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
        JobsCommand::Replay { id: Some(id), .. } => {
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
        super::note(&format!("more jobs: add --cursor {cursor} (or --all)"));
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
        (
            "headers",
            job.headers
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
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
        (
            "workflow",
            job.workflow_id
                .map(|w| format!("{w} (tether workflows show {w})"))
                .unwrap_or_default(),
        ),
        ("idempotency key", opt(&job.idempotency_key)),
        ("unique key", opt(&job.unique_key)),
        ("last error", opt(&job.last_error)),
    ];
    if let (Some(started), Some(finished)) = (job.started_at, job.finished_at) {
        let ms = (finished - started).num_milliseconds();
        pairs.push(("ran for", format::duration_ms(ms)));
    }
    let json =
        |v: &Option<serde_json::Value>| v.as_ref().map(format::pretty_json).unwrap_or_default();
    let blocks = [
        ("payload", format::pretty_json(&job.payload)),
        ("result", json(&job.result)),
        ("progress", json(&job.progress)),
    ];
    format::fields_and_blocks(&pairs, &blocks)
}

/// Most jobs that wait for a job `jobs show` lists (one page).
const DEPENDENTS_SHOWN: u32 = 50;

/// What a job waits for, in the order it named them; one removed by
/// retention is listed as such.
fn dependencies_table(ids: &[Uuid], found: &[DependencyJob], now: DateTime<Utc>) -> Table {
    let mut t = Table::new(&["ID", "KIND", "STATE", "FINISHED", "LAST ERROR"]).flex("LAST ERROR");
    for id in ids {
        let row = match found.iter().find(|d| d.id == *id) {
            Some(d) => vec![
                d.id.to_string(),
                d.kind.clone(),
                d.state.to_string(),
                format::ago_opt(d.finished_at, now),
                d.last_error.clone().unwrap_or_default(),
            ],
            None => vec![
                id.to_string(),
                String::new(),
                "(removed by retention)".to_owned(),
                String::new(),
                String::new(),
            ],
        };
        t.row(row);
    }
    t
}

/// The jobs that wait for a job.
fn dependents_table(jobs: &[Job], now: DateTime<Utc>) -> Table {
    let mut t = Table::new(&["ID", "QUEUE", "KIND", "STATE"]);
    for job in jobs {
        t.row(vec![
            job.id.to_string(),
            job.queue.clone(),
            job.kind.clone(),
            state_label(job, now),
        ]);
    }
    t
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
pub(crate) async fn resolve_id(ctx: &Ctx, text: &str) -> Result<Uuid, CliError> {
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

/// What a bulk command does to each job.
#[derive(Clone, Copy)]
enum Bulk {
    Cancel,
    Replay,
}

impl Bulk {
    fn verb(self) -> &'static str {
        match self {
            Bulk::Cancel => "cancel",
            Bulk::Replay => "replay",
        }
    }

    fn done(self) -> &'static str {
        match self {
            Bulk::Cancel => "cancelled",
            Bulk::Replay => "replayed",
        }
    }

    /// Why a job listed for it was skipped: it changed state since it was
    /// listed, so the server answered `invalid_state`.
    fn skipped(self) -> &'static str {
        match self {
            Bulk::Cancel => "already finished",
            Bulk::Replay => "not finished",
        }
    }
}

/// Jobs per bulk request (the API's limit).
const BULK_BATCH: usize = 500;

/// Cancels or replays every job `select` names: lists them first (so each
/// is acted on once, whatever they become meanwhile), asks, then sends
/// them in batches with a progress bar on a terminal.
async fn bulk(ctx: &Ctx, what: Bulk, select: Selection) -> Result<(), CliError> {
    let default_state = match what {
        Bulk::Cancel => JobState::Queued,
        Bulk::Replay => JobState::Failed,
    };
    let mut query = JobQuery::new().state(select.state.unwrap_or(default_state));
    query.queue = select.queue;
    query.kind = select.kind;
    query.tag = select.tag;
    let found = list(ctx, query, &PageArgs::every()).await?;
    let ids: Vec<Uuid> = found.jobs.iter().map(|j| j.id).collect();
    let many = super::format::plural(ids.len() as u64, "job");
    if ids.len() > 1 && !select.yes {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return Err(CliError::Usage(format!(
                "this would {} {many}: pass --yes to go ahead",
                what.verb()
            )));
        }
        eprint!("{} {many}? [y/N] ", capitalized(what.verb()));
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(CliError::Failed("nothing done".to_owned()));
        }
    }
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::new(ids.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut done = 0u64;
    let mut skipped = Vec::new();
    let mut failed = Vec::new();
    for batch in ids.chunks(BULK_BATCH) {
        let answers = match what {
            Bulk::Cancel => ctx.call(ctx.client.cancel_jobs(batch)).await?,
            Bulk::Replay => ctx.call(ctx.client.replay_jobs(batch)).await?,
        };
        for answer in answers {
            match answer.result {
                Ok(_) => done += 1,
                Err(e) if e.code() == Some(tether_client::ErrorCode::InvalidState) => {
                    skipped.push(answer.id)
                }
                Err(e) => failed.push(Failed {
                    id: answer.id,
                    error: e.to_string(),
                }),
            }
        }
        bar.inc(batch.len() as u64);
    }
    bar.finish_and_clear();
    let outcome = if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "{} could not be {}",
            super::format::plural(failed.len() as u64, "job"),
            what.done()
        )))
    };
    if ctx.json {
        ctx.print_json(&Summary {
            done,
            skipped,
            failed,
        })?;
        return outcome;
    }
    let mut text = format!(
        "{} {}, {} skipped ({})\n",
        what.done(),
        super::format::plural(done, "job"),
        skipped.len(),
        what.skipped()
    );
    for f in &failed {
        text.push_str(&format!("  {}: {}\n", f.id, format::visible(&f.error)));
    }
    out(&text);
    outcome
}

/// What a bulk cancel or replay did, as `--json` prints it.
#[derive(serde::Serialize)]
struct Summary {
    /// Jobs cancelled or replayed.
    done: u64,
    /// Jobs that changed state since they were listed.
    skipped: Vec<Uuid>,
    /// Jobs the server refused for another reason.
    failed: Vec<Failed>,
}

/// A job a bulk command could not act on, and why.
#[derive(serde::Serialize)]
struct Failed {
    id: Uuid,
    error: String,
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// An RFC 3339 instant, or a duration meaning that long before now.
fn instant_or_ago(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text.trim()) {
        return Ok(at.with_timezone(&Utc));
    }
    let ago = crate::duration::parse(text).map_err(|_| {
        format!("{text:?} is neither an RFC 3339 time nor a duration such as 1h30m")
    })?;
    chrono::Duration::from_std(ago)
        .ok()
        .and_then(|ago| Utc::now().checked_sub_signed(ago))
        .ok_or_else(|| format!("{text:?} is too long ago"))
}
