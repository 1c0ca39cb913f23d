//! The operator commands as a user runs them: the real `tether` binary
//! against a real `tether serve` (SQLite, and one PostgreSQL smoke test).
//! Every assertion about an effect reads the server's state back over HTTP.

#[path = "../common/mod.rs"]
mod common;
mod completions;
mod docs;
mod jobs;
mod queues;
mod schedules;
mod smoke;
mod tenants;
mod terminal;
mod workflows;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{call, temp_dir, tether, Run, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// A server on a fresh SQLite data directory (or a PostgreSQL database),
/// and the CLI pointed at it.
struct Setup {
    server: Option<Server>,
    dir: PathBuf,
    key: String,
    url: String,
    /// The CLI is given the key in TETHER_KEY (a server whose admin key
    /// came from TETHER_ADMIN_KEY writes no admin.key).
    key_in_env: bool,
}

impl Setup {
    fn sqlite(tag: &str) -> Setup {
        let dir = temp_dir(tag);
        let server = Server::start(&dir, &[], &[]);
        let key =
            tether_server::admin_key::read_key_file(&dir).expect("the first start saves the key");
        let url = format!("http://{}", server.addr);
        Setup {
            server: Some(server),
            dir,
            key,
            url,
            key_in_env: false,
        }
    }

    /// A server on the PostgreSQL database at `database_url`.
    fn postgres(tag: &str, database_url: &str) -> Setup {
        let dir = temp_dir(tag);
        let key = format!("cli-{tag}-admin-key-0123456789");
        let server = Server::start(
            &dir,
            &["--database-url", database_url],
            &[("TETHER_ADMIN_KEY", &key)],
        );
        assert!(server.banner.contains("postgres"), "{}", server.banner);
        let url = format!("http://{}", server.addr);
        Setup {
            server: Some(server),
            dir,
            key,
            url,
            key_in_env: true,
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }

    fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// `tether <args>` with TETHER_URL and TETHER_DATA_DIR pointing at the
    /// server (so the key comes from its admin.key).
    fn cli(&self, args: &[&str]) -> Run {
        self.cli_stdin(args, None)
    }

    fn cli_stdin(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let mut env = vec![
            ("TETHER_URL", self.url.as_str()),
            ("TETHER_DATA_DIR", self.dir()),
        ];
        if self.key_in_env {
            env.push(("TETHER_KEY", &self.key));
        }
        tether(args, &env, stdin)
    }

    /// `GET path` with the admin key; the status and body.
    async fn get(&self, path: &str) -> (u16, Value) {
        call(Method::GET, &self.server().url(path), &self.key, None).await
    }

    async fn job(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body["job"].clone()
    }

    async fn queue(&self, name: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/queues/{name}")).await;
        assert_eq!(status, 200, "{body}");
        body["queue"].clone()
    }

    /// Claims every ready job of `queue` (as `test-worker`); answers each
    /// job's id and lease token.
    async fn claim_all(&self, queue: &str) -> Vec<(String, Value)> {
        let (status, claimed) = call(
            Method::POST,
            &self.server().url(&format!("/v1/queues/{queue}/claim")),
            &self.key,
            Some(json!({"worker_id": "test-worker", "limit": 100})),
        )
        .await;
        assert_eq!(status, 200, "{claimed}");
        claimed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|job| {
                (
                    job["id"].as_str().unwrap().to_owned(),
                    job["lease_token"].clone(),
                )
            })
            .collect()
    }

    /// Claims every ready job of `queue` and fails each for good; answers
    /// their ids.
    async fn fail_all(&self, queue: &str, error: &str) -> Vec<String> {
        let mut ids = Vec::new();
        for (id, lease_token) in self.claim_all(queue).await {
            let (status, body) = call(
                Method::POST,
                &self.server().url(&format!("/v1/jobs/{id}/fail")),
                &self.key,
                Some(json!({"lease_token": lease_token, "error": error, "fatal": true})),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["job"]["state"], "failed");
            ids.push(id);
        }
        ids
    }

    /// Claims every ready job of `queue` and completes each; answers their
    /// ids.
    async fn succeed_all(&self, queue: &str) -> Vec<String> {
        let mut ids = Vec::new();
        for (id, lease_token) in self.claim_all(queue).await {
            let (status, body) = call(
                Method::POST,
                &self.server().url(&format!("/v1/jobs/{id}/complete")),
                &self.key,
                Some(json!({"lease_token": lease_token, "result": {"ok": true}})),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["job"]["state"], "succeeded");
            ids.push(id);
        }
        ids
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        drop(self.server.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ids(list: &Value, field: &str) -> Vec<String> {
    list[field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field} array in {list}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}
