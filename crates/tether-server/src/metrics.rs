//! `GET /metrics` (admin key): Prometheus text. Queue gauges are read from
//! the database at scrape time for every tenant, cached briefly so that
//! several scrapers cannot load it; counters come from the process's
//! `metrics` recorder when one is installed (`tether serve` installs it).
//!
//! The per-queue gauges cover at most `metrics_max_queues` queues (of all
//! tenants), so that many queue names cannot make the scrape grow without
//! bound: past it, the queues with the most unfinished and failed jobs are
//! kept and `tether_queue_series_omitted` counts the others.

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::PrometheusHandle;
use tether_core::{Engine, QueueStats};

use crate::error::ApiResult;
use crate::extract::Caller;
use crate::AppState;

/// How long one reading of the queue gauges is served again.
pub const GAUGE_CACHE: Duration = Duration::from_secs(2);

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
    pub fn with_recorder(recorder: PrometheusHandle) -> Self {
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
/// A gauge: name, help text, and how to read it off a queue's stats.
type Gauge = (&'static str, &'static str, fn(&QueueStats) -> Samples);

/// Keeps at most `max` queues, those with the most unfinished and failed
/// jobs (ties: by tenant and name), in tenant-and-name order; answers how
/// many were left out.
fn keep_busiest(queues: &mut Vec<(String, QueueStats)>, max: usize) -> usize {
    let weight =
        |q: &QueueStats| q.counts.queued + q.counts.running + q.counts.failed + q.expired_leases;
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
        (
            "tether_queue_jobs",
            "Jobs per queue and state, read from the database.",
            |q| {
                let c = &q.counts;
                vec![
                    (Some("queued"), c.queued as f64),
                    (Some("running"), c.running as f64),
                    (Some("succeeded"), c.succeeded as f64),
                    (Some("failed"), c.failed as f64),
                    (Some("cancelled"), c.cancelled as f64),
                ]
            },
        ),
        (
            "tether_queue_ready_jobs",
            "Queued jobs whose run_at has come.",
            |q| vec![(None, q.ready as f64)],
        ),
        (
            "tether_queue_scheduled_jobs",
            "Queued jobs whose run_at is still ahead.",
            |q| vec![(None, q.scheduled as f64)],
        ),
        (
            "tether_queue_oldest_ready_age_seconds",
            "How long the oldest ready job has waited (0 when none is ready).",
            |q| vec![(None, q.oldest_ready_age_ms as f64 / 1000.0)],
        ),
        (
            "tether_queue_expired_leases",
            "Running jobs past their lease, not yet reaped.",
            |q| vec![(None, q.expired_leases as f64)],
        ),
        ("tether_queue_paused", "1 when the queue is paused.", |q| {
            vec![(None, if q.paused { 1.0 } else { 0.0 })]
        }),
        (
            "tether_queue_max_running",
            "The queue's limit on running jobs (no series when it has none); \
             compare with tether_queue_jobs{state=\"running\"}.",
            |q| {
                q.limits
                    .max_running
                    .map(|n| vec![(None, f64::from(n))])
                    .unwrap_or_default()
            },
        ),
    ];
    let mut out = String::new();
    for (name, help, samples) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
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
    let _ = writeln!(
        out,
        "# HELP tether_queue_series_omitted Queues left out of the per-queue gauges \
         (past --metrics-max-queues; the ones with the fewest unfinished and failed jobs)."
    );
    let _ = writeln!(out, "# TYPE tether_queue_series_omitted gauge");
    let _ = writeln!(out, "tether_queue_series_omitted {omitted}");
    out
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
        `tether_claims_throttled_total{tenant,queue}` (claims flow control held back) and \
        `tether_jobs_*_total` counters.",
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
    if let Some(recorder) = &st.metrics.recorder {
        text.push_str(&recorder.render());
    }
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response())
}
