//! `tether events`: the history as it is committed, one line per event,
//! until Ctrl-C (the live stream, `GET /v1/events`; it resumes by itself
//! after a dropped connection, so no event is missed or shown twice).

use tether_client::{StreamFilter, StreamItem};
use uuid::Uuid;

use super::format;
use super::jobs::resolve_id;
use super::{out, CliError, Conn, Ctx, Doc};

/// `tether events …`.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Only the events of jobs of this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only this job's events (its id, or its first hex digits).
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// Only the events of this workflow's jobs.
    #[arg(long, value_name = "ID")]
    workflow: Option<Uuid>,
    /// Only these events (repeat, or separate with commas): enqueued,
    /// claimed, succeeded, failed, retry_scheduled, cancelled, ...
    #[arg(long = "event", value_name = "NAME", value_delimiter = ',')]
    events: Vec<String>,
    /// Start right after this cursor (printed with each event by --json)
    /// instead of with what is committed from now on.
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

pub(crate) async fn run(args: EventsArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    let job_id = match &args.job {
        Some(text) => Some(resolve_id(&ctx, text).await?),
        None => None,
    };
    let filter = StreamFilter {
        queue: args.queue,
        job_id,
        workflow_id: args.workflow,
        events: args.events,
        after: args.after,
    };
    let mut stream = ctx.client.stream_events(&filter);
    loop {
        let item = tokio::select! {
            item = stream.next() => ctx.call(async { item }).await?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        if ctx.json {
            // One compact document per line (JSON Lines).
            match &item {
                StreamItem::Event(e) => out(&format!("{}\n", Doc::compact("event", e))),
                StreamItem::Gap { oldest } => out(&format!("{}\n", Doc::compact("gap", oldest))),
            }
            continue;
        }
        match item {
            StreamItem::Event(e) => out(&format!(
                "{}  {:<16} {}/{}  {}  attempt {}{}{}\n",
                format::time(e.at),
                e.event,
                e.queue,
                e.kind,
                e.job_id,
                e.attempt,
                e.worker_id.map(|w| format!("  worker {w}")).unwrap_or_default(),
                e.detail.map(|d| format!("  {d}")).unwrap_or_default(),
            )),
            StreamItem::Gap { .. } => out(
                "-- events were removed by retention before they could be shown; going on after them\n",
            ),
        }
    }
}
