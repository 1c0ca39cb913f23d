//! Schedules, their runs, cron previews, and the bodies they are sent as.

use super::*;

/// A schedule as the API shows it (`GET /v1/schedules/{id}` and every
/// answer that carries one): a cron timetable that enqueues one job per
/// fire instant. It has no tenant (the API key decides it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Server-made id.
    pub id: Uuid,
    /// Unique in the tenant.
    pub name: String,
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The queue of the jobs it enqueues.
    pub queue: String,
    /// The kind of the jobs it enqueues.
    pub kind: String,
    /// The payload of the jobs it enqueues.
    #[serde(default)]
    pub payload: Value,
    /// Disabled schedules do not fire.
    pub enabled: bool,
    /// What it does while the previous run's job is unfinished.
    pub overlap: Overlap,
    /// The next fire instant; `None` when disabled.
    #[serde(default)]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The fire instant of the last run (scheduled or triggered).
    #[serde(default)]
    pub last_run_at: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When its definition last changed.
    pub updated_at: DateTime<Utc>,
}

impl Schedule {
    /// Its definition, e.g. to create a copy under another name.
    pub fn spec(&self) -> ScheduleSpec {
        ScheduleSpec {
            name: self.name.clone(),
            cron: self.cron.clone(),
            timezone: self.timezone.clone(),
            queue: self.queue.clone(),
            kind: self.kind.clone(),
            payload: self.payload.clone(),
            enabled: self.enabled,
            overlap: self.overlap,
        }
    }
}

/// One run of a schedule (`GET /v1/schedules/{id}/runs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRun {
    /// The fire instant (for a triggered run, when it was triggered).
    pub fire_at: DateTime<Utc>,
    /// The job it enqueued; `None` when it was skipped.
    #[serde(default)]
    pub job_id: Option<Uuid>,
    /// What it did (`enqueued`, `skipped`), kept as a string so that
    /// outcomes a newer server adds still decode; [`ScheduleRun::run_outcome`]
    /// parses it.
    pub outcome: String,
}

impl ScheduleRun {
    /// The outcome as a known one (`None` for one this client does not
    /// know).
    pub fn run_outcome(&self) -> Option<RunOutcome> {
        RunOutcome::parse(&self.outcome)
    }
}

/// What `GET /v1/cron/preview` computes: the next fire instants of an
/// expression, by the same code the scheduler uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronPreview {
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone it is read in (server default `UTC`).
    pub timezone: Option<String>,
    /// Instants strictly after this one (server default: now).
    pub from: Option<DateTime<Utc>>,
    /// How many instants, 1–100 (server default 5).
    pub count: Option<u32>,
}

impl CronPreview {
    /// The next 5 instants of `cron` in UTC after now.
    pub fn new(cron: impl Into<String>) -> Self {
        CronPreview {
            cron: cron.into(),
            timezone: None,
            from: None,
            count: None,
        }
    }

    /// Reads the expression in this IANA time zone.
    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = Some(timezone.into());
        self
    }

    /// Instants strictly after `from` instead of now.
    pub fn from(mut self, from: DateTime<Utc>) -> Self {
        self.from = Some(from);
        self
    }

    /// This many instants (1–100).
    pub fn count(mut self, count: u32) -> Self {
        self.count = Some(count);
        self
    }

    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![("cron", self.cron.clone())];
        if let Some(tz) = &self.timezone {
            q.push(("timezone", tz.clone()));
        }
        if let Some(from) = &self.from {
            q.push(("from", time(from)));
        }
        if let Some(n) = self.count {
            q.push(("count", n.to_string()));
        }
        q
    }
}

/// The body of `POST /v1/schedules`: every field of the definition (the
/// defaults of [`ScheduleSpec::new`] are the server's).
pub(crate) fn schedule_body(spec: &ScheduleSpec) -> Value {
    serde_json::json!({
        "name": spec.name,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "queue": spec.queue,
        "kind": spec.kind,
        "payload": spec.payload,
        "enabled": spec.enabled,
        "overlap": spec.overlap.as_str(),
    })
}

/// The body of `PATCH /v1/schedules/{id}`: only the fields the patch sets
/// (`payload: Some(Value::Null)` is sent as an explicit `null`, which sets
/// it).
pub(crate) fn schedule_patch_body(patch: &SchedulePatch) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    };
    put("name", patch.name.clone().map(Value::from));
    put("cron", patch.cron.clone().map(Value::from));
    put("timezone", patch.timezone.clone().map(Value::from));
    put("queue", patch.queue.clone().map(Value::from));
    put("kind", patch.kind.clone().map(Value::from));
    put("payload", patch.payload.clone());
    put("enabled", patch.enabled.map(Value::from));
    put("overlap", patch.overlap.map(|o| Value::from(o.as_str())));
    Value::Object(m)
}

#[derive(Deserialize)]
pub(crate) struct ScheduleEnvelope {
    pub(crate) schedule: Schedule,
}

#[derive(Deserialize)]
pub(crate) struct SchedulesEnvelope {
    pub(crate) schedules: Vec<Schedule>,
}

#[derive(Deserialize)]
pub(crate) struct RunsEnvelope {
    pub(crate) runs: Vec<ScheduleRun>,
}

#[derive(Deserialize)]
pub(crate) struct TimesEnvelope {
    pub(crate) times: Vec<DateTime<Utc>>,
}
