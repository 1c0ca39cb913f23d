//! Child processes: this same executable re-run with a hidden subcommand
//! (or a worker program of another SDK), its stdout read line by line on a
//! thread, signalled with `kill`.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};

/// A child process; killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    /// Held open: closing it tells the child its parent is gone.
    stdin: Option<ChildStdin>,
    /// Its process id.
    pub pid: u32,
}

impl Proc {
    /// Starts `<program> <args>` with `envs`; every stdout line goes to
    /// `on_line` (on a thread of its own); stderr is inherited.
    pub fn spawn_program(
        program: &std::path::Path,
        args: &[String],
        envs: &[(&str, &str)],
        mut on_line: impl FnMut(String) + Send + 'static,
    ) -> std::io::Result<Proc> {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => on_line(l),
                    Err(_) => break,
                }
            }
        });
        let pid = child.id();
        Ok(Proc { child, stdin, pid })
    }

    /// Sends a signal by name (`KILL`, `STOP`, `CONT`, `TERM`).
    pub fn signal(&self, sig: &str) -> std::io::Result<()> {
        send_signal(self.pid, sig)
    }

    /// Whether it has exited (reaping it if so).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if !self.exited() {
            self.kill();
        }
    }
}

/// `kill -s <sig> <pid>` (the crate forbids `unsafe`, so no libc).
pub fn send_signal(pid: u32, sig: &str) -> std::io::Result<()> {
    let status = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "kill -s {sig} {pid} failed ({status})"
        )))
    }
}

/// Whether a process with this id exists.
pub fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
