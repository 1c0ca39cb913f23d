//! The processes of a run: `tether serve` replicas on fixed loopback ports
//! and remote worker processes, each worker attached to one replica. With
//! `--partitions` every one of them runs in its own network namespace
//! (`ip netns exec`, see [`crate::net`]): a replica listens on all its
//! links, reaches PostgreSQL over its own, and each worker reaches its
//! replica over a link of its own.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::net::Net;
use crate::obs::{Line, Obs};
use crate::procs::Proc;
use crate::serve::LISTENING;

/// One replica's slot.
#[derive(Debug)]
pub struct Server {
    /// Its fixed port.
    pub port: u16,
    /// The running process, if any.
    pub proc: Option<Proc>,
    /// Successful starts.
    pub starts: u32,
}

/// One worker process's slot.
#[derive(Debug)]
pub struct WorkerSlot {
    /// The replica it talks to.
    pub server: usize,
    /// Incarnation (part of its worker ids).
    pub generation: u32,
    /// The running process, if any.
    pub proc: Option<Proc>,
    /// SIGSTOPped right now.
    pub stopped: bool,
}

impl WorkerSlot {
    /// The name of the current incarnation of slot `i` (its worker ids are
    /// `<name>.m`, `<name>.s` and `<name>.l`).
    pub fn name(&self, i: usize) -> String {
        format!("w{i}g{}", self.generation)
    }
}

/// The replica worker slot `slot` talks to, of `replicas`.
pub fn replica_of_slot(slot: usize, replicas: usize) -> usize {
    slot % replicas
}

/// The replica (of `replicas`) whose worker has the id `worker_id`
/// (`w<slot>g<generation>.<loop>`, see [`WorkerSlot::name`]).
pub fn replica_of(worker_id: &str, replicas: usize) -> Option<usize> {
    let slot = worker_id
        .strip_prefix('w')?
        .split('g')
        .next()?
        .parse()
        .ok()?;
    (replicas > 0).then(|| replica_of_slot(slot, replicas))
}

/// All processes of a run.
#[derive(Debug)]
pub struct Cluster {
    /// The run's database.
    pub database_url: String,
    /// The admin key the replicas are started with (and everyone uses).
    pub key: String,
    /// The server secret every replica is started with: replicas that each
    /// made their own (in their own data directories) would be refused.
    pub server_secret: String,
    /// The run's seed.
    pub seed: u64,
    /// Replicas.
    pub servers: Vec<Server>,
    /// Workers.
    pub workers: Vec<WorkerSlot>,
    /// What the workers print.
    pub obs: Arc<Mutex<Obs>>,
    /// The worker program and its first arguments (`--worker-cmd`); `None`
    /// runs this executable's own Rust worker (`__worker`).
    pub worker_cmd: Option<Vec<String>>,
    /// With `--partitions`: the network the processes run in, and each
    /// replica's URL of the database over its own link.
    pub net: Option<(Arc<Net>, Vec<String>)>,
}

/// A free loopback port below the ephemeral range, so that while a killed
/// replica is down no outgoing connection can be given its port (a
/// restarted replica must get its address back).
pub fn free_port(salt: u64) -> std::io::Result<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (from, to) = if low > 12_000 {
        (10_000u64, u64::from(low))
    } else {
        (49_152, 65_535)
    };
    let mut x = crate::plan::mix(u64::from(std::process::id()) ^ salt);
    for _ in 0..200 {
        x = crate::plan::mix(x);
        let port = (from + x % (to - from)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Cluster {
    /// A cluster of `servers` replicas and `workers` worker slots, nothing
    /// started yet.
    pub fn new(
        database_url: String,
        key: String,
        seed: u64,
        servers: usize,
        workers: usize,
        obs: Arc<Mutex<Obs>>,
        worker_cmd: Option<Vec<String>>,
    ) -> std::io::Result<Cluster> {
        let mut ports: Vec<u16> = Vec::new();
        let mut salt = 0;
        while ports.len() < servers {
            salt += 1;
            let port = free_port(salt)?;
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let servers: Vec<Server> = ports
            .into_iter()
            .map(|port| Server {
                port,
                proc: None,
                starts: 0,
            })
            .collect();
        let n = servers.len();
        let workers = (0..workers)
            .map(|i| WorkerSlot {
                server: replica_of_slot(i, n),
                generation: 0,
                proc: None,
                stopped: false,
            })
            .collect();
        Ok(Cluster {
            database_url,
            key,
            server_secret: tether_core::ServerSecret::generate().to_hex(),
            seed,
            servers,
            workers,
            obs,
            worker_cmd,
            net: None,
        })
    }

    /// The base URL of replica `i` for the parent (producers, probes).
    pub fn base_url(&self, i: usize) -> String {
        match &self.net {
            Some((net, _)) => format!("http://{}:{}", net.api_host(i), self.servers[i].port),
            None => format!("http://127.0.0.1:{}", self.servers[i].port),
        }
    }

    /// The base URL of worker slot `j`'s replica, as the worker reaches it.
    fn worker_base_url(&self, j: usize) -> String {
        let port = self.servers[self.workers[j].server].port;
        match &self.net {
            Some((net, _)) => format!("http://{}:{port}", net.worker_target(j)),
            None => format!("http://127.0.0.1:{port}"),
        }
    }

    /// Starts `program args` (`None`: this executable), in `ns` when the
    /// run has a network.
    fn spawn(
        &self,
        ns: impl FnOnce(&Net) -> String,
        program: Option<&str>,
        args: &[String],
        env: &[(&str, &str)],
        on_line: impl FnMut(String) + Send + 'static,
    ) -> std::io::Result<Proc> {
        let own;
        let program = match program {
            Some(p) => p,
            None => {
                own = std::env::current_exe()?.to_string_lossy().into_owned();
                own.as_str()
            }
        };
        match &self.net {
            // `ip netns exec` enters the namespace and execs the program:
            // the process keeps the pid (the maintenance holder names it).
            Some((net, _)) => {
                let (ip, all) = Net::exec_in(&ns(net), program, args);
                Proc::spawn_program(std::path::Path::new(&ip), &all, env, on_line)
            }
            None => Proc::spawn_program(std::path::Path::new(program), args, env, on_line),
        }
    }

    /// Starts replica `i` and waits until it listens (or fails: e.g. while
    /// PostgreSQL is down).
    pub async fn start_server(&mut self, i: usize) -> Result<(), String> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut args = vec![
            "__serve".to_owned(),
            self.database_url.clone(),
            self.servers[i].port.to_string(),
        ];
        if let Some((_, urls)) = &self.net {
            // Its own link to PostgreSQL; it listens on all of its links.
            args[1] = urls[i].clone();
            args.push("0.0.0.0".to_owned());
        }
        let env = [
            ("TETHER_ADMIN_KEY", self.key.as_str()),
            ("TETHER_SERVER_SECRET", self.server_secret.as_str()),
        ];
        let mut proc = self
            .spawn(
                |net| net.ns_replica(i),
                None,
                &args,
                &env,
                move |line| {
                    if line.starts_with(LISTENING) {
                        let _ = tx.send(());
                    }
                },
            )
            .map_err(|e| format!("cannot start replica {i}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if rx.try_recv().is_ok() {
                self.servers[i].proc = Some(proc);
                self.servers[i].starts += 1;
                return Ok(());
            }
            if proc.exited() {
                return Err(format!("replica {i} exited before listening"));
            }
            if Instant::now() > deadline {
                proc.kill();
                return Err(format!("replica {i} did not listen within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts replica `i`, trying again every half second until `deadline`.
    pub async fn ensure_server(&mut self, i: usize, deadline: Instant) -> Result<(), String> {
        loop {
            if self.servers[i].proc.as_mut().is_some_and(|p| !p.exited()) {
                return Ok(());
            }
            match self.start_server(i).await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Starts a new incarnation of worker slot `i` and waits until it runs.
    pub async fn start_worker(&mut self, i: usize) -> Result<(), String> {
        self.workers[i].generation += 1;
        let name = self.workers[i].name(i);
        let args = [
            self.worker_base_url(i),
            self.key.clone(),
            self.seed.to_string(),
            name.clone(),
        ];
        let (tx, mut rx) = mpsc::unbounded_channel();
        let obs = self.obs.clone();
        let on_line = move |line: String| match Line::parse(&line) {
            Some(Line::Ready) => {
                let _ = tx.send(());
            }
            Some(l) => obs.lock().unwrap_or_else(|e| e.into_inner()).record_line(l),
            None => {
                obs.lock().unwrap_or_else(|e| e.into_inner()).bad_lines += 1;
            }
        };
        let spawned = match &self.worker_cmd {
            Some(cmd) => {
                let args: Vec<String> = cmd[1..].iter().cloned().chain(args).collect();
                self.spawn(|net| net.ns_worker(i), Some(&cmd[0]), &args, &[], on_line)
            }
            None => {
                let args: Vec<String> =
                    std::iter::once("__worker".to_owned()).chain(args).collect();
                self.spawn(|net| net.ns_worker(i), None, &args, &[], on_line)
            }
        };
        let mut proc = spawned.map_err(|e| format!("cannot start worker {name}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if rx.try_recv().is_ok() {
                let slot = &mut self.workers[i];
                slot.proc = Some(proc);
                slot.stopped = false;
                return Ok(());
            }
            if proc.exited() {
                return Err(format!("worker {name} exited before it ran"));
            }
            if Instant::now() > deadline {
                proc.kill();
                return Err(format!("worker {name} did not start within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Processes that exited although nobody stopped them (a killed or
    /// stopped process leaves its slot first): each is a crash. Their slots
    /// are emptied.
    pub fn crashed(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, s) in self.servers.iter_mut().enumerate() {
            if s.proc.as_mut().is_some_and(|p| p.exited()) {
                s.proc = None;
                out.push(format!("replica {i} exited on its own"));
            }
        }
        for (i, w) in self.workers.iter_mut().enumerate() {
            if w.proc.as_mut().is_some_and(|p| p.exited()) {
                w.proc = None;
                w.stopped = false;
                out.push(format!("worker {} exited on its own", w.name(i)));
            }
        }
        out
    }

    /// Replica slots whose process runs.
    pub fn servers_up(&mut self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|&i| self.servers[i].proc.as_mut().is_some_and(|p| !p.exited()))
            .collect()
    }

    /// Worker slots whose process runs and is not stopped.
    pub fn workers_running(&mut self) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&i| {
                let w = &mut self.workers[i];
                !w.stopped && w.proc.as_mut().is_some_and(|p| !p.exited())
            })
            .collect()
    }

    /// Stops everything gracefully: workers first (SIGTERM: they hand back
    /// what they hold), then the replicas. Answers the processes that had
    /// to be killed because they did not exit within 15 s.
    pub async fn stop_all(&mut self) -> usize {
        let workers: Vec<Proc> = self
            .workers
            .iter_mut()
            .filter_map(|w| {
                w.stopped = false;
                w.proc.take()
            })
            .collect();
        let mut killed = terminate_all(workers).await;
        let servers: Vec<Proc> = self
            .servers
            .iter_mut()
            .filter_map(|s| s.proc.take())
            .collect();
        killed += terminate_all(servers).await;
        killed
    }
}

/// SIGTERM to every process, up to 15 s for all to exit, then SIGKILL.
async fn terminate_all(mut procs: Vec<Proc>) -> usize {
    for p in &procs {
        let _ = p.signal("CONT");
        let _ = p.signal("TERM");
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        procs.retain_mut(|p| !p.exited());
        if procs.is_empty() {
            return 0;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = procs.len();
    for p in &mut procs {
        p.kill();
    }
    n
}
