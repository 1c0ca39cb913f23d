//! The schedule figures on PostgreSQL: how late a per-second schedule fires
//! under the real maintenance loop, and what firing 10,000 schedules that
//! come due at the same instant costs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tether_core::{Engine, ScheduleSpec};
use tether_worker::{Maintenance, Source};

use crate::report::Report;
use crate::workload::TENANT;
use crate::Scale;

/// Runs the schedule figures on the bench database.
pub async fn run(engine: &Engine, pool: &PgPool, scale: &Scale, report: &mut Report) {
    lateness(engine, pool, scale, report).await;
    tick_10k(engine, pool, report).await;
}

async fn clear(pool: &PgPool) {
    sqlx::query("TRUNCATE tether.schedules, tether.schedule_runs, tether.jobs, tether.job_events")
        .execute(pool)
        .await
        .expect("truncate");
}

/// A per-second schedule fired by the maintenance loop (tick 1 s, the
/// default) for `scale.cron_seconds`; lateness is the job's `created_at`
/// minus its fire instant, both on the database clock.
async fn lateness(engine: &Engine, pool: &PgPool, scale: &Scale, report: &mut Report) {
    clear(pool).await;
    // The schedule first: a loop that already sleeps out its tick would see
    // a schedule created meanwhile only at the next tick.
    engine
        .create_schedule(
            TENANT,
            &ScheduleSpec::new("every-second", "* * * * * *", "cron-bench", "tick"),
        )
        .await
        .expect("create schedule");
    let source: Arc<dyn Source> = Arc::new(engine.clone());
    let maintenance = Maintenance::new(source, "bench-scheduler").start();
    tokio::time::sleep(Duration::from_secs(scale.cron_seconds)).await;
    maintenance.shutdown();
    maintenance.join().await;
    let mut late: Vec<f64> = sqlx::query_scalar(
        "SELECT (EXTRACT(EPOCH FROM j.created_at - r.fire_at) * 1000)::float8
           FROM tether.schedule_runs r JOIN tether.jobs j ON j.id = r.job_id",
    )
    .fetch_all(pool)
    .await
    .expect("lateness");
    late.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| late[((late.len() as f64 * q) as usize).min(late.len() - 1)];
    report.add(
        "cron_lateness_p50_ms",
        pick(0.5),
        "ms",
        format!(
            "per-second schedule, fire instant -> job enqueued, {} fires",
            late.len()
        ),
    );
    report.add(
        "cron_lateness_p99_ms",
        pick(0.99),
        "ms",
        "the same, 99th percentile (bar <= 250)",
    );
}

/// 10,000 enabled schedules all due at once: the scheduler passes that fire
/// them all (one run each), and a pass when none is due.
async fn tick_10k(engine: &Engine, pool: &PgPool, report: &mut Report) {
    const N: usize = 10_000;
    // The maintenance loop's pass size.
    const BATCH: u32 = tether_worker::MAINTENANCE_BATCH;
    clear(pool).await;
    // Created through the engine, 8 at a time, as daily schedules; then all
    // made due at once (as at midnight), so each fires exactly once.
    let mut handles = Vec::new();
    for t in 0..8 {
        let engine = engine.clone();
        handles.push(tokio::spawn(async move {
            for i in (t..N).step_by(8) {
                let spec = ScheduleSpec::new(format!("s{i}"), "0 0 3 * * *", "cron-10k", "tick");
                engine.create_schedule(TENANT, &spec).await.expect("create");
            }
        }));
    }
    for h in handles {
        h.await.expect("create task");
    }
    sqlx::query("UPDATE tether.schedules SET next_run_at = now() - interval '1 millisecond'")
        .execute(pool)
        .await
        .expect("make schedules due");
    let started = Instant::now();
    let mut fired = 0;
    loop {
        let r = engine
            .fire_due_schedules(BATCH, Duration::ZERO)
            .await
            .expect("fire");
        fired += r.enqueued;
        if r.total() < u64::from(BATCH) {
            break;
        }
    }
    let busy = started.elapsed();
    // Every schedule moved to tomorrow: time a pass with nothing due.
    let started = Instant::now();
    let idle_report = engine
        .fire_due_schedules(1_000, Duration::ZERO)
        .await
        .expect("idle pass");
    let idle = started.elapsed();
    assert_eq!(idle_report.total(), 0);
    report.add(
        "cron_tick_ms_10k",
        busy.as_secs_f64() * 1_000.0,
        "ms",
        format!("fire {fired} of {N} schedules due at the same instant (passes of 1000)"),
    );
    report.add(
        "cron_idle_tick_ms_10k",
        idle.as_secs_f64() * 1_000.0,
        "ms",
        format!("a scheduler pass with {N} enabled schedules, none due"),
    );
    clear(pool).await;
}
