//! `tether serve` as a real process against clients that misbehave: ones
//! that send half a request header and stop, ones that keep idle
//! connections open, and long-poll claims with absurd queue names. Each
//! test fails against a server without the matching bound.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{call, temp_dir, Server};
use serde_json::json;

/// Reads from `stream` until the server closes it; panics if it stays open
/// longer than `within`.
fn closed_by_server(stream: &mut TcpStream, within: Duration) {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("the server kept the connection open: {e}"),
        }
    }
}

/// 300 connections that send half a request head and stop do not keep the
/// server from answering, even when it may only open 128 files: the cap
/// keeps descriptors for the database, and the header-read timeout closes
/// the slow connections so others get their turn.
#[tokio::test]
async fn slow_headers_do_not_starve_the_server() {
    let dir = temp_dir("slowloris");
    let s = Server::start_with_open_files(&dir, &["--header-read-timeout", "1s"], 128);
    let addr = s.addr.clone();
    let slow: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut c = TcpStream::connect(&addr).unwrap();
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            c
        })
        .collect();
    // Give the server time to take in everything it will.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let healthz = client.get(s.url("/healthz")).send().await;
    assert_eq!(
        healthz.expect("/healthz answered").status(),
        200,
        "health check during the flood"
    );
    // And the database still works: a request that needs it.
    let key = tether_server::admin_key::read_key_file(&dir).unwrap();
    let (status, body) = call(reqwest::Method::GET, &s.url("/v1/queues"), &key, None).await;
    assert_eq!(status, 200, "{body}");
    // Every slow connection was closed by the server.
    for mut c in slow {
        closed_by_server(&mut c, Duration::from_secs(20));
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A keep-alive connection that sits idle is closed after the idle timeout;
/// a long-poll longer than both timeouts is not cut by them.
#[tokio::test]
async fn idle_connections_close_but_long_polls_finish() {
    let dir = temp_dir("idle");
    let s = Server::start(
        &dir,
        &["--header-read-timeout", "1s", "--idle-timeout", "2s"],
        &[],
    );
    let key = tether_server::admin_key::read_key_file(&dir).unwrap();

    let mut idle = TcpStream::connect(&s.addr).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Open past the header-read timeout: that one only bounds the first
    // request of a connection.
    std::thread::sleep(Duration::from_millis(1_500));
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let n = idle.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let quiet = Instant::now();
    closed_by_server(&mut idle, Duration::from_secs(10));
    assert!(
        quiet.elapsed() >= Duration::from_millis(1_500),
        "closed before the idle timeout: {:?}",
        quiet.elapsed()
    );

    // A claim waiting 3.5 s (longer than both timeouts) gets its answer.
    let (status, body) = call(
        reqwest::Method::POST,
        &s.url("/v1/queues/nothing-here/claim"),
        &key,
        Some(json!({"worker_id": "w", "wait_ms": 3_500})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobs"], json!([]));
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Long-poll claims with a 60 000-character queue name are refused before
/// they subscribe to anything: 1 200 of them leave the server's memory
/// where the first 600 left it.
#[tokio::test]
async fn refused_long_polls_leave_nothing_behind() {
    let dir = temp_dir("leak");
    let s = Server::start(&dir, &[], &[]);
    let key = tether_server::admin_key::read_key_file(&dir).unwrap();
    let client = reqwest::Client::new();
    let round = |r: usize| {
        let client = client.clone();
        let key = key.clone();
        let url = s.url("/v1/queues/");
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..600 {
                let name = format!("{r}-{i}-{}", "q".repeat(60_000));
                let req = client
                    .post(format!("{url}{name}/claim"))
                    .bearer_auth(&key)
                    .json(&json!({"worker_id": "w", "wait_ms": 1_000}));
                tasks.spawn(async move { req.send().await.map(|r| r.status().as_u16()) });
                if tasks.len() >= 32 {
                    let status = tasks.join_next().await.unwrap().unwrap().unwrap();
                    assert_eq!(status, 400);
                }
            }
            while let Some(r) = tasks.join_next().await {
                assert_eq!(r.unwrap().unwrap(), 400);
            }
        }
    };
    round(1).await;
    let after_first = rss_kib(s.pid());
    round(2).await;
    let growth = rss_kib(s.pid()).saturating_sub(after_first);
    // Before the fix each refused claim kept ~60 KB: ~35 MB a round.
    assert!(
        growth < 8 * 1024,
        "the second round grew the server by {growth} KiB"
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Event streams whose readers never read do not grow the server: ten of
/// them stay open while two rounds of 30 000 events are committed, and the
/// second round leaves the server's memory about where the first left it
/// (each stream holds one chunk for its reader, the rest waits in the
/// store). A server that queued events for each reader would grow by
/// about 10 × 30 000 × 300 bytes, some 90 MB, a round.
#[tokio::test]
async fn stalled_event_streams_do_not_grow_the_server() {
    let dir = temp_dir("stalled");
    let s = Server::start(&dir, &[], &[]);
    let key = tether_server::admin_key::read_key_file(&dir).unwrap();
    let stalled: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            let head = format!(
                "GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
            );
            c.write_all(head.as_bytes()).unwrap();
            // Read the answer's head only; from then on it never reads.
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut buf = [0u8; 512];
            let n = c.read(&mut buf).unwrap();
            let head = String::from_utf8_lossy(&buf[..n]);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            c
        })
        .collect();
    let round = |r: usize| {
        let (url, key) = (s.url("/v1/jobs/batch"), key.clone());
        async move {
            for b in 0..30 {
                let jobs: Vec<_> = (0..1_000)
                    .map(|i| json!({"queue": "stalled", "kind": "k", "payload": {"r": r, "b": b, "i": i}}))
                    .collect();
                let (status, body) = call(
                    reqwest::Method::POST,
                    &url,
                    &key,
                    Some(json!({"jobs": jobs})),
                )
                .await;
                assert_eq!(status, 200, "{body}");
            }
        }
    };
    // The streams read what the rounds commit from the store once they
    // fall behind the server's tail: let them get there.
    round(1).await;
    std::thread::sleep(Duration::from_secs(2));
    let after_first = rss_kib(s.pid());
    round(2).await;
    std::thread::sleep(Duration::from_secs(2));
    let growth = rss_kib(s.pid()).saturating_sub(after_first);
    eprintln!("stalled streams: the second round grew the server by {growth} KiB");
    assert!(
        growth < 24 * 1024,
        "the second round grew the server by {growth} KiB"
    );
    drop(stalled);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Resident memory of a process, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}
