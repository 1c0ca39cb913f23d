//! `tether workers`: who holds running jobs now, read from the jobs
//! themselves (`GET /v1/workers`).

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
    let mut t = Table::new(&["WORKER", "QUEUES", "RUNNING", "LAST HEARTBEAT"]).flex("QUEUES");
    for w in &workers {
        t.row(vec![
            w.worker_id.clone(),
            w.queues.join(", "),
            w.running.to_string(),
            w.last_heartbeat_at
                .map_or_else(|| "-".to_owned(), |at| format::ago(at, now)),
        ]);
    }
    t.print();
    Ok(())
}
