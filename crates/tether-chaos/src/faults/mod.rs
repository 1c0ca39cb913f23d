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

mod network;
mod postgres;
mod processes;

pub use postgres::pg_restart_command;
use postgres::*;

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
