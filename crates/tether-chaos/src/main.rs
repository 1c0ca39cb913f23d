//! tether's chaos program: a real scenario on PostgreSQL under fire, then a
//! check of every promise from the database and the history.
//!
//! ```text
//! cargo run --release -p tether-chaos -- --quick   # 5 000 jobs, about 2 minutes
//! cargo run --release -p tether-chaos              # 100 000 jobs, 4 minutes of faults
//! cargo run --release -p tether-chaos -- --jobs N --seconds S --seed X --workers W
//! cargo run --release -p tether-chaos -- --quick --worker-cmd "node sdk/typescript/build-test/tools/chaos-worker.js"
//! cargo run --release -p tether-chaos -- --quick --failover   # a primary and a standby, promoted mid-run
//! cargo run --release -p tether-chaos -- --quick --partitions # network faults (as root)
//! ```
//!
//! Three `tether serve` replicas and 5–6 remote worker processes (this same
//! executable re-run as `__serve` and `__worker`), producers in this process
//! enqueueing every job with an idempotency key (some batches twice, some
//! singles twice at once), and a fault injector that SIGKILLs workers and
//! replicas (the maintenance leader too), SIGSTOPs a worker past its lease,
//! and restarts PostgreSQL once. Then every job must reach a terminal state,
//! and the checks of [`check`] run over `tether.jobs`, `tether.job_events`
//! and what the clients saw. Exit status 0 only if every promise held.
//!
//! PostgreSQL: the admin URL is `TETHER_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); the run creates the
//! database `tether_chaos_<pid>` and drops it at the end. The restart is
//! `pg_ctlcluster <version> <cluster> restart` for the local cluster on the
//! URL's port, or `TETHER_CHAOS_PG_RESTART`; without either the run fails.
//! With `--worker-cmd "<program> [args]"` (split on whitespace) the worker
//! processes run that program instead, as `<program> [args] <base-url>
//! <key> <seed> <name>`: another SDK's worker, which must speak the line
//! protocol of [`obs::Line`] and follow [`plan::plan`] (the Python and
//! TypeScript SDKs ship one each; docs/RELIABILITY.md says what they must do).
//! `TETHER_CHAOS_SABOTAGE=1` breaks five promises behind tether's back
//! after the drain, to show the checks fail the run.
//! `TETHER_CHAOS_KEEP_DATABASE=1` keeps the run's database for a look at
//! the history (the next run drops it).
//!
//! `--failover` (with `--quick`, `--worker-cmd` and the rest) runs on a
//! primary and a synchronous standby of its own instead ([`pgpair`]): two
//! new clusters of the installed PostgreSQL (as the `postgres` user when
//! run as root) in `<tmp>/tether-chaos-pg-<pid>`, on free loopback ports,
//! removed at the end; `TETHER_TEST_DATABASE_URL` is not used. Everything
//! (replicas, producers, the checks) connects with the multi-host URL
//! `postgres://postgres@127.0.0.1:<primary>,127.0.0.1:<standby>/<db>?target_session_attrs=read-write`,
//! so tether itself finds the writable server. At the point of the
//! restart the primary crashes (`pg_ctl stop -m immediate`) and the
//! standby is promoted; the report says how long until the new primary
//! took writes and until every replica did again, and one more check
//! (`failover_not_exercised`) proves from the history that the workers of
//! every replica claimed and completed jobs on the new primary.
//!
//! `--partitions` (with `--quick`, `--seed` and the rest, not with
//! `--failover`) kills nothing: every replica and worker runs in a network
//! namespace of its own ([`net`]), on a PostgreSQL cluster of the run's own
//! that listens on the replicas' links, and the injector cuts and slows
//! links with tc instead — the maintenance leader cut off from PostgreSQL
//! right after a lease renewal, other replicas cut off while their workers
//! keep calling, a worker holding jobs cut off past its lease, slowed worker
//! and database links. An audit in the run's database ([`leadership`])
//! tells the replicas apart by address, and more checks prove that no
//! leader acted after its lease could have lapsed, that leaders cut off
//! were replaced, that no schedule instant fired twice, and that every
//! replica cut off took writes again.
//!
//! One queue, `chaos-limited`, runs with flow-control limits
//! ([`plan::LIMITS`]: `max_running`, `key_max_running`, a rate limit and
//! fair claims) and its jobs carry concurrency keys; the checks prove from
//! the history that no limit was ever exceeded, and that each one bound.
//!
//! A share of the jobs wait for others ([`graph`]): small graphs in batches
//! (`depends_on_entries`, with `cancel` and `run`, some rooted in a job that
//! fails on purpose) and singles after an acknowledged job (`depends_on`);
//! the checks prove that no job was released or claimed before its
//! dependencies allowed, none was left waiting, and every job downstream of
//! a failure with `cancel` ended cancelled without running.
//!
//! One reader of the live event stream (`GET /v1/events`,
//! [`stream_reader`]) runs from before the first job to the end, resuming
//! by itself through every kill, restart and failover; the check
//! `event_stream` proves it saw every history event exactly once, each
//! job's in order.
//!
//! Results and the full description: `docs/RELIABILITY.md`.

mod check;
mod clock;
mod cluster;
mod faults;
mod graph;
mod leadership;
mod net;
mod obs;
mod pgpair;
mod plan;
mod procs;
mod produce;
mod report;
mod scenario;
mod serve;
mod stream_reader;
mod worker;

use std::process::ExitCode;

use scenario::Opts;

const USAGE: &str = "usage: tether-chaos [--quick] [--jobs N] [--seconds S] [--seed X] \
                     [--workers W] [--worker-cmd \"PROGRAM [ARGS]\"] [--failover | --partitions]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("__serve") => {
            let ip = args
                .get(3)
                .map_or(Ok([127, 0, 0, 1].into()), |ip| ip.parse());
            let (Some(url), Some(Ok(port)), Ok(ip)) =
                (args.get(1), args.get(2).map(|p| p.parse()), ip)
            else {
                eprintln!("usage: tether-chaos __serve <db-url> <port> [ip]");
                return ExitCode::from(2);
            };
            return serve::run(url, port, ip);
        }
        Some("__worker") => {
            let (Some(base), Some(key), Some(Ok(seed))) =
                (args.get(1), args.get(2), args.get(3).map(|s| s.parse()))
            else {
                eprintln!("usage: tether-chaos __worker <base-url> <key> <seed> [name]");
                return ExitCode::from(2);
            };
            let default_name = format!("w{}", std::process::id());
            let name = args.get(4).unwrap_or(&default_name);
            return worker::run(base, key, seed, name);
        }
        _ => {}
    }
    match parse(&args) {
        Ok(Some(opts)) => scenario::main(opts),
        Ok(None) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// The options; `None` for `--help`.
fn parse(args: &[String]) -> Result<Option<Opts>, String> {
    let quick = args.iter().any(|a| a == "--quick");
    let mut opts = Opts {
        quick,
        jobs: if quick { 5_000 } else { 100_000 },
        seconds: if quick { 90 } else { 240 },
        seed: 1,
        workers: if quick { 5 } else { 6 },
        worker_cmd: None,
        failover: false,
        partitions: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| format!("{name} needs a value"))
                .and_then(|v| v.parse::<u64>().map_err(|e| format!("{name} {v:?}: {e}")))
        };
        match a.as_str() {
            "--quick" => {}
            "--failover" => opts.failover = true,
            "--partitions" => opts.partitions = true,
            "-h" | "--help" => return Ok(None),
            "--jobs" => opts.jobs = value("--jobs")?,
            "--seconds" => opts.seconds = value("--seconds")?,
            "--seed" => opts.seed = value("--seed")?,
            "--workers" => opts.workers = value("--workers")? as usize,
            "--worker-cmd" => {
                let cmd: Vec<String> = it
                    .next()
                    .ok_or("--worker-cmd needs a value")?
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                if cmd.is_empty() {
                    return Err("--worker-cmd needs a program".to_owned());
                }
                opts.worker_cmd = Some(cmd);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if opts.jobs == 0 || opts.workers == 0 || opts.seconds < 15 {
        return Err("--jobs and --workers must be at least 1, --seconds at least 15".to_owned());
    }
    if opts.failover && opts.partitions {
        return Err("--failover and --partitions are separate runs".to_owned());
    }
    if opts.partitions && opts.workers > net::MAX_NODES {
        return Err(format!(
            "--partitions places at most {} worker processes",
            net::MAX_NODES
        ));
    }
    Ok(Some(opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options() {
        let q = parse(&args("--quick")).unwrap().unwrap();
        assert_eq!((q.jobs, q.seconds, q.workers), (5_000, 90, 5));
        let f = parse(&args("--jobs 7 --seconds 20 --seed 9"))
            .unwrap()
            .unwrap();
        assert_eq!((f.jobs, f.seconds, f.seed, f.quick), (7, 20, 9, false));
        assert!(parse(&args("--help")).unwrap().is_none());
        assert!(parse(&args("--jobs")).is_err());
        assert!(parse(&args("--frobnicate")).is_err());
        let w = parse(&["--worker-cmd".to_owned(), "node  w.js --x".to_owned()])
            .unwrap()
            .unwrap();
        assert_eq!(w.worker_cmd.unwrap(), ["node", "w.js", "--x"]);
        assert!(!w.quick && w.jobs == 100_000 && !w.failover);
        let f = parse(&args("--failover --quick")).unwrap().unwrap();
        assert!(f.failover && f.quick && f.jobs == 5_000 && !f.partitions);
        let p = parse(&args("--quick --partitions --seed 3"))
            .unwrap()
            .unwrap();
        assert!(p.partitions && p.quick && !p.failover && p.seed == 3);
        assert!(parse(&args("--partitions --failover")).is_err());
        assert!(parse(&["--worker-cmd".to_owned(), " ".to_owned()]).is_err());
    }
}
