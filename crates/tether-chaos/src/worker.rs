//! `__worker <base-url> <key> <seed> <name>`: a remote worker process (the
//! Rust SDK's worker runtime over HTTP: one worker per queue, `<name>.m`,
//! `<name>.s` and `<name>.l` for the limited one) whose handler follows each job's
//! [`Plan`], and which prints every claim, every error the SDK reports and
//! every `lease_lost` answer on stdout (see [`crate::obs::Line`]).

use std::collections::HashSet;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tether_client::{HttpClient, JobContext, JobError, JobResult, RemoteSource, Worker};
use tether_core::{
    CarriedReports, ClaimRequest, ClaimedJob, Completion, Error, Failure, FireReport, Heartbeat,
    HeartbeatAck, JobState, Lease, LeaseToken, ReapReport, ReportedAndClaimed, Result, Wakeup,
};
use tether_worker::{CancelRequests, Source};
use uuid::Uuid;

use crate::obs::{now_us, ClaimObs, Line, LostObs};
use crate::plan::{self, Plan};

/// Prints one protocol line (stdout is line-buffered: one write per line,
/// so a SIGKILL loses no line that was printed).
fn emit(line: Line) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.render());
    let _ = out.flush();
}

/// The code of an error the SDK reported, as the worker runtime received it.
pub fn code_of(e: &Error) -> String {
    let client = match e {
        Error::Unavailable(src) | Error::Storage(src) => src.downcast_ref::<tether_client::Error>(),
        _ => None,
    };
    match client {
        Some(e) => client_code(e),
        // The remote source's own time limit on a heartbeat round trip.
        None if matches!(e, Error::Unavailable(_)) => "timeout".to_owned(),
        None => e.code().to_string(),
    }
}

/// The code of an error the producers' SDK calls returned.
pub fn client_code(e: &tether_client::Error) -> String {
    match e {
        tether_client::Error::Api { code, .. } => code.to_string(),
        tether_client::Error::UnknownCode { code, .. } => code.clone(),
        tether_client::Error::Transport(_) => "transport".to_owned(),
        tether_client::Error::Decode { .. } => "decode".to_owned(),
        tether_client::Error::Invalid { .. } => "client_invalid".to_owned(),
    }
}

fn report_error(op: &str, e: &Error) {
    emit(Line::Err {
        op: op.to_owned(),
        code: code_of(e),
    });
}

fn report_lost(op: &str, job: Uuid, token: LeaseToken) {
    emit(Line::Lost(LostObs {
        op: op.to_owned(),
        job,
        token: token.0,
        at_us: now_us(),
    }));
}

/// The remote source with every answer observed.
#[derive(Debug, Clone)]
struct Observed {
    inner: Arc<RemoteSource>,
}

impl Observed {
    /// Observes the jobs a claim answered.
    fn claimed(req: &ClaimRequest, jobs: &[ClaimedJob]) {
        let at_us = now_us();
        for c in jobs {
            emit(Line::Claim(
                c.lease_token.0,
                ClaimObs {
                    job: c.job.id,
                    attempt: c.job.attempt,
                    worker: req.worker_id.clone(),
                    at_us,
                },
            ));
        }
    }

    /// Observes a per-job answer of a fenced operation.
    fn item<T>(op: &str, id: Uuid, token: LeaseToken, r: &Result<T>) {
        if let Err(e) = r {
            report_error(op, e);
            if matches!(e, Error::LeaseLost(_)) {
                report_lost(op, id, token);
            }
        }
    }
}

#[async_trait]
impl Source for Observed {
    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        let r = self.inner.claim(tenant, req).await;
        match &r {
            Ok(jobs) => Self::claimed(req, jobs),
            Err(e) => report_error("claim", e),
        }
        r
    }

    async fn report_and_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed> {
        let r = self.inner.report_and_claim(tenant, req, reports).await;
        match &r {
            Ok(out) => {
                let items = (reports
                    .complete
                    .iter()
                    .map(|c| ("complete", c.id, c.lease_token)))
                .chain(reports.fail.iter().map(|f| ("fail", f.id, f.lease_token)));
                for ((op, id, token), a) in items.zip(&out.reports) {
                    Self::item(op, id, token, a);
                }
                Self::claimed(req, &out.jobs);
            }
            Err(e) => report_error("claim", e),
        }
        r
    }

    fn report_wait(&self) -> std::time::Duration {
        self.inner.report_wait()
    }

    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        let r = self.inner.heartbeat_many(tenant, items).await;
        match &r {
            Ok(answers) => {
                for (item, a) in items.iter().zip(answers) {
                    Self::item("heartbeat", item.id, item.lease_token, a);
                }
            }
            Err(e) => report_error("heartbeat", e),
        }
        r
    }

    async fn complete_many(&self, tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>> {
        let r = self.inner.complete_many(tenant, items).await;
        match &r {
            Ok(answers) => {
                for (item, a) in items.iter().zip(answers) {
                    Self::item("complete", item.id, item.lease_token, a);
                }
            }
            Err(e) => report_error("complete", e),
        }
        r
    }

    async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: Failure,
    ) -> Result<JobState> {
        let r = self.inner.fail(tenant, id, token, failure).await;
        Self::item("fail", id, token, &r);
        r
    }

    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<JobState> {
        let r = self.inner.snooze(tenant, id, token, delay_ms).await;
        Self::item("snooze", id, token, &r);
        r
    }

    fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        self.inner.subscribe(tenant, queue)
    }

    /// The remote source's stream of cancel requests (nothing to observe:
    /// it changes when a handler hears of a cancel, not what is reported).
    fn cancel_requests(&self, tenant: &str) -> Option<CancelRequests> {
        self.inner.cancel_requests(tenant)
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>> {
        self.inner.acquire_lease(name, holder, ttl_ms).await
    }

    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        self.inner.renew_lease(name, token, ttl_ms).await
    }

    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        self.inner.release_lease(name, token).await
    }

    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        self.inner.reap_lapsed_leases(batch).await
    }

    async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        self.inner.expire_jobs(batch).await
    }

    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        self.inner.prune_finished(retention_ms, batch).await
    }

    async fn fire_due_schedules(&self, batch: u32, catch_up: Duration) -> Result<FireReport> {
        self.inner.fire_due_schedules(batch, catch_up).await
    }

    async fn next_schedule_due(&self) -> Result<Option<Duration>> {
        self.inner.next_schedule_due().await
    }

    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        self.inner.prune_schedule_runs(retention_ms, batch).await
    }

    async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        self.inner.prune_empty_queues(batch).await
    }
}

/// Claims (job, attempt) that already snoozed in-process on this worker.
type Snoozed = Arc<Mutex<HashSet<(Uuid, i32)>>>;

/// Runs one job according to its plan.
async fn handle(seed: u64, worker: String, snoozed: Snoozed, ctx: JobContext) -> JobResult {
    let job = ctx.job();
    let attempt = job.attempt;
    let Some(n) = job.payload.get("n").and_then(|n| n.as_u64()) else {
        return Err(JobError::fatal("chaos: payload without n"));
    };
    let p = plan::plan(seed, n);
    if let Some((fatal, message)) = p.failure_on(attempt) {
        return Err(match p {
            _ if fatal => JobError::fatal(message),
            Plan::Flaky {
                retry_after_ms: Some(ms),
                ..
            } => JobError::retry_after(message, Duration::from_millis(ms)),
            _ => JobError::retry(message),
        });
    }
    match p {
        Plan::Ok { sleep_ms } | Plan::Slow { sleep_ms } => {
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
        }
        Plan::SnoozeQueue { delay_ms } => {
            let moved = (job.run_at - job.created_at).num_milliseconds();
            if moved < plan::UNMOVED_SLACK_MS {
                return Err(JobError::snooze(Duration::from_millis(delay_ms)));
            }
        }
        Plan::SnoozeInProcess { delay_ms } => {
            let first = snoozed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((job.id, attempt));
            if first {
                return Err(JobError::snooze(Duration::from_millis(delay_ms)));
            }
        }
        Plan::Flaky { .. } | Plan::AlwaysRetry | Plan::Fatal => {}
    }
    Ok(Some(json!({ "n": n, "by": worker, "attempt": attempt })))
}

/// The worker process.
pub fn run(base_url: &str, key: &str, seed: u64, name: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("chaos worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let client = match HttpClient::builder(base_url, key)
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(2))
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("chaos worker {name}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let source = Observed {
            inner: Arc::new(RemoteSource::new(client).claim_wait(Duration::from_secs(2))),
        };
        let snoozed: Snoozed = Arc::default();
        let build = |suffix: &str, queue: &str, concurrency: usize, lease: Duration| {
            let id = format!("{name}.{suffix}");
            let (by, snoozed) = (id.clone(), snoozed.clone());
            Worker::builder(source.clone())
                .maintenance(false)
                .worker_id(id)
                .queue(queue, concurrency)
                .lease_ttl(lease)
                .poll_interval(Duration::from_millis(500))
                .max_in_process_snooze(plan::MAX_IN_PROCESS_SNOOZE)
                .shutdown_grace(Duration::from_secs(5))
                .handler(plan::KIND, move |ctx| {
                    handle(seed, by.clone(), snoozed.clone(), ctx)
                })
                .build()
        };
        let workers = [
            build("m", plan::QUEUE, plan::CONCURRENCY, plan::LEASE),
            build(
                "s",
                plan::SLOW_QUEUE,
                plan::SLOW_CONCURRENCY,
                plan::SLOW_LEASE,
            ),
            build(
                "l",
                plan::LIMITED_QUEUE,
                plan::LIMITED_CONCURRENCY,
                plan::LIMITED_LEASE,
            ),
        ];
        let mut handles = Vec::new();
        for w in workers {
            match w {
                Ok(w) => handles.push(w.start()),
                Err(e) => {
                    eprintln!("chaos worker {name}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        emit(Line::Ready);
        crate::serve::until_stopped().await;
        for h in &handles {
            h.shutdown();
        }
        for h in handles {
            h.join().await;
        }
        ExitCode::SUCCESS
    })
}
