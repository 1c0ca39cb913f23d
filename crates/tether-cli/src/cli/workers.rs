//! `tether workers`: who holds running jobs now (read from the jobs
//! themselves) and who announced itself lately, idle or not
//! (`GET /v1/workers`).

use chrono::Utc;

use super::format::{self, Table};
use super::{CliError, Conn, Ctx};

/// `tether workers`.
#[derive(Debug, clap::Args)]
pub struct WorkersArgs {
    #[command(flatten)]
    conn: Conn,
}

pub(crate) async fn run(args: WorkersArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    let workers = ctx.call(ctx.client.list_workers()).await?;
    if ctx.json {
        return ctx.print_doc("workers", &workers);
    }
    let now = Utc::now();
    let mut t = Table::new(&[
        "WORKER",
        "QUEUES",
        "RUNNING",
        "CONCURRENCY",
        "SDK",
        "HOST",
        "LAST SEEN",
        "LAST HEARTBEAT",
    ])
    .flex("QUEUES");
    let dash = || "-".to_owned();
    for w in &workers {
        t.row(vec![
            w.worker_id.clone(),
            w.queues.join(", "),
            w.running.to_string(),
            w.concurrency.map_or_else(dash, |c| c.to_string()),
            match (&w.sdk, &w.version) {
                (Some(sdk), Some(version)) => format!("{sdk} {version}"),
                (Some(sdk), None) => sdk.clone(),
                _ => dash(),
            },
            match (&w.host, w.pid) {
                (Some(host), Some(pid)) => format!("{host}:{pid}"),
                (Some(host), None) => host.clone(),
                _ => dash(),
            },
            w.last_seen_at.map_or_else(dash, |at| format::ago(at, now)),
            w.last_heartbeat_at
                .map_or_else(dash, |at| format::ago(at, now)),
        ]);
    }
    t.print();
    Ok(())
}
