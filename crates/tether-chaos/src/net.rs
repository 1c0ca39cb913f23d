//! The network of a `--partitions` run: every replica and every worker
//! process in a network namespace of its own, joined by veth pairs, so that
//! the run can cut or degrade one link at a time in the kernel.
//!
//! ```text
//!                     root namespace: PostgreSQL (the run's own cluster), the parent
//!   10.O.r.1 ── db ── 10.O.r.2   replica r (namespace tch<pid>r<r>) ── serves on 0.0.0.0:<port>
//!   10.O.64+r.1 ── api ── 10.O.64+r.2   (the producers and the probes reach replica r here)
//!   replica r: 10.O.128+j.1 ── w<j>/uplink ── 10.O.128+j.2   worker slot j (namespace tch<pid>w<j>)
//! ```
//!
//! `O` is a second octet in 64..128 that no address of the machine uses.
//! Every end of every link carries the same small tc tree from the start:
//! an HTB root with one class (10 gbit/s: no shaping) holding a pfifo, and
//! a classic-BPF filter in direct-action mode that passes every packet.
//! A fault only changes it, on both ends (both directions):
//!
//! - **cut**: the filter drops every packet (`TC_ACT_SHOT`). TCP sees
//!   silence, as on a pulled cable: no reset, no error; it retransmits
//!   with backoff and carries on once the link is back.
//! - **slow**: the class is squeezed to [`SLOW_RATE`] with a queue of
//!   [`SLOW_QUEUE`] packets (queueing delay, and tail drops when a burst
//!   fills it), and the filter drops [`SLOW_LOSS_PERCENT`] % of the packets
//!   at random (`ld rand`).
//!
//! Why not netem (`delay 50ms 20ms loss 5%`): the kernel this was built on
//! has no `sch_netem` (nor `act_gact`); it has HTB, pfifo and `cls_bpf`,
//! and classic BPF bytecode needs no compiler. The latency is therefore
//! queueing delay behind a narrow link rather than a fixed delay line.
//!
//! The namespaces and root-side devices are named `tch<pid>…`; dropping
//! the [`Net`] deletes them (the veth pairs and their qdiscs go with them),
//! and [`sweep_stale`] deletes those of earlier runs whose process is gone.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;

use crate::obs::now_us;

/// Prefix of every namespace and root-side device: `tch<pid>`.
const PREFIX: &str = "tch";
/// The rate of a link that is not slowed (no shaping in practice).
const FULL_RATE: &str = "10gbit";
/// The queue of a link that is not slowed (veth's own `txqueuelen`).
const FULL_QUEUE: u32 = 1_000;
/// The rate of a slowed link.
pub const SLOW_RATE: &str = "4mbit";
/// The queue of a slowed link, in packets: at [`SLOW_RATE`] a full queue
/// of full-size packets waits about 90 ms.
pub const SLOW_QUEUE: u32 = 30;
/// Packets a slowed link drops at random, in percent.
pub const SLOW_LOSS_PERCENT: u32 = 5;
/// Most worker slots and replicas one run can place.
pub const MAX_NODES: usize = 64;

/// Classic BPF: return -1 (`TC_ACT_UNSPEC`: on to the default class).
const PASS: &str = "1,6 0 0 4294967295";
/// Classic BPF: return 2 (`TC_ACT_SHOT`: drop).
const DROP: &str = "1,6 0 0 2";

/// Classic BPF dropping `percent` % of the packets at random: `A = rand;
/// if A >= threshold pass else drop` (`SKF_AD_OFF + SKF_AD_RANDOM` is
/// 0xfffff000 + 56).
fn random_drop(percent: u32) -> String {
    let threshold = (u64::from(percent) << 32) / 100;
    format!("4,32 0 0 4294963256,53 0 1 {threshold},6 0 0 4294967295,6 0 0 2")
}

/// A link of the run's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkId {
    /// Replica `r` ↔ PostgreSQL.
    Db(usize),
    /// Replica `r` ↔ the parent (producers, probes); never impaired.
    Api(usize),
    /// Worker slot `j` ↔ its replica.
    Worker(usize),
}

impl std::fmt::Display for LinkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkId::Db(r) => write!(f, "replica {r} ↔ PostgreSQL"),
            LinkId::Api(r) => write!(f, "replica {r} ↔ clients"),
            LinkId::Worker(j) => write!(f, "worker slot {j} ↔ its replica"),
        }
    }
}

/// What a fault does to a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Impairment {
    /// Every packet dropped, both ways.
    Cut,
    /// Narrow, queueing and lossy, both ways.
    Slow,
}

/// A stretch of time during which a link was impaired (µs on the host's
/// clock, which is also PostgreSQL's: one machine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    /// The link.
    pub link: LinkId,
    /// How.
    pub what: Impairment,
    /// From.
    pub from_us: i64,
    /// Until (`None`: still on when read).
    pub to_us: Option<i64>,
}

impl Episode {
    /// Whether it overlaps `[from, to]`.
    pub fn overlaps(&self, from: i64, to: i64) -> bool {
        self.from_us <= to && self.to_us.is_none_or(|end| end >= from)
    }
}

/// What went over a link (both ends together), per tc's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent.
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets dropped (by a cut, the random loss or a full queue).
    pub drops: u64,
}

/// One end of a link: a device, in a namespace or the root one.
#[derive(Debug, Clone)]
struct End {
    ns: Option<String>,
    dev: String,
}

#[derive(Debug, Default)]
struct State {
    /// Current impairments per link.
    on: BTreeMap<LinkId, (bool, bool)>,
    /// Every episode, in order of start.
    episodes: Vec<Episode>,
}

/// The namespaces, links and shaping of one run; deleted when dropped.
#[derive(Debug)]
pub struct Net {
    tag: String,
    octet: u8,
    replicas: usize,
    /// The replica of each worker slot.
    worker_replica: Vec<usize>,
    state: Mutex<State>,
}

impl Net {
    /// Makes the namespaces and links for `replicas` replicas and a worker
    /// slot per entry of `worker_replica` (the replica it talks to). On an
    /// error whatever was made is deleted again.
    pub fn create(replicas: usize, worker_replica: Vec<usize>) -> Result<Net, String> {
        if replicas > MAX_NODES || worker_replica.len() > MAX_NODES {
            return Err(format!(
                "--partitions places at most {MAX_NODES} replicas and {MAX_NODES} workers"
            ));
        }
        let tag = format!("{PREFIX}{}", std::process::id());
        let octet = free_octet()?;
        // From here on, dropping `net` deletes what exists.
        let net = Net {
            tag,
            octet,
            replicas,
            worker_replica,
            state: Mutex::default(),
        };
        for r in 0..replicas {
            net.add_ns(&net.ns_replica(r))?;
        }
        for j in 0..net.worker_replica.len() {
            net.add_ns(&net.ns_worker(j))?;
        }
        for r in 0..replicas {
            for link in [LinkId::Db(r), LinkId::Api(r)] {
                let [root, inner] = net.ends(link);
                let (a, b) = net.addrs(link);
                let ns = inner.ns.as_deref().expect("replica end");
                ip(&[
                    "link", "add", &root.dev, "type", "veth", "peer", "name", &inner.dev, "netns",
                    ns,
                ])?;
                ip(&["addr", "add", &format!("{a}/30"), "dev", &root.dev])?;
                ip(&["link", "set", "dev", &root.dev, "up"])?;
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{b}/30"),
                    "dev",
                    &inner.dev,
                ])?;
                ip(&["-n", ns, "link", "set", "dev", &inner.dev, "up"])?;
            }
        }
        for j in 0..net.worker_replica.len() {
            let link = LinkId::Worker(j);
            let [replica_end, worker_end] = net.ends(link);
            let (a, b) = net.addrs(link);
            let (rns, wns) = (
                replica_end.ns.as_deref().expect("ns"),
                worker_end.ns.as_deref().expect("ns"),
            );
            ip(&[
                "-n",
                rns,
                "link",
                "add",
                &replica_end.dev,
                "type",
                "veth",
                "peer",
                "name",
                &worker_end.dev,
                "netns",
                wns,
            ])?;
            ip(&[
                "-n",
                rns,
                "addr",
                "add",
                &format!("{a}/30"),
                "dev",
                &replica_end.dev,
            ])?;
            ip(&["-n", rns, "link", "set", "dev", &replica_end.dev, "up"])?;
            ip(&[
                "-n",
                wns,
                "addr",
                "add",
                &format!("{b}/30"),
                "dev",
                &worker_end.dev,
            ])?;
            ip(&["-n", wns, "link", "set", "dev", &worker_end.dev, "up"])?;
        }
        for link in net.links() {
            for end in net.ends(link) {
                shaping_tree(&end)?;
            }
            lock(&net.state).on.insert(link, (false, false));
        }
        Ok(net)
    }

    fn add_ns(&self, name: &str) -> Result<(), String> {
        ip(&["netns", "add", name])?;
        ip(&["-n", name, "link", "set", "lo", "up"])
    }

    /// Every link.
    pub fn links(&self) -> Vec<LinkId> {
        (0..self.replicas)
            .flat_map(|r| [LinkId::Db(r), LinkId::Api(r)])
            .chain((0..self.worker_replica.len()).map(LinkId::Worker))
            .collect()
    }

    /// The namespace of replica `r`.
    pub fn ns_replica(&self, r: usize) -> String {
        format!("{}r{r}", self.tag)
    }

    /// The namespace of worker slot `j`.
    pub fn ns_worker(&self, j: usize) -> String {
        format!("{}w{j}", self.tag)
    }

    /// The two ends of a link: (root or replica side, far side).
    fn ends(&self, link: LinkId) -> [End; 2] {
        match link {
            LinkId::Db(r) => [
                End {
                    ns: None,
                    dev: format!("{}d{r}", self.tag),
                },
                End {
                    ns: Some(self.ns_replica(r)),
                    dev: "db".to_owned(),
                },
            ],
            LinkId::Api(r) => [
                End {
                    ns: None,
                    dev: format!("{}a{r}", self.tag),
                },
                End {
                    ns: Some(self.ns_replica(r)),
                    dev: "api".to_owned(),
                },
            ],
            LinkId::Worker(j) => [
                End {
                    ns: Some(self.ns_replica(self.worker_replica[j])),
                    dev: format!("w{j}"),
                },
                End {
                    ns: Some(self.ns_worker(j)),
                    dev: "uplink".to_owned(),
                },
            ],
        }
    }

    /// The addresses of a link's two ends, as [`Net::ends`] orders them.
    fn addrs(&self, link: LinkId) -> (String, String) {
        let third = match link {
            LinkId::Db(r) => r,
            LinkId::Api(r) => 64 + r,
            LinkId::Worker(j) => 128 + j,
        };
        let o = self.octet;
        (format!("10.{o}.{third}.1"), format!("10.{o}.{third}.2"))
    }

    /// Where replica `r` reaches PostgreSQL (PostgreSQL listens there).
    pub fn pg_host(&self, r: usize) -> String {
        self.addrs(LinkId::Db(r)).0
    }

    /// Every address PostgreSQL must listen on for the replicas.
    pub fn pg_hosts(&self) -> Vec<String> {
        (0..self.replicas).map(|r| self.pg_host(r)).collect()
    }

    /// The network PostgreSQL must trust (`pg_hba.conf`).
    pub fn subnet(&self) -> String {
        format!("10.{}.0.0/16", self.octet)
    }

    /// The address replica `r`'s connections to PostgreSQL come from.
    pub fn replica_client(&self, r: usize) -> String {
        self.addrs(LinkId::Db(r)).1
    }

    /// Where the parent reaches replica `r`.
    pub fn api_host(&self, r: usize) -> String {
        self.addrs(LinkId::Api(r)).1
    }

    /// Where worker slot `j` reaches its replica.
    pub fn worker_target(&self, j: usize) -> String {
        self.addrs(LinkId::Worker(j)).0
    }

    /// Turns `what` on or off on `link` (both ends), and records it.
    pub fn set(&self, link: LinkId, what: Impairment, on: bool) -> Result<(), String> {
        let (cut, slow) = {
            let mut s = lock(&self.state);
            let now = now_us();
            let entry = s.on.entry(link).or_default();
            let flag = match what {
                Impairment::Cut => &mut entry.0,
                Impairment::Slow => &mut entry.1,
            };
            if *flag == on {
                return Ok(());
            }
            *flag = on;
            let current = *entry;
            if on {
                s.episodes.push(Episode {
                    link,
                    what,
                    from_us: now,
                    to_us: None,
                });
            } else if let Some(e) = s
                .episodes
                .iter_mut()
                .rev()
                .find(|e| e.link == link && e.what == what && e.to_us.is_none())
            {
                e.to_us = Some(now);
            }
            current
        };
        for end in self.ends(link) {
            apply(&end, cut, slow)?;
        }
        Ok(())
    }

    /// Whether `link` is cut right now.
    pub fn is_cut(&self, link: LinkId) -> bool {
        lock(&self.state).on.get(&link).is_some_and(|s| s.0)
    }

    /// Ends every impairment (the run's end, or a failure).
    pub fn heal_all(&self) -> Result<(), String> {
        let on: Vec<(LinkId, (bool, bool))> =
            lock(&self.state).on.iter().map(|(l, s)| (*l, *s)).collect();
        for (link, (cut, slow)) in on {
            if cut {
                self.set(link, Impairment::Cut, false)?;
            }
            if slow {
                self.set(link, Impairment::Slow, false)?;
            }
        }
        Ok(())
    }

    /// Every episode so far.
    pub fn episodes(&self) -> Vec<Episode> {
        lock(&self.state).episodes.clone()
    }

    /// What went over each link so far, per tc's counters (both ends).
    pub fn traffic(&self) -> BTreeMap<LinkId, Traffic> {
        self.links()
            .into_iter()
            .map(|link| {
                let mut t = Traffic::default();
                for end in self.ends(link) {
                    let c = counters(&end);
                    t.bytes += c.bytes;
                    t.packets += c.packets;
                    t.drops += c.drops;
                }
                (link, t)
            })
            .collect()
    }

    /// The command line that runs `program args` in namespace `ns`.
    pub fn exec_in(ns: &str, program: &str, args: &[String]) -> (String, Vec<String>) {
        let mut all = vec![
            "netns".to_owned(),
            "exec".to_owned(),
            ns.to_owned(),
            program.to_owned(),
        ];
        all.extend(args.iter().cloned());
        ("ip".to_owned(), all)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for link in self.links() {
            let [root, _] = self.ends(link);
            if root.ns.is_none() {
                let _ = ip(&["link", "del", &root.dev]);
            }
        }
        for r in 0..self.replicas {
            let _ = ip(&["netns", "del", &self.ns_replica(r)]);
        }
        for j in 0..self.worker_replica.len() {
            let _ = ip(&["netns", "del", &self.ns_worker(j)]);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `ip args`; its output goes into the error.
fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

/// `tc [-n ns] args` for one end.
fn tc(end: &End, args: &[&str]) -> Result<(), String> {
    let mut all: Vec<&str> = Vec::with_capacity(args.len() + 2);
    if let Some(ns) = &end.ns {
        all.extend(["-n", ns.as_str()]);
    }
    all.extend_from_slice(args);
    run("tc", &all)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
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

/// The tc tree every end carries from the start: HTB root `1:` whose
/// default class `1:10` (full rate) holds pfifo `10:`, and filter 1 (pass).
fn shaping_tree(end: &End) -> Result<(), String> {
    let dev = end.dev.as_str();
    let limit = FULL_QUEUE.to_string();
    tc(
        end,
        &[
            "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
        ],
    )?;
    tc(
        end,
        &[
            "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate",
            FULL_RATE, "quantum", "1514",
        ],
    )?;
    tc(
        end,
        &[
            "qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "pfifo", "limit", &limit,
        ],
    )?;
    filter(end, "add", PASS)
}

fn filter(end: &End, verb: &str, program: &str) -> Result<(), String> {
    tc(
        end,
        &[
            "filter", verb, "dev", &end.dev, "parent", "1:", "protocol", "all", "prio", "1",
            "handle", "1", "bpf", "bytecode", program, "da",
        ],
    )
}

/// Sets one end's tree for the link's state.
fn apply(end: &End, cut: bool, slow: bool) -> Result<(), String> {
    let dev = end.dev.as_str();
    let (rate, limit) = if slow {
        (SLOW_RATE, SLOW_QUEUE)
    } else {
        (FULL_RATE, FULL_QUEUE)
    };
    let limit = limit.to_string();
    tc(
        end,
        &[
            "class", "change", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate,
            "ceil", rate, "quantum", "1514",
        ],
    )?;
    tc(
        end,
        &[
            "qdisc", "change", "dev", dev, "parent", "1:10", "handle", "10:", "pfifo", "limit",
            &limit,
        ],
    )?;
    let program = if cut {
        DROP.to_owned()
    } else if slow {
        random_drop(SLOW_LOSS_PERCENT)
    } else {
        PASS.to_owned()
    };
    filter(end, "replace", &program)
}

/// The root qdisc's counters of one end (`tc -s -j qdisc show`): what the
/// filter dropped is counted there, what the queue dropped too.
fn counters(end: &End) -> Traffic {
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = &end.ns {
        args.extend(["-n", ns.as_str()]);
    }
    args.extend(["-s", "-j", "qdisc", "show", "dev", end.dev.as_str()]);
    let Ok(out) = Command::new("tc").args(&args).output() else {
        return Traffic::default();
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return Traffic::default();
    };
    let get = |q: &serde_json::Value, k: &str| q.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    let qdiscs = v.as_array().cloned().unwrap_or_default();
    let root = qdiscs
        .iter()
        .find(|q| q.get("root").and_then(|r| r.as_bool()) == Some(true));
    // The leaf's drops are its full queue; the root's include the filter's.
    let leaf_drops: u64 = qdiscs
        .iter()
        .filter(|q| q.get("parent").is_some())
        .map(|q| get(q, "drops"))
        .sum();
    match root {
        Some(r) => Traffic {
            bytes: get(r, "bytes"),
            packets: get(r, "packets"),
            drops: get(r, "drops").max(leaf_drops),
        },
        None => Traffic::default(),
    }
}

/// A second octet in 64..128 whose `10.x.0.0/16` no address of this
/// machine is in, starting from one that depends on the process id (two
/// runs at once pick different ones).
fn free_octet() -> Result<u8, String> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let used = |o: u32| listing.contains(&format!(" 10.{o}."));
    let start = std::process::id() % 64;
    (0..64)
        .map(|i| 64 + (start + i) % 64)
        .find(|&o| !used(o))
        .map(|o| o as u8)
        .ok_or_else(|| "no free 10.x.0.0/16 network for the run's links".to_owned())
}

/// Deletes the namespaces and root-side devices of earlier runs whose
/// process is gone (killed before they could clean up).
pub fn sweep_stale() {
    let me = std::process::id();
    let stale = |name: &str, kinds: &[char]| -> bool {
        let Some(rest) = name.strip_prefix(PREFIX) else {
            return false;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let tail = &rest[digits.len()..];
        let Ok(pid) = digits.parse::<u32>() else {
            return false;
        };
        tail.starts_with(kinds)
            && tail[1..].chars().all(|c| c.is_ascii_digit())
            && tail.len() > 1
            && pid != me
            && !crate::procs::alive(pid)
    };
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if stale(name, &['r', 'w', 'p']) {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(out) = Command::new("ip").args(["-o", "link", "show"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // `7: tch123d0@if6: <...`
            let name = line
                .split(':')
                .nth(1)
                .map(|n| n.trim().split('@').next().unwrap_or_default())
                .unwrap_or_default();
            if stale(name, &['d', 'a']) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

/// Whether this machine can run `--partitions`: `ip netns` works and tc
/// has HTB and the BPF classifier. Tried on a throw-away namespace.
pub fn probe() -> Result<(), String> {
    let ns = format!("{PREFIX}{}p0", std::process::id());
    ip(&["netns", "add", &ns]).map_err(|e| format!("`ip netns add` does not work here: {e}"))?;
    let end = End {
        ns: Some(ns.clone()),
        dev: "p".to_owned(),
    };
    let tried = ip(&[
        "-n", &ns, "link", "add", "p", "type", "veth", "peer", "name", "q",
    ])
    .and_then(|()| shaping_tree(&end))
    .and_then(|()| apply(&end, false, true))
    .and_then(|()| apply(&end, true, false));
    let _ = ip(&["netns", "del", &ns]);
    tried.map_err(|e| format!("the tc tree for the faults cannot be set up here: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_drop_thresholds() {
        assert_eq!(
            random_drop(5),
            "4,32 0 0 4294963256,53 0 1 214748364,6 0 0 4294967295,6 0 0 2"
        );
    }

    #[test]
    fn episodes_overlap() {
        let e = Episode {
            link: LinkId::Db(0),
            what: Impairment::Cut,
            from_us: 100,
            to_us: Some(200),
        };
        assert!(e.overlaps(150, 300) && e.overlaps(0, 100) && e.overlaps(200, 250));
        assert!(!e.overlaps(201, 300) && !e.overlaps(0, 99));
        let open = Episode { to_us: None, ..e };
        assert!(open.overlaps(10_000, 20_000));
    }
}
