//! Maintenance leadership under partitions (`--partitions`): an audit the
//! run installs in its own database, and the checks over it.
//!
//! The history (`tether.job_events`) cannot say who reaped a job, and
//! `tether.leases` keeps only the current holder. But in a `--partitions`
//! run every replica reaches PostgreSQL from an address of its own (its
//! link), so triggers that record `inet_client_addr()` tell the replicas
//! apart. Before any replica starts, the run adds to its database (schema
//! `chaos_audit`, never touched by tether):
//!
//! - `leases`: every write of the `maintenance` lease (acquire, renew,
//!   release) with its token, `expires_at` and the writer's address, at
//!   `clock_timestamp()`;
//! - `passes`: every reaper, expiry and prune statement (statement-level
//!   triggers on `tether.jobs`, told apart by the statement's text, so a
//!   pass that changes nothing is seen too), with its transaction's `now()`
//!   (which the reaper stamps on its `lease_expired` events) and its
//!   writer's address;
//! - `fires`: every run a schedule fired (`tether.schedule_runs`), with its
//!   writer's address.
//!
//! A schedule firing every second (queue [`CRON_QUEUE`], overlap `skip`,
//! no worker serves it: one job, then skipped runs) gives the scheduler
//! something to do all along.
//!
//! The checks ([`check`]): every maintenance change (a job reaped or
//! expired, a schedule fired) was made by a replica whose lease had not
//! lapsed yet; every lease was acquired only after the one before had
//! lapsed or been released; every leader cut off from PostgreSQL was
//! replaced while it was cut off; no schedule instant fired twice.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::check::{EventRow, Findings};
use crate::net::{Episode, Impairment, LinkId};

/// The queue of the schedule's jobs (no worker serves it).
pub const CRON_QUEUE: &str = "chaos-cron";
/// The schedule's name.
pub const CRON_SCHEDULE: &str = "chaos-cron";
/// Every second (six fields, seconds first).
pub const CRON_EVERY_SECOND: &str = "* * * * * *";

/// The checks only a `--partitions` run makes.
pub const CHECKS: [&str; 3] = [AFTER_LEASE, LEADERSHIP, DOUBLE_FIRE];
/// No maintenance change after the lease could have lapsed.
pub const AFTER_LEASE: &str = "maintenance_after_lease";
/// Leases never overlap, leaders cut off are replaced, the audit sees.
pub const LEADERSHIP: &str = "leadership";
/// No schedule instant fired twice.
pub const DOUBLE_FIRE: &str = "schedule_double_fire";

/// The first characters of the statements the passes run (tether-postgres'
/// `REAP`, `EXPIRE` and `PRUNE`). If tether rewrites them, the audit sees
/// no pass and [`LEADERSHIP`] fails saying so.
const REAP_PREFIX: &str = "WITH lapsed AS (";
const EXPIRE_PREFIX: &str = "WITH gone AS (";
const PRUNE_PREFIX: &str = "WITH old AS (";

/// The audit: tables, functions, triggers.
fn install_sql() -> String {
    format!(
        r#"
CREATE SCHEMA chaos_audit;
CREATE TABLE chaos_audit.leases (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    op text NOT NULL,
    holder text NOT NULL,
    token uuid NOT NULL,
    expires_at timestamptz NOT NULL,
    client text DEFAULT host(inet_client_addr())
);
CREATE FUNCTION chaos_audit.lease_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.name = 'maintenance' THEN
            INSERT INTO chaos_audit.leases (op, holder, token, expires_at)
            VALUES ('release', OLD.holder, OLD.token, OLD.expires_at);
        END IF;
    ELSIF NEW.name = 'maintenance' THEN
        INSERT INTO chaos_audit.leases (op, holder, token, expires_at)
        VALUES (CASE WHEN TG_OP = 'INSERT' OR OLD.token IS DISTINCT FROM NEW.token
                     THEN 'acquire' ELSE 'renew' END,
                NEW.holder, NEW.token, NEW.expires_at);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit_leases AFTER INSERT OR UPDATE OR DELETE ON tether.leases
    FOR EACH ROW EXECUTE FUNCTION chaos_audit.lease_log();

CREATE TABLE chaos_audit.passes (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    tx_at timestamptz NOT NULL DEFAULT now(),
    what text NOT NULL,
    client text DEFAULT host(inet_client_addr())
);
CREATE FUNCTION chaos_audit.pass_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_audit.passes (what) VALUES (TG_ARGV[0]);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit_reap AFTER UPDATE ON tether.jobs FOR EACH STATEMENT
    WHEN (current_query() LIKE '{REAP_PREFIX}%') EXECUTE FUNCTION chaos_audit.pass_log('reap');
CREATE TRIGGER chaos_audit_expire AFTER UPDATE ON tether.jobs FOR EACH STATEMENT
    WHEN (current_query() LIKE '{EXPIRE_PREFIX}%') EXECUTE FUNCTION chaos_audit.pass_log('expire');
CREATE TRIGGER chaos_audit_prune AFTER DELETE ON tether.jobs FOR EACH STATEMENT
    WHEN (current_query() LIKE '{PRUNE_PREFIX}%') EXECUTE FUNCTION chaos_audit.pass_log('prune');

CREATE TABLE chaos_audit.fires (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    schedule_id uuid NOT NULL,
    fire_at timestamptz NOT NULL,
    outcome text NOT NULL,
    client text DEFAULT host(inet_client_addr())
);
CREATE FUNCTION chaos_audit.fire_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_audit.fires (schedule_id, fire_at, outcome)
    VALUES (NEW.schedule_id, NEW.fire_at, NEW.outcome);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit_fires AFTER INSERT ON tether.schedule_runs
    FOR EACH ROW EXECUTE FUNCTION chaos_audit.fire_log();
"#
    )
}

/// Installs the audit in the run's database (the schema of tether must
/// exist: migrate first).
pub async fn install(pool: &PgPool) -> Result<(), String> {
    sqlx::raw_sql(&install_sql())
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot install the leadership audit: {e}"))
}

/// The latest `maintenance` lease write by the replica at `client`:
/// `(seq, op, at)`, for the fault injector to aim a cut right after one.
pub async fn latest_lease_write(
    pool: &PgPool,
    client: &str,
) -> Option<(i64, String, DateTime<Utc>)> {
    sqlx::query_as(
        "SELECT seq, op, at FROM chaos_audit.leases WHERE client = $1 ORDER BY seq DESC LIMIT 1",
    )
    .bind(client)
    .fetch_optional(pool)
    .await
    .ok()
    .flatten()
}

/// A write of the maintenance lease.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    /// When (the trigger's `clock_timestamp()`).
    pub at: DateTime<Utc>,
    /// `acquire`, `renew` or `release`.
    pub op: String,
    /// The holder (`serve:<pid>:<rand>`).
    pub holder: String,
    /// The lease's token.
    pub token: Uuid,
    /// Until when it holds (for a release: until when it would have).
    pub expires_at: DateTime<Utc>,
    /// The writer's address.
    pub client: Option<String>,
}

/// A maintenance statement (`reap`, `expire`, `prune`) as it ran.
#[derive(Debug, Clone)]
pub struct PassRow {
    /// When it ran (end of the statement).
    pub at: DateTime<Utc>,
    /// Its transaction's `now()` (the `at` of the events it wrote).
    pub tx_at: DateTime<Utc>,
    /// Which pass.
    pub what: String,
    /// The writer's address.
    pub client: Option<String>,
}

/// A run of a schedule, as it was written.
#[derive(Debug, Clone)]
pub struct FireRow {
    /// When.
    pub at: DateTime<Utc>,
    /// The schedule.
    pub schedule_id: Uuid,
    /// The instant it fired for.
    pub fire_at: DateTime<Utc>,
    /// `enqueued` or `skipped`.
    pub outcome: String,
    /// The writer's address.
    pub client: Option<String>,
}

/// The audit, read back.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// Lease writes, in order.
    pub leases: Vec<LeaseRow>,
    /// Maintenance statements, in order.
    pub passes: Vec<PassRow>,
    /// Schedule runs, in order.
    pub fires: Vec<FireRow>,
}

/// Reads the audit.
pub async fn load(pool: &PgPool) -> Result<Audit, sqlx::Error> {
    let leases = sqlx::query(
        "SELECT at, op, holder, token, expires_at, client FROM chaos_audit.leases ORDER BY seq",
    )
    .try_map(|r: sqlx::postgres::PgRow| {
        Ok(LeaseRow {
            at: r.try_get("at")?,
            op: r.try_get("op")?,
            holder: r.try_get("holder")?,
            token: r.try_get("token")?,
            expires_at: r.try_get("expires_at")?,
            client: r.try_get("client")?,
        })
    })
    .fetch_all(pool)
    .await?;
    let passes = sqlx::query("SELECT at, tx_at, what, client FROM chaos_audit.passes ORDER BY seq")
        .try_map(|r: sqlx::postgres::PgRow| {
            Ok(PassRow {
                at: r.try_get("at")?,
                tx_at: r.try_get("tx_at")?,
                what: r.try_get("what")?,
                client: r.try_get("client")?,
            })
        })
        .fetch_all(pool)
        .await?;
    let fires = sqlx::query(
        "SELECT at, schedule_id, fire_at, outcome, client FROM chaos_audit.fires ORDER BY seq",
    )
    .try_map(|r: sqlx::postgres::PgRow| {
        Ok(FireRow {
            at: r.try_get("at")?,
            schedule_id: r.try_get("schedule_id")?,
            fire_at: r.try_get("fire_at")?,
            outcome: r.try_get("outcome")?,
            client: r.try_get("client")?,
        })
    })
    .fetch_all(pool)
    .await?;
    Ok(Audit {
        leases,
        passes,
        fires,
    })
}

/// A cut of the maintenance leader's link to PostgreSQL.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderCut {
    /// The replica that led.
    pub replica: usize,
    /// From (µs, host clock).
    pub from_us: i64,
    /// Until.
    pub to_us: i64,
    /// How long after the leader's lease write the cut began (aimed at
    /// the middle of its maintenance tick), if the injector saw it.
    pub after_renewal_ms: Option<f64>,
    /// When no other replica had taken the lease by the end of the cut:
    /// what the database's sessions were doing then.
    pub diagnosis: Option<String>,
}

/// Whether a replica other than the one at `client` acquired the lease
/// after that one's last lease write before `from` (for the injector, at
/// the end of a leader cut that began at `from`).
pub async fn taken_over_since(pool: &PgPool, client: &str, from: DateTime<Utc>) -> Option<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (
             SELECT 1 FROM chaos_audit.leases
             WHERE op = 'acquire' AND client IS DISTINCT FROM $2
               AND at > coalesce((SELECT max(at) FROM chaos_audit.leases
                                  WHERE client = $2 AND at <= $1), '-infinity'))",
    )
    .bind(from)
    .bind(client)
    .fetch_one(pool)
    .await
    .ok()
}

/// A row of `pg_stat_activity`: pid, client, state, wait event, seconds in
/// its transaction, the start of its statement, the pids blocking it.
type Session = (
    i32,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<f64>,
    Option<String>,
    Vec<i32>,
);

/// What the run database's sessions are doing (not idle): who, in what
/// state, waiting on what and blocked by whom, how old their transaction,
/// and the start of their statement; and the lease row.
pub async fn sessions(pool: &PgPool) -> String {
    let rows: Result<Vec<Session>, _> = sqlx::query_as(
        "SELECT pid, host(client_addr), state,
                    wait_event_type || ':' || wait_event,
                    extract(epoch FROM clock_timestamp() - xact_start)::float8,
                    left(regexp_replace(query, '\\s+', ' ', 'g'), 60),
                    pg_blocking_pids(pid)
             FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'",
    )
    .fetch_all(pool)
    .await;
    let lease: Option<(String, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "SELECT holder, expires_at, clock_timestamp() FROM tether.leases WHERE name = 'maintenance'",
    )
    .fetch_optional(pool)
    .await
    .ok()
    .flatten();
    let mut out = match lease {
        Some((holder, expires, now)) => format!(
            "the lease: {holder}, expires {expires} ({:+.2} s from now)",
            (expires - now).num_milliseconds() as f64 / 1e3
        ),
        None => "the lease: no row".to_owned(),
    };
    match rows {
        Ok(rows) => {
            for (pid, client, state, wait, xact_s, query, blockers) in rows {
                out.push_str(&format!(
                    "; pid {pid} from {} {} {}{} xact {:.1} s {:?}",
                    client.as_deref().unwrap_or("local"),
                    state.as_deref().unwrap_or("?"),
                    wait.as_deref().unwrap_or("running"),
                    if blockers.is_empty() {
                        String::new()
                    } else {
                        format!(" blocked by {blockers:?}")
                    },
                    xact_s.unwrap_or(0.0),
                    query.unwrap_or_default()
                ));
            }
        }
        Err(e) => out.push_str(&format!("; pg_stat_activity: {e}")),
    }
    out
}

/// What a `--partitions` run knows besides the rows.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Replicas.
    pub replicas: usize,
    /// The address each replica's connections come from.
    pub clients: HashMap<String, usize>,
    /// The audit.
    pub audit: Audit,
    /// Every impairment of every link.
    pub episodes: Vec<Episode>,
    /// The cuts of the leader.
    pub leader_cuts: Vec<LeaderCut>,
}

/// Why a maintenance action came after its lease had lapsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// Its link to PostgreSQL was cut in between.
    Cut,
    /// Its link to PostgreSQL was slowed in between.
    Slow,
    /// Neither: the host stalled (no network fault explains it).
    Stall,
}

/// What the audit shows.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Lease writes: acquisitions, renewals, releases.
    pub acquisitions: u64,
    /// Renewals.
    pub renewals: u64,
    /// Releases.
    pub releases: u64,
    /// Maintenance statements by replica (reaper, expiry and prune passes).
    pub passes: Vec<u64>,
    /// Reaper passes that reaped at least one job.
    pub reaping_passes: u64,
    /// Leader cuts, and those during which another replica took over.
    pub leader_cuts: u64,
    /// ... of which another replica took the lease during the cut.
    pub takeovers: u64,
    /// The longest from a leader cut's start to the takeover.
    pub slowest_takeover_us: i64,
    /// Maintenance statements that ran after their replica's lease had
    /// lapsed but changed nothing, by cause.
    pub late_noop: BTreeMap<Cause, u64>,
    /// The latest of them: how long after the lapse (µs).
    pub late_noop_max_us: i64,
    /// An example of them, for the report.
    pub late_noop_example: Option<String>,
    /// Changes after the lapse that no network fault explains (a stall).
    pub late_changes_stalled: u64,
    /// Schedule runs (fires).
    pub fires: u64,
    /// Instants of the schedule between its first and last run that got
    /// no run (a failover longer than the catch-up collapses them).
    pub instants_missed: u64,
    /// The longest between two consecutive fired instants (µs).
    pub longest_fire_gap_us: i64,
}

fn us(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn at(t: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t).unwrap_or_default()
}

/// One action of a replica to judge against its lease.
struct Action<'a> {
    replica: usize,
    at: i64,
    what: &'a str,
    /// Rows it changed (jobs reaped or expired; 1 for a fire).
    changed: u64,
}

/// Runs the checks; the stats go into `f.stats.leadership`.
pub fn check(f: &mut Findings, events: &[EventRow], facts: &Facts) {
    let mut s = Stats {
        passes: vec![0; facts.replicas],
        ..Stats::default()
    };
    let replica = |client: &Option<String>| client.as_ref().and_then(|c| facts.clients.get(c));
    // Lease writes per replica, in order.
    let mut by_replica: Vec<Vec<&LeaseRow>> = vec![Vec::new(); facts.replicas];
    for l in &facts.audit.leases {
        match l.op.as_str() {
            "acquire" => s.acquisitions += 1,
            "renew" => s.renewals += 1,
            _ => s.releases += 1,
        }
        if let Some(&r) = replica(&l.client) {
            by_replica[r].push(l);
        }
    }

    // Events a pass wrote carry its transaction's now().
    let mut written: HashMap<(&str, i64), u64> = HashMap::new();
    for e in events {
        if matches!(e.event.as_str(), "lease_expired" | "expired") {
            *written.entry((e.event.as_str(), us(e.at))).or_insert(0) += 1;
        }
    }
    let mut actions: Vec<Action<'_>> = Vec::new();
    for p in &facts.audit.passes {
        let Some(&r) = replica(&p.client) else {
            continue;
        };
        s.passes[r] += 1;
        let event = match p.what.as_str() {
            "reap" => "lease_expired",
            "expire" => "expired",
            _ => "",
        };
        let changed = written.get(&(event, us(p.tx_at))).copied().unwrap_or(0);
        if p.what == "reap" && changed > 0 {
            s.reaping_passes += 1;
        }
        actions.push(Action {
            replica: r,
            at: us(p.at),
            what: p.what.as_str(),
            changed,
        });
    }
    for fire in &facts.audit.fires {
        if let Some(&r) = replica(&fire.client) {
            actions.push(Action {
                replica: r,
                at: us(fire.at),
                what: "fire",
                changed: 1,
            });
        }
    }
    if s.passes.iter().sum::<u64>() == 0 {
        f.flag(LEADERSHIP, || {
            format!(
                "the audit saw no maintenance pass of any replica: do tether's reaper statements \
                 still begin with {REAP_PREFIX:?}? (then the run cannot judge the leaders)"
            )
        });
    }

    // Every action within its replica's lease.
    for a in &actions {
        let lease = by_replica[a.replica]
            .iter()
            .rev()
            .find(|l| us(l.at) <= a.at)
            .copied();
        let ends = match lease {
            Some(l) if l.op == "release" => us(l.at),
            Some(l) => us(l.expires_at),
            None => i64::MIN,
        };
        if a.at <= ends {
            continue;
        }
        let since = lease.map_or(i64::MIN, |l| us(l.at));
        let db = |what: Impairment| {
            facts.episodes.iter().find(|e| {
                e.link == LinkId::Db(a.replica) && e.what == what && e.overlaps(since, a.at)
            })
        };
        let (cause, episode) = match (db(Impairment::Cut), db(Impairment::Slow)) {
            (Some(e), _) => (Cause::Cut, Some(e)),
            (None, Some(e)) => (Cause::Slow, Some(e)),
            (None, None) => (Cause::Stall, None),
        };
        let late_us = a.at.saturating_sub(ends);
        let holder = facts
            .audit
            .leases
            .iter()
            .rev()
            .find(|l| us(l.at) <= a.at && l.op == "acquire")
            .filter(|l| replica(&l.client) != Some(&a.replica));
        let describe = || {
            format!(
                "replica {} ran a {} pass at {} that changed {} row(s), {} after its lease {} \
                 (its last lease write: {}){}{}",
                a.replica,
                a.what,
                at(a.at),
                a.changed,
                secs(late_us),
                match lease {
                    Some(l) if l.op == "release" => "was released".to_owned(),
                    Some(l) => format!("lapsed at {}", l.expires_at),
                    None => "— it never held one".to_owned(),
                },
                lease.map_or("none".to_owned(), |l| format!("{} at {}", l.op, l.at)),
                holder.map_or(String::new(), |h| format!(
                    "; replica {} had acquired the lease at {}",
                    replica(&h.client).map_or("?".to_owned(), |r| r.to_string()),
                    h.at
                )),
                episode.map_or(
                    "; no network fault on its link in between (a stall)".to_owned(),
                    |e| format!(
                        "; its link to PostgreSQL was {} from {}{}",
                        if e.what == Impairment::Cut {
                            "cut"
                        } else {
                            "slowed"
                        },
                        at(e.from_us),
                        e.to_us.map_or(String::new(), |t| format!(" to {}", at(t)))
                    )
                ),
            )
        };
        if a.changed > 0 {
            if cause == Cause::Stall {
                s.late_changes_stalled += 1;
            } else {
                f.flag(AFTER_LEASE, describe);
            }
        } else {
            *s.late_noop.entry(cause).or_insert(0) += 1;
            if late_us > s.late_noop_max_us {
                s.late_noop_max_us = late_us;
                s.late_noop_example = Some(describe());
            }
        }
    }

    // Acquisitions only after the lease before had lapsed or was released.
    let mut current: Option<&LeaseRow> = None;
    for l in &facts.audit.leases {
        match l.op.as_str() {
            "acquire" => {
                if let Some(c) = current {
                    let ended = if c.op == "release" {
                        us(c.at)
                    } else {
                        us(c.expires_at)
                    };
                    if c.token != l.token && ended > us(l.at) {
                        f.flag(LEADERSHIP, || {
                            format!(
                                "{} acquired the maintenance lease at {} while {}'s ran until {}",
                                l.holder,
                                l.at,
                                c.holder,
                                at(ended)
                            )
                        });
                    }
                }
                current = Some(l);
            }
            _ => current = Some(l),
        }
    }

    // Every leader cut off was replaced by the end of the cut: another
    // replica acquired the lease after the cut leader's last lease write
    // before the cut (which may precede the cut when the leader was slow
    // to renew and lost the lease as the cut came).
    for cut in &facts.leader_cuts {
        s.leader_cuts += 1;
        let last_write = by_replica[cut.replica]
            .iter()
            .rev()
            .find(|l| us(l.at) <= cut.from_us)
            .map_or(i64::MIN, |l| us(l.at));
        let takeover = facts.audit.leases.iter().find(|l| {
            l.op == "acquire"
                && replica(&l.client).is_some_and(|&r| r != cut.replica)
                && us(l.at) > last_write
                && us(l.at) <= cut.to_us
        });
        match takeover {
            Some(l) => {
                s.takeovers += 1;
                s.slowest_takeover_us = s.slowest_takeover_us.max(us(l.at) - cut.from_us);
            }
            None => f.flag(LEADERSHIP, || {
                let before = facts
                    .audit
                    .leases
                    .iter()
                    .rev()
                    .find(|l| us(l.at) < cut.from_us);
                let next = facts
                    .audit
                    .leases
                    .iter()
                    .find(|l| l.op == "acquire" && us(l.at) >= cut.from_us);
                let who =
                    |l: &LeaseRow| replica(&l.client).map_or("?".to_owned(), |r| r.to_string());
                format!(
                    "replica {}, the maintenance leader, was cut off from PostgreSQL from {} to \
                     {}, and no other replica took the lease meanwhile (the last lease write \
                     before: {}; the next acquisition: {}){}",
                    cut.replica,
                    at(cut.from_us),
                    at(cut.to_us),
                    before.map_or("none".to_owned(), |l| format!(
                        "{} by replica {} at {}, until {}",
                        l.op,
                        who(l),
                        l.at,
                        l.expires_at
                    )),
                    next.map_or("none".to_owned(), |l| format!(
                        "by replica {} at {}",
                        who(l),
                        l.at
                    )),
                    cut.diagnosis
                        .as_ref()
                        .map_or(String::new(), |d| format!("; at the end of the cut: {d}"))
                )
            }),
        }
    }

    // No instant fired twice; how regular the fires were.
    let mut seen: HashSet<(Uuid, i64)> = HashSet::new();
    let mut instants: BTreeMap<Uuid, Vec<i64>> = BTreeMap::new();
    for fire in &facts.audit.fires {
        s.fires += 1;
        if !seen.insert((fire.schedule_id, us(fire.fire_at))) {
            f.flag(DOUBLE_FIRE, || {
                format!(
                    "schedule {} fired its instant {} twice (the second time {} by {:?})",
                    fire.schedule_id, fire.fire_at, fire.outcome, fire.client
                )
            });
        }
        instants
            .entry(fire.schedule_id)
            .or_default()
            .push(us(fire.fire_at));
    }
    for list in instants.values_mut() {
        list.sort_unstable();
        list.dedup();
        for w in list.windows(2) {
            let gap = w[1] - w[0];
            s.longest_fire_gap_us = s.longest_fire_gap_us.max(gap);
            s.instants_missed += (gap / 1_000_000).saturating_sub(1) as u64;
        }
    }
    if s.fires == 0 {
        f.flag(DOUBLE_FIRE, || {
            format!("schedule {CRON_SCHEDULE} never fired: the scheduler was not exercised")
        });
    }
    f.stats.leadership = Some(s);
}

fn secs(us: i64) -> String {
    format!("{:.2} s", us as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Findings;
    use crate::net::{Episode, Impairment, LinkId};

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    fn lease(ms: i64, op: &str, replica: usize, token: Uuid, ttl_ms: i64) -> LeaseRow {
        LeaseRow {
            at: t(ms),
            op: op.to_owned(),
            holder: format!("serve:{replica}"),
            token,
            expires_at: t(ms + ttl_ms),
            client: Some(format!("10.1.{replica}.2")),
        }
    }

    fn pass(ms: i64, what: &str, replica: usize) -> PassRow {
        PassRow {
            at: t(ms),
            tx_at: t(ms - 1),
            what: what.to_owned(),
            client: Some(format!("10.1.{replica}.2")),
        }
    }

    fn reaped(ms: i64) -> EventRow {
        EventRow {
            job_id: Uuid::now_v7(),
            seq: 3,
            at: t(ms),
            event: "lease_expired".to_owned(),
            attempt: 1,
            worker_id: Some("w0g1.m".to_owned()),
            detail: Some("queued".to_owned()),
        }
    }

    fn fire(ms: i64, fire_ms: i64, replica: usize) -> FireRow {
        FireRow {
            at: t(ms),
            schedule_id: Uuid::nil(),
            fire_at: t(fire_ms),
            outcome: "skipped".to_owned(),
            client: Some(format!("10.1.{replica}.2")),
        }
    }

    /// Replica 0 leads, renews at 0 and 250 (lease 1 s), is cut off from
    /// 300 to 5 300; replica 1 takes over at 1 400 and renews at 1 650.
    fn story() -> Facts {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let mut facts = Facts {
            replicas: 2,
            clients: (0..2).map(|r| (format!("10.1.{r}.2"), r)).collect(),
            ..Facts::default()
        };
        facts.audit.leases = vec![
            lease(0, "acquire", 0, a, 1_000),
            lease(250, "renew", 0, a, 1_000),
            lease(1_400, "acquire", 1, b, 1_000),
            lease(1_650, "renew", 1, b, 1_000),
        ];
        facts.audit.passes = vec![
            pass(10, "reap", 0),
            pass(260, "reap", 0),
            pass(1_410, "reap", 1),
        ];
        facts.audit.fires = vec![fire(20, 0, 0), fire(1_420, 1_000, 1)];
        facts.episodes = vec![Episode {
            link: LinkId::Db(0),
            what: Impairment::Cut,
            from_us: us(t(300)),
            to_us: Some(us(t(5_300))),
        }];
        facts.leader_cuts = vec![LeaderCut {
            replica: 0,
            from_us: us(t(300)),
            to_us: us(t(5_300)),
            after_renewal_ms: Some(50.0),
            diagnosis: None,
        }];
        facts
    }

    fn run(events: &[EventRow], facts: &Facts) -> Findings {
        let mut f = Findings::default();
        check(&mut f, events, facts);
        f
    }

    #[test]
    fn a_clean_takeover_passes() {
        let facts = story();
        let f = run(&[reaped(259)], &facts);
        assert!(f.passed(), "{:?}", f.violations);
        let s = f.stats.leadership.unwrap();
        assert_eq!((s.acquisitions, s.renewals, s.takeovers), (2, 2, 1));
        assert_eq!(s.passes, vec![2, 1]);
        assert_eq!(s.reaping_passes, 1);
        assert_eq!(s.slowest_takeover_us, 1_100_000);
        assert_eq!((s.fires, s.instants_missed), (2, 0));
    }

    #[test]
    fn a_late_pass_that_changed_nothing_is_only_reported() {
        let mut facts = story();
        // Replica 0's pass, held up by the cut, runs at 5 400.
        facts.audit.passes.push(pass(5_400, "expire", 0));
        let f = run(&[], &facts);
        assert!(f.passed(), "{:?}", f.violations);
        let s = f.stats.leadership.unwrap();
        assert_eq!(s.late_noop[&Cause::Cut], 1);
        assert_eq!(s.late_noop_max_us, 4_150_000);
        assert!(s
            .late_noop_example
            .unwrap()
            .contains("replica 1 had acquired"));
    }

    #[test]
    fn a_late_reap_or_fire_of_a_partitioned_leader_is_caught() {
        let mut facts = story();
        facts.audit.passes.push(pass(5_400, "reap", 0));
        let f = run(&[reaped(5_399)], &facts);
        let v = &f.violations[AFTER_LEASE];
        assert_eq!(v.count, 1);
        assert!(v.examples[0].contains("cut from"), "{v:?}");
        facts.audit.passes.pop();
        facts.audit.fires.push(fire(5_450, 2_000, 0));
        let f = run(&[], &facts);
        assert_eq!(f.violations[AFTER_LEASE].count, 1, "{:?}", f.violations);
    }

    #[test]
    fn a_late_change_without_a_fault_is_a_stall() {
        let mut facts = story();
        facts.episodes.clear();
        facts.leader_cuts.clear();
        facts.audit.passes.push(pass(5_400, "reap", 0));
        let f = run(&[reaped(5_399)], &facts);
        assert!(f.passed(), "{:?}", f.violations);
        assert_eq!(f.stats.leadership.unwrap().late_changes_stalled, 1);
    }

    #[test]
    fn overlapping_leases_and_missing_takeovers_are_caught() {
        let mut facts = story();
        // Replica 1 acquires at 900, while replica 0's runs until 1 250.
        facts.audit.leases[2].at = t(900);
        let f = run(&[], &facts);
        assert!(f.violations.contains_key(LEADERSHIP), "{:?}", f.violations);
        let mut facts = story();
        facts.audit.leases.truncate(2);
        let f = run(&[], &facts);
        assert!(f.violations[LEADERSHIP].examples[0].contains("no other replica"));
        // A leader slow to renew may lose the lease just before the cut:
        // the takeover counts from its last lease write.
        let mut facts = story();
        facts.leader_cuts[0].from_us = us(t(1_500));
        let f = run(&[], &facts);
        assert!(f.passed(), "{:?}", f.violations);
        // A release ends a lease at once.
        let mut facts = story();
        let token = facts.audit.leases[0].token;
        facts
            .audit
            .leases
            .insert(2, lease(300, "release", 0, token, 950));
        facts.audit.leases[3].at = t(310);
        let f = run(&[], &facts);
        assert!(f.passed(), "{:?}", f.violations);
    }

    #[test]
    fn instants_fired_twice_and_blind_audits_are_caught() {
        let mut facts = story();
        facts.audit.fires.push(fire(1_500, 1_000, 1));
        facts.audit.fires.push(fire(4_500, 4_000, 1));
        let f = run(&[], &facts);
        assert_eq!(f.violations[DOUBLE_FIRE].count, 1, "{:?}", f.violations);
        let s = f.stats.leadership.unwrap();
        assert_eq!((s.instants_missed, s.longest_fire_gap_us), (2, 3_000_000));
        let mut facts = story();
        facts.audit.passes.clear();
        facts.audit.fires.clear();
        let f = run(&[], &facts);
        assert!(f.violations.contains_key(LEADERSHIP));
        assert!(f.violations.contains_key(DOUBLE_FIRE));
    }
}
