//! Shared helpers of the HTTP tests: a router over a fresh database, a
//! bootstrapped admin key and a second tenant, and a one-shot request helper.

#![allow(dead_code)]

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tether_conformance::TestDb;
use tether_server::{router, AppState, ServerConfig};
use tower::ServiceExt;

/// A router plus the keys of the bootstrap tenants.
pub struct Ctx {
    pub app: Router,
    /// Admin key of `default`.
    pub admin: String,
    /// Non-admin key of tenant `other`.
    pub other: String,
    /// Id of tenant `other`.
    pub other_id: String,
}

pub async fn setup(db: &TestDb) -> Ctx {
    setup_with(db, ServerConfig::default()).await
}

pub async fn setup_with(db: &TestDb, config: ServerConfig) -> Ctx {
    setup_engine(db, db.engine.clone(), config).await
}

/// A router over `engine` (`db`'s store, e.g. with its own limits) and
/// `config`.
pub async fn setup_engine(db: &TestDb, engine: tether_core::Engine, config: ServerConfig) -> Ctx {
    setup_state(db, engine, |engine| AppState::new(engine, config)).await
}

/// A router over the state `state` makes of `engine` (`db`'s store, e.g.
/// with a metrics recorder), after `db`'s two tenants and their keys are
/// made ([`TestDb::two_tenants`]).
pub async fn setup_state(
    db: &TestDb,
    engine: tether_core::Engine,
    state: impl FnOnce(tether_core::Engine) -> AppState,
) -> Ctx {
    let keys = db.two_tenants().await;
    Ctx {
        app: router(state(engine)),
        admin: keys.admin_key,
        other: keys.other_key,
        other_id: keys.other_id.to_string(),
    }
}

/// An answer: status and parsed JSON body (`Value::Null` when empty).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    /// Asserts the status and, for errors, the code.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        &self.body
    }

    /// Asserts an error answer with this status and code.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        assert_eq!(self.body["error"]["code"], code, "body: {}", self.body);
        assert!(
            self.body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "body: {}",
            self.body
        );
    }
}

/// A request with `key` (if any), acting for `tenant` (if any), with a
/// JSON body (if any).
fn request(
    method: &str,
    uri: &str,
    key: Option<&str>,
    tenant: Option<&str>,
    body: Option<Value>,
) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(uri);
    if let Some(key) = key {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    if let Some(tenant) = tenant {
        req = req.header("x-tether-tenant", tenant);
    }
    match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&b).unwrap())),
        None => req.body(Body::empty()),
    }
    .unwrap()
}

impl Ctx {
    /// Sends one request with `key` (if any) and a JSON body (if any).
    pub async fn call(
        &self,
        method: &str,
        uri: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        self.send(request(method, uri, key, None, body)).await
    }

    /// Like [`Ctx::call`], acting for the tenant `tenant` names
    /// (`X-Tether-Tenant`).
    pub async fn call_for(
        &self,
        tenant: &str,
        method: &str,
        uri: &str,
        key: &str,
        body: Option<Value>,
    ) -> Answer {
        self.send(request(method, uri, Some(key), Some(tenant), body))
            .await
    }

    /// Sends a prepared request.
    pub async fn send(&self, req: Request<Body>) -> Answer {
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
        };
        Answer { status, body }
    }

    /// A raw-body request with the admin key.
    pub async fn raw(
        &self,
        method: &str,
        uri: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Answer {
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(uri)
            .header("authorization", format!("Bearer {}", self.admin));
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        self.send(req.body(Body::from(body)).unwrap()).await
    }

    /// Admin-key shorthands.
    pub async fn post(&self, uri: &str, body: Value) -> Answer {
        self.call("POST", uri, Some(&self.admin.clone()), Some(body))
            .await
    }

    pub async fn post_empty(&self, uri: &str) -> Answer {
        self.call("POST", uri, Some(&self.admin.clone()), None)
            .await
    }

    pub async fn get(&self, uri: &str) -> Answer {
        self.call("GET", uri, Some(&self.admin.clone()), None).await
    }

    /// `GET uri` with the admin key: status and body as text.
    pub async fn get_text(&self, uri: &str) -> (StatusCode, String) {
        let req = Request::builder()
            .uri(uri)
            .header("authorization", format!("Bearer {}", self.admin))
            .body(Body::empty())
            .unwrap();
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// Enqueues `{queue, kind}` and returns the job id.
    pub async fn enqueue(&self, queue: &str, kind: &str) -> String {
        let a = self
            .post(
                "/v1/jobs",
                serde_json::json!({"queue": queue, "kind": kind}),
            )
            .await;
        a.expect(201)["job"]["id"].as_str().unwrap().to_owned()
    }

    /// Claims one job from `queue`; returns (id, lease_token).
    pub async fn claim_one(&self, queue: &str) -> (String, String) {
        let a = self
            .post(
                &format!("/v1/queues/{queue}/claim"),
                serde_json::json!({"worker_id": "w1"}),
            )
            .await;
        let jobs = a.expect(200)["jobs"].as_array().unwrap().clone();
        assert_eq!(jobs.len(), 1, "{}", a.body);
        (
            jobs[0]["id"].as_str().unwrap().to_owned(),
            jobs[0]["lease_token"].as_str().unwrap().to_owned(),
        )
    }
}

/// One message of a server-sent event stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

/// A server-sent event stream being read.
pub struct SseReader {
    body: axum::body::BodyDataStream,
    buffer: String,
}

impl SseReader {
    /// The next message, or `None` if none comes within `wait` (or the
    /// stream ended). Comment lines (heartbeats) are skipped.
    pub async fn next(&mut self, wait: std::time::Duration) -> Option<Message> {
        use futures_util::StreamExt;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::from("message"), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim_start().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim_start().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() && id.is_none() {
                    continue; // a comment
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                return Some(Message { id, event, data });
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()??;
            self.buffer
                .push_str(std::str::from_utf8(&chunk.expect("a body chunk")).expect("text"));
        }
    }
}

impl Ctx {
    /// Opens `GET uri` as an event stream with `key`, and `Last-Event-ID`
    /// when given: the status, and the reader when it is 200 (else the
    /// error body).
    pub async fn stream(
        &self,
        uri: &str,
        key: &str,
        last_event_id: Option<&str>,
    ) -> Result<SseReader, Answer> {
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(uri)
            .header("authorization", format!("Bearer {key}"));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let resp = self
            .app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        if status != StatusCode::OK {
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(Answer { status, body });
        }
        assert_eq!(
            resp.headers()["content-type"],
            "text/event-stream",
            "an event stream"
        );
        Ok(SseReader {
            body: resp.into_body().into_data_stream(),
            buffer: String::new(),
        })
    }
}
