//! The fault injector: every few seconds a SIGKILL of a worker (restarted
//! at once), a SIGSTOP of a worker for longer than its lease (SIGCONT
//! later), a SIGKILL of a replica (the maintenance leader or any; restarted
//! at the same address), and once a restart of PostgreSQL itself, or with
//! `--failover` a failover: the primary crashes and its standby is promoted.
//! With `--partitions` the faults are the network's instead (see
//! [`partition_schedule`]): links cut or slowed in the kernel ([`Net`]).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tether_client::HttpClient;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::{Connection, PgPool};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::leadership::{self, LeaderCut};
use crate::net::{Impairment, LinkId, Net};
use crate::obs::now_us;
use crate::pgpair::{self, PgPair};

/// How long a SIGSTOPped worker stays stopped: past the main queue's lease
/// (4 s) plus the reaper's tick, so its jobs are reaped and claimed again.
pub const STOP_FOR: Duration = Duration::from_secs(7);
/// Pause before a killed replica is started again.
const SERVER_DOWN_FOR: Duration = Duration::from_millis(1_000);
/// Pause before a killed worker is started again.
const WORKER_DOWN_FOR: Duration = Duration::from_millis(300);
/// How long a replica (not the leader) stays cut off from PostgreSQL while
/// its workers keep calling it.
pub const CUT_REPLICA_FOR: Duration = Duration::from_secs(4);
/// How long the maintenance leader stays cut off from PostgreSQL: its
/// lease (1 s) lapses and another replica takes over well within it.
pub const CUT_LEADER_FOR: Duration = Duration::from_secs(5);
/// How long a worker stays cut off from its replica: as long as a SIGSTOP,
/// past its lease, so its jobs are reaped and its late reports fenced.
pub const CUT_WORKER_FOR: Duration = STOP_FOR;
/// How long links stay slowed.
pub const SLOW_FOR: Duration = Duration::from_secs(8);
/// The longest the injector waits for the leader's next lease write to aim
/// a cut right after it (a tick is 250 ms).
const AIM_WITHIN: Duration = Duration::from_millis(1_500);
/// The longest a replica may take to serve a write again once its link to
/// PostgreSQL is back.
const RECOVER_WITHIN: Duration = Duration::from_secs(60);

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a worker process, then start a new one in its slot.
    KillWorker,
    /// SIGSTOP a worker that holds jobs for [`STOP_FOR`], then SIGCONT.
    StopWorker,
    /// SIGKILL a random replica, then restart it.
    KillServer,
    /// SIGKILL the replica that leads maintenance, then restart it.
    KillLeader,
    /// Restart PostgreSQL; with `--failover`, crash the primary and
    /// promote the standby instead.
    RestartPg,
    /// Cut a replica that does not lead maintenance off from PostgreSQL
    /// for [`CUT_REPLICA_FOR`]; its workers and the producers keep calling
    /// it.
    CutReplica,
    /// Cut the maintenance leader off from PostgreSQL for
    /// [`CUT_LEADER_FOR`], right after one of its lease renewals.
    CutLeader,
    /// Cut the worker that holds running jobs off from its replica for
    /// [`CUT_WORKER_FOR`].
    CutWorker,
    /// Slow some worker↔replica links for [`SLOW_FOR`].
    SlowWorkers,
    /// Slow some replica↔PostgreSQL links for [`SLOW_FOR`].
    SlowDb,
}

impl Fault {
    /// How long a network fault lasts.
    fn lasts(self) -> Duration {
        match self {
            Fault::CutReplica => CUT_REPLICA_FOR,
            Fault::CutLeader => CUT_LEADER_FOR,
            Fault::CutWorker => CUT_WORKER_FOR,
            Fault::SlowWorkers | Fault::SlowDb => SLOW_FOR,
            _ => Duration::ZERO,
        }
    }
}

/// The faults of a `--partitions` run and when, decided by the seed, on
/// two tracks. Cuts, one at a time, from 2 s on with 2–4 s between one's
/// end and the next: the first three are a leader cut, a worker cut and a
/// replica cut, then drawn with weights 35/35/30. Slowed links from 5 s
/// on, with 3–6 s between, alternately worker links and links to
/// PostgreSQL (they overlap the cuts). Everything ends 4 s before the
/// window does.
pub fn partition_schedule(seed: u64, window: Duration) -> Vec<(Duration, Fault)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9a27_1710);
    let end = window.saturating_sub(Duration::from_secs(4));
    let first = [Fault::CutLeader, Fault::CutWorker, Fault::CutReplica];
    let mut out = Vec::new();
    let mut t = Duration::from_secs(2);
    loop {
        let fault =
            first
                .get(out.len())
                .copied()
                .unwrap_or_else(|| match rng.random_range(0..100) {
                    0..=34 => Fault::CutLeader,
                    35..=69 => Fault::CutWorker,
                    _ => Fault::CutReplica,
                });
        if t + fault.lasts() > end {
            break;
        }
        out.push((t, fault));
        t += fault.lasts() + Duration::from_millis(rng.random_range(2_000..4_000));
    }
    let mut t = Duration::from_secs(5);
    let mut workers = true;
    while t + SLOW_FOR <= end {
        out.push((
            t,
            if workers {
                Fault::SlowWorkers
            } else {
                Fault::SlowDb
            },
        ));
        workers = !workers;
        t += SLOW_FOR + Duration::from_millis(rng.random_range(3_000..6_000));
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// The faults of a run and when (after the start), decided by the seed:
/// one every 2–4 s from 2 s to 4 s before the window ends, the first five
/// covering every kind, and one PostgreSQL restart (or failover) at 40 % of
/// the window.
pub fn schedule(seed: u64, window: Duration) -> Vec<(Duration, Fault)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xfa_0175);
    let first = [
        Fault::KillWorker,
        Fault::StopWorker,
        Fault::KillLeader,
        Fault::KillWorker,
        Fault::KillServer,
    ];
    let mut out = Vec::new();
    let mut t = Duration::from_secs(2);
    let end = window.saturating_sub(Duration::from_secs(4));
    while t < end {
        let fault =
            first
                .get(out.len())
                .copied()
                .unwrap_or_else(|| match rng.random_range(0..100) {
                    0..=49 => Fault::KillWorker,
                    50..=64 => Fault::StopWorker,
                    65..=79 => Fault::KillServer,
                    _ => Fault::KillLeader,
                });
        out.push((t, fault));
        t += Duration::from_millis(rng.random_range(2_000..4_000));
    }
    out.push((window.mul_f64(0.4), Fault::RestartPg));
    out.sort_by_key(|(t, _)| *t);
    out
}

/// What the injector did.
#[derive(Debug, Default, Clone)]
pub struct FaultStats {
    /// Worker processes SIGKILLed.
    pub worker_kills: u64,
    /// Worker processes SIGSTOPped (and SIGCONTed later).
    pub worker_stops: u64,
    /// ... of which held running jobs when stopped.
    pub stops_with_jobs: u64,
    /// Replicas SIGKILLed.
    pub server_kills: u64,
    /// ... of which led maintenance at the time.
    pub leader_kills: u64,
    /// PostgreSQL restarts.
    pub pg_restarts: u64,
    /// From the restart command's start until PostgreSQL answered again.
    pub pg_downtime: Option<Duration>,
    /// Failovers (`--failover`): the primary crashed, the standby promoted.
    pub failovers: u64,
    /// From the crash until the promoted standby took writes.
    pub writable_after: Option<Duration>,
    /// The new primary's clock when it first took writes: every event at
    /// or after it was written there (the old primary was gone by then).
    pub promoted_at: Option<DateTime<Utc>>,
    /// From the crash until each replica running then took a write again
    /// (replica, time).
    pub serving_after: Vec<(usize, Duration)>,
    /// Things the injector could not do (a restart that failed): each one
    /// fails the run.
    pub failures: Vec<String>,
    /// Processes that exited although nobody killed or stopped them.
    pub crashes: Vec<String>,
    /// Replicas (not leading) cut off from PostgreSQL.
    pub replica_cuts: u64,
    /// The maintenance leader cut off from PostgreSQL.
    pub leader_cuts: Vec<LeaderCut>,
    /// Workers cut off from their replica.
    pub worker_cuts: u64,
    /// ... of which held running jobs then.
    pub cuts_with_jobs: u64,
    /// Periods of slowed worker links, and links slowed in them.
    pub slow_worker_periods: (u64, u64),
    /// Periods of slowed links to PostgreSQL, and links slowed in them.
    pub slow_db_periods: (u64, u64),
    /// After each cut of a replica's link to PostgreSQL: how long from the
    /// link's return until the replica took a write again (replica, time).
    pub recovered_after: Vec<(usize, Duration)>,
    /// Replicas that did not take a write again in time: each fails
    /// `partition_recovery`.
    pub recovery_failures: Vec<String>,
}

impl FaultStats {
    /// Every SIGKILL (workers and replicas).
    pub fn kills(&self) -> u64 {
        self.worker_kills + self.server_kills
    }

    /// From the failover's crash until the last replica running then took
    /// a write again.
    pub fn all_serving_after(&self) -> Option<Duration> {
        self.serving_after.iter().map(|(_, d)| *d).max()
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Fault(Fault),
    /// SIGCONT worker slot `.0` if still incarnation `.1`.
    Cont(usize, u32),
    RestartServer(usize, Instant),
    RestartWorker(usize, Instant),
    /// Ends an impairment of a link; `.2`: the leader cut it ends.
    Restore(LinkId, Impairment, Option<usize>),
}

/// Runs the faults.
pub struct Injector {
    /// The processes.
    pub cluster: Cluster,
    /// The run's database.
    pub pool: PgPool,
    /// The admin URL (to see PostgreSQL answer again).
    pub admin_url: String,
    /// The command that restarts PostgreSQL.
    pub pg_restart: String,
    /// With `--failover`: the primary and standby to fail over between
    /// instead of the restart.
    pub failover: Option<Arc<PgPair>>,
    /// Decides victims.
    pub rng: StdRng,
    /// The start of the window.
    pub start: Instant,
    /// What it did.
    pub stats: FaultStats,
    /// With `--partitions`: the network whose links it cuts and slows.
    pub net: Option<Arc<Net>>,
    /// Probes of replicas whose link to PostgreSQL came back.
    pub probes: Vec<tokio::task::JoinHandle<Result<(usize, Duration), String>>>,
}

impl Injector {
    fn say(&self, what: String) {
        println!("[{:>6.1}s] {what}", self.start.elapsed().as_secs_f64());
    }

    /// Runs `schedule` (offsets from `start`) and every follow-up (restarts,
    /// SIGCONTs); returns when nothing is left to do, every process running.
    pub async fn run(mut self, schedule: Vec<(Duration, Fault)>) -> (Cluster, FaultStats) {
        let mut queue: Vec<(Instant, Action)> = schedule
            .into_iter()
            .map(|(t, f)| (self.start + t, Action::Fault(f)))
            .collect();
        while !queue.is_empty() {
            let i = (0..queue.len())
                .min_by_key(|&i| queue[i].0)
                .expect("non-empty");
            let (at, action) = queue.swap_remove(i);
            tokio::time::sleep_until(at).await;
            for crash in self.cluster.crashed() {
                self.say(format!("{crash}!"));
                self.stats.crashes.push(crash);
            }
            for follow_up in self.act(action).await {
                queue.push(follow_up);
            }
        }
        if let Some(net) = &self.net {
            if let Err(e) = net.heal_all() {
                self.stats.failures.push(e);
            }
        }
        for probe in std::mem::take(&mut self.probes) {
            match probe.await {
                Ok(Ok(served)) => self.stats.recovered_after.push(served),
                Ok(Err(e)) => self.stats.recovery_failures.push(e),
                Err(e) => self
                    .stats
                    .recovery_failures
                    .push(format!("a recovery probe failed: {e}")),
            }
        }
        (self.cluster, self.stats)
    }

    async fn act(&mut self, action: Action) -> Vec<(Instant, Action)> {
        let now = Instant::now();
        match action {
            Action::Fault(Fault::KillWorker) => self.kill_worker(),
            Action::Fault(Fault::StopWorker) => self.stop_worker().await,
            Action::Fault(Fault::KillServer) => self.kill_server(false).await,
            Action::Fault(Fault::KillLeader) => self.kill_server(true).await,
            Action::Fault(Fault::RestartPg) => {
                match self.failover.clone() {
                    Some(pair) => self.fail_over(&pair).await,
                    None => self.restart_pg().await,
                }
                Vec::new()
            }
            Action::Fault(Fault::CutReplica) => self.cut_replica(None).await,
            Action::Fault(Fault::CutLeader) => self.cut_leader().await,
            Action::Fault(Fault::CutWorker) => self.cut_worker().await,
            Action::Fault(Fault::SlowWorkers) => self.slow(true),
            Action::Fault(Fault::SlowDb) => self.slow(false),
            Action::Restore(link, what, leader_cut) => {
                if let (Some(i), LinkId::Db(r), Some(net)) = (leader_cut, link, self.net.clone()) {
                    self.diagnose_takeover(i, &net.replica_client(r)).await;
                }
                self.restore(link, what, leader_cut);
                Vec::new()
            }
            Action::Cont(i, generation) => {
                let w = &mut self.cluster.workers[i];
                if w.generation == generation && w.stopped {
                    if let Some(p) = &w.proc {
                        let _ = p.signal("CONT");
                    }
                    w.stopped = false;
                    let name = w.name(i);
                    self.say(format!("SIGCONT worker {name}"));
                }
                Vec::new()
            }
            Action::RestartWorker(i, since) => match self.cluster.start_worker(i).await {
                Ok(()) => Vec::new(),
                Err(e) if since.elapsed() > Duration::from_secs(60) => {
                    self.stats
                        .failures
                        .push(format!("worker slot {i} could not be restarted: {e}"));
                    Vec::new()
                }
                Err(_) => vec![(
                    now + Duration::from_secs(1),
                    Action::RestartWorker(i, since),
                )],
            },
            Action::RestartServer(i, since) => match self.cluster.start_server(i).await {
                Ok(()) => {
                    self.say(format!(
                        "replica {i} back on port {} after {:.1}s",
                        self.cluster.servers[i].port,
                        since.elapsed().as_secs_f64()
                    ));
                    Vec::new()
                }
                Err(e) if since.elapsed() > Duration::from_secs(90) => {
                    self.stats
                        .failures
                        .push(format!("replica {i} could not be restarted: {e}"));
                    Vec::new()
                }
                Err(_) => vec![(
                    now + Duration::from_millis(500),
                    Action::RestartServer(i, since),
                )],
            },
        }
    }

    fn kill_worker(&mut self) -> Vec<(Instant, Action)> {
        let candidates = self.cluster.workers_running();
        if candidates.is_empty() {
            return Vec::new();
        }
        let i = candidates[self.rng.random_range(0..candidates.len())];
        let w = &mut self.cluster.workers[i];
        let name = w.name(i);
        let Some(mut p) = w.proc.take() else {
            return Vec::new();
        };
        let pid = p.pid;
        p.kill();
        self.stats.worker_kills += 1;
        self.say(format!("SIGKILL worker {name} (pid {pid})"));
        let now = Instant::now();
        vec![(now + WORKER_DOWN_FOR, Action::RestartWorker(i, now))]
    }

    async fn stop_worker(&mut self) -> Vec<(Instant, Action)> {
        if self.cluster.workers.iter().any(|w| w.stopped) {
            // One stopped at a time: kill one instead.
            return self.kill_worker();
        }
        let running = self.cluster.workers_running();
        let busy = self.busy_workers().await;
        let holding: Vec<usize> = running
            .iter()
            .copied()
            .filter(|i| busy.contains(&self.cluster.workers[*i].name(*i)))
            .collect();
        let pool = if holding.is_empty() {
            &running
        } else {
            &holding
        };
        if pool.is_empty() {
            return Vec::new();
        }
        let i = pool[self.rng.random_range(0..pool.len())];
        let w = &mut self.cluster.workers[i];
        let (name, generation) = (w.name(i), w.generation);
        let Some(p) = &w.proc else {
            return Vec::new();
        };
        if p.signal("STOP").is_err() {
            return Vec::new();
        }
        w.stopped = true;
        self.stats.worker_stops += 1;
        if !holding.is_empty() {
            self.stats.stops_with_jobs += 1;
        }
        self.say(format!(
            "SIGSTOP worker {name} for {} s ({})",
            STOP_FOR.as_secs(),
            if holding.is_empty() {
                "holding no job"
            } else {
                "holding jobs"
            }
        ));
        vec![(Instant::now() + STOP_FOR, Action::Cont(i, generation))]
    }

    /// Names (`w<slot>g<generation>`) of the workers holding running jobs.
    async fn busy_workers(&self) -> Vec<String> {
        let q = sqlx::query_scalar::<_, String>(
            "SELECT DISTINCT worker_id FROM tether.jobs WHERE state = 'running' AND worker_id IS NOT NULL",
        )
        .fetch_all(&self.pool);
        match tokio::time::timeout(Duration::from_secs(5), q).await {
            Ok(Ok(ids)) => ids
                .into_iter()
                .filter_map(|id| id.split('.').next().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The process id of the maintenance leader, per `tether.leases`.
    async fn leader_pid(&self) -> Option<u32> {
        let q = sqlx::query_scalar::<_, String>(
            "SELECT holder FROM tether.leases WHERE name = 'maintenance' AND expires_at > now()",
        )
        .fetch_optional(&self.pool);
        let holder = tokio::time::timeout(Duration::from_secs(5), q)
            .await
            .ok()?
            .ok()??;
        // `serve:<pid>:<random>`
        holder
            .strip_prefix("serve:")?
            .split(':')
            .next()?
            .parse()
            .ok()
    }

    async fn kill_server(&mut self, leader: bool) -> Vec<(Instant, Action)> {
        let up = self.cluster.servers_up();
        if up.len() < self.cluster.servers.len() {
            // One replica down at a time: kill a worker instead.
            return self.kill_worker();
        }
        let leader_pid = self.leader_pid().await;
        let by_pid = |pid: Option<u32>, c: &Cluster| {
            up.iter()
                .copied()
                .find(|&i| c.servers[i].proc.as_ref().map(|p| p.pid) == pid && pid.is_some())
        };
        let leading = by_pid(leader_pid, &self.cluster);
        let i = match (leader, leading) {
            (true, Some(i)) => i,
            _ => up[self.rng.random_range(0..up.len())],
        };
        let Some(mut p) = self.cluster.servers[i].proc.take() else {
            return Vec::new();
        };
        let pid = p.pid;
        p.kill();
        let was_leader = leading == Some(i);
        self.stats.server_kills += 1;
        if was_leader {
            self.stats.leader_kills += 1;
        }
        self.say(format!(
            "SIGKILL replica {i} (pid {pid}){}",
            if was_leader {
                ", the maintenance leader"
            } else {
                ""
            }
        ));
        let now = Instant::now();
        vec![(now + SERVER_DOWN_FOR, Action::RestartServer(i, now))]
    }

    /// Sets an impairment (the tc commands block for a few ms).
    fn impair(&mut self, link: LinkId, what: Impairment, on: bool) -> bool {
        let Some(net) = self.net.clone() else {
            return false;
        };
        match tokio::task::block_in_place(|| net.set(link, what, on)) {
            Ok(()) => true,
            Err(e) => {
                let msg = format!("could not change the link {link}: {e}");
                self.say(msg.clone());
                self.stats.failures.push(msg);
                false
            }
        }
    }

    /// The replica whose process has this pid.
    fn replica_by_pid(&mut self, pid: Option<u32>) -> Option<usize> {
        let pid = pid?;
        self.cluster
            .servers_up()
            .into_iter()
            .find(|&i| self.cluster.servers[i].proc.as_ref().map(|p| p.pid) == Some(pid))
    }

    /// (a) Cuts a replica off from PostgreSQL (`leader`: the one to cut,
    /// else one that does not lead).
    async fn cut_replica(
        &mut self,
        leader: Option<(usize, Option<f64>)>,
    ) -> Vec<(Instant, Action)> {
        let Some(net) = self.net.clone() else {
            return Vec::new();
        };
        let r = match leader {
            Some((r, _)) => r,
            None => {
                let leading = self.leader_pid().await;
                let leading = self.replica_by_pid(leading);
                let others: Vec<usize> = (0..self.cluster.servers.len())
                    .filter(|&i| Some(i) != leading && !net.is_cut(LinkId::Db(i)))
                    .collect();
                if others.is_empty() {
                    return Vec::new();
                }
                others[self.rng.random_range(0..others.len())]
            }
        };
        let from_us = now_us();
        if !self.impair(LinkId::Db(r), Impairment::Cut, true) {
            return Vec::new();
        }
        let (lasts, cut) = match leader {
            Some((_, after_renewal_ms)) => {
                self.stats.leader_cuts.push(LeaderCut {
                    replica: r,
                    from_us,
                    to_us: from_us,
                    after_renewal_ms,
                    diagnosis: None,
                });
                self.say(format!(
                    "cut replica {r}, the maintenance leader, off from PostgreSQL for {} s{}",
                    CUT_LEADER_FOR.as_secs(),
                    after_renewal_ms.map_or(" (no renewal seen to aim at)".to_owned(), |ms| {
                        format!(" ({ms:.0} ms after its lease renewal)")
                    })
                ));
                (CUT_LEADER_FOR, Some(self.stats.leader_cuts.len() - 1))
            }
            None => {
                self.stats.replica_cuts += 1;
                self.say(format!(
                    "cut replica {r} off from PostgreSQL for {} s (its workers keep calling it)",
                    CUT_REPLICA_FOR.as_secs()
                ));
                (CUT_REPLICA_FOR, None)
            }
        };
        vec![(
            Instant::now() + lasts,
            Action::Restore(LinkId::Db(r), Impairment::Cut, cut),
        )]
    }

    /// (b) Cuts the maintenance leader off from PostgreSQL, aimed right
    /// after one of its lease writes (a renewal: the tick's maintenance
    /// statements follow it), so that statements of that tick are on the
    /// wire when the link goes.
    async fn cut_leader(&mut self) -> Vec<(Instant, Action)> {
        let Some(net) = self.net.clone() else {
            return Vec::new();
        };
        // The leader, then its next lease write; a leader that writes none
        // within AIM_WITHIN may have just lost the lease (a slow link): look
        // for the leader once more.
        let mut target = None;
        for _ in 0..2 {
            let leading = self.leader_pid().await;
            let Some(r) = self.replica_by_pid(leading) else {
                continue;
            };
            let client = net.replica_client(r);
            let before = leadership::latest_lease_write(&self.pool, &client).await;
            let aim_until = Instant::now() + AIM_WITHIN;
            target = Some((r, None));
            while Instant::now() < aim_until {
                tokio::time::sleep(Duration::from_millis(2)).await;
                let latest = leadership::latest_lease_write(&self.pool, &client).await;
                if let Some((seq, _, at)) = latest {
                    if before.as_ref().is_none_or(|b| b.0 != seq) {
                        let ms = (now_us() - at.timestamp_micros()) as f64 / 1e3;
                        target = Some((r, Some(ms)));
                        break;
                    }
                }
            }
            if target.is_some_and(|(_, ms)| ms.is_some()) {
                break;
            }
        }
        let Some((r, after_renewal_ms)) = target else {
            self.say("no maintenance leader found: cutting another replica instead".to_owned());
            return self.cut_replica(None).await;
        };
        self.cut_replica(Some((r, after_renewal_ms))).await
    }

    /// At the end of leader cut `i`: if no other replica took the lease
    /// meanwhile, records what the database's sessions were doing.
    async fn diagnose_takeover(&mut self, i: usize, client: &str) {
        let Some(from) = self
            .stats
            .leader_cuts
            .get(i)
            .and_then(|c| chrono::DateTime::from_timestamp_micros(c.from_us))
        else {
            return;
        };
        if leadership::taken_over_since(&self.pool, client, from).await == Some(false) {
            let d = leadership::sessions(&self.pool).await;
            self.say(format!(
                "no other replica took the maintenance lease during the cut; {d}"
            ));
            self.stats.leader_cuts[i].diagnosis = Some(d);
        }
    }

    /// (c) Cuts the worker holding running jobs off from its replica.
    async fn cut_worker(&mut self) -> Vec<(Instant, Action)> {
        let Some(net) = self.net.clone() else {
            return Vec::new();
        };
        let running: Vec<usize> = self
            .cluster
            .workers_running()
            .into_iter()
            .filter(|&j| !net.is_cut(LinkId::Worker(j)))
            .collect();
        let busy = self.busy_workers().await;
        let holding: Vec<usize> = running
            .iter()
            .copied()
            .filter(|j| busy.contains(&self.cluster.workers[*j].name(*j)))
            .collect();
        let pool = if holding.is_empty() {
            &running
        } else {
            &holding
        };
        if pool.is_empty() {
            return Vec::new();
        }
        let j = pool[self.rng.random_range(0..pool.len())];
        if !self.impair(LinkId::Worker(j), Impairment::Cut, true) {
            return Vec::new();
        }
        self.stats.worker_cuts += 1;
        if !holding.is_empty() {
            self.stats.cuts_with_jobs += 1;
        }
        let name = self.cluster.workers[j].name(j);
        self.say(format!(
            "cut worker {name} off from its replica for {} s ({})",
            CUT_WORKER_FOR.as_secs(),
            if holding.is_empty() {
                "holding no job"
            } else {
                "holding jobs"
            }
        ));
        vec![(
            Instant::now() + CUT_WORKER_FOR,
            Action::Restore(LinkId::Worker(j), Impairment::Cut, None),
        )]
    }

    /// (d) Slows some worker links (`workers`) or links to PostgreSQL.
    fn slow(&mut self, workers: bool) -> Vec<(Instant, Action)> {
        let n = if workers {
            self.cluster.workers.len()
        } else {
            self.cluster.servers.len()
        };
        if n == 0 || self.net.is_none() {
            return Vec::new();
        }
        let k = self.rng.random_range(1..=n);
        let mut picked: Vec<usize> = (0..n).collect();
        for i in 0..n {
            let j = self.rng.random_range(i..n);
            picked.swap(i, j);
        }
        picked.truncate(k);
        picked.sort_unstable();
        let link = |i: usize| {
            if workers {
                LinkId::Worker(i)
            } else {
                LinkId::Db(i)
            }
        };
        let mut follow = Vec::new();
        for &i in &picked {
            if self.impair(link(i), Impairment::Slow, true) {
                follow.push((
                    Instant::now() + SLOW_FOR,
                    Action::Restore(link(i), Impairment::Slow, None),
                ));
            }
        }
        let period = if workers {
            &mut self.stats.slow_worker_periods
        } else {
            &mut self.stats.slow_db_periods
        };
        period.0 += 1;
        period.1 += follow.len() as u64;
        self.say(format!(
            "slow {} for {} s: {} at most, a queue of {} packets, {} % lost",
            if workers {
                format!("the links of worker slots {picked:?} to their replicas")
            } else {
                format!("the links of replicas {picked:?} to PostgreSQL")
            },
            SLOW_FOR.as_secs(),
            crate::net::SLOW_RATE,
            crate::net::SLOW_QUEUE,
            crate::net::SLOW_LOSS_PERCENT
        ));
        follow
    }

    /// Ends an impairment; after a cut of a replica's link to PostgreSQL,
    /// probes until the replica takes a write again.
    fn restore(&mut self, link: LinkId, what: Impairment, leader_cut: Option<usize>) {
        if !self.impair(link, what, false) {
            return;
        }
        if let Some(c) = leader_cut.and_then(|i| self.stats.leader_cuts.get_mut(i)) {
            c.to_us = now_us();
        }
        if what == Impairment::Slow {
            return;
        }
        self.say(format!("the link {link} is back"));
        if let LinkId::Db(r) = link {
            let client = HttpClient::builder(&self.cluster.base_url(r), &self.cluster.key)
                .timeout(Duration::from_secs(3))
                .connect_timeout(Duration::from_secs(1))
                .build();
            let healed = Instant::now();
            self.probes.push(tokio::spawn(async move {
                let client = client.map_err(|e| format!("replica {r}: client: {e}"))?;
                loop {
                    match client.resume(PARTITION_PROBE_QUEUE).await {
                        Ok(_) => return Ok((r, healed.elapsed())),
                        Err(e) if healed.elapsed() > RECOVER_WITHIN => {
                            return Err(format!(
                                "replica {r} took no write within {} s of its link to PostgreSQL \
                                 coming back: {e}",
                                RECOVER_WITHIN.as_secs()
                            ))
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            }));
        }
    }

    async fn restart_pg(&mut self) {
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
    async fn fail_over(&mut self, pair: &Arc<PgPair>) {
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
const PROBE_QUEUE: &str = "chaos-failover-probe";
/// The queue the probe after a partition writes to (through `resume`).
const PARTITION_PROBE_QUEUE: &str = "chaos-partition-probe";

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
fn cluster_on_port(listing: &str, port: u16) -> Option<String> {
    listing.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 3 && f[2].parse::<u16>().ok() == Some(port))
            .then(|| format!("pg_ctlcluster {} {} restart", f[0], f[1]))
    })
}

/// The `port = N` of a postgresql.conf (5432 when unset).
fn conf_port(conf: &str) -> u16 {
    conf.lines()
        .filter_map(|l| {
            let l = l.split('#').next()?.trim();
            let (k, v) = l.split_once('=')?;
            (k.trim() == "port").then(|| v.trim().parse().ok())?
        })
        .next_back()
        .unwrap_or(5432)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1:5433/postgres"),
            ("127.0.0.1".to_owned(), 5433)
        );
        assert_eq!(
            host_port("postgres://u:p@localhost/db"),
            ("localhost".to_owned(), 5432)
        );
        assert_eq!(
            host_port("postgres://[::1]:6000/x"),
            ("::1".to_owned(), 6000)
        );
        assert_eq!(
            tether_postgres::url_with_database(
                "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
                "c"
            ),
            "postgres://postgres@127.0.0.1:5432/c?sslmode=disable"
        );
        assert_eq!(
            tether_postgres::url_with_database("postgres://127.0.0.1", "c"),
            "postgres://127.0.0.1/c"
        );
    }

    #[test]
    fn clusters_are_found_by_port() {
        let listing = "15  chaos   5433 online postgres /var/lib/postgresql/15/chaos /var/log/x.log\n\
                       15  main    5432 online postgres /var/lib/postgresql/15/main  /var/log/y.log\n";
        assert_eq!(
            cluster_on_port(listing, 5432).as_deref(),
            Some("pg_ctlcluster 15 main restart")
        );
        assert_eq!(cluster_on_port(listing, 5999), None);
        assert_eq!(
            conf_port("#port = 1\nport = 5433\t\t# (change requires restart)\n"),
            5433
        );
        assert_eq!(conf_port("# nothing\n"), 5432);
    }

    #[test]
    fn schedules_cover_every_fault_and_restart_postgres_once() {
        let s = schedule(1, Duration::from_secs(60));
        assert_eq!(s, schedule(1, Duration::from_secs(60)));
        for f in [
            Fault::KillWorker,
            Fault::StopWorker,
            Fault::KillServer,
            Fault::KillLeader,
        ] {
            assert!(s.iter().any(|(_, x)| *x == f), "{f:?}");
        }
        assert_eq!(s.iter().filter(|(_, f)| *f == Fault::RestartPg).count(), 1);
        assert!(s.len() >= 15, "{}", s.len());
        assert!(s.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn partition_schedules_cover_every_fault_one_cut_at_a_time() {
        let window = Duration::from_secs(90);
        let s = partition_schedule(1, window);
        assert_eq!(s, partition_schedule(1, window));
        assert_ne!(s, partition_schedule(2, window));
        for f in [
            Fault::CutLeader,
            Fault::CutWorker,
            Fault::CutReplica,
            Fault::SlowWorkers,
            Fault::SlowDb,
        ] {
            assert!(s.iter().any(|(_, x)| *x == f), "{f:?}");
        }
        assert!(s
            .iter()
            .all(|(t, f)| *t + f.lasts() <= window - Duration::from_secs(4)));
        let cuts: Vec<_> = s
            .iter()
            .filter(|(_, f)| matches!(f, Fault::CutLeader | Fault::CutWorker | Fault::CutReplica))
            .collect();
        assert!(cuts.len() >= 8, "{}", cuts.len());
        assert!(cuts
            .windows(2)
            .all(|w| w[0].0 + w[0].1.lasts() + Duration::from_secs(2) <= w[1].0));
        assert!(!s.iter().any(|(_, f)| *f == Fault::RestartPg));
    }
}
