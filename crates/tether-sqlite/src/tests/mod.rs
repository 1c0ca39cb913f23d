//! Backend-specific checks: connection setup, migrations and transaction
//! hygiene. The lifecycle itself is proven by the shared behaviour suite
//! (`tether-conformance`); the few lifecycle tests here are smoke tests.
//!
//! By topic: `connections` (the file, its migrations and connections,
//! transaction hygiene, durability), `jobs` (smoke tests of the lifecycle
//! on SQLite), `schedules` (what is particular to SQLite about them),
//! `workflows` (dependencies and workflows: the cascade by trigger, wake-ups,
//! the upgrades).

mod connections;
mod jobs;
mod schedules;
mod workflows;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use sqlx::Connection;
use tether_core::{
    ClaimRequest, Completed, Completion, Error, EventKind, Failure, Heartbeat, JobFilter, JobState,
    NewJob, NewJobRef, Store,
};
use uuid::Uuid;

use crate::SqliteStore;

/// A database file under the temp dir, deleted (with its WAL and shm files)
/// when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new() -> TempDb {
        TempDb(std::env::temp_dir().join(format!(
            "tether-sqlite-test-{}-{}.db",
            std::process::id(),
            Uuid::new_v4()
        )))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

fn enqueue_refs(jobs: &[NewJob]) -> Vec<NewJobRef<'_>> {
    jobs.iter()
        .map(|job| NewJobRef {
            id: Uuid::now_v7(),
            job,
        })
        .collect()
}

fn claim_req(queue: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        queue: queue.into(),
        worker_id: "w1".into(),
        limit,
        lease_ttl_ms: None,
    }
}
