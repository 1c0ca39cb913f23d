//! What of the API's wire is the client's own; the bodies themselves are
//! [`tether_api`]'s. Here: per-item answers of batches (read item by item,
//! leniently), the builders of queries and request options, and the times
//! the client sends (cut to what the server keeps).
//!
//! Answers are decoded leniently (fields a newer server adds are ignored);
//! requests carry only the fields that are set.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use tether_api::{ErrorDetail, Job};
use uuid::Uuid;

mod attempts;
mod jobs;
mod schedules;
mod tenants;
mod workflows;

pub use attempts::*;
pub use jobs::*;
pub use schedules::*;
pub use tenants::*;
pub use workflows::*;

/// One item of a batch answer (`POST /v1/jobs/heartbeat`,
/// `POST /v1/jobs/complete`, a claim's `reports`), in request order.
#[derive(Debug)]
pub struct ItemResult<T> {
    /// The job the item is about.
    pub id: Uuid,
    /// Its outcome; a failed item is an [`crate::Error::Api`] with the status
    /// the API pairs with its code (e.g. 409 for `lease_lost`).
    pub result: crate::Result<T>,
}

/// A time as the server takes it: at most microseconds (the finest it
/// keeps; it refuses more digits), so nanoseconds are cut here. Request
/// bodies write it with chrono's own RFC 3339 encoding.
pub(crate) fn sent_time(t: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::SubsecRound;
    t.trunc_subsecs(6)
}

/// [`sent_time`] as a query string writes it: RFC 3339 in UTC.
pub(crate) fn time(t: &DateTime<Utc>) -> String {
    sent_time(*t).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// `{"results": [...]}` of a batch answer.
#[derive(Deserialize)]
pub(crate) struct ResultsEnvelope<T> {
    pub(crate) results: Vec<T>,
}

/// One item of a batch answer, before it becomes an [`ItemResult`].
///
/// The API's item types are untagged enums, which cannot tell a failed
/// item from a done one when unknown fields are ignored; this reads `ok`
/// and takes what the item carries.
#[derive(Deserialize)]
pub(crate) struct BatchItem {
    pub(crate) id: Uuid,
    pub(crate) ok: bool,
    #[serde(default)]
    pub(crate) error: Option<ErrorDetail>,
    #[serde(default)]
    pub(crate) lease_expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(crate) cancel_requested: Option<bool>,
    /// The job, in the answers of the bulk cancel and replay.
    #[serde(default)]
    pub(crate) job: Option<Box<Job>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use tether_api::{JobEvent, PatchScheduleBody, Queue, ScheduleRun};
    use tether_core::{Backoff, NewJob, Overlap, RunAt, SchedulePatch, ScheduleSpec};

    #[test]
    fn enqueue_body_carries_every_set_field_and_nothing_else() {
        let at: DateTime<Utc> = "2030-01-02T03:04:05.678Z".parse().unwrap();
        let full = NewJob::new("q", "k", json!({"a": 1}))
            .priority(7)
            .run_at(RunAt::At(at))
            .max_attempts(3)
            .timeout_ms(1500)
            .idempotency_key("i:1")
            .unique_key("u:1")
            .tags(["x", "y"])
            .expires_at(at)
            .backoff(Backoff {
                base_ms: 10,
                cap_ms: 20,
            });
        let body = |job: &NewJob| serde_json::to_value(enqueue_request(job)).unwrap();
        assert_eq!(
            body(&full),
            json!({
                "queue": "q", "kind": "k", "payload": {"a": 1}, "priority": 7,
                "run_at": "2030-01-02T03:04:05.678Z", "max_attempts": 3,
                "timeout_ms": 1500, "idempotency_key": "i:1", "unique_key": "u:1",
                "tags": ["x", "y"], "expires_at": "2030-01-02T03:04:05.678Z",
                "backoff": {"base_ms": 10, "cap_ms": 20},
            })
        );
        // Nanoseconds are cut to the microseconds the server takes.
        let fine: DateTime<Utc> = "2030-01-02T03:04:05.123456789Z".parse().unwrap();
        assert_eq!(time(&fine), "2030-01-02T03:04:05.123456Z");
        let at_fine = NewJob::new("q", "k", Value::Null).run_at(RunAt::At(fine));
        assert_eq!(body(&at_fine)["run_at"], "2030-01-02T03:04:05.123456Z");
        let delayed = NewJob::new("q", "k", Value::Null).run_at(RunAt::Delay(250));
        assert_eq!(
            body(&delayed),
            json!({"queue": "q", "kind": "k", "delay_ms": 250})
        );
    }

    #[test]
    fn schedule_bodies_carry_what_is_set() {
        let spec = ScheduleSpec::new("nightly", "0 3 * * *", "q", "k");
        assert_eq!(
            serde_json::to_value(tether_api::CreateScheduleBody::from(spec)).unwrap(),
            json!({
                "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "queue": "q",
                "kind": "k", "payload": null, "enabled": true, "overlap": "allow",
            })
        );
        let patch_body = |p: SchedulePatch| serde_json::to_value(PatchScheduleBody::from(p));
        assert_eq!(patch_body(SchedulePatch::default()).unwrap(), json!({}));
        let patch = SchedulePatch {
            payload: Some(Value::Null),
            enabled: Some(false),
            overlap: Some(Overlap::Skip),
            ..SchedulePatch::default()
        };
        assert_eq!(
            patch_body(patch).unwrap(),
            json!({"payload": null, "enabled": false, "overlap": "skip"})
        );
        let from: DateTime<Utc> = "2026-03-07T12:00:00Z".parse().unwrap();
        let preview = CronPreview::new("30 2 * * *")
            .timezone("America/New_York")
            .from(from)
            .count(3);
        assert_eq!(
            preview.query(),
            tether_api::CronPreviewQuery {
                cron: "30 2 * * *".to_owned(),
                timezone: Some("America/New_York".to_owned()),
                from: Some("2026-03-07T12:00:00Z".to_owned()),
                count: Some("3".to_owned()),
            }
        );
        let run: ScheduleRun = serde_json::from_value(json!({
            "fire_at": "2030-01-02T03:04:05.678Z", "job_id": null, "outcome": "postponed",
            "added_later": 1,
        }))
        .unwrap();
        assert_eq!(run.run_outcome(), None);
    }

    #[test]
    fn answers_with_unknown_fields_still_decode() {
        let q: Queue = serde_json::from_value(json!({
            "name": "q", "paused": false,
            "counts": {"queued": 1, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0, "new": 1},
            "ready": 1, "scheduled": 0, "oldest_ready_age_ms": 5, "expired_leases": 0,
            "max_attempts": 5, "backoff": {"base_ms": 1000, "cap_ms": 3600000, "jitter": 0.5},
            "default_lease_ttl_ms": 30000, "added_later": true,
        }))
        .unwrap();
        assert_eq!(q.backoff.base_ms, 1000);
        let e: JobEvent = serde_json::from_value(json!({
            "at": "2030-01-02T03:04:05.678Z", "event": "teleported", "attempt": 1,
            "worker_id": null, "detail": null,
        }))
        .unwrap();
        assert_eq!(e.kind(), None);
    }
}
