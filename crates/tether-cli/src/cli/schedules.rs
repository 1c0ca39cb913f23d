//! `tether schedules ls | add | apply | edit | rm | runs | preview | enable |
//! disable | trigger`. A schedule is named by its id or its name.

use chrono::{DateTime, Utc};
use clap::Subcommand;
use serde_json::Value;
use tether_client::{CronPreview, ErrorCode, Overlap, Schedule, SchedulePatch, ScheduleSpec};
use uuid::Uuid;

use super::format::{self, Table};
use super::{out, CliError, Conn, Ctx};

/// `tether schedules …`.
#[derive(Debug, clap::Args)]
pub struct SchedulesArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: SchedulesCommand,
}

#[derive(Debug, Subcommand)]
enum SchedulesCommand {
    /// Every schedule with its next run.
    Ls,
    /// Create a schedule that enqueues a job per cron instant.
    Add {
        /// Its name (unique in the tenant).
        name: String,
        #[arg(help = CRON_HELP)]
        cron: String,
        /// The queue of the jobs it enqueues.
        queue: String,
        /// The kind of the jobs it enqueues.
        kind: String,
        #[command(flatten)]
        settings: Settings,
        /// Create it disabled.
        #[arg(long)]
        disabled: bool,
        /// If a schedule has this name already, make it this one (its id
        /// and runs stay) instead of failing.
        #[arg(long)]
        replace: bool,
    },
    /// Make the schedules declared in a JSON file exist exactly as written:
    /// each is created, updated or left unchanged (by name). The file is
    /// `{"schedules": [{"name", "cron", "queue", "kind", "timezone"?,
    /// "payload"?, "enabled"?, "overlap"?}, ...]}`, each entry the body of
    /// `POST /v1/schedules`.
    Apply {
        /// The file (`-` reads standard input).
        file: String,
        /// Also delete the tenant's schedules the file does not name.
        #[arg(long)]
        prune: bool,
    },
    /// Change a schedule: only the fields given; its runs stay, and its
    /// next run is worked out again from now.
    Edit {
        /// Its id or name.
        schedule: String,
        #[command(flatten)]
        changes: Changes,
    },
    /// Delete a schedule and its runs (the jobs it enqueued stay).
    Rm {
        /// Its id or name.
        schedule: String,
    },
    /// A schedule's recent runs, newest first.
    Runs {
        /// Its id or name.
        schedule: String,
    },
    /// The next fire instants of an expression, computed by the server's scheduler.
    Preview {
        #[arg(help = CRON_HELP)]
        cron: String,
        /// IANA time zone the expression is read in.
        #[arg(long)]
        timezone: Option<String>,
        /// Instants strictly after this one (RFC 3339) [default: now].
        #[arg(long, value_name = "TIME")]
        from: Option<DateTime<Utc>>,
        /// How many, 1–100 [default: 5].
        #[arg(long)]
        count: Option<u32>,
    },
    /// Let a schedule fire again (from now on).
    Enable {
        /// Its id or name.
        schedule: String,
    },
    /// Stop a schedule from firing.
    Disable {
        /// Its id or name.
        schedule: String,
    },
    /// Run a schedule now, outside its timetable.
    Trigger {
        /// Its id or name.
        schedule: String,
    },
}

/// The help of a cron expression argument.
const CRON_HELP: &str = "5 fields (minute first), 6 with seconds first, or @hourly, @daily \
                         (@midnight), @weekly, @monthly, @yearly (@annually); quote it";

fn overlap(text: &str) -> Result<Overlap, String> {
    Overlap::parse(text).ok_or_else(|| format!("unknown overlap {text:?} (use allow or skip)"))
}

pub(crate) async fn run(args: SchedulesArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    let now = Utc::now();
    match args.command {
        SchedulesCommand::Ls => {
            let schedules = ctx.call(ctx.client.list_schedules()).await?;
            if ctx.json {
                return ctx.print_doc("schedules", &schedules);
            }
            if schedules.is_empty() {
                out("no schedules\n");
                return Ok(());
            }
            let mut t = Table::new(&[
                "ID", "NAME", "CRON", "TIMEZONE", "QUEUE", "KIND", "ENABLED", "OVERLAP",
                "NEXT RUN", "LAST RUN",
            ]);
            for s in &schedules {
                t.row(vec![
                    s.id.to_string(),
                    s.name.clone(),
                    s.cron.clone(),
                    s.timezone.clone(),
                    s.queue.clone(),
                    s.kind.clone(),
                    if s.enabled { "yes" } else { "no" }.to_owned(),
                    s.overlap.as_str().to_owned(),
                    s.next_run_at
                        .map(|t| format!("{} ({})", format::time(t), format::ago(t, now)))
                        .unwrap_or_else(|| "-".to_owned()),
                    format::ago_opt(s.last_run_at, now),
                ]);
            }
            t.print();
            Ok(())
        }
        SchedulesCommand::Add {
            name,
            cron,
            queue,
            kind,
            settings,
            disabled,
            replace,
        } => {
            let mut spec = ScheduleSpec::new(name, cron, queue, kind).enabled(!disabled);
            if let Some(timezone) = settings.timezone {
                spec = spec.timezone(timezone);
            }
            if let Some(payload) = settings.payload {
                spec = spec.payload(payload);
            }
            if let Some(overlap) = settings.overlap {
                spec = spec.overlap(overlap);
            }
            let (s, verb) = if replace {
                let (s, outcome) = ctx.call(ctx.client.ensure_schedule(&spec)).await?;
                (s, outcome.as_str())
            } else {
                (
                    ctx.call(ctx.client.create_schedule(&spec)).await?,
                    "created",
                )
            };
            if ctx.json {
                return ctx.print_doc("schedule", &s);
            }
            out(&format!("{verb} schedule {} ({})\n", s.name, s.id));
            out(&describe(&s, now));
            Ok(())
        }
        SchedulesCommand::Apply { file, prune } => {
            let declared = read_declared(&file)?;
            let mut applied = Vec::with_capacity(declared.len());
            for spec in &declared {
                let (s, outcome) = ctx.call(ctx.client.ensure_schedule(spec)).await?;
                if !ctx.json {
                    out(&format!(
                        "{} schedule {} ({})\n",
                        outcome.as_str(),
                        s.name,
                        s.id
                    ));
                }
                applied.push(ApplyLine {
                    name: s.name,
                    id: s.id,
                    outcome: outcome.as_str(),
                });
            }
            if prune {
                let names: std::collections::HashSet<&str> =
                    declared.iter().map(|s| s.name.as_str()).collect();
                for s in ctx.call(ctx.client.list_schedules()).await? {
                    if names.contains(s.name.as_str()) {
                        continue;
                    }
                    ctx.call(ctx.client.delete_schedule(s.id)).await?;
                    if !ctx.json {
                        out(&format!("deleted schedule {} ({})\n", s.name, s.id));
                    }
                    applied.push(ApplyLine {
                        name: s.name,
                        id: s.id,
                        outcome: "deleted",
                    });
                }
            }
            if ctx.json {
                return ctx.print_doc("schedules", &applied);
            }
            Ok(())
        }
        SchedulesCommand::Edit { schedule, changes } => {
            let patch = SchedulePatch::from(changes);
            if patch == SchedulePatch::default() {
                return Err(CliError::Usage(
                    "nothing to change: give at least one of --name, --cron, --timezone, \
                     --queue, --kind, --payload, --overlap"
                        .to_owned(),
                ));
            }
            let s = resolve(&ctx, &schedule).await?;
            let s = ctx.call(ctx.client.patch_schedule(s.id, &patch)).await?;
            if ctx.json {
                return ctx.print_doc("schedule", &s);
            }
            out(&format!("changed schedule {} ({})\n", s.name, s.id));
            out(&describe(&s, now));
            Ok(())
        }
        SchedulesCommand::Rm { schedule } => {
            let s = resolve(&ctx, &schedule).await?;
            ctx.call(ctx.client.delete_schedule(s.id)).await?;
            if ctx.json {
                return ctx.print_doc("deleted", &s.id);
            }
            out(&format!("deleted schedule {} ({})\n", s.name, s.id));
            Ok(())
        }
        SchedulesCommand::Runs { schedule } => {
            let s = resolve(&ctx, &schedule).await?;
            let runs = ctx.call(ctx.client.schedule_runs(s.id)).await?;
            if ctx.json {
                return ctx.print_doc("runs", &runs);
            }
            if runs.is_empty() {
                out(&format!("schedule {} has not run yet\n", s.name));
                return Ok(());
            }
            let mut t = Table::new(&["FIRE AT", "AGE", "OUTCOME", "JOB"]);
            for r in &runs {
                t.row(vec![
                    format::time(r.fire_at),
                    format::ago(r.fire_at, now),
                    r.outcome.clone(),
                    r.job_id.map(|id| id.to_string()).unwrap_or_default(),
                ]);
            }
            t.print();
            Ok(())
        }
        SchedulesCommand::Preview {
            cron,
            timezone,
            from,
            count,
        } => {
            let preview = CronPreview {
                cron,
                timezone: timezone.clone(),
                from,
                count,
            };
            let times = ctx.call(ctx.client.cron_preview(&preview)).await?;
            if ctx.json {
                return ctx.print_doc("times", &times);
            }
            let zone: Option<chrono_tz::Tz> = timezone.as_deref().and_then(|z| z.parse().ok());
            let mut text = String::new();
            for t in &times {
                text.push_str(&format::time(*t));
                if let Some(zone) = zone.filter(|z| z.name() != "UTC") {
                    let local = t.with_timezone(&zone);
                    text.push_str(&format!("  {}", local.format("%Y-%m-%d %H:%M:%S %Z")));
                }
                text.push('\n');
            }
            out(&text);
            Ok(())
        }
        SchedulesCommand::Enable { schedule } => set_enabled(&ctx, &schedule, true).await,
        SchedulesCommand::Disable { schedule } => set_enabled(&ctx, &schedule, false).await,
        SchedulesCommand::Trigger { schedule } => {
            let s = resolve(&ctx, &schedule).await?;
            let job = ctx.call(ctx.client.trigger_schedule(s.id)).await?;
            if ctx.json {
                return ctx.print_doc("job", &job);
            }
            out(&format!(
                "triggered schedule {}: enqueued job {} on queue {}\n",
                s.name, job.id, job.queue
            ));
            Ok(())
        }
    }
}

async fn set_enabled(ctx: &Ctx, schedule: &str, enabled: bool) -> Result<(), CliError> {
    let s = resolve(ctx, schedule).await?;
    let patch = SchedulePatch {
        enabled: Some(enabled),
        ..SchedulePatch::default()
    };
    let s = ctx.call(ctx.client.patch_schedule(s.id, &patch)).await?;
    if ctx.json {
        return ctx.print_doc("schedule", &s);
    }
    let verb = if enabled { "enabled" } else { "disabled" };
    out(&format!("{verb} schedule {} ({})\n", s.name, s.id));
    out(&describe(&s, Utc::now()));
    Ok(())
}

/// A schedule named by id or by name.
async fn resolve(ctx: &Ctx, schedule: &str) -> Result<Schedule, CliError> {
    if let Ok(id) = Uuid::try_parse(schedule) {
        return ctx.call(ctx.client.get_schedule(id)).await;
    }
    ctx.call(ctx.client.list_schedules())
        .await?
        .into_iter()
        .find(|s| s.name == schedule)
        .ok_or_else(|| CliError::Api {
            url: ctx.url.clone(),
            error: tether_client::Error::Api {
                status: 404,
                code: ErrorCode::NotFound,
                message: format!("schedule {schedule:?} not found (no id or name matches)"),
            },
        })
}

fn describe(s: &Schedule, now: DateTime<Utc>) -> String {
    format::fields(&[
        ("cron", format!("{} ({})", s.cron, s.timezone)),
        ("jobs", format!("{} on queue {}", s.kind, s.queue)),
        ("overlap", s.overlap.as_str().to_owned()),
        (
            "next run",
            s.next_run_at
                .map(|t| format::time_ago(Some(t), now))
                .unwrap_or_else(|| "- (disabled)".to_owned()),
        ),
    ])
}

/// The settings `add` and `edit` both take; absent, `add` uses the
/// defaults and `edit` keeps the schedule's.
#[derive(Debug, clap::Args)]
struct Settings {
    /// IANA time zone the expression is read in [add's default: UTC].
    #[arg(long)]
    timezone: Option<String>,
    /// The payload of its jobs (JSON) [add's default: null].
    #[arg(long, value_parser = super::json_value)]
    payload: Option<Value>,
    /// `allow`, or `skip`: enqueue nothing while the previous run's job is
    /// unfinished [add's default: allow].
    #[arg(long, value_parser = overlap)]
    overlap: Option<Overlap>,
}

/// What `schedules edit` changes: the fields given.
#[derive(Debug, clap::Args)]
struct Changes {
    /// A new name.
    #[arg(long)]
    name: Option<String>,
    #[arg(long, help = CRON_HELP)]
    cron: Option<String>,
    /// A new queue for its jobs.
    #[arg(long)]
    queue: Option<String>,
    /// A new kind for its jobs.
    #[arg(long)]
    kind: Option<String>,
    #[command(flatten)]
    settings: Settings,
}

impl From<Changes> for SchedulePatch {
    fn from(c: Changes) -> Self {
        SchedulePatch {
            name: c.name,
            cron: c.cron,
            timezone: c.settings.timezone,
            queue: c.queue,
            kind: c.kind,
            payload: c.settings.payload,
            overlap: c.settings.overlap,
            enabled: None,
        }
    }
}

/// What `schedules apply` did to one schedule (its `--json` line).
#[derive(serde::Serialize)]
struct ApplyLine {
    name: String,
    id: Uuid,
    outcome: &'static str,
}

/// The file of `schedules apply`. It is read whole, and an unknown field or
/// two entries of one name are refused, before anything is sent; entries
/// are then applied in order, and one the server refuses (a bad cron, say)
/// stops there, the earlier ones applied: each is idempotent, so the fix is
/// to correct the file and apply it again.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Declared {
    schedules: Vec<tether_client::api::CreateScheduleBody>,
}

fn read_declared(file: &str) -> Result<Vec<ScheduleSpec>, CliError> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    }
    .map_err(|e| CliError::Usage(format!("cannot read {file}: {e}")))?;
    let declared: Declared = serde_json::from_str(&text)
        .map_err(|e| CliError::Usage(format!("{file} is not a schedules file: {e}")))?;
    let mut seen = std::collections::HashSet::new();
    let mut specs = Vec::with_capacity(declared.schedules.len());
    for body in declared.schedules {
        if !seen.insert(body.name.clone()) {
            return Err(CliError::Usage(format!(
                "{file} declares the schedule {:?} twice",
                body.name
            )));
        }
        specs.push(ScheduleSpec::from(body));
    }
    Ok(specs)
}
