//! Entry points for the fuzz targets in `fuzz/` (not part of the API): a
//! request body decoded the way its route decodes it, then validated as the
//! engine validates it, with no database. The property the targets check is
//! that any input is either accepted or refused with 400/413 — never a
//! panic, never another status.

use tether_core::{
    validate, ClaimRequest, Completion, Failure, Heartbeat, JobState, Limits, QueueConfigPatch,
    ReplayFilter, ScheduleSpec,
};

use crate::error::ApiError;
use crate::extract::parse_json;
use tether_api::*;

/// The route decoders the fuzz target picks from.
pub const ROUTES: [&str; 14] = [
    "enqueue",
    "enqueue_batch",
    "claim",
    "heartbeat_batch",
    "complete_batch",
    "fail",
    "snooze",
    "bulk_replay",
    "queue_config",
    "create_schedule",
    "patch_schedule",
    "put_schedule",
    "create_tenant",
    "create_key",
];

/// Decodes `body` as `route`'s request and validates it.
pub fn decode_and_validate(route: &str, body: &[u8]) -> Result<(), ApiError> {
    let limits = Limits::default();
    match route {
        "enqueue" => {
            let job = parse_json::<EnqueueRequest>(body)?.into_new_job("")?;
            validate::new_job("", &job, &limits)?;
        }
        "enqueue_batch" => {
            let jobs = parse_json::<BatchEnqueueRequest>(body)?
                .jobs
                .into_iter()
                .enumerate()
                .map(|(i, j)| j.into_new_job(&format!("jobs[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            validate::new_jobs(&jobs, &limits)?;
        }
        "claim" => {
            let b = parse_json::<ClaimBody>(body)?;
            validate::claim(&ClaimRequest {
                queue: "q".into(),
                worker_id: b.worker_id,
                limit: b.limit.unwrap_or(1),
                lease_ttl_ms: b.lease_ttl_ms,
            })?;
            if let Some(wait) = b.wait_ms {
                validate::millis("wait_ms", wait, 0..=crate::DEFAULT_MAX_WAIT_MS)?;
            }
        }
        "heartbeat_batch" => {
            let items: Vec<Heartbeat> = parse_json::<HeartbeatManyBody>(body)?
                .items
                .into_iter()
                .map(Heartbeat::from)
                .collect();
            validate::batch_len("items", items.len(), validate::MAX_BATCH)?;
            for hb in &items {
                validate::heartbeat(hb, &limits)?;
            }
        }
        "complete_batch" => {
            let items: Vec<Completion> = parse_json::<CompleteManyBody>(body)?
                .items
                .into_iter()
                .map(Completion::from)
                .collect();
            validate::completions(&items, &limits)?;
        }
        "fail" => {
            let b = parse_json::<FailBody>(body)?;
            validate::failure(&Failure {
                error: b.error,
                retry_after_ms: b.retry_after_ms,
                fatal: b.fatal.unwrap_or(false),
                cancelled: b.cancelled.unwrap_or(false),
            })?;
        }
        "snooze" => {
            let b = parse_json::<SnoozeBody>(body)?;
            validate::millis("delay_ms", b.delay_ms, 0..=validate::MAX_DURATION_MS)?;
        }
        "bulk_replay" => {
            let b = parse_json::<BulkReplayBody>(body)?;
            validate::replay_filter(&ReplayFilter {
                queue: "q".into(),
                state: b.state.unwrap_or(JobState::Failed),
                kind: b.kind,
                limit: b.limit,
                cursor: None,
                expires_at: b.expires_at,
            })?;
        }
        "queue_config" => {
            let patch: QueueConfigPatch = parse_json::<QueueConfigBody>(body)?.into();
            validate::queue_config(&patch)?;
        }
        "create_schedule" => {
            let spec: ScheduleSpec = parse_json::<CreateScheduleBody>(body)?.into();
            validate::schedule(&spec, &limits)?;
        }
        "put_schedule" => {
            let spec = parse_json::<PutScheduleBody>(body)?.into_spec("nightly".to_owned());
            validate::schedule(&spec, &limits)?;
        }
        "patch_schedule" => {
            let patch: tether_core::SchedulePatch = parse_json::<PatchScheduleBody>(body)?.into();
            let base = ScheduleSpec::new("nightly", "0 3 * * *", "q", "k");
            validate::schedule(&patch.apply(&base), &limits)?;
        }
        "create_tenant" => {
            let b = parse_json::<CreateTenantBody>(body)?;
            validate::name("name", &b.name)?;
        }
        "create_key" => {
            let b = parse_json::<CreateKeyBody>(body)?;
            if let Some(name) = &b.name {
                validate::key_name("name", name)?;
            }
        }
        other => panic!("unknown route {other:?}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_accepts_a_good_body_and_refuses_a_bad_one() {
        let good: [&[u8]; 14] = [
            br#"{"queue": "q", "kind": "k"}"#,
            br#"{"jobs": [{"queue": "q", "kind": "k"}]}"#,
            br#"{"worker_id": "w"}"#,
            br#"{"items": [{"id": "01a22adb-bb28-7129-ae6a-5de7d34629f6", "lease_token": "01a22adb-bb28-7129-ae6a-5de7d34629f6"}]}"#,
            br#"{"items": [{"id": "01a22adb-bb28-7129-ae6a-5de7d34629f6", "lease_token": "01a22adb-bb28-7129-ae6a-5de7d34629f6"}]}"#,
            br#"{"lease_token": "01a22adb-bb28-7129-ae6a-5de7d34629f6", "error": "boom"}"#,
            br#"{"lease_token": "01a22adb-bb28-7129-ae6a-5de7d34629f6", "delay_ms": 5}"#,
            br#"{}"#,
            br#"{"max_attempts": 3}"#,
            br#"{"name": "n", "cron": "0 3 * * *", "queue": "q", "kind": "k"}"#,
            br#"{"timezone": "Europe/Berlin"}"#,
            br#"{"cron": "0 3 * * *", "queue": "q", "kind": "k"}"#,
            br#"{"name": "acme"}"#,
            br#"{"name": "ci"}"#,
        ];
        for (route, body) in ROUTES.iter().zip(good) {
            decode_and_validate(route, body).unwrap_or_else(|e| panic!("{route}: {e:?}"));
            let bad = decode_and_validate(route, b"[1]").expect_err(route);
            assert_eq!(bad.status.as_u16(), 400, "{route}");
        }
    }
}
