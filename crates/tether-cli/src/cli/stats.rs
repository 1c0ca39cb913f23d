//! `tether stats [--watch [INTERVAL]]`: per-queue health at a glance.

use std::time::Duration;

use chrono::{SubsecRound, Utc};
use tether_client::Queue;

use super::format::{self, Table};
use super::{out, CliError, Conn, Ctx};

/// `tether stats …`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Only these queues [default: every queue].
    queues: Vec<String>,
    /// Refresh every INTERVAL (default 2s) until Ctrl-C; in place on a terminal.
    #[arg(
        long,
        value_name = "INTERVAL",
        num_args = 0..=1,
        default_missing_value = "2s",
        value_parser = super::millis
    )]
    watch: Option<i64>,
    /// A queue whose oldest ready job has waited this long while none of
    /// its jobs runs reads "stuck" (nobody is claiming it).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = super::millis)]
    stuck_after: i64,
}

pub(crate) async fn run(args: StatsArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    let Some(every) = args.watch else {
        let queues = fetch(&ctx, &args.queues).await?;
        return print(&ctx, &queues, args.stuck_after);
    };
    let every = Duration::from_millis(every.max(100) as u64);
    // Registered once, before the first frame: a Ctrl-C that lands while a
    // frame is fetched or printed is kept for the next wait, not lost (a
    // fresh `ctrl_c()` per wait would miss it and, with the handler
    // installed, leave the process running).
    let mut interrupt = Interrupt::install()
        .map_err(|e| CliError::Failed(format!("cannot watch for Ctrl-C: {e}")))?;
    let tty = super::stdout_is_tty() && !ctx.json;
    if tty {
        super::out_raw("\x1b[?25l\x1b[2J");
    }
    let outcome = loop {
        let frame = match fetch(&ctx, &args.queues).await {
            Ok(queues) if ctx.json => {
                // One compact document per line (JSON Lines) while watching.
                out(&format!("{}\n", super::Doc::compact("queues", &queues)));
                None
            }
            Ok(queues) => Some(render(&queues, args.stuck_after)),
            Err(e) => Some(format!("error: {e}\n")),
        };
        if let Some(frame) = frame {
            let head = format!(
                "tether stats · {} · every {} · {} (Ctrl-C to stop)\n\n",
                ctx.url,
                format::duration_ms(every.as_millis() as i64),
                format::time(Utc::now().trunc_subsecs(0))
            );
            if tty {
                // Home, each line cleared to its end, the rest of the screen
                // cleared: our controls around text made safe first.
                let body: String = format!("{head}{frame}")
                    .lines()
                    .map(|l| format!("{}\x1b[K\n", format::visible(l)))
                    .collect();
                super::out_raw(&format!("\x1b[H{body}\x1b[J"));
            } else {
                out(&format!("{head}{frame}\n"));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = interrupt.recv() => break Ok(()),
        }
    };
    if tty {
        super::out_raw("\x1b[?25h");
    }
    outcome
}

async fn fetch(ctx: &Ctx, only: &[String]) -> Result<Vec<Queue>, CliError> {
    if only.is_empty() {
        return ctx.call(ctx.client.list_queues()).await;
    }
    let mut queues = Vec::with_capacity(only.len());
    for name in only {
        queues.push(ctx.call(ctx.client.get_queue(name)).await?);
    }
    Ok(queues)
}

fn print(ctx: &Ctx, queues: &[Queue], stuck_after: i64) -> Result<(), CliError> {
    if ctx.json {
        return ctx.print_doc("queues", &queues);
    }
    out(&render(queues, stuck_after));
    Ok(())
}

fn render(queues: &[Queue], stuck_after: i64) -> String {
    if queues.is_empty() {
        return "no queues yet\n".to_owned();
    }
    let mut t = Table::new(&[
        "QUEUE",
        "HEALTH",
        "QUEUED",
        "READY",
        "SCHEDULED",
        "WAITING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "CANCELLED",
        "OLDEST READY",
        "EXPIRED LEASES",
    ])
    .numeric(&[
        "QUEUED",
        "READY",
        "SCHEDULED",
        "WAITING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "CANCELLED",
        "OLDEST READY",
        "EXPIRED LEASES",
    ]);
    let mut total = tether_client::StateCounts::default();
    for q in queues {
        let c = &q.counts;
        total.queued += c.queued;
        total.waiting += c.waiting;
        total.running += c.running;
        total.succeeded += c.succeeded;
        total.failed += c.failed;
        total.cancelled += c.cancelled;
        t.row(vec![
            q.name.clone(),
            health(q, stuck_after),
            c.queued.to_string(),
            q.ready.to_string(),
            q.scheduled.to_string(),
            c.waiting.to_string(),
            c.running.to_string(),
            c.succeeded.to_string(),
            c.failed.to_string(),
            c.cancelled.to_string(),
            if q.ready > 0 {
                format::duration_ms(q.oldest_ready_age_ms)
            } else {
                "-".to_owned()
            },
            q.expired_leases.to_string(),
        ]);
    }
    let mut text = t.render(format::terminal_width());
    text.push_str(&format!(
        "\n{}: {} queued, {} waiting, {} running, {} succeeded, {} failed, {} cancelled\n",
        format::plural(queues.len() as u64, "queue"),
        total.queued,
        total.waiting,
        total.running,
        total.succeeded,
        total.failed,
        total.cancelled
    ));
    text
}

/// One word on what needs attention first.
fn health(q: &Queue, stuck_after: i64) -> String {
    let mut notes = Vec::new();
    if q.paused {
        notes.push("paused");
    }
    if q.expired_leases > 0 {
        notes.push("expired leases");
    }
    // Ready work waiting past the threshold while none of the queue's
    // jobs runs: no worker is claiming it. (GET /v1/workers is read from
    // the same running jobs, so it would tell nothing more.)
    if !q.paused && q.ready > 0 && q.counts.running == 0 && q.oldest_ready_age_ms >= stuck_after {
        notes.push("stuck");
    }
    if q.counts.failed > 0 {
        notes.push("dead letters");
    }
    if notes.is_empty() {
        "ok".to_owned()
    } else {
        notes.join(", ")
    }
}

/// SIGINT (Ctrl-C), listened for from the moment it is installed.
struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn install() -> std::io::Result<Interrupt> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Interrupt {
                signal: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Interrupt {})
        }
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            self.signal.recv().await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
