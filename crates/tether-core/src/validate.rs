//! Validation of everything that crosses the library edge. Every check runs
//! before any write, so bad input changes nothing.

use chrono::{DateTime, NaiveDate, Utc};

use crate::error::{Error, Result};
use crate::model::{
    Backoff, CarriedReports, ClaimRequest, Completion, Dependency, EventQuery, Failure, Heartbeat,
    JobFilter, JobState, NewJob, NewWorkflow, QueueConfigPatch, ReplayFilter, RunAt,
    WorkflowFilter, MAX_DEPENDENCIES,
};

/// Most jobs in one enqueue, claim or completion batch.
pub const MAX_BATCH: usize = 1_000;
/// Longest name (queue, kind, tenant, tag, worker id).
pub const MAX_NAME_LEN: usize = 128;
/// Longest idempotency or unique key.
pub const MAX_KEY_LEN: usize = 255;
/// Most tags on one job.
pub const MAX_TAGS: usize = 32;
/// Most headers on one job.
pub const MAX_HEADERS: usize = 32;
/// Longest header name (bytes; names are `[A-Za-z0-9_.-]`).
pub const MAX_HEADER_NAME_LEN: usize = 64;
/// Longest header value, in bytes of UTF-8.
pub const MAX_HEADER_VALUE_LEN: usize = 1_024;
/// Most bytes of one job's header names and values together.
pub const MAX_HEADERS_BYTES: usize = 4_096;
/// Most queues a worker may announce.
pub const MAX_WORKER_QUEUES: usize = 100;
/// Longest `sdk`, `version` or `host` of a worker's announcement.
pub const MAX_WORKER_LABEL_LEN: usize = 255;
/// Priority range.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i16> = -100..=100;
/// Attempt budget range.
pub const MAX_ATTEMPTS_RANGE: std::ops::RangeInclusive<i32> = 1..=1_000;
/// Range of a queue's `max_running`, `key_max_running` and rate-limit count.
pub const MAX_RUNNING_RANGE: std::ops::RangeInclusive<i32> = 1..=100_000;
/// Range of a rate limit's window (1 s to 1 day).
pub const RATE_PERIOD_RANGE: std::ops::RangeInclusive<i64> = 1_000..=86_400_000;
/// Lease length range (1 s to 1 h).
pub const LEASE_TTL_RANGE: std::ops::RangeInclusive<i64> = 1_000..=3_600_000;
/// Longest delay, job timeout or backoff: 366 days.
pub const MAX_DURATION_MS: i64 = 366 * 24 * 3_600_000;
/// Largest page of a listing.
pub const MAX_PAGE: u32 = 500;
/// Largest bulk replay.
pub const MAX_REPLAY: u32 = 10_000;
/// Largest page of a job's history.
pub const MAX_EVENT_PAGE: u32 = 1_000;
/// Page size of a job's history when none is asked for.
pub const DEFAULT_EVENT_PAGE: u32 = 100;

/// The earliest absolute time accepted as input: the Unix epoch.
pub const MIN_INSTANT: &str = "1970-01-01T00:00:00Z";
/// The latest absolute time accepted as input: the end of year 9999.
pub const MAX_INSTANT: &str = "9999-12-31T23:59:59.999Z";

/// An absolute time given as input (`run_at`, `expires_at`, a cron
/// preview's `from`) within [`MIN_INSTANT`]..=[`MAX_INSTANT`]. Years outside
/// it (negative, or above 9999) are stored by one backend and not the other
/// (PostgreSQL's `timestamptz` ends at 294276, SQLite stores any integer),
/// and mean nothing for a job queue; every backend refuses the same values.
pub fn instant(field: &str, value: &DateTime<Utc>) -> Result<()> {
    let min = DateTime::<Utc>::UNIX_EPOCH;
    let max = NaiveDate::from_ymd_opt(10_000, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .expect("a valid date");
    if *value < min || *value >= max {
        return Err(Error::invalid(
            field,
            format!(
                "must be between {MIN_INSTANT} and {MAX_INSTANT}, got {}",
                value.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            ),
        ));
    }
    Ok(())
}

/// Most digits of a fraction of a second in an input time: microseconds,
/// what PostgreSQL keeps (SQLite keeps milliseconds; answers show
/// milliseconds). Finer digits would be cut off without a word, so they
/// are refused.
pub const MAX_FRACTION_DIGITS: usize = 6;

/// Reads an input time: the one rule for every time the API takes, in a
/// body (`run_at`, `expires_at`) or a query string (`created_after`, a cron
/// preview's `from`). RFC 3339 with a four-digit year and an offset (`Z`
/// or `±hh:mm`), converted to UTC, with at most [`MAX_FRACTION_DIGITS`]
/// digits of a second. A signed or expanded year (`+2026-…`, which
/// chrono's `FromStr` and so serde take) is refused. The error is a
/// message for the field's name to precede. Whether the instant is in
/// range is [`instant`]'s to say.
pub fn parse_instant(text: &str) -> std::result::Result<DateTime<Utc>, String> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "not an RFC 3339 time (it starts with a four-digit year): {text:?}"
        ));
    }
    let at = DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("not an RFC 3339 time ({e}): {text:?}"))?;
    // Neither the date nor the offset holds a `.`: the first one starts
    // the fraction of the second.
    if let Some((_, fraction)) = text.split_once('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits > MAX_FRACTION_DIGITS {
            return Err(format!(
                "{text:?} has {digits} digits of a second; at most {MAX_FRACTION_DIGITS} \
                 (microseconds) are kept, so round it first"
            ));
        }
    }
    Ok(at.to_utc())
}

/// Size limits, configurable by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest serialized payload, result or progress, in bytes (default 1 MiB).
    pub max_payload_bytes: usize,
    /// Most queues one tenant may have (rows: queues with jobs or settings;
    /// default 1 000). An enqueue, pause or configuration that would make
    /// another is refused with [`crate::Error::LimitReached`]. Each queue is
    /// a stored row and a set of `/metrics` series, so names must not grow
    /// without bound.
    pub max_queues_per_tenant: u32,
    /// Most schedules one tenant may have (default 10 000).
    pub max_schedules_per_tenant: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 1024 * 1024,
            max_queues_per_tenant: 1_000,
            max_schedules_per_tenant: 10_000,
        }
    }
}

/// A name: 1–128 characters of `[A-Za-z0-9._:-]`.
pub fn name(field: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            field,
            format!(
                "must be 1 to {MAX_NAME_LEN} characters, got {}",
                value.len()
            ),
        ));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(Error::invalid(
            field,
            format!("{value:?} contains {bad:?}; allowed are A-Z a-z 0-9 . _ : -"),
        ));
    }
    // Names travel as URL path segments (`/v1/queues/{queue}`), where `.`
    // and `..` are dot-segments that URL parsers remove.
    if value == "." || value == ".." {
        return Err(Error::invalid(
            field,
            format!("{value:?} cannot be used: it is a dot-segment in a URL path"),
        ));
    }
    Ok(())
}

/// A new tenant's name: a [`name`] that is not also a tenant id. An admin
/// names the tenant it acts for by name or id (`X-Tether-Tenant`), so a
/// name that reads as an id (any form a UUID parses from: hyphenated,
/// 32 hex digits, `urn:uuid:`, any case) could point at another tenant
/// than the one whose name it is.
pub fn tenant_name(field: &str, value: &str) -> Result<()> {
    name(field, value)?;
    if uuid::Uuid::try_parse(value).is_ok() {
        return Err(Error::invalid(
            field,
            format!(
                "{value:?} reads as a UUID, and tenants are named by name or id; \
                 choose a name that is not a UUID"
            ),
        ));
    }
    Ok(())
}

/// An idempotency or unique key: 1–255 characters, no control characters.
pub fn key(field: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.chars().count() > MAX_KEY_LEN {
        return Err(Error::invalid(
            field,
            format!("must be 1 to {MAX_KEY_LEN} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(())
}

/// A worker id: 1–128 characters, no control characters.
pub fn worker_id(field: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.chars().count() > MAX_NAME_LEN {
        return Err(Error::invalid(
            field,
            format!("must be 1 to {MAX_NAME_LEN} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(())
}

/// An API key's optional label: 1–128 characters, no control characters.
pub fn key_name(field: &str, value: &str) -> Result<()> {
    worker_id(field, value)
}

/// A duration in milliseconds within `range`.
pub fn millis(field: &str, value: i64, range: std::ops::RangeInclusive<i64>) -> Result<()> {
    if value < 0 {
        return Err(Error::invalid(
            field,
            format!("must not be negative, got {value}"),
        ));
    }
    if !range.contains(&value) {
        return Err(Error::invalid(
            field,
            format!(
                "must be between {} and {} ms, got {value}",
                range.start(),
                range.end()
            ),
        ));
    }
    Ok(())
}

/// A JSON value whose serialized size is within the limit and whose strings
/// (and keys) hold no U+0000, which PostgreSQL's `jsonb` cannot store: the
/// same value is refused on every backend, before anything is written.
pub fn json_size(field: &str, value: &serde_json::Value, limits: &Limits) -> Result<()> {
    let size = serde_json::to_vec(value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > limits.max_payload_bytes {
        return Err(Error::TooLarge {
            field: field.to_owned(),
            size,
            limit: limits.max_payload_bytes,
        });
    }
    if holds_nul(value) {
        return Err(Error::invalid(
            field,
            "must not contain the character U+0000 in any string or key",
        ));
    }
    Ok(())
}

fn holds_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// A batch size of 1..=`max`.
pub fn batch_len(field: &str, len: usize, max: usize) -> Result<()> {
    if len == 0 || len > max {
        return Err(Error::invalid(
            field,
            format!("must hold 1 to {max} items, got {len}"),
        ));
    }
    Ok(())
}

/// Backoff parameters: 0 ≤ base ≤ cap ≤ 366 days.
pub fn backoff(field: &str, b: &Backoff) -> Result<()> {
    millis(&format!("{field}.base_ms"), b.base_ms, 0..=MAX_DURATION_MS)?;
    millis(&format!("{field}.cap_ms"), b.cap_ms, 0..=MAX_DURATION_MS)?;
    if b.base_ms > b.cap_ms {
        return Err(Error::invalid(
            field,
            format!(
                "base_ms ({}) must not exceed cap_ms ({})",
                b.base_ms, b.cap_ms
            ),
        ));
    }
    Ok(())
}

/// An attempt budget.
pub fn max_attempts(field: &str, value: i32) -> Result<()> {
    if !MAX_ATTEMPTS_RANGE.contains(&value) {
        return Err(Error::invalid(
            field,
            format!(
                "must be between {} and {}, got {value}",
                MAX_ATTEMPTS_RANGE.start(),
                MAX_ATTEMPTS_RANGE.end()
            ),
        ));
    }
    Ok(())
}

/// One job to enqueue; `field` prefixes the names in errors (e.g. `jobs[3]`).
pub fn new_job(field: &str, job: &NewJob, limits: &Limits) -> Result<()> {
    new_job_at(field, job, limits, None)
}

/// [`new_job`] for the `index`-th entry of a batch (`None`: a single job,
/// which cannot name batch entries).
fn new_job_at(field: &str, job: &NewJob, limits: &Limits, index: Option<usize>) -> Result<()> {
    let f = |name: &str| {
        if field.is_empty() {
            name.to_owned()
        } else {
            format!("{field}.{name}")
        }
    };
    name(&f("queue"), &job.queue)?;
    name(&f("kind"), &job.kind)?;
    json_size(&f("payload"), &job.payload, limits)?;
    if !PRIORITY_RANGE.contains(&job.priority) {
        return Err(Error::invalid(
            f("priority"),
            format!("must be between -100 and 100, got {}", job.priority),
        ));
    }
    match job.run_at {
        RunAt::Delay(ms) => millis(&f("delay_ms"), ms, 0..=MAX_DURATION_MS)?,
        RunAt::At(at) => instant(&f("run_at"), &at)?,
        RunAt::Now => {}
    }
    if let Some(at) = &job.expires_at {
        instant(&f("expires_at"), at)?;
    }
    if let Some(n) = job.max_attempts {
        max_attempts(&f("max_attempts"), n)?;
    }
    if let Some(b) = &job.backoff {
        backoff(&f("backoff"), b)?;
    }
    if let Some(ms) = job.timeout_ms {
        millis(&f("timeout_ms"), ms, 1..=MAX_DURATION_MS)?;
    }
    if let Some(k) = &job.idempotency_key {
        key(&f("idempotency_key"), k)?;
    }
    if let Some(k) = &job.unique_key {
        key(&f("unique_key"), k)?;
    }
    if let Some(k) = &job.concurrency_key {
        name(&f("concurrency_key"), k)?;
    }
    if job.tags.len() > MAX_TAGS {
        return Err(Error::invalid(
            f("tags"),
            format!("at most {MAX_TAGS} tags, got {}", job.tags.len()),
        ));
    }
    for (i, tag) in job.tags.iter().enumerate() {
        name(&f(&format!("tags[{i}]")), tag)?;
    }
    headers(&f("headers"), &job.headers)?;
    dependencies(&f, &job.depends_on, index)
}

/// A job's dependencies: at most [`MAX_DEPENDENCIES`], none twice, batch
/// entries only in a batch and only earlier ones (so a batch's graph has
/// no cycle).
fn dependencies(
    f: &dyn Fn(&str) -> String,
    deps: &[Dependency],
    index: Option<usize>,
) -> Result<()> {
    if deps.len() > MAX_DEPENDENCIES {
        return Err(Error::invalid(
            f("depends_on"),
            format!(
                "at most {MAX_DEPENDENCIES} dependencies, got {}",
                deps.len()
            ),
        ));
    }
    for (i, dep) in deps.iter().enumerate() {
        let field = match dep {
            Dependency::Job(_) => "depends_on",
            Dependency::Entry(_) => "depends_on_entries",
        };
        if deps[..i].contains(dep) {
            return Err(Error::invalid(
                f(field),
                format!("names {} twice", dep_name(dep)),
            ));
        }
        if let Dependency::Entry(entry) = dep {
            match index {
                None => {
                    return Err(Error::invalid(
                        f(field),
                        "names batch entries, which only a batch has",
                    ))
                }
                Some(own) if *entry >= own => {
                    return Err(Error::invalid(
                        f(field),
                        format!("may name only earlier entries of the batch (this is entry {own}), got {entry}"),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

fn dep_name(dep: &Dependency) -> String {
    match dep {
        Dependency::Job(id) => format!("job {id}"),
        Dependency::Entry(i) => format!("entry {i}"),
    }
}

/// A batch of jobs to enqueue.
pub fn new_jobs(jobs: &[NewJob], limits: &Limits) -> Result<()> {
    batch_len("jobs", jobs.len(), MAX_BATCH)?;
    for (i, job) in jobs.iter().enumerate() {
        new_job_at(&format!("jobs[{i}]"), job, limits, Some(i))?;
    }
    Ok(())
}

/// A claim request.
pub fn claim(req: &ClaimRequest) -> Result<()> {
    name("queue", &req.queue)?;
    worker_id("worker_id", &req.worker_id)?;
    batch_len("limit", req.limit as usize, MAX_BATCH)?;
    if let Some(ttl) = req.lease_ttl_ms {
        millis("lease_ttl_ms", ttl, LEASE_TTL_RANGE)?;
    }
    Ok(())
}

/// A heartbeat.
pub fn heartbeat(hb: &Heartbeat, limits: &Limits) -> Result<()> {
    if let Some(ttl) = hb.lease_ttl_ms {
        millis("lease_ttl_ms", ttl, LEASE_TTL_RANGE)?;
    }
    if let Some(p) = &hb.progress {
        json_size("progress", p, limits)?;
    }
    Ok(())
}

/// A batch of completions.
pub fn completions(items: &[Completion], limits: &Limits) -> Result<()> {
    batch_len("items", items.len(), MAX_BATCH)?;
    for (i, item) in items.iter().enumerate() {
        if let Some(r) = &item.result {
            json_size(&format!("items[{i}].result"), r, limits)?;
        }
    }
    Ok(())
}

/// The reports a claim carries: at most [`MAX_BATCH`] together (none is
/// fine), each checked as its own route checks it.
pub fn carried_reports(reports: &CarriedReports, limits: &Limits) -> Result<()> {
    if reports.len() > MAX_BATCH {
        return Err(Error::invalid(
            "complete",
            format!(
                "complete and fail together must hold at most {MAX_BATCH} items, got {}",
                reports.len()
            ),
        ));
    }
    for (i, item) in reports.complete.iter().enumerate() {
        if let Some(r) = &item.result {
            json_size(&format!("complete[{i}].result"), r, limits)?;
        }
    }
    for (i, item) in reports.fail.iter().enumerate() {
        failure(&item.failure).map_err(|e| match e {
            Error::Invalid { field, message } => Error::Invalid {
                field: format!("fail[{i}].{field}"),
                message,
            },
            other => other,
        })?;
    }
    Ok(())
}

/// A failure report.
pub fn failure(failure: &Failure) -> Result<()> {
    if let Some(ms) = failure.retry_after_ms {
        millis("retry_after_ms", ms, 0..=MAX_DURATION_MS)?;
    }
    if failure.fatal && failure.cancelled {
        return Err(Error::invalid(
            "cancelled",
            "a failure is either fatal or a cancel acknowledgement, not both",
        ));
    }
    Ok(())
}

/// A listing filter.
pub fn job_filter(filter: &JobFilter) -> Result<()> {
    if let Some(q) = &filter.queue {
        name("queue", q)?;
    }
    if let Some(k) = &filter.kind {
        name("kind", k)?;
    }
    if let Some(t) = &filter.tag {
        name("tag", t)?;
    }
    if let Some(limit) = filter.limit {
        batch_len("limit", limit as usize, MAX_PAGE as usize)?;
    }
    if let Some(t) = &filter.created_after {
        instant("created_after", t)?;
    }
    if let Some(t) = &filter.created_before {
        instant("created_before", t)?;
    }
    Ok(())
}

/// A new workflow and its jobs: a name, a key if any, and jobs that do not
/// name a workflow of their own (they join the new one).
pub fn new_workflow(workflow: &NewWorkflow, jobs: &[NewJob], limits: &Limits) -> Result<()> {
    name("workflow.name", &workflow.name)?;
    if let Some(k) = &workflow.idempotency_key {
        key("workflow.idempotency_key", k)?;
    }
    new_jobs(jobs, limits)?;
    if let Some(i) = jobs.iter().position(|j| j.workflow_id.is_some()) {
        return Err(Error::invalid(
            format!("jobs[{i}].workflow_id"),
            "the jobs of a new workflow join it; workflow_id is for adding jobs to an existing one",
        ));
    }
    Ok(())
}

/// A workflow listing's filters.
pub fn workflow_filter(filter: &WorkflowFilter) -> Result<()> {
    if let Some(n) = &filter.name {
        name("name", n)?;
    }
    if let Some(limit) = filter.limit {
        batch_len("limit", limit as usize, MAX_PAGE as usize)?;
    }
    Ok(())
}

/// A page request of a job's history.
pub fn event_query(query: &EventQuery) -> Result<()> {
    if let Some(limit) = query.limit {
        batch_len("limit", limit as usize, MAX_EVENT_PAGE as usize)?;
    }
    Ok(())
}

/// A bulk replay selection.
pub fn replay_filter(filter: &ReplayFilter) -> Result<()> {
    name("queue", &filter.queue)?;
    if !matches!(filter.state, JobState::Failed | JobState::Cancelled) {
        return Err(Error::invalid(
            "state",
            format!(
                "only failed or cancelled jobs can be replayed, not {}",
                filter.state
            ),
        ));
    }
    if let Some(k) = &filter.kind {
        name("kind", k)?;
    }
    if let Some(limit) = filter.limit {
        batch_len("limit", limit as usize, MAX_REPLAY as usize)?;
    }
    if let Some(at) = &filter.expires_at {
        instant("expires_at", at)?;
    }
    Ok(())
}

/// A queue settings change.
pub fn queue_config(patch: &QueueConfigPatch) -> Result<()> {
    if let Some(n) = patch.max_attempts {
        max_attempts("max_attempts", n)?;
    }
    if let Some(b) = &patch.backoff {
        backoff("backoff", b)?;
    }
    if let Some(ttl) = patch.default_lease_ttl_ms {
        millis("default_lease_ttl_ms", ttl, LEASE_TTL_RANGE)?;
    }
    if let Some(Some(n)) = patch.max_running {
        limit("max_running", n)?;
    }
    if let Some(Some(n)) = patch.key_max_running {
        limit("key_max_running", n)?;
    }
    if let Some(Some(rate)) = patch.rate_limit {
        limit("rate_limit.count", rate.count)?;
        millis("rate_limit.period_ms", rate.period_ms, RATE_PERIOD_RANGE)?;
    }
    Ok(())
}

/// A flow-control number in [`MAX_RUNNING_RANGE`].
fn limit(field: &str, n: i32) -> Result<()> {
    if MAX_RUNNING_RANGE.contains(&n) {
        return Ok(());
    }
    Err(Error::invalid(
        field,
        format!(
            "must be between {} and {} (or null for no limit), got {n}",
            MAX_RUNNING_RANGE.start(),
            MAX_RUNNING_RANGE.end()
        ),
    ))
}

/// A schedule definition: names, payload size, and its expression and time
/// zone (printable ASCII only, then parsed); answers the timetable they make.
pub fn schedule(spec: &crate::ScheduleSpec, limits: &Limits) -> Result<crate::cron::CronSchedule> {
    name("name", &spec.name)?;
    name("queue", &spec.queue)?;
    name("kind", &spec.kind)?;
    json_size("payload", &spec.payload, limits)?;
    printable_ascii("timezone", &spec.timezone)?;
    printable_ascii("cron", &spec.cron)?;
    crate::cron::CronSchedule::parse(&spec.cron, &spec.timezone)
}

/// A cron expression or a time zone name: printable ASCII only (U+0020 to
/// U+007E). Neither has a use for anything else, and the expression is
/// stored as written: a carriage return, a vertical tab or U+0085 reads as
/// whitespace to the parser, and would stay in the schedule for every
/// operator who lists it to see (or for their terminal to obey).
pub fn printable_ascii(field: &str, value: &str) -> Result<()> {
    let Some((at, c)) = value.char_indices().find(|(_, c)| !(' '..='~').contains(c)) else {
        return Ok(());
    };
    let what = if c.is_control() {
        "a control character"
    } else {
        "not ASCII"
    };
    Err(Error::invalid(
        field,
        format!(
            "must be printable ASCII: {c:?} (U+{:04X}) at byte {at} is {what}",
            u32::from(c)
        ),
    ))
}

/// A job's headers: at most [`MAX_HEADERS`], names of 1 to
/// [`MAX_HEADER_NAME_LEN`] characters of `A-Z a-z 0-9 _ . -`, values of at
/// most [`MAX_HEADER_VALUE_LEN`] bytes without control characters (they
/// are shown by the CLI and the dashboard, and PostgreSQL's JSON cannot
/// hold a NUL), [`MAX_HEADERS_BYTES`] in all.
pub fn headers(field: &str, headers: &std::collections::BTreeMap<String, String>) -> Result<()> {
    if headers.len() > MAX_HEADERS {
        return Err(Error::invalid(
            field,
            format!("at most {MAX_HEADERS} headers, got {}", headers.len()),
        ));
    }
    let mut total = 0;
    for (name, value) in headers {
        let at = format!("{field}.{name}");
        if name.is_empty() || name.len() > MAX_HEADER_NAME_LEN {
            return Err(Error::invalid(
                field,
                format!(
                    "a header name must be 1 to {MAX_HEADER_NAME_LEN} characters, got {} ({name:?})",
                    name.len()
                ),
            ));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(Error::invalid(
                field,
                format!("header name {name:?} contains {bad:?}; allowed are A-Z a-z 0-9 . _ -"),
            ));
        }
        if value.len() > MAX_HEADER_VALUE_LEN {
            return Err(Error::invalid(
                at,
                format!(
                    "must be at most {MAX_HEADER_VALUE_LEN} bytes, got {}",
                    value.len()
                ),
            ));
        }
        if let Some(bad) = value.chars().find(|c| c.is_control()) {
            return Err(Error::invalid(
                at,
                format!("contains the control character {bad:?}"),
            ));
        }
        total += name.len() + value.len();
    }
    if total > MAX_HEADERS_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "names and values must be at most {MAX_HEADERS_BYTES} bytes in all, got {total}"
            ),
        ));
    }
    Ok(())
}

/// A worker's announcement: a valid worker id, 1 to [`MAX_WORKER_QUEUES`]
/// distinct queue names, a concurrency of 1 to 100 000, and labels of at
/// most [`MAX_WORKER_LABEL_LEN`] characters without control characters.
pub fn worker_announcement(id: &str, a: &crate::WorkerAnnouncement) -> Result<()> {
    worker_id("worker_id", id)?;
    if a.queues.is_empty() || a.queues.len() > MAX_WORKER_QUEUES {
        return Err(Error::invalid(
            "queues",
            format!(
                "must name 1 to {MAX_WORKER_QUEUES} queues, got {}",
                a.queues.len()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, queue) in a.queues.iter().enumerate() {
        name(&format!("queues[{i}]"), queue)?;
        if !seen.insert(queue) {
            return Err(Error::invalid(
                format!("queues[{i}]"),
                format!("{queue:?} is named twice"),
            ));
        }
    }
    if !(1..=100_000).contains(&a.concurrency) {
        return Err(Error::invalid(
            "concurrency",
            format!("must be between 1 and 100000, got {}", a.concurrency),
        ));
    }
    for (field, value) in [("sdk", &a.sdk), ("version", &a.version), ("host", &a.host)] {
        let Some(value) = value else { continue };
        if value.is_empty() || value.chars().count() > MAX_WORKER_LABEL_LEN {
            return Err(Error::invalid(
                field,
                format!("must be 1 to {MAX_WORKER_LABEL_LEN} characters"),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(Error::invalid(field, "must not contain control characters"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_with_nul_is_refused() {
        let limits = Limits::default();
        assert!(json_size("payload", &json!({"a": ["ok", {"b": "x"}]}), &limits).is_ok());
        for bad in [
            json!("a\u{0}b"),
            json!({"k": ["fine", "n\u{0}l"]}),
            json!({"ke\u{0}y": 1}),
        ] {
            match json_size("payload", &bad, &limits) {
                Err(Error::Invalid { field, .. }) => assert_eq!(field, "payload"),
                other => panic!("{bad} was not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn input_times_follow_one_rule() {
        let utc = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        for (text, want) in [
            ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
            ("2026-01-01t00:00:00z", "2026-01-01T00:00:00Z"),
            ("2026-01-01T01:00:00+01:00", "2026-01-01T00:00:00Z"),
            ("2026-01-01T00:00:00.5Z", "2026-01-01T00:00:00.5Z"),
            ("2026-01-01T00:00:59.123456Z", "2026-01-01T00:00:59.123456Z"),
            (
                "2026-01-01T02:00:59.123456+02:00",
                "2026-01-01T00:00:59.123456Z",
            ),
        ] {
            assert_eq!(parse_instant(text), Ok(utc(want)), "{text}");
        }
        for bad in [
            "+2026-01-01T00:00:00Z",
            "-2026-01-01T00:00:00Z",
            "+002026-01-01T00:00:00Z",
            "02026-01-01T00:00:00Z",
            "2026-01-01T00:00:59.9999999Z",
            "2026-01-01T00:00:59.123456789Z",
            "2026-01-01T00:00:59.1234567+01:00",
            "2026-01-01T00:00:00",
            "2026-01-01",
            " 2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00Z ",
            "",
        ] {
            let e = parse_instant(bad).expect_err(bad);
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
        let e = parse_instant("2026-01-01T00:00:59.9999999Z").unwrap_err();
        assert!(e.contains("7 digits") && e.contains("microseconds"), "{e}");
        // What serde's own reading of a time took, and this refuses.
        let serde: DateTime<Utc> = serde_json::from_str("\"+2026-01-01T00:00:00Z\"").unwrap();
        assert_eq!(serde, utc("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn instants_outside_1970_to_9999_are_refused() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        for ok in [
            "1970-01-01T00:00:00Z",
            "2026-11-29T23:00:00.123Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            assert!(instant("run_at", &at(ok)).is_ok(), "{ok}");
        }
        let before = DateTime::<Utc>::UNIX_EPOCH - chrono::Duration::milliseconds(1);
        let after = at("9999-12-31T23:59:59.999Z") + chrono::Duration::milliseconds(1);
        let negative = NaiveDate::from_ymd_opt(-5000, 1, 1)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc();
        for bad in [before, after, negative] {
            match instant("jobs[2].expires_at", &bad) {
                Err(Error::Invalid { field, .. }) => assert_eq!(field, "jobs[2].expires_at"),
                other => panic!("{bad} was not refused: {other:?}"),
            }
        }
        let job = NewJob::new("q", "k", serde_json::Value::Null);
        let limits = Limits::default();
        let err = new_job("", &job.clone().run_at(RunAt::At(negative)), &limits).unwrap_err();
        assert!(err.to_string().contains("run_at"), "{err}");
        let err = new_job("", &job.expires_at(after), &limits).unwrap_err();
        assert!(err.to_string().contains("expires_at"), "{err}");
    }

    #[test]
    fn cron_and_time_zone_text_is_printable_ascii() {
        let limits = Limits::default();
        let spec =
            |cron: &str, zone: &str| crate::ScheduleSpec::new("s", cron, "q", "k").timezone(zone);
        assert!(schedule(&spec("0 3 * * 1-5", "Europe/Berlin"), &limits).is_ok());
        assert!(schedule(&spec("@daily", "America/Argentina/Buenos_Aires"), &limits).is_ok());
        for (cron, zone, field, shown) in [
            (
                "0 3 * * *\r",
                "UTC",
                "cron",
                "'\\r' (U+000D) at byte 9 is a control character",
            ),
            (
                "0\u{b}3 * * *",
                "UTC",
                "cron",
                "'\\u{b}' (U+000B) at byte 1",
            ),
            ("0 3 * * *\u{85}", "UTC", "cron", "'\\u{85}' (U+0085)"),
            ("0\t3 * * *", "UTC", "cron", "'\\t'"),
            ("0 3 * * *\n", "UTC", "cron", "'\\n'"),
            ("0 3 * * *\u{1b}[2J", "UTC", "cron", "U+001B"),
            (
                "0 3 * * \u{2167}",
                "UTC",
                "cron",
                "(U+2167) at byte 8 is not ASCII",
            ),
            ("0 3 * * *\u{a0}", "UTC", "cron", "U+00A0"),
            ("0 3 * * *", "UTC\r", "timezone", "U+000D"),
            ("0 3 * * *", "Europe/Berl\u{131}n", "timezone", "not ASCII"),
            ("0 3 * * *\r", "UTC\u{7f}", "timezone", "U+007F"),
        ] {
            match schedule(&spec(cron, zone), &limits) {
                Err(Error::Invalid { field: f, message }) => {
                    assert_eq!(f, field, "{cron:?} {zone:?}: {message}");
                    assert!(message.contains("printable ASCII"), "{message}");
                    assert!(message.contains(shown), "{message:?} lacks {shown:?}");
                    assert!(!message.chars().any(char::is_control), "{message:?}");
                }
                other => panic!("{cron:?} in {zone:?} was not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn names() {
        assert!(name("queue", "emails.v2:high-prio_1").is_ok());
        assert!(name("queue", "").is_err());
        assert!(name("queue", &"a".repeat(129)).is_err());
        assert!(name("queue", &"a".repeat(128)).is_ok());
        assert!(name("queue", "has space").is_err());
        assert!(name("queue", "ünïcode").is_err());
        assert!(name("queue", ".").is_err());
        assert!(name("queue", "..").is_err());
        assert!(name("queue", "...").is_ok());
        assert!(name("queue", ".hidden").is_ok());
    }

    #[test]
    fn jobs() {
        let limits = Limits {
            max_payload_bytes: 100,
            ..Limits::default()
        };
        let ok = NewJob::new("q", "k", json!({"a": 1}));
        assert!(new_job("", &ok, &limits).is_ok());
        let big = NewJob::new("q", "k", json!("x".repeat(200)));
        assert!(matches!(
            new_job("", &big, &limits),
            Err(Error::TooLarge { .. })
        ));
        assert!(new_job("", &ok.clone().priority(101), &limits).is_err());
        assert!(new_job("", &ok.clone().priority(-100), &limits).is_ok());
        assert!(new_job("", &ok.clone().run_at(RunAt::Delay(-1)), &limits).is_err());
        assert!(new_job("", &ok.clone().max_attempts(0), &limits).is_err());
        let err = new_jobs(&[ok.clone(), ok.clone().priority(500)], &limits).unwrap_err();
        assert!(err.to_string().contains("jobs[1].priority"), "{err}");
        assert!(new_jobs(&[], &limits).is_err());
        assert!(new_jobs(&vec![ok; 1001], &limits).is_err());
    }
}
