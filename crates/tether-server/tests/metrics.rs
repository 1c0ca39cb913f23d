//! `/metrics` with the recorder `tether serve` installs, on PostgreSQL and
//! SQLite: the answer parses as the Prometheus text format (every sample's
//! family has `# HELP` and `# TYPE`, histogram buckets are cumulative and
//! end with `+Inf` equal to `_count`), the outcome counters carry a `queue`
//! label, the wait and run histograms move by exactly the jobs claimed and
//! finished (a repeated report adds nothing), the HTTP histogram by the
//! requests made, and the process
//! gauges are there.

#[path = "common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use common::{Answer, Ctx};
use serde_json::json;
use tether_conformance::TestDb;
use tether_server::{AppState, Kind, Metrics, ServerConfig, FAMILIES};

tether_conformance::both_backends!(
    histograms_count_every_claim_and_report,
    the_scrape_is_well_formed_prometheus_text,
    queue_gauges_count_waiting_jobs,
);

/// The process's recorder, installed once (it is global); shared by the
/// tests of this binary, which take [`SERIAL`] so that none sees another's
/// requests in its deltas.
fn metrics() -> Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS
        .get_or_init(|| {
            Metrics::with_recorder(tether_server::install_recorder(1_000).expect("install"))
        })
        .clone()
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn setup(db: &TestDb) -> Ctx {
    common::setup_state(db, db.engine.clone(), |engine| {
        AppState::new(engine, ServerConfig::default()).with_metrics(metrics())
    })
    .await
}

/// One sample line: the series name, its labels and its value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape, parsed and checked against the text format's rules.
#[derive(Debug)]
struct Scrape {
    /// Family name → its `# TYPE`.
    types: HashMap<String, String>,
    /// Family name → its `# HELP` text.
    helps: HashMap<String, String>,
    samples: Vec<Sample>,
}

/// `name{a="x",b="y"} value` (labels optional; values may hold escaped
/// quotes).
fn parse_sample(line: &str) -> Sample {
    let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|e| panic!("value of {line}: {e}")),
    };
    let (name, labels) = match series.split_once('{') {
        None => (series.to_owned(), BTreeMap::new()),
        Some((name, rest)) => {
            let body = rest
                .strip_suffix('}')
                .unwrap_or_else(|| panic!("unclosed labels: {line}"));
            let mut labels = BTreeMap::new();
            let mut chars = body.chars().peekable();
            while chars.peek().is_some() {
                let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                assert_eq!(chars.next(), Some('"'), "{line}");
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some('\\') => value.push(chars.next().expect("escape")),
                        Some('"') => break,
                        Some(c) => value.push(c),
                        None => panic!("unterminated label value: {line}"),
                    }
                }
                if chars.peek() == Some(&',') {
                    chars.next();
                }
                assert!(
                    labels.insert(key.clone(), value).is_none(),
                    "{key} twice: {line}"
                );
            }
            (name.to_owned(), labels)
        }
    };
    assert!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "bad name: {line}"
    );
    Sample {
        name,
        labels,
        value,
    }
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape {
            types: HashMap::new(),
            helps: HashMap::new(),
            samples: Vec::new(),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                assert!(!help.trim().is_empty(), "empty help: {line}");
                let fresh = scrape.helps.insert(name.to_owned(), help.to_owned());
                assert!(fresh.is_none(), "HELP twice: {line}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect(line);
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                    "{line}"
                );
                assert!(
                    scrape.helps.contains_key(name),
                    "TYPE before HELP (or no HELP): {line}"
                );
                let fresh = scrape.types.insert(name.to_owned(), kind.to_owned());
                assert!(fresh.is_none(), "TYPE twice: {line}");
            } else {
                assert!(!line.starts_with('#'), "unknown comment: {line}");
                let sample = parse_sample(line);
                let family = scrape.family_of(&sample.name);
                assert!(
                    scrape.types.contains_key(&family),
                    "{} has no # TYPE before it",
                    sample.name
                );
                scrape.samples.push(sample);
            }
        }
        scrape.check_histograms();
        scrape
    }

    /// The family a series belongs to: a histogram's `_bucket`, `_sum` and
    /// `_count` series are of the histogram.
    fn family_of(&self, series: &str) -> String {
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = series.strip_suffix(suffix) {
                if self.types.get(base).map(String::as_str) == Some("histogram") {
                    return base.to_owned();
                }
            }
        }
        series.to_owned()
    }

    /// Each histogram series (its labels without `le`): buckets that rise
    /// in `le` and never fall in count, the last one `+Inf` and equal to
    /// `_count`, and a `_sum`.
    fn check_histograms(&self) {
        for (family, _) in self.types.iter().filter(|(_, k)| *k == "histogram") {
            let mut buckets: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
            for s in self
                .samples
                .iter()
                .filter(|s| s.name == format!("{family}_bucket"))
            {
                let mut labels = s.labels.clone();
                let le = labels.remove("le").expect("a bucket has le");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                buckets.entry(labels).or_default().push((le, s.value));
            }
            for (labels, series) in &buckets {
                assert!(
                    series
                        .windows(2)
                        .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                    "{family}{labels:?}: buckets not cumulative: {series:?}"
                );
                let last = series.last().unwrap();
                assert_eq!(
                    last.0,
                    f64::INFINITY,
                    "{family}{labels:?} ends without +Inf"
                );
                let count = self
                    .value(&format!("{family}_count"), labels)
                    .unwrap_or_else(|| panic!("{family}{labels:?} has no _count"));
                assert_eq!(last.1, count, "{family}{labels:?}: +Inf is not _count");
                assert!(
                    self.value(&format!("{family}_sum"), labels).is_some(),
                    "{family}{labels:?} has no _sum"
                );
            }
        }
    }

    /// The value of the series `name` with exactly these labels.
    fn value(&self, name: &str, labels: &BTreeMap<String, String>) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.name == name && &s.labels == labels)
            .map(|s| s.value)
    }

    /// Like [`Scrape::value`], labels given as pairs; 0 when absent (a
    /// series appears with its first observation).
    fn at(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.value(name, &labels).unwrap_or(0.0)
    }
}

async fn scrape(c: &Ctx) -> Scrape {
    let (status, text) = c.get_text("/metrics").await;
    assert_eq!(status.as_u16(), 200, "{text}");
    Scrape::parse(&text)
}

/// Claims `n` jobs of `queue` at once; answers (id, lease token) of each.
async fn claim(c: &Ctx, queue: &str, n: usize) -> Vec<(String, String)> {
    let a: Answer = c
        .post(
            &format!("/v1/queues/{queue}/claim"),
            json!({"worker_id": "w1", "limit": n}),
        )
        .await;
    let jobs = a.expect(200)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), n, "{}", a.body);
    jobs.iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_owned(),
                j["lease_token"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn histograms_count_every_claim_and_report(db: &TestDb) {
    let _serial = SERIAL.lock().await;
    let c = setup(db).await;
    // A queue of this test alone, so that its series start here.
    let queue = format!("hist-{}", db.backend());
    let q = queue.as_str();
    let t = "default";
    let before = scrape(&c).await;

    // Six jobs: one whose run_at is two hours past, so it is ready from its
    // creation, not from its run_at.
    for _ in 0..5 {
        c.enqueue(q, "k").await;
    }
    // Milliseconds: the API refuses more digits than it keeps (microseconds).
    let past = (chrono::Utc::now() - chrono::Duration::hours(2))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    c.post("/v1/jobs", json!({"queue": q, "kind": "k", "run_at": past}))
        .await
        .expect(201);
    let jobs = claim(&c, q, 6).await;
    // Two completed alone, two in one batch, one failed for good, one
    // retried.
    for (id, token) in &jobs[..2] {
        c.post(
            &format!("/v1/jobs/{id}/complete"),
            json!({"lease_token": token}),
        )
        .await
        .expect(200);
    }
    let items: Vec<_> = jobs[2..4]
        .iter()
        .map(|(id, token)| json!({"id": id, "lease_token": token}))
        .collect();
    let batch = c.post("/v1/jobs/complete", json!({"items": items})).await;
    batch.expect(200);
    let (id, token) = &jobs[4];
    c.post(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token, "error": "no", "fatal": true}),
    )
    .await
    .expect(200);
    let (id, token) = &jobs[5];
    c.post(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token, "error": "again", "retry_after_ms": 3_600_000}),
    )
    .await
    .expect(200);
    // Repeated reports (as after a lost answer) are no new observations.
    let (id, token) = &jobs[0];
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    let (id, token) = &jobs[4];
    c.post(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token, "error": "no", "fatal": true}),
    )
    .await
    .expect(200);

    let after = scrape(&c).await;
    let moved =
        |name: &str, labels: &[(&str, &str)]| after.at(name, labels) - before.at(name, labels);
    let tq = [("tenant", t), ("queue", q)];
    let with = |outcome: &'static str| [("tenant", t), ("queue", q), ("outcome", outcome)];

    assert_eq!(moved("tether_job_wait_seconds_count", &tq), 6.0);
    // Each wait is from ready: the job of two hours ago did not wait two
    // hours (a bound far above any run of this test).
    let mut within = tq.to_vec();
    within.push(("le", "600"));
    assert_eq!(moved("tether_job_wait_seconds_bucket", &within), 6.0);
    assert!(moved("tether_job_wait_seconds_sum", &tq) >= 0.0);

    assert_eq!(
        moved("tether_job_run_seconds_count", &with("succeeded")),
        4.0
    );
    assert_eq!(moved("tether_job_run_seconds_count", &with("dead")), 1.0);
    assert_eq!(moved("tether_job_run_seconds_count", &with("retried")), 1.0);

    // The outcome counters, per queue.
    assert_eq!(moved("tether_jobs_enqueued_total", &tq), 6.0);
    assert_eq!(moved("tether_jobs_claimed_total", &tq), 6.0);
    assert_eq!(moved("tether_jobs_completed_total", &tq), 4.0);
    assert_eq!(moved("tether_jobs_failed_total", &with("dead")), 1.0);
    assert_eq!(moved("tether_jobs_failed_total", &with("retried")), 1.0);

    // The HTTP histogram, by route template (never the job's id).
    let http = "tether_http_request_duration_seconds_count";
    let route = |method: &'static str, route: &'static str| {
        [("method", method), ("route", route), ("status", "2xx")]
    };
    assert_eq!(moved(http, &route("POST", "/v1/queues/{queue}/claim")), 1.0);
    assert_eq!(moved(http, &route("POST", "/v1/jobs/{id}/complete")), 3.0);
    assert_eq!(moved(http, &route("POST", "/v1/jobs/{id}/fail")), 3.0);
    assert_eq!(moved(http, &route("POST", "/v1/jobs/complete")), 1.0);
    // The first scrape is in the second's histogram (it ended before).
    assert_eq!(moved(http, &route("GET", "/metrics")), 1.0);
    assert!(after
        .samples
        .iter()
        .filter(|s| s.name.starts_with("tether_http_request_duration_seconds"))
        .all(|s| !s.labels["route"].contains(&jobs[0].0)));
}

async fn the_scrape_is_well_formed_prometheus_text(db: &TestDb) {
    let _serial = SERIAL.lock().await;
    let c = setup(db).await;
    let before = scrape(&c).await;
    c.enqueue("tidy", "k").await;
    let (id, token) = c.claim_one("tidy").await;
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    c.call("GET", "/v1/nowhere", None, None).await.expect(404);
    let s = scrape(&c).await;

    // Every family exported is one of ours, with our help text and kind.
    for (name, kind) in &s.types {
        let family = FAMILIES
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name} is exported but not in FAMILIES"));
        let expected = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        };
        assert_eq!(kind, expected, "{name}");
        assert_eq!(s.helps[name], family.help, "{name}");
    }
    // Those this scrape must hold: the queue gauges, the engine's counters
    // and histograms fed above, the HTTP histogram and the process gauges.
    for name in [
        "tether_queue_jobs",
        "tether_jobs_enqueued_total",
        "tether_jobs_claimed_total",
        "tether_jobs_completed_total",
        "tether_job_wait_seconds",
        "tether_job_run_seconds",
        "tether_http_request_duration_seconds",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(s.types.contains_key(name), "{name} missing");
    }
    let one = |name: &str| s.at(name, &[]);
    assert!(one("process_resident_memory_bytes") > 0.0);
    assert!(one("process_open_fds") >= 3.0);
    assert!(one("process_cpu_seconds_total").is_finite());
    assert!(one("process_start_time_seconds") > 1.5e9);
    // The unmatched path is one bounded label, not the path.
    let unmatched = [("method", "GET"), ("route", "unmatched"), ("status", "4xx")];
    let count = "tether_http_request_duration_seconds_count";
    assert_eq!(s.at(count, &unmatched) - before.at(count, &unmatched), 1.0);
    // The outcome counters carry the queue; the histograms' buckets are the
    // configured ones.
    let completed = s
        .samples
        .iter()
        .find(|x| x.name == "tether_jobs_completed_total")
        .unwrap();
    assert!(completed.labels.contains_key("queue"), "{completed:?}");
    for family in FAMILIES.iter().filter(|f| s.types.contains_key(f.name)) {
        let Kind::Histogram(buckets) = family.kind else {
            continue;
        };
        let mut expected: Vec<String> = buckets.iter().map(f64::to_string).collect();
        expected.push("+Inf".to_owned());
        let mut series: BTreeMap<BTreeMap<String, String>, Vec<String>> = BTreeMap::new();
        for x in s
            .samples
            .iter()
            .filter(|x| x.name == format!("{}_bucket", family.name))
        {
            let mut labels = x.labels.clone();
            let le = labels.remove("le").unwrap();
            series.entry(labels).or_default().push(le);
        }
        for (labels, les) in series {
            let les: Vec<f64> = les.iter().map(|le| le.parse().unwrap()).collect();
            let want: Vec<f64> = expected.iter().map(|le| le.parse().unwrap()).collect();
            assert_eq!(les, want, "{}{labels:?}", family.name);
        }
    }
}

/// `tether_queue_jobs{state="waiting"}`: the jobs that wait for their
/// dependencies, per queue, beside the other states; a job released by its
/// dependency's success moves to `queued`.
async fn queue_gauges_count_waiting_jobs(db: &TestDb) {
    let _serial = SERIAL.lock().await;
    let c = setup(db).await;
    let parent = c.enqueue("flow", "parent").await;
    let child = json!({"queue": "flow", "kind": "child", "depends_on": [parent]});
    let child = c.post("/v1/jobs", child).await;
    assert_eq!(child.expect(201)["job"]["state"], "waiting");
    queue_jobs_reach(
        &c,
        "flow",
        &[("waiting", 1.0), ("queued", 1.0), ("succeeded", 0.0)],
    )
    .await;
    // One series per state, in lifecycle order.
    let s = scrape(&c).await;
    let states: Vec<&str> = (s.samples.iter())
        .filter(|x| x.name == "tether_queue_jobs" && x.labels["queue"] == "flow")
        .map(|x| x.labels["state"].as_str())
        .collect();
    assert_eq!(
        states,
        [
            "waiting",
            "queued",
            "running",
            "succeeded",
            "failed",
            "cancelled"
        ]
    );
    // The parent succeeds: the child is released, nothing waits any more.
    let (id, token) = c.claim_one("flow").await;
    assert_eq!(id, parent);
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    queue_jobs_reach(
        &c,
        "flow",
        &[("waiting", 0.0), ("queued", 1.0), ("succeeded", 1.0)],
    )
    .await;
}

/// Scrapes until `tether_queue_jobs` of `queue` (tenant `default`) reads
/// `want` per state (the gauges are cached for `GAUGE_CACHE`).
async fn queue_jobs_reach(c: &Ctx, queue: &str, want: &[(&str, f64)]) {
    tether_conformance::eventually(
        &format!("tether_queue_jobs of {queue} to read {want:?}"),
        std::time::Duration::from_secs(10),
        || async {
            let s = scrape(c).await;
            want.iter()
                .all(|(state, n)| {
                    let labels = [("tenant", "default"), ("queue", queue), ("state", state)];
                    let labels = (labels.iter())
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect();
                    s.value("tether_queue_jobs", &labels) == Some(*n)
                })
                .then_some(())
        },
    )
    .await
}
