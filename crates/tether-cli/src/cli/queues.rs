//! `tether queues ls | show | pause | resume | rm | config | throughput`.

use chrono::Utc;
use clap::Subcommand;
use tether_client::{Queue, QueueConfigPatch, RateLimit, Throughput, ThroughputMinute};

use super::format::{self, Table};
use super::{out, warn, CliError, Conn, Ctx};

/// `tether queues …`.
#[derive(Debug, clap::Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: QueuesCommand,
}

#[derive(Debug, Subcommand)]
enum QueuesCommand {
    /// Every queue with its counts and settings.
    Ls,
    /// One queue's health and settings (any name: an unused queue shows zeros).
    Show {
        /// The queue.
        queue: String,
    },
    /// Stop handing out jobs (enqueues are still accepted).
    Pause {
        /// The queue.
        queue: String,
    },
    /// Remove an empty queue (its pause flag and settings): for a name
    /// made by a typo. A queue holding any job is refused.
    Rm {
        /// The queue.
        queue: String,
    },
    /// Hand out jobs again.
    Resume {
        /// The queue.
        queue: String,
    },
    /// Jobs finished per minute (succeeded, failed, retried, cancelled)
    /// and the wait and run percentiles of the jobs that finished.
    Throughput {
        /// The queue.
        queue: String,
        /// How many minutes, ending with the current one (1–1440).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=1440))]
        minutes: u32,
    },
    /// Change the settings later jobs copy (none given: show them).
    Config {
        /// The queue.
        queue: String,
        /// Attempts before a job fails for good.
        #[arg(long)]
        max_attempts: Option<i32>,
        /// Delay before the first retry (e.g. 1s).
        #[arg(long, value_parser = super::millis, value_name = "DURATION")]
        backoff_base: Option<i64>,
        /// Largest delay between retries (e.g. 1h).
        #[arg(long, value_parser = super::millis, value_name = "DURATION")]
        backoff_cap: Option<i64>,
        /// Lease length of claims that do not set one (e.g. 30s).
        #[arg(long, value_parser = super::millis, value_name = "DURATION")]
        lease_ttl: Option<i64>,
        /// At most this many running jobs across every worker (`none`
        /// removes the limit).
        #[arg(long, value_parser = limit, value_name = "N|none")]
        max_running: Option<Limit>,
        /// At most COUNT jobs handed out in any PERIOD, e.g. `100/1m`
        /// (`none` removes the limit).
        #[arg(long, value_parser = rate, value_name = "COUNT/PERIOD|none")]
        rate: Option<Rate>,
        /// At most this many running jobs per concurrency key (`none`
        /// removes the limit).
        #[arg(long, value_parser = limit, value_name = "N|none")]
        key_max_running: Option<Limit>,
        /// Claims take concurrency keys in turn (`--fair=false` to stop).
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        fair: Option<bool>,
    },
}

pub(crate) async fn run(args: QueuesArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    match args.command {
        QueuesCommand::Ls => {
            let queues = ctx.call(ctx.client.list_queues()).await?;
            if ctx.json {
                return ctx.print_doc("queues", &queues);
            }
            if queues.is_empty() {
                out("no queues yet\n");
                return Ok(());
            }
            let mut t = Table::new(&[
                "QUEUE",
                "STATUS",
                "READY",
                "SCHEDULED",
                "WAITING",
                "RUNNING",
                "SUCCEEDED",
                "FAILED",
                "CANCELLED",
                "MAX ATTEMPTS",
                "BACKOFF",
                "LEASE",
                "MAX RUNNING",
                "RATE",
                "KEY MAX",
                "FAIR",
            ])
            .numeric(&[
                "READY",
                "SCHEDULED",
                "WAITING",
                "RUNNING",
                "SUCCEEDED",
                "FAILED",
                "CANCELLED",
                "MAX ATTEMPTS",
            ]);
            for q in &queues {
                t.row(vec![
                    q.name.clone(),
                    if q.paused { "paused" } else { "active" }.to_owned(),
                    q.ready.to_string(),
                    q.scheduled.to_string(),
                    q.counts.waiting.to_string(),
                    q.counts.running.to_string(),
                    q.counts.succeeded.to_string(),
                    q.counts.failed.to_string(),
                    q.counts.cancelled.to_string(),
                    q.max_attempts.to_string(),
                    backoff(q),
                    format::duration_ms(q.default_lease_ttl_ms),
                    limit_text(q.max_running),
                    rate_text(q),
                    limit_text(q.key_max_running),
                    if q.fair { "yes" } else { "no" }.to_owned(),
                ]);
            }
            t.print();
            Ok(())
        }
        QueuesCommand::Show { queue } => {
            let q = ctx.call(ctx.client.get_queue(&queue)).await?;
            show(&ctx, &q)
        }
        QueuesCommand::Pause { queue } => {
            warn_if_unknown(&ctx, &queue).await?;
            let q = ctx.call(ctx.client.pause(&queue)).await?;
            if ctx.json {
                return ctx.print_doc("queue", &q);
            }
            let waiting = format::plural(q.ready, "ready job");
            out(&format!("paused queue {} ({waiting} wait)\n", q.name));
            Ok(())
        }
        QueuesCommand::Rm { queue } => {
            ctx.call(ctx.client.delete_queue(&queue)).await?;
            if !ctx.json {
                out(&format!("removed queue {queue}\n"));
            }
            Ok(())
        }
        QueuesCommand::Resume { queue } => {
            warn_if_unknown(&ctx, &queue).await?;
            let q = ctx.call(ctx.client.resume(&queue)).await?;
            if ctx.json {
                return ctx.print_doc("queue", &q);
            }
            out(&format!("resumed queue {}\n", q.name));
            Ok(())
        }
        QueuesCommand::Throughput { queue, minutes } => {
            let t = ctx
                .call(ctx.client.throughput(&queue, Some(minutes)))
                .await?;
            if ctx.json {
                return ctx.print_json(&t);
            }
            out(&throughput(&queue, &t));
            Ok(())
        }
        QueuesCommand::Config {
            queue,
            max_attempts,
            backoff_base,
            backoff_cap,
            lease_ttl,
            max_running,
            rate,
            key_max_running,
            fair,
        } => {
            warn_if_unknown(&ctx, &queue).await?;
            let patch = QueueConfigPatch {
                max_attempts,
                backoff: super::enqueue::backoff(&ctx, &queue, backoff_base, backoff_cap).await?,
                default_lease_ttl_ms: lease_ttl,
                max_running: max_running.map(|l| l.0),
                rate_limit: rate.map(|r| r.0),
                key_max_running: key_max_running.map(|l| l.0),
                fair,
            };
            let q = if patch == QueueConfigPatch::default() {
                ctx.call(ctx.client.get_queue(&queue)).await?
            } else {
                ctx.call(ctx.client.configure_queue(&queue, &patch)).await?
            };
            show(&ctx, &q)
        }
    }
}

/// Warns (on stderr) when `queue` is not among the tenant's queues: any
/// name is valid, so a typo'd one would be paused or configured silently.
async fn warn_if_unknown(ctx: &Ctx, queue: &str) -> Result<(), CliError> {
    let queues = ctx.call(ctx.client.list_queues()).await?;
    if !queues.iter().any(|q| q.name == queue) {
        let known: Vec<&str> = queues.iter().map(|q| q.name.as_str()).collect();
        let known = if known.is_empty() {
            "none yet".to_owned()
        } else {
            known.join(", ")
        };
        warn(&format!(
            "queue '{queue}' has never held a job (a typo?); known queues: {known}"
        ));
    }
    Ok(())
}

/// Reads one outcome's count of a minute.
type Count = fn(&ThroughputMinute) -> u64;

/// Marks of a sparkline, from the least (not zero) to the most.
const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// At most this many marks a line: longer windows put several minutes in a mark.
const MAX_MARKS: usize = 60;

/// One line per outcome: a sparkline of its counts (a blank for none, the
/// tallest mark for its busiest mark), its total and its busiest minute;
/// then the percentiles.
fn throughput(queue: &str, t: &Throughput) -> String {
    let per_mark = t.minutes.len().div_ceil(MAX_MARKS).max(1);
    let (first, last) = match (t.minutes.first(), t.minutes.last()) {
        (Some(first), Some(last)) => (first.at, last.at),
        _ => return format!("queue {queue}: no minutes\n"),
    };
    let mut text = format!(
        "queue {queue}: {} from {} to {} (now), one mark {}\n\n",
        format::plural(t.minutes.len() as u64, "minute"),
        format::time(first),
        format::time(last),
        match per_mark {
            1 => "a minute".to_owned(),
            n => format!("per {n} minutes"),
        },
    );
    let series: [(&str, Count); 4] = [
        ("succeeded", |m| m.succeeded),
        ("failed", |m| m.failed),
        ("retried", |m| m.retried),
        ("cancelled", |m| m.cancelled),
    ];
    let mut table = Table::new(&["", "OLDEST TO NOW", "TOTAL", "BUSIEST MINUTE"])
        .numeric(&["TOTAL", "BUSIEST MINUTE"]);
    for (name, count) in series {
        let marks: Vec<u64> = t
            .minutes
            .chunks(per_mark)
            .map(|chunk| chunk.iter().map(count).sum())
            .collect();
        table.row(vec![
            name.to_owned(),
            sparkline(&marks),
            marks.iter().sum::<u64>().to_string(),
            t.minutes.iter().map(count).max().unwrap_or(0).to_string(),
        ]);
    }
    text.push_str(&table.render(None));
    text.push('\n');
    let mut table = Table::new(&["", "P50", "P95", "P99"]).numeric(&["P50", "P95", "P99"]);
    for (name, p) in [("wait", t.wait_ms), ("run", t.run_ms)] {
        let cells = match p {
            Some(p) => [p.p50, p.p95, p.p99].map(format::duration_ms),
            None => ["-", "-", "-"].map(str::to_owned),
        };
        let mut row = vec![name.to_owned()];
        row.extend(cells);
        table.row(row);
    }
    text.push_str(&table.render(None));
    if t.wait_ms.is_none() {
        text.push_str("(no job finished in the window)\n");
    }
    text
}

/// `values` as marks scaled to the largest: a blank for zero, at least
/// the lowest mark for any other count.
fn sparkline(values: &[u64]) -> String {
    let peak = values.iter().copied().max().unwrap_or(0).max(1);
    let top = SPARKS.len() as u64 - 1;
    values
        .iter()
        .map(|&v| match v {
            0 => ' ',
            v => SPARKS[(v * top / peak) as usize],
        })
        .collect()
}

fn show(ctx: &Ctx, q: &Queue) -> Result<(), CliError> {
    if ctx.json {
        return ctx.print_doc("queue", &q);
    }
    let c = &q.counts;
    let now = Utc::now();
    let oldest = if q.ready > 0 {
        let at = now - chrono::Duration::milliseconds(q.oldest_ready_age_ms);
        format!(
            "{} (waiting since {})",
            format::duration_ms(q.oldest_ready_age_ms),
            format::time(at)
        )
    } else {
        "-".to_owned()
    };
    out(&format::fields(&[
        ("queue", q.name.clone()),
        (
            "status",
            if q.paused { "paused" } else { "active" }.to_owned(),
        ),
        (
            "queued",
            format!(
                "{} ({} ready, {} scheduled)",
                c.queued, q.ready, q.scheduled
            ),
        ),
        ("waiting", c.waiting.to_string()),
        ("running", c.running.to_string()),
        ("succeeded", c.succeeded.to_string()),
        ("failed", c.failed.to_string()),
        ("cancelled", c.cancelled.to_string()),
        ("oldest ready", oldest),
        ("expired leases", q.expired_leases.to_string()),
        ("max attempts", q.max_attempts.to_string()),
        ("backoff", backoff(q)),
        ("lease ttl", format::duration_ms(q.default_lease_ttl_ms)),
        ("max running", limit_text(q.max_running)),
        ("rate limit", rate_text(q)),
        ("key max running", limit_text(q.key_max_running)),
        ("fair", if q.fair { "yes" } else { "no" }.to_owned()),
    ]));
    Ok(())
}

/// A limit as typed: a number, or `none` for no limit (a type of its own:
/// clap reads `Option<Option<_>>` as a flag with an optional value).
#[derive(Debug, Clone, Copy)]
struct Limit(Option<i32>);

fn limit(s: &str) -> Result<Limit, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Limit(None));
    }
    s.parse()
        .map(|n| Limit(Some(n)))
        .map_err(|_| format!("expected a number or `none`, got {s:?}"))
}

/// A rate limit as typed: `COUNT/PERIOD` (`100/1m`), or `none`.
#[derive(Debug, Clone, Copy)]
struct Rate(Option<RateLimit>);

fn rate(s: &str) -> Result<Rate, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Rate(None));
    }
    let (count, period) = s
        .split_once('/')
        .ok_or_else(|| format!("expected COUNT/PERIOD (e.g. 100/1m) or `none`, got {s:?}"))?;
    let count = count
        .trim()
        .parse()
        .map_err(|_| format!("expected a count before the `/`, got {count:?}"))?;
    let period_ms = super::millis(period.trim())?;
    Ok(Rate(Some(RateLimit { count, period_ms })))
}

/// A rate limit as shown: `100/1m`, or `-` for none.
fn rate_text(q: &Queue) -> String {
    q.rate_limit.map_or_else(
        || "-".to_owned(),
        |r| format!("{}/{}", r.count, format::duration_ms(r.period_ms)),
    )
}

/// A limit as shown: the number, or `-` for none.
fn limit_text(limit: Option<i32>) -> String {
    limit.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

fn backoff(q: &Queue) -> String {
    format!(
        "{}..{}",
        format::duration_ms(q.backoff.base_ms),
        format::duration_ms(q.backoff.cap_ms)
    )
}
