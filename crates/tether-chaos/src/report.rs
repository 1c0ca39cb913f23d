//! The report: a Markdown table of what happened, then every check with its
//! verdict (and examples of any violation).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::check::{self, Findings, CHECKS, FAILOVER_CHECK};
use crate::faults::FaultStats;
use crate::leadership::Cause;
use crate::net::{LinkId, Traffic};
use crate::obs::{Obs, Side};
use crate::plan::{self, Limits};
use crate::scenario::{Opts, SERVERS};

/// How long the phases took.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// Database, replicas and workers up.
    pub setup: Duration,
    /// The fault window (until the injector's last follow-up).
    pub faults: Duration,
    /// From the end of the faults until no job was queued or running.
    pub drain: Duration,
    /// Reading the rows and checking.
    pub check: Duration,
    /// Everything, start to verdict.
    pub total: Duration,
}

fn list(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".to_owned();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The limits, in words.
pub fn limits(l: &Limits) -> String {
    format!(
        "max_running {}, key_max_running {}, rate limit {} per {} ms{}",
        l.max_running,
        l.key_max_running,
        l.rate.count,
        l.rate.period_ms,
        if l.fair { ", fair claims" } else { "" }
    )
}

fn us_secs(us: i64) -> String {
    format!("{:.1} s", us as f64 / 1e6)
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Prints the report.
pub fn print(
    opts: &Opts,
    f: &Findings,
    faults: &FaultStats,
    obs: &Obs,
    t: &Timings,
    traffic: Option<&BTreeMap<LinkId, Traffic>>,
) {
    let s = &f.stats;
    let l = &s.limited;
    let get = |k: &str| s.states.get(k).copied().unwrap_or(0);
    let failed_by: BTreeMap<String, u64> = s
        .failed_by
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    let rows: Vec<(&str, String)> = vec![
        (
            "run",
            format!(
                "{}{}{}, seed {}, {SERVERS} replicas, {} worker processes running {}",
                if opts.quick { "--quick" } else { "full" },
                if opts.failover { " --failover" } else { "" },
                if opts.partitions { " --partitions" } else { "" },
                opts.seed,
                opts.workers,
                opts.worker_label()
            ),
        ),
        (
            "jobs submitted / acknowledged keys",
            format!("{} / {}", opts.jobs, obs.acks.len()),
        ),
        ("jobs in the database", s.jobs.to_string()),
        (
            "enqueue requests acknowledged",
            format!(
                "{} ({} batches resubmitted with {} jobs, {} singles sent twice at once)",
                obs.enqueue_requests,
                obs.resubmitted_batches,
                obs.resubmitted_jobs,
                obs.concurrent_singles
            ),
        ),
        (
            "final states",
            format!(
                "succeeded {}, failed {} ({}), cancelled {}, queued {} (later: {}), running {}, \
                 waiting {}",
                get("succeeded"),
                get("failed"),
                list(&failed_by),
                get("cancelled"),
                get("queued"),
                s.queued_later,
                get("running"),
                get("waiting")
            ),
        ),
        ("worker SIGKILLs", faults.worker_kills.to_string()),
        (
            "worker SIGSTOP → SIGCONT (holding jobs)",
            format!("{} ({})", faults.worker_stops, faults.stops_with_jobs),
        ),
        (
            "replica SIGKILLs (of the maintenance leader)",
            format!("{} ({})", faults.server_kills, faults.leader_kills),
        ),
        ("kills in total", faults.kills().to_string()),
        if opts.failover {
            (
                "PostgreSQL failovers: primary crashed, standby promoted (until the new primary \
                 took writes / until every replica did)",
                format!(
                    "{} ({} / {})",
                    faults.failovers,
                    faults.writable_after.map_or("-".to_owned(), secs),
                    faults.all_serving_after().map_or("-".to_owned(), secs)
                ),
            )
        } else {
            (
                "PostgreSQL restarts (until it answered again)",
                format!(
                    "{} ({})",
                    faults.pg_restarts,
                    faults.pg_downtime.map_or("-".to_owned(), secs)
                ),
            )
        },
        (
            "claims (claims workers printed)",
            format!("{} ({})", s.claims, s.client_claims),
        ),
        ("most claims of one job", s.max_claims.to_string()),
        (
            "limited queue (its limits)",
            format!("`{}` ({})", plan::LIMITED_QUEUE, limits(&plan::LIMITS)),
        ),
        (
            "limited queue: jobs (keys), final states, claims",
            format!(
                "{} ({} keys, {} jobs without a key); {}; {} claims",
                l.jobs,
                l.keys,
                l.unkeyed,
                list(&l.states),
                l.claims
            ),
        ),
        (
            "limited queue: most running at once / max_running",
            format!(
                "{}/{} (reached {} times, at the limit for {})",
                l.max_running,
                plan::LIMITS.max_running,
                l.max_running_reached,
                us_secs(l.at_max_running_us)
            ),
        ),
        (
            "limited queue: most running of one key / key_max_running",
            format!(
                "{}/{} (first by key {}; a key reached it {} times, some key at it for {})",
                l.max_key_running,
                plan::LIMITS.key_max_running,
                l.max_key.as_deref().unwrap_or("-"),
                l.key_max_reached,
                us_secs(l.at_key_max_us)
            ),
        ),
        (
            "limited queue: most claims in any window / rate limit",
            format!(
                "{}/{} per {} ms ({} windows full from their first claim)",
                l.max_window_claims,
                plan::LIMITS.rate.count,
                plan::LIMITS.rate.period_ms,
                l.full_windows
            ),
        ),
        (
            "jobs waiting for others: jobs (edges), by rule",
            format!(
                "{} of {} sent so ({} edges), {}",
                s.graphs.jobs,
                s.graphs.waits_sent,
                s.graphs.edges,
                list(&s.graphs.rules.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect())
            ),
        ),
        (
            "released / cancelled by a dependency (at enqueue) / `run` jobs run after a failed dependency",
            format!(
                "{} / {} ({}) / {}",
                s.graphs.released,
                s.graphs.cancelled_by_dependency,
                s.graphs.cancelled_at_enqueue,
                s.graphs.ran_after_failure
            ),
        ),
        ("retries (retry_scheduled)", s.retries.to_string()),
        ("snoozes back to the queue (snoozed)", s.snoozes.to_string()),
        (
            "reaped leases (lease_expired → state)",
            list(&s.lease_expired),
        ),
        (
            "lease_lost in the history (by operation)",
            list(&s.lease_lost),
        ),
        (
            "lease_lost answers workers printed",
            s.client_lease_lost.to_string(),
        ),
        (
            "errors seen by clients (by code)",
            list(&obs.errors_by_code()),
        ),
        (
            "errors producers saw / workers saw (by operation)",
            format!(
                "{} / {}",
                list(&obs.errors_of(Side::Producer)),
                list(&obs.worker_errors)
            ),
        ),
        (
            "duration",
            format!(
                "{} total: setup {}, faults {}, drain {}, check {}",
                secs(t.total),
                secs(t.setup),
                secs(t.faults),
                secs(t.drain),
                secs(t.check)
            ),
        ),
    ];
    let mut rows = rows;
    if s.clock_back_us > 0 {
        // The history's times can disagree with its order by this much.
        rows.push((
            "wall clock stepped back during the run",
            format!("{:.1} ms", s.clock_back_us as f64 / 1000.0),
        ));
    }
    if opts.partitions {
        // The process faults did not happen; the network's did.
        rows.retain(|(k, _)| {
            !(k.starts_with("worker SIG")
                || k.starts_with("replica SIGKILLs")
                || k.starts_with("kills in total")
                || k.starts_with("PostgreSQL restarts"))
        });
        let at = rows
            .iter()
            .position(|(k, _)| k.starts_with("claims"))
            .unwrap_or(rows.len());
        for (i, row) in partition_rows(f, faults, traffic).into_iter().enumerate() {
            rows.insert(at + i, row);
        }
    }
    if let Some(a) = &s.after_failover {
        let per = |v: &[u64]| {
            v.iter()
                .enumerate()
                .map(|(i, n)| format!("{n} via replica {i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        rows.insert(
            rows.len() - 1,
            (
                "on the new primary after its promotion: events; claims; completions; reaped leases",
                format!(
                    "{}; {}; {}; {}",
                    a.events,
                    per(&a.claims),
                    per(&a.successes),
                    a.reaped
                ),
            ),
        );
    }
    if let Some(e) = &s.stream {
        rows.push((
            "live event stream, one reader through the whole run: events seen / history events \
             it had to see (jobs); written later, seen; missing, duplicated, not in the history, \
             jobs out of order, gaps; caught up at the end in",
            format!(
                "{} / {} ({} jobs); {}, {}; {}, {}, {}, {}, {}; {}",
                e.seen,
                e.required,
                e.jobs,
                e.later,
                e.later_seen,
                e.missing,
                e.duplicated,
                e.unknown,
                e.out_of_order,
                e.gaps,
                e.caught_up.map_or("- (not caught up)".to_owned(), secs)
            ),
        ));
    }
    println!();
    println!("| what | value |");
    println!("|---|---|");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
    println!();
    let made = |name: &str| check::made(name, opts.failover, opts.partitions);
    for (name, promise) in CHECKS {
        match f.violations.get(name) {
            None if !made(name) => println!(
                "n/a   {promise} (only with {})",
                if name == FAILOVER_CHECK {
                    "--failover"
                } else {
                    "--partitions"
                }
            ),
            None => println!("ok    {promise}"),
            Some(v) => {
                println!("FAIL  {promise}: {} violation(s) [{name}]", v.count);
                for e in &v.examples {
                    println!("        {e}");
                }
            }
        }
    }
    for (name, v) in &f.violations {
        if !CHECKS.iter().any(|(n, _)| n == name) {
            println!("FAIL  {name}: {} violation(s)", v.count);
        }
    }
    println!();
    if f.passed() {
        let checks = CHECKS.iter().filter(|(name, _)| made(name)).count();
        if opts.partitions {
            println!(
                "tether-chaos: PASS ({checks} checks, {} leader cuts, {} replica cuts, {} worker \
                 cuts, {} slowed periods)",
                faults.leader_cuts.len(),
                faults.replica_cuts,
                faults.worker_cuts,
                faults.slow_worker_periods.0 + faults.slow_db_periods.0
            );
        } else if opts.failover {
            println!(
                "tether-chaos: PASS ({checks} checks, {} kills, {} PostgreSQL failover)",
                faults.kills(),
                faults.failovers
            );
        } else {
            println!(
                "tether-chaos: PASS ({checks} checks, {} kills, {} PostgreSQL restart)",
                faults.kills(),
                faults.pg_restarts
            );
        }
    } else {
        let n: u64 = f.violations.values().map(|v| v.count).sum();
        println!(
            "tether-chaos: FAIL ({n} violations in {} checks)",
            f.violations.len()
        );
    }
}

/// The rows of a `--partitions` run: the network's faults, the leadership
/// audit, the schedule, the traffic.
fn partition_rows(
    f: &Findings,
    faults: &FaultStats,
    traffic: Option<&BTreeMap<LinkId, Traffic>>,
) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    let aimed: Vec<String> = faults
        .leader_cuts
        .iter()
        .map(|c| {
            format!(
                "replica {}{}",
                c.replica,
                c.after_renewal_ms
                    .map_or(String::new(), |ms| format!(" {ms:.0} ms after a renewal"))
            )
        })
        .collect();
    rows.push((
        "maintenance leader cut off from PostgreSQL (5 s each; when)",
        format!(
            "{} ({})",
            faults.leader_cuts.len(),
            if aimed.is_empty() {
                "-".to_owned()
            } else {
                aimed.join(", ")
            }
        ),
    ));
    let recovered = faults
        .recovered_after
        .iter()
        .map(|(_, d)| *d)
        .max()
        .map_or("-".to_owned(), secs);
    rows.push((
        "other replicas cut off from PostgreSQL (4 s each); slowest to take a write again after \
         any cut",
        format!("{}; {recovered}", faults.replica_cuts),
    ));
    rows.push((
        "workers cut off from their replica (7 s each; holding jobs)",
        format!("{} ({})", faults.worker_cuts, faults.cuts_with_jobs),
    ));
    rows.push((
        "slowed periods (8 s each): worker links (links) / links to PostgreSQL (links)",
        format!(
            "{} ({}) / {} ({}): {} at most, a queue of {} packets, {} % lost at random",
            faults.slow_worker_periods.0,
            faults.slow_worker_periods.1,
            faults.slow_db_periods.0,
            faults.slow_db_periods.1,
            crate::net::SLOW_RATE,
            crate::net::SLOW_QUEUE,
            crate::net::SLOW_LOSS_PERCENT
        ),
    ));
    if let Some(l) = &f.stats.leadership {
        rows.push((
            "maintenance lease: acquisitions, renewals, releases; taken over during leader cuts \
             (slowest)",
            format!(
                "{}, {}, {}; {}/{} ({})",
                l.acquisitions,
                l.renewals,
                l.releases,
                l.takeovers,
                l.leader_cuts,
                us_secs(l.slowest_takeover_us)
            ),
        ));
        let late: Vec<String> = l
            .late_noop
            .iter()
            .map(|(cause, n)| {
                format!(
                    "{n} {}",
                    match cause {
                        Cause::Cut => "after a cut",
                        Cause::Slow => "after a slowed link",
                        Cause::Stall => "after a stall",
                    }
                )
            })
            .collect();
        rows.push((
            "maintenance passes by replica (reaper passes that reaped); passes run after their \
             lease had lapsed that changed nothing (latest)",
            format!(
                "{:?} ({}); {} ({})",
                l.passes,
                l.reaping_passes,
                if late.is_empty() {
                    "none".to_owned()
                } else {
                    late.join(", ")
                },
                us_secs(l.late_noop_max_us)
            ),
        ));
        if let Some(e) = &l.late_noop_example {
            rows.push(("latest of those passes", e.clone()));
        }
        if l.late_changes_stalled > 0 {
            rows.push((
                "changes after a lapsed lease with no network fault to explain them (host stalls)",
                l.late_changes_stalled.to_string(),
            ));
        }
        rows.push((
            "schedule runs (every second): runs, instants missed, longest gap",
            format!(
                "{}, {}, {}",
                l.fires,
                l.instants_missed,
                us_secs(l.longest_fire_gap_us)
            ),
        ));
    }
    if let Some(traffic) = traffic {
        let mut by_kind: BTreeMap<&str, Traffic> = BTreeMap::new();
        for (link, t) in traffic {
            let kind = match link {
                LinkId::Db(_) => "replicas ↔ PostgreSQL",
                LinkId::Api(_) => "parent ↔ replicas",
                LinkId::Worker(_) => "workers ↔ replicas",
            };
            let k = by_kind.entry(kind).or_default();
            k.bytes += t.bytes;
            k.packets += t.packets;
            k.drops += t.drops;
        }
        rows.push((
            "traffic over the links: bytes, packets (dropped by the faults)",
            by_kind
                .iter()
                .map(|(kind, t)| {
                    format!(
                        "{kind} {:.1} MB, {} ({})",
                        t.bytes as f64 / 1e6,
                        t.packets,
                        t.drops
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    rows
}
