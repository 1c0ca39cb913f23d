//! `tether dlq ls | replay`: the dead-letter queue is the `failed` jobs.

use std::io::IsTerminal;

use chrono::Utc;
use clap::Subcommand;
use tether_client::{BulkReplay, JobQuery, JobState};

use super::format::{self, Table};
use super::jobs::PageArgs;
use super::{out, CliError, Conn, Ctx};

/// Jobs per replay round when `--limit` is not given.
const ROUND: u32 = 1_000;

/// `tether dlq …`.
#[derive(Debug, clap::Args)]
pub struct DlqArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: DlqCommand,
}

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// Failed jobs, newest first, with their last error.
    Ls {
        /// Only this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only this kind.
        #[arg(long)]
        kind: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Queue a queue's failed jobs again (one round of --limit; --all: until none is left).
    Replay {
        /// The queue.
        queue: String,
        /// Only jobs of this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Jobs per round, 1–10000 [default: 1000].
        #[arg(long)]
        limit: Option<u32>,
        /// Replay in rounds until no failed job is left.
        #[arg(long)]
        all: bool,
    },
}

pub(crate) async fn run(args: DlqArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    match args.command {
        DlqCommand::Ls { queue, kind, page } => {
            let query = JobQuery {
                queue,
                kind,
                state: Some(JobState::Failed),
                ..JobQuery::default()
            };
            let page = super::jobs::list(&ctx, query, &page).await?;
            if ctx.json {
                return ctx.print_json(&page);
            }
            if page.jobs.is_empty() {
                out("the dead-letter queue is empty\n");
            } else {
                let now = Utc::now();
                let mut t =
                    Table::new(&["ID", "QUEUE", "KIND", "ATTEMPTS", "FAILED", "LAST ERROR"])
                        .flex("LAST ERROR");
                for job in &page.jobs {
                    t.row(vec![
                        job.id.to_string(),
                        job.queue.clone(),
                        job.kind.clone(),
                        format!("{}/{}", job.attempt, job.max_attempts),
                        format::ago_opt(job.finished_at, now),
                        job.last_error.clone().unwrap_or_default(),
                    ]);
                }
                t.print();
            }
            super::jobs::more_hint(&page);
            Ok(())
        }
        DlqCommand::Replay {
            queue,
            kind,
            limit,
            all,
        } => replay(&ctx, &queue, kind, limit, all).await,
    }
}

async fn replay(
    ctx: &Ctx,
    queue: &str,
    kind: Option<String>,
    limit: Option<u32>,
    all: bool,
) -> Result<(), CliError> {
    let round = limit.unwrap_or(ROUND);
    let show_bar = all && !ctx.json && super::stdout_is_tty() && std::io::stderr().is_terminal();
    // The total is known when every failed job of the queue is wanted.
    let total = if show_bar && kind.is_none() {
        Some(ctx.call(ctx.client.get_queue(queue)).await?.counts.failed as u64)
    } else {
        None
    };
    let mut bar = Progress::new(show_bar, total);
    let mut filter = BulkReplay {
        state: Some(JobState::Failed),
        kind: kind.clone(),
        limit: Some(round),
        ..BulkReplay::default()
    };
    let mut replayed = 0u64;
    let mut rounds = 0u32;
    // Each round continues after the last job the previous one looked at
    // (the server's cursor), so every job that was failed when the replay
    // began is taken once: a job that fails again meanwhile is not replayed
    // a second time, nor counted twice, and the loop ends.
    let more = loop {
        let got = match ctx
            .call(ctx.client.replay_queue_round(queue, &filter))
            .await
        {
            Ok(got) => got,
            Err(e) => {
                bar.finish();
                if replayed > 0 {
                    super::note(&format!(
                        "replayed {} before the error",
                        format::plural(replayed, "job")
                    ));
                }
                return Err(e);
            }
        };
        replayed += got.replayed;
        rounds += 1;
        bar.update(replayed);
        match got.next_cursor {
            Some(cursor) if all => filter.cursor = Some(cursor),
            next => break next.is_some(),
        }
    };
    bar.finish();
    // Jobs of the selection that are failed now: they failed (again) while
    // the replay ran, e.g. replayed jobs whose handler fails at once.
    let failed_after = if all {
        Some(failed_now(ctx, queue, kind.as_deref()).await?)
    } else {
        None
    };
    if ctx.json {
        #[derive(serde::Serialize)]
        struct Replayed {
            replayed: u64,
            rounds: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            failed_after: Option<u64>,
        }
        return ctx.print_json(&Replayed {
            replayed,
            rounds,
            failed_after: failed_after.map(|(n, _)| n),
        });
    }
    let what = match &kind {
        Some(k) => format::plural(replayed, &format!("failed {k} job")),
        None => format::plural(replayed, "failed job"),
    };
    if all && rounds > 1 {
        out(&format!(
            "replayed {what} of queue {queue} in {rounds} rounds\n"
        ));
    } else {
        out(&format!("replayed {what} of queue {queue}\n"));
    }
    if let Some((n, at_least)) = failed_after.filter(|(n, _)| *n > 0) {
        let count = if at_least {
            format!("at least {n}")
        } else {
            n.to_string()
        };
        super::warn(&format!(
            "{count} {what} are in queue {queue} again: they failed while the replay ran \
             (see: tether dlq ls --queue {queue})"
        ));
    }
    if !all && more {
        super::note("more failed jobs may be left: add --all to replay until none is");
    }
    Ok(())
}

/// How many failed jobs (of `kind`) the queue holds now; `true` when there
/// are more than one page shows (then the number is a lower bound).
async fn failed_now(ctx: &Ctx, queue: &str, kind: Option<&str>) -> Result<(u64, bool), CliError> {
    match kind {
        None => {
            let q = ctx.call(ctx.client.get_queue(queue)).await?;
            Ok((q.counts.failed.max(0) as u64, false))
        }
        Some(kind) => {
            let query = JobQuery::new()
                .queue(queue)
                .kind(kind)
                .state(JobState::Failed)
                .limit(500);
            let page = ctx.call(ctx.client.list_jobs(&query)).await?;
            Ok((page.jobs.len() as u64, page.next_cursor.is_some()))
        }
    }
}

/// A progress bar on stderr (only on a terminal): a bar with the count
/// when the total is known, else a spinner with the count.
struct Progress(indicatif::ProgressBar);

impl Progress {
    fn new(on: bool, total: Option<u64>) -> Progress {
        let bar = match (on, total) {
            (false, _) => indicatif::ProgressBar::hidden(),
            (true, Some(total)) => indicatif::ProgressBar::new(total),
            (true, None) => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_message("replaying");
        Progress(bar)
    }

    fn update(&self, done: u64) {
        self.0.set_position(done);
    }

    fn finish(&mut self) {
        // Cleared, so that the summary starts on a clean line.
        self.0.finish_and_clear();
    }
}
