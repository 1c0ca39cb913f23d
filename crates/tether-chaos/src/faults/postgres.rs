//! Faults of PostgreSQL: a restart, or a failover to the standby; and how
//! to find and restart the cluster.

use super::*;

impl Injector {
    pub(super) async fn restart_pg(&mut self) {
        let started = Instant::now();
        self.say(format!("restarting PostgreSQL: {}", self.pg_restart));
        let cmd = self.pg_restart.clone();
        let out =
            tokio::task::spawn_blocking(move || Command::new("sh").arg("-c").arg(&cmd).output())
                .await;
        match out {
            Ok(Ok(o)) if o.status.success() => {}
            Ok(Ok(o)) => {
                let msg = format!(
                    "the PostgreSQL restart command failed ({}): {}{}",
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                self.say(msg.clone());
                self.stats.failures.push(msg);
                return;
            }
            Ok(Err(e)) => {
                self.stats
                    .failures
                    .push(format!("cannot run the PostgreSQL restart command: {e}"));
                return;
            }
            Err(e) => {
                self.stats
                    .failures
                    .push(format!("the PostgreSQL restart task failed: {e}"));
                return;
            }
        }
        loop {
            if answers(&self.admin_url).await {
                break;
            }
            if started.elapsed() > Duration::from_secs(60) {
                self.stats
                    .failures
                    .push("PostgreSQL did not answer within 60 s of its restart".to_owned());
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.stats.pg_restarts += 1;
        self.stats.pg_downtime = Some(started.elapsed());
        self.say(format!(
            "PostgreSQL answers again after {:.1}s",
            started.elapsed().as_secs_f64()
        ));
    }
}

impl Injector {
    /// The failover: `pg_ctl stop -m immediate` on the primary (a crash),
    /// then `pg_ctl promote` on the standby; times how long until the
    /// standby takes writes, and until every replica running then takes a
    /// write again through its API (its pool moved to the new primary).
    pub(super) async fn fail_over(&mut self, pair: &Arc<PgPair>) {
        // The premise: the standby has every acknowledged commit.
        match pair.sync_state().await {
            Ok(Some(s)) if s == "sync" => {}
            other => self.stats.failures.push(format!(
                "the standby was not synchronous just before the failover: {other:?}"
            )),
        }
        let started = Instant::now();
        self.say(format!(
            "failover: crashing the primary on port {} (pg_ctl stop -m immediate), promoting the \
             standby on port {}",
            pair.primary.port, pair.standby.port
        ));
        let p = pair.clone();
        let crashed = tokio::task::spawn_blocking(move || {
            p.crash_primary()?;
            p.promote_standby()
        })
        .await
        .map_err(|e| format!("the failover task failed: {e}"))
        .and_then(|r| r);
        if let Err(e) = crashed {
            let msg = format!("the failover failed: {e}");
            self.say(msg.clone());
            self.stats.failures.push(msg);
            return;
        }
        let standby = pair.standby_admin_url();
        let promoted_at = loop {
            if let Some(at) = pgpair::takes_writes(&standby).await {
                break at;
            }
            if started.elapsed() > Duration::from_secs(60) {
                self.stats.failures.push(format!(
                    "the promoted standby took no write within 60 s of the crash; {}",
                    pair.log_tails()
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.stats.failovers += 1;
        self.stats.writable_after = Some(started.elapsed());
        self.stats.promoted_at = Some(promoted_at);
        self.say(format!(
            "the promoted standby takes writes after {:.1}s",
            started.elapsed().as_secs_f64()
        ));

        // A write through each replica that runs now: `resume` of a queue
        // no job uses (it upserts the queue's row).
        let mut probes = Vec::new();
        for i in self.cluster.servers_up() {
            let client = HttpClient::builder(&self.cluster.base_url(i), &self.cluster.key)
                .timeout(Duration::from_secs(3))
                .connect_timeout(Duration::from_secs(1))
                .build();
            probes.push(tokio::spawn(async move {
                let client = client.map_err(|e| format!("replica {i}: client: {e}"))?;
                loop {
                    match client.resume(PROBE_QUEUE).await {
                        Ok(_) => return Ok((i, started.elapsed())),
                        Err(e) if started.elapsed() > Duration::from_secs(60) => {
                            return Err(format!(
                                "replica {i} took no write within 60 s of the failover: {e}"
                            ))
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            }));
        }
        for probe in probes {
            match probe.await {
                Ok(Ok(served)) => self.stats.serving_after.push(served),
                Ok(Err(e)) => self.stats.failures.push(e),
                Err(e) => self
                    .stats
                    .failures
                    .push(format!("a failover probe failed: {e}")),
            }
        }
        let each: Vec<String> = self
            .stats
            .serving_after
            .iter()
            .map(|(i, d)| format!("replica {i} {:.1}s", d.as_secs_f64()))
            .collect();
        self.say(format!(
            "the replicas take writes again after the crash: {}",
            each.join(", ")
        ));
    }
}

/// The queue the failover's probe writes to (through `resume`); no job
/// goes there.
pub(super) const PROBE_QUEUE: &str = "chaos-failover-probe";
/// The queue the probe after a partition writes to (through `resume`).
pub(super) const PARTITION_PROBE_QUEUE: &str = "chaos-partition-probe";

/// Whether PostgreSQL at `url` answers a query.
pub async fn answers(url: &str) -> bool {
    let attempt = async {
        let mut conn = sqlx::PgConnection::connect(url).await.ok()?;
        sqlx::query("SELECT 1").execute(&mut conn).await.ok()?;
        let _ = conn.close().await;
        Some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(3), attempt).await,
        Ok(Some(()))
    )
}

/// The host and port of a `postgres://` URL (port 5432 when absent).
pub fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').unwrap_or((v6, ""));
        (h.to_owned(), after.strip_prefix(':').unwrap_or(""))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p),
            None => (hostport.to_owned(), ""),
        }
    };
    (host, port.parse().unwrap_or(5432))
}

/// The command that restarts the PostgreSQL at `admin_url`:
/// `TETHER_CHAOS_PG_RESTART` when set, else `pg_ctlcluster <version>
/// <cluster> restart` for the local cluster on the URL's port (found with
/// `pg_lsclusters`, else in `/etc/postgresql/*/*/postgresql.conf`). An error
/// when there is none: the run must not quietly skip the restart.
pub fn pg_restart_command(admin_url: &str) -> Result<String, String> {
    if let Ok(cmd) = std::env::var("TETHER_CHAOS_PG_RESTART") {
        if !cmd.trim().is_empty() {
            return Ok(cmd);
        }
    }
    let (host, port) = host_port(admin_url);
    if !matches!(host.as_str(), "127.0.0.1" | "localhost" | "::1" | "") {
        return Err(format!(
            "PostgreSQL at {host}:{port} is not on this machine, so the chaos run cannot restart it; \
             set TETHER_CHAOS_PG_RESTART to a command that does"
        ));
    }
    if let Ok(out) = Command::new("pg_lsclusters").arg("--no-header").output() {
        if let Some(cmd) = cluster_on_port(&String::from_utf8_lossy(&out.stdout), port) {
            return Ok(cmd);
        }
    }
    if let Ok(versions) = std::fs::read_dir("/etc/postgresql") {
        for v in versions.flatten() {
            let Ok(clusters) = std::fs::read_dir(v.path()) else {
                continue;
            };
            for c in clusters.flatten() {
                let conf =
                    std::fs::read_to_string(c.path().join("postgresql.conf")).unwrap_or_default();
                if conf_port(&conf) == port {
                    return Ok(format!(
                        "pg_ctlcluster {} {} restart",
                        v.file_name().to_string_lossy(),
                        c.file_name().to_string_lossy()
                    ));
                }
            }
        }
    }
    Err(format!(
        "no PostgreSQL cluster of this machine listens on port {port} (looked with pg_lsclusters \
         and in /etc/postgresql/*/*); set TETHER_CHAOS_PG_RESTART to the command that restarts \
         the database at {admin_url}"
    ))
}

/// `pg_lsclusters --no-header` lines: `<version> <cluster> <port> <status> ...`.
pub(super) fn cluster_on_port(listing: &str, port: u16) -> Option<String> {
    listing.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 3 && f[2].parse::<u16>().ok() == Some(port))
            .then(|| format!("pg_ctlcluster {} {} restart", f[0], f[1]))
    })
}

/// The `port = N` of a postgresql.conf (5432 when unset).
pub(super) fn conf_port(conf: &str) -> u16 {
    conf.lines()
        .filter_map(|l| {
            let l = l.split('#').next()?.trim();
            let (k, v) = l.split_once('=')?;
            (k.trim() == "port").then(|| v.trim().parse().ok())?
        })
        .next_back()
        .unwrap_or(5432)
}
