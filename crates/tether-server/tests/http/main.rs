//! HTTP-level tests of the `/v1` API, each on PostgreSQL and SQLite, driving
//! the router in-process; the OpenAPI document; and the dashboard, in a
//! real browser. One binary, so that CI links the tree once for them (the
//! `/metrics` tests have binaries of their own: the recorder is global).

#[path = "../common/mod.rs"]
mod common;
mod dashboard;
mod errors;
mod events;
mod jobs;
mod neighbours;
mod openapi;
mod operators;
mod polling;
mod schedules;
mod tenants;
mod waiting;
mod workflows;

use std::time::{Duration, Instant};

use common::{setup, setup_with, Ctx};
use serde_json::{json, Value};
use tether_conformance::TestDb;
use tether_server::ServerConfig;

const JOB_FIELDS: [&str; 30] = [
    "id",
    "queue",
    "kind",
    "payload",
    "result",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
    "last_error",
    "unique_key",
    "idempotency_key",
    "tags",
    "expires_at",
    "concurrency_key",
    "timeout_ms",
    "cancel_requested",
    "worker_id",
    "lease_expires_at",
    "heartbeat_at",
    "progress",
    "depends_on",
    "dependency_failure",
    "workflow_id",
    "headers",
];

fn is_rfc3339_utc(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(s).is_ok())
}

const SCHEDULE_FIELDS: [&str; 13] = [
    "id",
    "name",
    "cron",
    "timezone",
    "queue",
    "kind",
    "payload",
    "enabled",
    "overlap",
    "next_run_at",
    "last_run_at",
    "created_at",
    "updated_at",
];

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort_unstable();
    keys
}

fn sorted(fields: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
    v.sort_unstable();
    v
}

/// A time of an answer.
fn at(v: &Value) -> chrono::DateTime<chrono::Utc> {
    assert!(is_rfc3339_utc(v), "not an RFC 3339 UTC time: {v}");
    let s = v.as_str().unwrap();
    // Milliseconds, like every time the server writes.
    assert_eq!(s.len(), "2026-11-29T23:00:00.123Z".len(), "{s}");
    s.parse().unwrap()
}

/// Creates a schedule with the admin key; returns it.
async fn create_schedule(c: &Ctx, body: Value) -> Value {
    let a = c.post("/v1/schedules", body).await;
    a.expect(201)["schedule"].clone()
}

async fn patch(c: &Ctx, uri: &str, body: Value) -> common::Answer {
    c.call("PATCH", uri, Some(&c.admin.clone()), Some(body))
        .await
}

async fn delete(c: &Ctx, uri: &str) -> common::Answer {
    c.call("DELETE", uri, Some(&c.admin.clone()), None).await
}
