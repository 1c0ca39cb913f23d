//! Shared by the tests that run the real `tether` binary.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `tether serve` child process.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub banner: String,
}

impl Server {
    /// Starts `tether serve` on a free port and waits for its banner.
    pub fn start(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn(
            Command::new(env!("CARGO_BIN_EXE_tether")),
            data_dir,
            extra,
            env,
            Stdio::inherit(),
        )
    }

    /// Like [`Server::start`], with the server's stderr (its log) written
    /// to the file `log` instead of the test's.
    pub fn start_logging_to(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Server {
        let file = std::fs::File::create(log).expect("create the log file");
        Server::spawn(
            Command::new(env!("CARGO_BIN_EXE_tether")),
            data_dir,
            extra,
            env,
            Stdio::from(file),
        )
    }

    /// Like [`Server::start`], under a soft limit of `open_files` descriptors.
    pub fn start_with_open_files(data_dir: &Path, extra: &[&str], open_files: u32) -> Server {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_tether"));
        Server::spawn(cmd, data_dir, extra, &[], Stdio::inherit())
    }

    /// Starts `tether serve` with no option on its command line: every
    /// setting comes from `env` (which must give `TETHER_LISTEN` a free
    /// port and `TETHER_DATA_DIR`).
    pub fn start_from_env(env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
        cmd.arg("serve");
        Server::until_banner(cmd, env)
    }

    fn spawn(
        mut cmd: Command,
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Server {
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra);
        Server::until_banner_with(cmd, env, stderr)
    }

    /// Runs `cmd` (a `tether serve`) and waits for its banner.
    fn until_banner(cmd: Command, env: &[(&str, &str)]) -> Server {
        Server::until_banner_with(cmd, env, Stdio::inherit())
    }

    fn until_banner_with(mut cmd: Command, env: &[(&str, &str)], stderr: Stdio) -> Server {
        cmd.env_remove("TETHER_ADMIN_KEY")
            .env_remove("TETHER_SERVER_SECRET")
            .env_remove("TETHER_DATABASE_URL")
            .env("TETHER_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn tether serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut banner = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(line) => line,
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait().unwrap();
                    panic!("tether serve gave no banner ({status}); got: {banner}");
                }
            };
            banner.push_str(&line);
            banner.push('\n');
            if line.trim_start().starts_with("admin key") && !line.ends_with(':') {
                break;
            }
            if line.starts_with("    tth_") {
                break;
            }
        }
        let addr = banner
            .lines()
            .find_map(|l| l.strip_prefix("tether serve: listening on http://"))
            .expect("banner names the address")
            .trim()
            .to_owned();
        Server {
            child,
            addr,
            banner,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits for the process to exit; panics after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("tether serve did not exit within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tether-cli-test-{tag}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub async fn call(
    method: reqwest::Method,
    url: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http().request(method, url).bearer_auth(key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, body)
}

/// What one run of the `tether` binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout as one JSON document; panics with both streams otherwise.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }

    /// Panics unless the exit code is `code`.
    pub fn expect(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "exit code {} instead of {code}\nstdout: {}\nstderr: {}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// Panics unless it exited 0.
    pub fn ok(self) -> Run {
        self.expect(0)
    }
}

/// Runs `tether <args>` with none of the TETHER_* variables of the
/// environment (only `env`), `stdin` as its input, and waits for it.
pub fn tether(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Run {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in [
        "TETHER_URL",
        "TETHER_KEY",
        "TETHER_DATA_DIR",
        "TETHER_ADMIN_KEY",
        "TETHER_SERVER_SECRET",
        "TETHER_DATABASE_URL",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn tether");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().expect("wait for tether");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
