//! Shared helpers of the client tests: a real tether server on a loopback
//! socket over a fresh database, with an admin key of `default` and a
//! non-admin key of a second tenant, and the `both_backends!` macro.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use tether_client::{HttpClient, Job, JobState};
use tether_conformance::TestDb;
use tether_server::{router, AppState, ServerConfig};
use tokio::task::JoinHandle;
use uuid::Uuid;

/// A server running in this process, stopped when dropped.
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Admin key of `default`.
    pub admin_key: String,
    /// A client with the admin key.
    pub admin: HttpClient,
    /// Non-admin key of tenant `other`.
    pub other_key: String,
    /// A client with that key.
    pub other: HttpClient,
    /// Id of tenant `other`.
    pub other_id: Uuid,
    /// The engine under the server (for the test reaper).
    pub engine: tether_core::Engine,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts a server over `db` on `127.0.0.1:0`, with the default settings.
pub async fn start(db: &TestDb) -> Server {
    let engine = db.engine.clone();
    let keys = db.two_tenants().await;
    let (admin_key, other_key) = (keys.admin_key, keys.other_key);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(AppState::new(engine.clone(), ServerConfig::default()));
    let serve = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let base = format!("http://{addr}");
    Server {
        admin: HttpClient::new(&base, &admin_key).unwrap(),
        other: HttpClient::new(&base, &other_key).unwrap(),
        base,
        admin_key,
        other_key,
        other_id: keys.other_id,
        engine,
        tasks: vec![serve],
    }
}

impl Server {
    /// A client with another key.
    pub fn client(&self, key: &str) -> HttpClient {
        HttpClient::new(&self.base, key).unwrap()
    }

    /// Runs the reaper every 100 ms, as the server's maintenance leader
    /// would: a running job whose lease lapses is taken back.
    pub fn spawn_reaper(&mut self) {
        let engine = self.engine.clone();
        self.tasks.push(tokio::spawn(async move {
            loop {
                let _ = engine.reap_lapsed_leases(1_000).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    /// Waits until job `id` (of the admin's tenant) is in `state`; panics
    /// after `timeout` naming the last state seen.
    pub async fn wait_for_state(&self, id: Uuid, state: JobState, timeout: Duration) -> Job {
        let deadline = Instant::now() + timeout;
        loop {
            let job = self.admin.get_job(id).await.unwrap();
            if job.state == state {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} not {state} after {timeout:?}: {job:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}
