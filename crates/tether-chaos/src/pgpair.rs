//! The primary and the standby of a `--failover` run: two PostgreSQL
//! clusters of this machine's installed version, made for the run in
//! `<tmp>/tether-chaos-pg-<pid>` on free loopback ports, with synchronous
//! streaming replication (an acknowledged commit is on the standby), and
//! removed when the run ends; a run that was killed leaves them behind and
//! the next run removes them ([`sweep_stale`]).
//!
//! `initdb` refuses to run as root, so as root every PostgreSQL command
//! runs as the `postgres` user (`runuser -u postgres --`), which owns the
//! directory. Authentication is `trust` on the unix socket and 127.0.0.1,
//! for replication too; nothing listens beyond loopback.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Connection;
use tokio::time::Instant;

/// The standby's `application_name`, which the primary's
/// `synchronous_standby_names` names.
pub const STANDBY_NAME: &str = "tether_chaos_standby";
/// Prefix of the run directory under the temp directory.
const DIR_PREFIX: &str = "tether-chaos-pg-";
/// Longest wait for a cluster to start, or the standby to be in sync.
const START_WITHIN: Duration = Duration::from_secs(60);

/// One of the two clusters.
#[derive(Debug)]
pub struct Node {
    /// `primary` or `standby`.
    pub name: &'static str,
    /// Its data directory.
    pub data: PathBuf,
    /// Its loopback port.
    pub port: u16,
    /// Its server log (`pg_ctl -l`).
    pub log: PathBuf,
}

/// The two clusters, stopped and removed when dropped (unless kept).
#[derive(Debug)]
pub struct PgPair {
    root: PathBuf,
    bin: PathBuf,
    /// Run the commands as the `postgres` user (we are root).
    as_postgres: bool,
    /// The cluster the run starts on.
    pub primary: Node,
    /// Its synchronous standby, promoted by the fault.
    pub standby: Node,
    /// Leave the clusters running for a look (`TETHER_CHAOS_KEEP_DATABASE=1`).
    keep: AtomicBool,
}

impl PgPair {
    /// Makes, configures and starts both clusters on `ports` (primary,
    /// standby) and waits until the primary sees the standby as
    /// synchronous. On an error whatever was made is removed again.
    pub async fn start(ports: (u16, u16)) -> Result<PgPair, String> {
        let pair = tokio::task::spawn_blocking(move || PgPair::create(ports))
            .await
            .map_err(|e| format!("setting up PostgreSQL panicked: {e}"))??;
        pair.wait_sync().await?;
        Ok(pair)
    }

    /// The blocking part of [`PgPair::start`]: initdb, config, start, base
    /// backup, start.
    fn create((primary_port, standby_port): (u16, u16)) -> Result<PgPair, String> {
        let bin = bindir()?;
        let as_postgres = running_as_root();
        let root = std::env::temp_dir().join(format!("{DIR_PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        let node = |name: &'static str, port: u16| Node {
            name,
            data: root.join(name),
            port,
            log: root.join(format!("{name}.log")),
        };
        // From here on, dropping `pair` stops and removes what exists.
        let pair = PgPair {
            primary: node("primary", primary_port),
            standby: node("standby", standby_port),
            root,
            bin,
            as_postgres,
            keep: AtomicBool::new(false),
        };
        for node in [&pair.primary, &pair.standby] {
            let sockets = pair.sockets(node);
            std::fs::create_dir_all(&sockets)
                .map_err(|e| format!("cannot create {}: {e}", sockets.display()))?;
        }
        if as_postgres {
            pair.run_plain("chown", &["-R", "postgres:postgres", &path(&pair.root)])?;
        }

        let p = &pair.primary;
        pair.pg(
            "initdb",
            &[
                "-D",
                &path(&p.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                // The data of a throw-away cluster need not reach the disk
                // before it starts; the server itself runs with fsync on.
                "--no-sync",
                "--no-instructions",
            ],
        )?;
        std::fs::write(
            p.data.join("pg_hba.conf"),
            "# tether-chaos --failover: trust on the socket and loopback, replication too\n\
             local all all trust\n\
             host all all 127.0.0.1/32 trust\n\
             local replication all trust\n\
             host replication all 127.0.0.1/32 trust\n",
        )
        .map_err(|e| format!("cannot write the primary's pg_hba.conf: {e}"))?;
        append(
            &p.data.join("postgresql.conf"),
            &format!(
                "\n# tether-chaos --failover: the primary\n\
                 {common}\
                 wal_level = replica\n\
                 max_wal_senders = 4\n\
                 max_replication_slots = 4\n\
                 wal_keep_size = 128MB\n\
                 synchronous_standby_names = '{STANDBY_NAME}'\n\
                 synchronous_commit = on\n",
                common = pair.common_settings(p),
            ),
        )?;
        pair.pg_ctl_start(p)?;

        let s = &pair.standby;
        pair.pg(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &p.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &path(&s.data),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "-C",
                "-S",
                STANDBY_NAME,
                "--no-sync",
            ],
        )?;
        // The base backup copied the primary's configuration: the standby
        // gets its own port and sockets, and no synchronous standby of its
        // own, or once promoted every commit would wait for one forever.
        append(
            &s.data.join("postgresql.conf"),
            &format!(
                "\n# tether-chaos --failover: the standby\n\
                 {common}\
                 synchronous_standby_names = ''\n\
                 hot_standby = on\n",
                common = pair.common_settings(s),
            ),
        )?;
        // After the `primary_conninfo` that `-R` wrote (the last one wins):
        // the same, with the name the primary waits for.
        append(
            &s.data.join("postgresql.auto.conf"),
            &format!(
                "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}'\n",
                p.port
            ),
        )?;
        pair.pg_ctl_start(s)?;
        Ok(pair)
    }

    /// Settings of both clusters: where they listen, and small, for a
    /// machine of two cores shared with the rest of the run.
    fn common_settings(&self, node: &Node) -> String {
        common_settings(node, &sockets(&self.root, node), "127.0.0.1")
    }

    fn sockets(&self, node: &Node) -> PathBuf {
        sockets(&self.root, node)
    }

    /// Waits until `pg_stat_replication` on the primary shows the standby
    /// with `sync_state = 'sync'`.
    async fn wait_sync(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let last = match self.sync_state().await {
                Ok(Some(s)) if s == "sync" => return Ok(()),
                Ok(state) => format!("sync_state {state:?}"),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                return Err(format!(
                    "the standby was not a synchronous standby of the primary within {} s \
                     ({last}); {}",
                    START_WITHIN.as_secs(),
                    self.log_tails()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The standby's `sync_state` in the primary's `pg_stat_replication`
    /// (`None` while it is not connected).
    pub async fn sync_state(&self) -> Result<Option<String>, String> {
        let url = self.primary_admin_url();
        let attempt = async {
            let mut c = sqlx::PgConnection::connect(&url).await?;
            let state: Option<String> = sqlx::query_scalar(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
            )
            .bind(STANDBY_NAME)
            .fetch_optional(&mut c)
            .await?;
            let _ = c.close().await;
            Ok::<_, sqlx::Error>(state)
        };
        match tokio::time::timeout(Duration::from_secs(3), attempt).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("timed out".to_owned()),
        }
    }

    /// The primary's `postgres` database (to create the run's database).
    pub fn primary_admin_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.primary.port
        )
    }

    /// The standby's `postgres` database (to see it take writes).
    pub fn standby_admin_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.standby.port
        )
    }

    /// `database` on whichever of the two is writable: the multi-host URL
    /// everything in the run uses.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{database}?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// Stops the primary as a crash would: `pg_ctl stop -m immediate` (no
    /// shutdown checkpoint; its backends are killed mid-statement).
    pub fn crash_primary(&self) -> Result<(), String> {
        self.pg(
            "pg_ctl",
            &[
                "stop",
                "-D",
                &path(&self.primary.data),
                "-m",
                "immediate",
                "-w",
            ],
        )
    }

    /// Tells the standby to become the primary, without waiting (the caller
    /// times when it takes writes).
    pub fn promote_standby(&self) -> Result<(), String> {
        self.pg(
            "pg_ctl",
            &["promote", "-D", &path(&self.standby.data), "-W"],
        )
    }

    /// Leaves both clusters and their directory in place at the end.
    pub fn keep(&self) {
        self.keep.store(true, Ordering::Relaxed);
    }

    /// Where the clusters live.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The last lines of both server logs, for an error message.
    pub fn log_tails(&self) -> String {
        [&self.primary, &self.standby]
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(8)..].join("\n    ");
                format!("{} log ({}):\n    {tail}", n.name, n.log.display())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn pg_ctl_start(&self, node: &Node) -> Result<(), String> {
        self.pg(
            "pg_ctl",
            &[
                "start",
                "-D",
                &path(&node.data),
                "-l",
                &path(&node.log),
                "-w",
                "-t",
                &START_WITHIN.as_secs().to_string(),
            ],
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(&node.log).unwrap_or_default();
            format!("{e}\n{} log:\n{log}", node.name)
        })
    }

    /// Runs the PostgreSQL program `program` (from [`bindir`]).
    fn pg(&self, program: &str, args: &[&str]) -> Result<(), String> {
        pg(&self.root, &self.bin, self.as_postgres, program, args)
    }

    fn run_plain(&self, program: &str, args: &[&str]) -> Result<(), String> {
        run(&self.root, program, args)
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        if self.keep.load(Ordering::Relaxed) {
            return;
        }
        for node in [&self.standby, &self.primary] {
            if node.data.join("postmaster.pid").exists() {
                let _ = self.pg(
                    "pg_ctl",
                    &["stop", "-D", &path(&node.data), "-m", "immediate", "-w"],
                );
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Stops and removes the clusters of earlier `--failover` runs whose
/// process is gone (killed before it could clean up, or kept with
/// `TETHER_CHAOS_KEEP_DATABASE=1`).
pub fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let Ok(bin) = bindir() else { return };
    let as_postgres = running_as_root();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(Ok(pid)) = name.strip_prefix(DIR_PREFIX).map(str::parse::<u32>) else {
            continue;
        };
        if pid == std::process::id() || crate::procs::alive(pid) {
            continue;
        }
        let root = entry.path();
        for node in ["standby", "primary"] {
            let data = root.join(node);
            if data.join("postmaster.pid").exists() {
                let pg_ctl = path(&bin.join("pg_ctl"));
                let data = path(&data);
                let args = ["stop", "-D", data.as_str(), "-m", "immediate", "-w"];
                let _ = if as_postgres {
                    let mut all = vec!["-u", "postgres", "--", pg_ctl.as_str()];
                    all.extend_from_slice(&args);
                    run(&root, "runuser", &all)
                } else {
                    run(&root, &pg_ctl, &args)
                };
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Settings of a cluster of the run: where it listens (`listen`, a list
/// for `listen_addresses`), and small, for a machine of two cores shared
/// with the rest of the run.
fn common_settings(node: &Node, sockets: &Path, listen: &str) -> String {
    format!(
        "listen_addresses = '{listen}'\n\
         port = {port}\n\
         unix_socket_directories = '{sockets}'\n\
         max_connections = 100\n\
         shared_buffers = 32MB\n\
         max_wal_size = 512MB\n\
         fsync = on\n\
         logging_collector = off\n",
        port = node.port,
        sockets = path(sockets),
    )
}

fn sockets(root: &Path, node: &Node) -> PathBuf {
    root.join(format!("{}.sock", node.name))
}

/// Runs the PostgreSQL program `program` (from `bin`), as the `postgres`
/// user when `as_postgres`, in `root`.
fn pg(
    root: &Path,
    bin: &Path,
    as_postgres: bool,
    program: &str,
    args: &[&str],
) -> Result<(), String> {
    let exe = path(&bin.join(program));
    if as_postgres {
        let mut all = vec!["-u", "postgres", "--", exe.as_str()];
        all.extend_from_slice(args);
        run(root, "runuser", &all)
    } else {
        run(root, &exe, args)
    }
}

/// The one cluster of a `--partitions` run: made like the pair's primary
/// (in `<tmp>/tether-chaos-pg-<pid>/primary`, so [`sweep_stale`] removes
/// it after a killed run too), without a standby, listening on loopback
/// and on the root-side ends of the replicas' links, and trusting their
/// network. Stopped and removed when dropped (unless kept).
#[derive(Debug)]
pub struct PgSolo {
    root: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    /// The cluster.
    pub node: Node,
    keep: AtomicBool,
}

impl PgSolo {
    /// Makes and starts the cluster on `port`, listening on 127.0.0.1 and
    /// `hosts`, trusting connections from `subnet` (and loopback).
    pub async fn start(port: u16, hosts: Vec<String>, subnet: String) -> Result<PgSolo, String> {
        tokio::task::spawn_blocking(move || PgSolo::create(port, &hosts, &subnet))
            .await
            .map_err(|e| format!("setting up PostgreSQL panicked: {e}"))?
    }

    fn create(port: u16, hosts: &[String], subnet: &str) -> Result<PgSolo, String> {
        let bin = bindir()?;
        let as_postgres = running_as_root();
        let root = std::env::temp_dir().join(format!("{DIR_PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        // From here on, dropping `solo` stops and removes what exists.
        let solo = PgSolo {
            node: Node {
                name: "primary",
                data: root.join("primary"),
                port,
                log: root.join("primary.log"),
            },
            root,
            bin,
            as_postgres,
            keep: AtomicBool::new(false),
        };
        let n = &solo.node;
        let socket_dir = sockets(&solo.root, n);
        std::fs::create_dir_all(&socket_dir)
            .map_err(|e| format!("cannot create {}: {e}", socket_dir.display()))?;
        if as_postgres {
            run(
                &solo.root,
                "chown",
                &["-R", "postgres:postgres", &path(&solo.root)],
            )?;
        }
        solo.pg(
            "initdb",
            &[
                "-D",
                &path(&n.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
        )?;
        std::fs::write(
            n.data.join("pg_hba.conf"),
            format!(
                "# tether-chaos --partitions: trust on the socket, loopback and the run's links\n\
                 local all all trust\n\
                 host all all 127.0.0.1/32 trust\n\
                 host all all {subnet} trust\n"
            ),
        )
        .map_err(|e| format!("cannot write pg_hba.conf: {e}"))?;
        let listen = std::iter::once("127.0.0.1".to_owned())
            .chain(hosts.iter().cloned())
            .collect::<Vec<_>>()
            .join(",");
        append(
            &n.data.join("postgresql.conf"),
            &format!(
                "\n# tether-chaos --partitions\n{}",
                common_settings(n, &socket_dir, &listen)
            ),
        )?;
        solo.pg(
            "pg_ctl",
            &[
                "start",
                "-D",
                &path(&n.data),
                "-l",
                &path(&n.log),
                "-w",
                "-t",
                &START_WITHIN.as_secs().to_string(),
            ],
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(&n.log).unwrap_or_default();
            format!("{e}\nserver log:\n{log}")
        })?;
        Ok(solo)
    }

    fn pg(&self, program: &str, args: &[&str]) -> Result<(), String> {
        pg(&self.root, &self.bin, self.as_postgres, program, args)
    }

    /// Its `postgres` database over loopback (the parent's own connections).
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.node.port)
    }

    /// Leaves the cluster and its directory in place at the end.
    pub fn keep(&self) {
        self.keep.store(true, Ordering::Relaxed);
    }

    /// Where the cluster lives.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for PgSolo {
    fn drop(&mut self) {
        if self.keep.load(Ordering::Relaxed) {
            return;
        }
        if self.node.data.join("postmaster.pid").exists() {
            let _ = self.pg(
                "pg_ctl",
                &[
                    "stop",
                    "-D",
                    &path(&self.node.data),
                    "-m",
                    "immediate",
                    "-w",
                ],
            );
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `program args` in `dir`; its output goes into the error.
fn run(dir: &Path, program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        // The postgres user may not enter the caller's directory.
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn append(file: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot append to {}: {e}", file.display()))
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Whether this process runs as root (`id -u`; the crate uses no libc).
fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The directory of the installed PostgreSQL's programs: `pg_config
/// --bindir` when it holds `initdb`, `pg_ctl` and `pg_basebackup`, else the
/// newest `/usr/lib/postgresql/<version>/bin` that does.
pub fn bindir() -> Result<PathBuf, String> {
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "pg_basebackup"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && complete(&dir) {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            complete(&bin).then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "--failover needs PostgreSQL's initdb, pg_ctl and pg_basebackup: none in \
         `pg_config --bindir` nor in /usr/lib/postgresql/<version>/bin"
            .to_owned()
    })
}

/// Whether the server at `url` takes writes: a transaction that takes a
/// transaction id (which a standby refuses) commits. Answers the server's
/// `now()` in it.
pub async fn takes_writes(url: &str) -> Option<DateTime<Utc>> {
    let attempt = async {
        let mut conn = sqlx::PgConnection::connect(url).await.ok()?;
        let now: DateTime<Utc> = sqlx::query_scalar("SELECT now() FROM pg_current_xact_id()")
            .fetch_one(&mut conn)
            .await
            .ok()?;
        let _ = conn.close().await;
        Some(now)
    };
    tokio::time::timeout(Duration::from_secs(3), attempt)
        .await
        .ok()
        .flatten()
}
