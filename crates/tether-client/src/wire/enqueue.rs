//! Enqueues: the answer, and the body a new job is sent as.

use super::*;

/// The answer to one enqueued job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The new job, or the existing one its idempotency or unique key led to
    /// (unchanged, even if this request's payload differs).
    pub job: Job,
    /// `false` when an existing job was returned instead of a new one.
    pub created: bool,
}

/// The body of `POST /v1/jobs` (and of each entry of a batch): only the
/// fields the job sets.
pub(crate) fn enqueue_body(job: &NewJob) -> Value {
    let mut m = Map::new();
    m.insert("queue".into(), job.queue.clone().into());
    m.insert("kind".into(), job.kind.clone().into());
    if !job.payload.is_null() {
        m.insert("payload".into(), job.payload.clone());
    }
    if job.priority != 0 {
        m.insert("priority".into(), job.priority.into());
    }
    match job.run_at {
        RunAt::Now => {}
        RunAt::At(at) => {
            m.insert("run_at".into(), time(&at).into());
        }
        RunAt::Delay(ms) => {
            m.insert("delay_ms".into(), ms.into());
        }
    }
    if let Some(n) = job.max_attempts {
        m.insert("max_attempts".into(), n.into());
    }
    if let Some(ms) = job.timeout_ms {
        m.insert("timeout_ms".into(), ms.into());
    }
    if let Some(k) = &job.idempotency_key {
        m.insert("idempotency_key".into(), k.clone().into());
    }
    if let Some(k) = &job.unique_key {
        m.insert("unique_key".into(), k.clone().into());
    }
    if let Some(k) = &job.concurrency_key {
        m.insert("concurrency_key".into(), k.clone().into());
    }
    if !job.tags.is_empty() {
        m.insert("tags".into(), job.tags.clone().into());
    }
    if let Some(at) = job.expires_at {
        m.insert("expires_at".into(), time(&at).into());
    }
    if let Some(b) = job.backoff {
        m.insert(
            "backoff".into(),
            serde_json::json!({ "base_ms": b.base_ms, "cap_ms": b.cap_ms }),
        );
    }
    Value::Object(m)
}
