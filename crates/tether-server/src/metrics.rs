//! `GET /metrics` (admin key): Prometheus text. Every family tether exports
//! is listed once, with its labels and help text, in [`FAMILIES`]. Queue
//! gauges are read from the database at scrape time for every tenant,
//! cached briefly so that several scrapers cannot load it; process gauges
//! are read from `/proc` (Linux) at scrape time; counters and histograms
//! come from the process's `metrics` recorder when one is installed
//! (`tether serve` installs it with [`install_recorder`], which describes
//! them and sets the histograms' buckets).
//!
//! The per-queue gauges cover at most `metrics_max_queues` queues (of all
//! tenants), so that many queue names cannot make the scrape grow without
//! bound: past it, the queues with the most unfinished and failed jobs are
//! kept and `tether_queue_series_omitted` counts the others. The recorder's
//! per-queue counters and histograms are bounded by the same number, of
//! (tenant, queue) pairs at a time (see `tether_core::counters`): a pair
//! whose series have not moved for the series idle time (an hour) is
//! dropped by the recorder and gives its place to another, so a deleted
//! queue's series go and queue names seen once do not stay forever.

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use tether_core::{Engine, QueueStats};

use crate::error::ApiResult;
use crate::extract::Caller;
use crate::AppState;

/// How long one reading of the queue gauges is served again.
pub const GAUGE_CACHE: Duration = Duration::from_secs(2);

/// What a metric family is, for Prometheus.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Only goes up (since the process started).
    Counter,
    /// A value read now.
    Gauge,
    /// Observations counted into these buckets (upper bounds, in seconds).
    Histogram(&'static [f64]),
}

/// Where a family's samples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The process's `metrics` recorder: this process's work since it
    /// started (sum over replicas).
    Recorder,
    /// The database, read at scrape time (the same on every replica).
    Database,
    /// This process, read from `/proc` at scrape time (Linux only).
    Process,
}

/// One metric family tether exports.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The name, as scraped.
    pub name: &'static str,
    /// Its labels (besides a histogram's `le`).
    pub labels: &'static [&'static str],
    /// Counter, gauge or histogram (with its buckets).
    pub kind: Kind,
    /// Where its samples come from.
    pub source: Source,
    /// The `# HELP` text.
    pub help: &'static str,
}

/// Buckets of job wait times: from a hot queue (milliseconds) to a backlog
/// of hours.
const WAIT_BUCKETS: &[f64] = &[
    0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0, 21600.0,
];
/// Buckets of attempt and handler run times: a quick handler to an
/// hour-long batch.
const RUN_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0, 3600.0,
];
/// Buckets of HTTP latency: a millisecond to the 60 s request time limit
/// (long-polls wait up to 30 s by default).
const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0, 60.0,
];
/// Buckets of schedule fire lateness: a maintenance tick (1 s) to an hour.
const LATENESS_BUCKETS: &[f64] = &[0.1, 0.5, 1.0, 2.0, 5.0, 15.0, 60.0, 300.0, 3600.0];

/// Every metric family tether exports, the one list: the recorder's are
/// described from it and get their buckets from it ([`install_recorder`]),
/// the database and process gauges take their help text from it, and
/// `docs/operations.md` documents each (a test checks).
pub const FAMILIES: &[Family] = &[
    // The engine (tether_core::counters), per tenant and queue.
    recorded("tether_jobs_enqueued_total", &["tenant", "queue"], Kind::Counter,
        "Jobs created (an enqueue that returned an existing job is not counted)."),
    recorded("tether_jobs_claimed_total", &["tenant", "queue"], Kind::Counter,
        "Attempts started by claims."),
    recorded("tether_claims_throttled_total", &["tenant", "queue"], Kind::Counter,
        "Claims that flow control held back (fewer jobs than asked while ready ones were left)."),
    recorded("tether_jobs_completed_total", &["tenant", "queue"], Kind::Counter,
        "Attempts that succeeded (a repeated report is not counted again)."),
    recorded("tether_jobs_failed_total", &["tenant", "queue", "outcome"], Kind::Counter,
        "Attempts that failed, by where the job went: retried, dead or cancelled."),
    recorded("tether_jobs_snoozed_total", &["tenant", "queue"], Kind::Counter,
        "Attempts given back by a snooze."),
    recorded("tether_jobs_replayed_total", &["tenant", "queue"], Kind::Counter,
        "Failed or cancelled jobs queued again by a replay."),
    recorded("tether_jobs_reaped_total", &["tenant", "queue", "outcome"], Kind::Counter,
        "Lapsed leases taken back by the reaper, by where the job went: requeued, failed or cancelled."),
    recorded("tether_jobs_expired_total", &[], Kind::Counter,
        "Queued jobs failed because their expires_at passed."),
    recorded("tether_jobs_pruned_total", &[], Kind::Counter,
        "Finished jobs deleted after the retention."),
    recorded("tether_job_wait_seconds", &["tenant", "queue"], Kind::Histogram(WAIT_BUCKETS),
        "From a job being ready (the later of run_at and created_at) to its claim."),
    recorded("tether_job_run_seconds", &["tenant", "queue", "outcome"], Kind::Histogram(RUN_BUCKETS),
        "From a claim to the report that ended the attempt: succeeded, retried, dead, cancelled or snoozed."),
    recorded("tether_enqueue_groups_total", &["tenant"], Kind::Counter,
        "Group commits of single enqueues (each one statement and one commit)."),
    recorded("tether_enqueue_group_jobs_total", &["tenant"], Kind::Counter,
        "Single enqueues written by group commits; divided by tether_enqueue_groups_total, the mean group size."),
    recorded("tether_schedule_fires_total", &["tenant"], Kind::Counter,
        "Schedule fires that enqueued a job."),
    recorded("tether_schedule_fire_lateness_seconds", &["tenant"], Kind::Histogram(LATENESS_BUCKETS),
        "From a schedule's fire instant to its job being enqueued."),
    // The HTTP service (crate::observe).
    recorded("tether_http_request_duration_seconds", &["method", "route", "status"],
        Kind::Histogram(HTTP_BUCKETS),
        "HTTP requests by method, route template and status class (2xx...), until the response head."),
    // The feed's reader (crate::feed), while anyone listens.
    recorded("tether_feed_lag_seconds", &[], Kind::Gauge,
        "How far the process's reader of the event feed is behind: now minus the time of the newest event its last read returned (0 when that read found nothing new)."),
    // The worker runtime (tether_worker), in processes that run handlers.
    recorded("tether_worker_handler_duration_seconds", &["queue", "kind"], Kind::Histogram(RUN_BUCKETS),
        "How long handlers ran, in the worker process."),
    recorded("tether_worker_jobs_total", &["queue", "kind", "outcome"], Kind::Counter,
        "Jobs the worker runtime finished, by the outcome it reported."),
    recorded("tether_worker_report_errors_total", &[], Kind::Counter,
        "Reports (complete, fail, snooze) the worker runtime could not deliver."),
    // The database, at scrape time (render_gauges).
    database("tether_queue_jobs", &["tenant", "queue", "state"],
        "Jobs per queue and state (waiting, queued, running, succeeded, failed, cancelled), read from the database."),
    database("tether_queue_ready_jobs", &["tenant", "queue"],
        "Queued jobs whose run_at has come."),
    database("tether_queue_scheduled_jobs", &["tenant", "queue"],
        "Queued jobs whose run_at is still ahead."),
    database("tether_queue_oldest_ready_age_seconds", &["tenant", "queue"],
        "How long the oldest ready job has waited (0 when none is ready)."),
    database("tether_queue_expired_leases", &["tenant", "queue"],
        "Running jobs past their lease, not yet reaped."),
    database("tether_queue_paused", &["tenant", "queue"], "1 when the queue is paused."),
    database("tether_queue_max_running", &["tenant", "queue"],
        "The queue's limit on running jobs (no series when it has none); \
         compare with tether_queue_jobs{state=\"running\"}."),
    database("tether_queue_series_omitted", &[],
        "Queues left out of the per-queue gauges \
         (past --metrics-max-queues; the ones with the fewest unfinished and failed jobs)."),
    // This process, from /proc (render_process).
    Family {
        name: "process_cpu_seconds_total",
        labels: &[],
        kind: Kind::Counter,
        source: Source::Process,
        help: "User and system CPU time spent, in seconds.",
    },
    process("process_resident_memory_bytes", "Resident memory size in bytes."),
    process("process_open_fds", "Open file descriptors."),
    process("process_max_fds", "The soft limit on open file descriptors."),
    process("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds."),
];

const fn recorded(
    name: &'static str,
    labels: &'static [&'static str],
    kind: Kind,
    help: &'static str,
) -> Family {
    Family {
        name,
        labels,
        kind,
        source: Source::Recorder,
        help,
    }
}

const fn database(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> Family {
    Family {
        name,
        labels,
        kind: Kind::Gauge,
        source: Source::Database,
        help,
    }
}

const fn process(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        labels: &[],
        kind: Kind::Gauge,
        source: Source::Process,
        help,
    }
}

/// The help text of a family of [`FAMILIES`].
fn help(name: &str) -> &'static str {
    FAMILIES
        .iter()
        .find(|f| f.name == name)
        .map_or("", |f| f.help)
}

/// Installs the process's Prometheus recorder as `tether serve` does: with
/// the buckets of every histogram of [`FAMILIES`] (without, the exporter
/// would summarise them instead), every recorded family described (its
/// `# HELP` line), and the per-queue series of the engine's counters and
/// histograms bounded to `max_queue_series` (tenant, queue) pairs, and
/// counters and histograms that have not moved for
/// [`tether_core::counters::DEFAULT_SERIES_IDLE`] dropped. The caller runs
/// the handle's upkeep now and then (it summarises histograms).
pub fn install_recorder(max_queue_series: usize) -> Result<PrometheusHandle, BuildError> {
    install_recorder_with(max_queue_series, tether_core::counters::DEFAULT_SERIES_IDLE)
}

/// [`install_recorder`] with another series idle time: a counter or
/// histogram series that has not moved for `series_idle` is dropped by the
/// recorder (at the next scrape, or [`Metrics`]' sweep) and its (tenant,
/// queue) pair's place goes to the next new pair. The counters without
/// labels are kept (every scrape touches them), so they never restart.
pub fn install_recorder_with(
    max_queue_series: usize,
    series_idle: Duration,
) -> Result<PrometheusHandle, BuildError> {
    let mut builder = PrometheusBuilder::new().idle_timeout(
        MetricKindMask::COUNTER | MetricKindMask::HISTOGRAM,
        Some(series_idle),
    );
    for family in FAMILIES {
        if let Kind::Histogram(buckets) = family.kind {
            builder =
                builder.set_buckets_for_metric(Matcher::Full(family.name.to_owned()), buckets)?;
        }
    }
    let handle = builder.install_recorder()?;
    for family in FAMILIES.iter().filter(|f| f.source == Source::Recorder) {
        match family.kind {
            Kind::Counter => metrics::describe_counter!(family.name, family.help),
            Kind::Gauge => metrics::describe_gauge!(family.name, family.help),
            Kind::Histogram(_) => metrics::describe_histogram!(family.name, family.help),
        }
    }
    tether_core::counters::limit_queue_series(max_queue_series);
    tether_core::counters::set_queue_series_idle(series_idle);
    Ok(handle)
}

/// Keeps the counters of [`FAMILIES`] without labels (expired, pruned,
/// report errors) in the recorder whatever the idle timeout: a counter
/// that vanished and came back would lose its first increments to
/// Prometheus. Also makes them show from the first scrape, at 0.
fn keep_unlabelled_counters() {
    for family in FAMILIES {
        if family.source == Source::Recorder
            && family.kind == Kind::Counter
            && family.labels.is_empty()
        {
            metrics::counter!(family.name).increment(0);
        }
    }
}

/// How often [`Metrics::with_recorder`] sweeps the recorder of idle series
/// when nobody scrapes (a scrape sweeps too).
pub const SERIES_SWEEP: Duration = Duration::from_secs(60);

/// The `/metrics` state: the recorder's handle and the gauge cache.
#[derive(Clone, Default)]
pub struct Metrics {
    recorder: Option<PrometheusHandle>,
    cache: Arc<Mutex<Option<(Instant, String)>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("recorder", &self.recorder.is_some())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Gauges only (no counters): for a process without a recorder.
    pub fn gauges_only() -> Self {
        Metrics::default()
    }

    /// Gauges plus whatever the installed Prometheus recorder holds (the
    /// `tether_jobs_*_total` counters of the engine, the worker metrics).
    /// Inside a Tokio runtime it also sweeps the recorder every
    /// [`SERIES_SWEEP`], so that idle series are dropped (and their memory
    /// freed) even if nobody scrapes.
    pub fn with_recorder(recorder: PrometheusHandle) -> Self {
        keep_unlabelled_counters();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let sweeper = recorder.clone();
            runtime.spawn(async move {
                loop {
                    tokio::time::sleep(SERIES_SWEEP).await;
                    keep_unlabelled_counters();
                    drop(sweeper.render());
                }
            });
        }
        Metrics {
            recorder: Some(recorder),
            ..Metrics::default()
        }
    }

    async fn gauges(&self, engine: &Engine, max_queues: usize) -> ApiResult<String> {
        if let Some((at, text)) = &*self.cache.lock().unwrap_or_else(|e| e.into_inner()) {
            if at.elapsed() < GAUGE_CACHE {
                return Ok(text.clone());
            }
        }
        let mut queues = Vec::new();
        for tenant in engine.list_tenants().await? {
            for q in engine.list_queues(&tenant.name).await? {
                queues.push((tenant.name.clone(), q));
            }
        }
        let omitted = keep_busiest(&mut queues, max_queues);
        let text = render_gauges(&queues, omitted);
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), text.clone()));
        Ok(text)
    }
}

/// One queue's samples of one gauge: an optional `state` label and a value.
type Samples = Vec<(Option<&'static str>, f64)>;
/// A gauge: its name (of [`FAMILIES`]) and how to read it off a queue's
/// stats.
type Gauge = (&'static str, fn(&QueueStats) -> Samples);

/// Keeps at most `max` queues, those with the most unfinished (waiting,
/// queued, running) and failed jobs (ties: by tenant and name), in
/// tenant-and-name order; answers how many were left out.
fn keep_busiest(queues: &mut Vec<(String, QueueStats)>, max: usize) -> usize {
    let weight = |q: &QueueStats| {
        let c = &q.counts;
        c.waiting + c.queued + c.running + c.failed + q.expired_leases
    };
    let by_name = |a: &(String, QueueStats), b: &(String, QueueStats)| {
        a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name))
    };
    let omitted = queues.len().saturating_sub(max);
    if omitted > 0 {
        queues.sort_by(|a, b| weight(&b.1).cmp(&weight(&a.1)).then_with(|| by_name(a, b)));
        queues.truncate(max);
    }
    queues.sort_by(by_name);
    omitted
}

/// The queue gauges as Prometheus text.
fn render_gauges(queues: &[(String, QueueStats)], omitted: usize) -> String {
    let gauges: [Gauge; 7] = [
        ("tether_queue_jobs", |q| {
            let c = &q.counts;
            vec![
                (Some("waiting"), c.waiting as f64),
                (Some("queued"), c.queued as f64),
                (Some("running"), c.running as f64),
                (Some("succeeded"), c.succeeded as f64),
                (Some("failed"), c.failed as f64),
                (Some("cancelled"), c.cancelled as f64),
            ]
        }),
        ("tether_queue_ready_jobs", |q| vec![(None, q.ready as f64)]),
        ("tether_queue_scheduled_jobs", |q| {
            vec![(None, q.scheduled as f64)]
        }),
        ("tether_queue_oldest_ready_age_seconds", |q| {
            vec![(None, q.oldest_ready_age_ms as f64 / 1000.0)]
        }),
        ("tether_queue_expired_leases", |q| {
            vec![(None, q.expired_leases as f64)]
        }),
        ("tether_queue_paused", |q| {
            vec![(None, if q.paused { 1.0 } else { 0.0 })]
        }),
        ("tether_queue_max_running", |q| {
            q.limits
                .max_running
                .map(|n| vec![(None, f64::from(n))])
                .unwrap_or_default()
        }),
    ];
    let mut out = String::new();
    for (name, samples) in gauges {
        write_head(&mut out, name, "gauge");
        for (tenant, q) in queues {
            for (state, value) in samples(q) {
                let _ = write!(
                    out,
                    "{name}{{tenant=\"{}\",queue=\"{}\"",
                    escape(tenant),
                    escape(&q.name)
                );
                if let Some(state) = state {
                    let _ = write!(out, ",state=\"{state}\"");
                }
                let _ = writeln!(out, "}} {value}");
            }
        }
    }
    write_head(&mut out, "tether_queue_series_omitted", "gauge");
    let _ = writeln!(out, "tether_queue_series_omitted {omitted}");
    out
}

/// The `# HELP` and `# TYPE` lines of a family of [`FAMILIES`].
fn write_head(out: &mut String, name: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", help(name));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// This process's CPU time, memory, descriptors and start time, read from
/// `/proc` now; empty where there is no `/proc` (not Linux), and a value
/// that cannot be read is left out.
fn render_process() -> String {
    let mut out = String::new();
    let stat = process::read();
    let samples = [
        ("process_cpu_seconds_total", "counter", stat.cpu_seconds),
        (
            "process_resident_memory_bytes",
            "gauge",
            stat.resident_bytes,
        ),
        ("process_open_fds", "gauge", stat.open_fds),
        ("process_max_fds", "gauge", stat.max_fds),
        ("process_start_time_seconds", "gauge", stat.start_time),
    ];
    for (name, kind, value) in samples {
        if let Some(value) = value {
            write_head(&mut out, name, kind);
            let _ = writeln!(out, "{name} {value}");
        }
    }
    out
}

/// Reading `/proc/self` (and `/proc/stat`), by hand: the few numbers
/// needed do not justify a crate.
mod process {
    use std::fs;

    /// What [`read`] found; `None` for what it could not.
    #[derive(Debug, Default)]
    pub(super) struct Stat {
        pub cpu_seconds: Option<f64>,
        pub resident_bytes: Option<f64>,
        pub open_fds: Option<f64>,
        pub max_fds: Option<f64>,
        pub start_time: Option<f64>,
    }

    /// The `AT_CLKTCK` entry of the auxiliary vector: the unit of the
    /// times in `/proc/<pid>/stat`.
    const AT_CLKTCK: u64 = 17;

    pub(super) fn read() -> Stat {
        let ticks = clock_ticks();
        let stat = fs::read_to_string("/proc/self/stat").ok();
        // Fields after the command name (which may hold spaces and
        // parentheses): the 3rd field of the line is the first here.
        let fields: Vec<&str> = stat
            .as_deref()
            .and_then(|s| s.rsplit_once(')'))
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
        let cpu_seconds = match (field(14), field(15), ticks) {
            (Some(utime), Some(stime), Some(hz)) => Some((utime + stime) / hz),
            _ => None,
        };
        let boot_time = fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        let start_time = match (field(22), ticks, boot_time) {
            (Some(start), Some(hz), Some(boot)) => Some(boot + start / hz),
            _ => None,
        };
        let resident_bytes = fs::read_to_string("/proc/self/status").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|kib| kib * 1024.0)
        });
        let open_fds = fs::read_dir("/proc/self/fd")
            .ok()
            .map(|dir| dir.count() as f64);
        let max_fds = fs::read_to_string("/proc/self/limits").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|soft| soft.parse::<f64>().ok())
        });
        Stat {
            cpu_seconds,
            resident_bytes,
            open_fds,
            max_fds,
            start_time,
        }
    }

    /// Clock ticks per second, from the auxiliary vector the kernel gave
    /// the process (what `sysconf(_SC_CLK_TCK)` reads, without `unsafe`).
    fn clock_ticks() -> Option<f64> {
        let auxv = fs::read("/proc/self/auxv").ok()?;
        let word = std::mem::size_of::<usize>();
        auxv.chunks_exact(2 * word).find_map(|pair| {
            let (key, value) = pair.split_at(word);
            let read = |bytes: &[u8]| -> Option<u64> {
                let mut buf = [0u8; 8];
                buf.get_mut(..word)?.copy_from_slice(bytes);
                Some(u64::from_ne_bytes(buf))
            };
            (read(key)? == AT_CLKTCK)
                .then(|| read(value))
                .flatten()
                .filter(|&hz| hz > 0)
                .map(|hz| hz as f64)
        })
    }

    #[cfg(all(test, target_os = "linux"))]
    mod tests {
        #[test]
        fn reads_this_process() {
            let stat = super::read();
            assert!(stat.cpu_seconds.is_some_and(|s| s >= 0.0), "{stat:?}");
            assert!(stat.resident_bytes.is_some_and(|b| b > 0.0), "{stat:?}");
            assert!(stat.open_fds.is_some_and(|n| n >= 3.0), "{stat:?}");
            assert!(stat.max_fds.is_some_and(|n| n >= 1.0), "{stat:?}");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            // Started before now (and, as a sanity bound, within a day).
            assert!(
                stat.start_time
                    .is_some_and(|t| t <= now + 1.0 && t > now - 86_400.0),
                "{stat:?} now {now}"
            );
        }
    }
}

/// A label value in Prometheus text (names are restricted already; this
/// keeps the output well-formed whatever they hold).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus metrics of every tenant (admin).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "admin",
    description = "The Prometheus text format, labelled by tenant and queue: at least \
        `tether_queue_jobs{tenant,queue,state}`, \
        `tether_queue_oldest_ready_age_seconds{tenant,queue}`, \
        `tether_queue_expired_leases{tenant,queue}`, \
        `tether_queue_max_running{tenant,queue}` (queues with a limit), \
        `tether_claims_throttled_total{tenant,queue}` (claims flow control held back), \
        `tether_jobs_*_total` counters, the histograms `tether_job_wait_seconds{tenant,queue}`, \
        `tether_job_run_seconds{tenant,queue,outcome}` and \
        `tether_http_request_duration_seconds{method,route,status}`, and `process_*` gauges; \
        every family has `# HELP` and `# TYPE` lines (the full list: docs/operations.md).",
    responses(
        (status = 200, description = "The metrics, in the Prometheus text exposition format.", content_type = "text/plain", body = String),
    )
)]
pub(crate) async fn metrics(State(st): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require_admin()?;
    let mut text = st
        .metrics
        .gauges(&st.engine, st.config.metrics_max_queues)
        .await?;
    text.push_str(&render_process());
    if let Some(recorder) = &st.metrics.recorder {
        keep_unlabelled_counters();
        text.push_str(&recorder.render());
    }
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_listed_once_and_documented() {
        let docs = include_str!("../../../docs/operations.md");
        let mut names = std::collections::HashSet::new();
        for family in FAMILIES {
            assert!(names.insert(family.name), "{} twice", family.name);
            assert!(!family.help.is_empty(), "{} has no help", family.name);
            // Its row in a table of the docs names it and each of its labels.
            let cell = format!("| `{}` |", family.name);
            let row = docs
                .lines()
                .find(|l| l.starts_with(&cell))
                .unwrap_or_else(|| panic!("{} has no row in docs/operations.md", family.name));
            for label in family.labels {
                assert!(
                    row.contains(&format!("`{label}`")),
                    "the row of {} does not name its label {label}",
                    family.name
                );
            }
            if let Kind::Histogram(buckets) = family.kind {
                assert!(
                    buckets.windows(2).all(|w| w[0] < w[1]),
                    "{} buckets rise",
                    family.name
                );
            }
        }
    }

    #[test]
    fn process_gauges_have_help_and_type_lines() {
        let text = render_process();
        if cfg!(target_os = "linux") {
            for name in [
                "process_cpu_seconds_total",
                "process_resident_memory_bytes",
                "process_open_fds",
                "process_max_fds",
                "process_start_time_seconds",
            ] {
                assert!(text.contains(&format!("# HELP {name} ")), "{text}");
                assert!(text.contains(&format!("\n{name} ")), "{text}");
            }
            assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
        }
    }
}
