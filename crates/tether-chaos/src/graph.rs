//! Jobs that wait for other jobs, in the chaos workload: which jobs the
//! producers send with dependencies, on which jobs and with which rule,
//! decided by the run's seed and the chunks alone, so that the checker
//! knows every edge the producers meant to write.
//!
//! Two ways in:
//!
//! - **Graph batches**: about a third of the batches hold small graphs
//!   written with `depends_on_entries` (earlier entries of the same batch):
//!   chains, fan-ins and fan-out/fan-ins of 2–6 jobs, each waiting job with
//!   `cancel` (60 %) or `run` (40 %). Half of the graphs are rooted in a job
//!   whose plan fails (fatal, or retried until exhausted) when the batch
//!   still holds one, so that failures travel down graphs on purpose: a
//!   `cancel` job below must end `cancelled` without running, a `run` job
//!   must run once everything it waits for has ended.
//! - **Singles after an acknowledged job**: 30 % of the singles wait
//!   (`depends_on`, an id) for a job of their producer's previous chunk,
//!   which it already got acknowledged; whatever that job's state by then
//!   (queued, running, ended, itself waiting or cancelled), the rule applies
//!   at enqueue or later.
//!
//! The jobs are the run's ordinary jobs (`payload.n`, the plan of
//! [`crate::plan`]): any worker, in any language, runs them unchanged.

use std::collections::{HashMap, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tether_core::DependencyFailure;

use crate::plan::{self, mix, Plan};
use crate::produce::{Chunk, Mode};

/// Batches that hold graphs, per mille.
const GRAPH_BATCHES_PER_MILLE: u64 = 350;
/// Singles that wait for a job of their producer's previous chunk, per mille.
const SINGLES_WAITING_PER_MILLE: u64 = 300;
/// Waiting jobs of a graph with `cancel`, per mille (the rest: `run`).
const CANCEL_PER_MILLE: u64 = 600;

/// One entry of a batch as the producers send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The job number.
    pub n: u64,
    /// Earlier entries (indexes into the batch) it waits for.
    pub after: Vec<usize>,
    /// Its rule (meaningful only with dependencies).
    pub rule: DependencyFailure,
}

/// What a job waits for, as its producer sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The jobs (numbers), in the order sent.
    pub on: Vec<u64>,
    /// What it does when one of them fails.
    pub rule: DependencyFailure,
}

/// Whether the batch starting at job `first` holds graphs.
pub fn is_graph_batch(seed: u64, first: u64) -> bool {
    mix(seed ^ mix(first ^ 0x06ba_9e5d)) % 1000 < GRAPH_BATCHES_PER_MILLE
}

/// Whether job `n`'s plan fails it for good (fatal, or retried until its
/// attempts run out): a root that fails on purpose.
pub fn fails(seed: u64, n: u64) -> bool {
    matches!(plan::plan(seed, n), Plan::Fatal | Plan::AlwaysRetry)
}

/// The entries of a batch chunk in the order sent: its jobs in order, or,
/// for a graph batch, its jobs grouped into small graphs, each graph's
/// jobs after the ones they wait for.
pub fn batch_entries(seed: u64, chunk: &Chunk) -> Vec<Entry> {
    let ns = chunk.first..chunk.first + chunk.len;
    if !is_graph_batch(seed, chunk.first) {
        return ns
            .map(|n| Entry {
                n,
                after: Vec::new(),
                rule: DependencyFailure::Cancel,
            })
            .collect();
    }
    let mut rng = StdRng::seed_from_u64(seed ^ mix(chunk.first ^ 0x0da6_0f00));
    let (mut failing, mut others): (VecDeque<u64>, VecDeque<u64>) =
        ns.partition(|&n| fails(seed, n));
    let mut entries: Vec<Entry> = Vec::with_capacity(chunk.len as usize);
    while !(failing.is_empty() && others.is_empty()) {
        let left = failing.len() + others.len();
        let size = rng.random_range(2..=6usize).min(left);
        let shape = rng.random_range(0..3u8);
        let failing_root = rng.random_bool(0.5);
        let base = entries.len();
        for k in 0..size {
            let n = if k == 0 && failing_root {
                failing.pop_front().or_else(|| others.pop_front())
            } else {
                others.pop_front().or_else(|| failing.pop_front())
            }
            .expect("a job left");
            let after: Vec<usize> = match (shape, k) {
                (_, 0) => Vec::new(),
                // A chain: each after the one before.
                (0, k) => vec![base + k - 1],
                // A fan-in: the last after all the others.
                (1, k) if k == size - 1 => (base..base + k).collect(),
                (1, _) => Vec::new(),
                // Fan-out then fan-in: the middle after the root, the last
                // after the middle.
                (_, k) if k == size - 1 && size > 2 => (base + 1..base + k).collect(),
                (_, _) => vec![base],
            };
            let rule = if after.is_empty() || rng.random_range(0..1000) < CANCEL_PER_MILLE {
                DependencyFailure::Cancel
            } else {
                DependencyFailure::Run
            };
            entries.push(Entry { n, after, rule });
        }
    }
    entries
}

/// What single job `n` waits for: a job of `previous`, its producer's
/// chunk before the one `n` is in (already acknowledged when `n` is sent),
/// and the rule; `None` for most singles.
pub fn single_wait(
    seed: u64,
    n: u64,
    previous: Option<&Chunk>,
) -> Option<(u64, DependencyFailure)> {
    let previous = previous?;
    let h = mix(seed ^ mix(n ^ 0x0051_9a1e));
    if h % 1000 >= SINGLES_WAITING_PER_MILLE {
        return None;
    }
    let on = previous.first + (h >> 20) % previous.len;
    let rule = if (h >> 40).is_multiple_of(2) {
        DependencyFailure::Cancel
    } else {
        DependencyFailure::Run
    };
    Some((on, rule))
}

/// Every job's dependencies as the producers send them, given the chunks
/// each of `producers` tasks submits in order (chunk `i` goes to producer
/// `i % producers`).
pub fn waits(seed: u64, chunks: &[Chunk], producers: usize) -> HashMap<u64, Wait> {
    let mut out = HashMap::new();
    for (i, chunk) in chunks.iter().enumerate() {
        match &chunk.mode {
            Mode::Batch { .. } => {
                let entries = batch_entries(seed, chunk);
                for e in &entries {
                    if !e.after.is_empty() {
                        let on = e.after.iter().map(|&a| entries[a].n).collect();
                        out.insert(e.n, Wait { on, rule: e.rule });
                    }
                }
            }
            Mode::Singles { .. } => {
                let previous = i.checked_sub(producers).map(|p| &chunks[p]);
                for n in chunk.first..chunk.first + chunk.len {
                    if let Some((on, rule)) = single_wait(seed, n, previous) {
                        out.insert(n, Wait { on: vec![on], rule });
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::produce::chunks;

    #[test]
    fn graph_batches_are_graphs_of_the_batchs_jobs() {
        let all = chunks(1, 5_000);
        let mut graph_batches = 0;
        let (mut failing_roots, mut shapes) = (0, [0u32; 3]);
        for c in all.iter().filter(|c| matches!(c.mode, Mode::Batch { .. })) {
            let entries = batch_entries(1, c);
            assert_eq!(entries, batch_entries(1, c), "deterministic");
            let mut ns: Vec<u64> = entries.iter().map(|e| e.n).collect();
            ns.sort_unstable();
            assert_eq!(ns, (c.first..c.first + c.len).collect::<Vec<_>>());
            if !is_graph_batch(1, c.first) {
                assert!(entries.iter().all(|e| e.after.is_empty()));
                continue;
            }
            graph_batches += 1;
            for (i, e) in entries.iter().enumerate() {
                assert!(e.after.iter().all(|&a| a < i), "only earlier entries");
                assert!(e.after.len() <= 5);
                if e.after.is_empty() && fails(1, e.n) {
                    failing_roots += 1;
                }
                match e.after.len() {
                    0 => {}
                    1 if e.after[0] + 1 == i => shapes[0] += 1,
                    1 => shapes[2] += 1,
                    _ => shapes[1] += 1,
                }
            }
        }
        let batches = all
            .iter()
            .filter(|c| matches!(c.mode, Mode::Batch { .. }))
            .count();
        assert!(graph_batches * 5 > batches && graph_batches * 2 < batches);
        assert!(failing_roots > 20, "{failing_roots}");
        assert!(shapes.iter().all(|&s| s > 20), "{shapes:?}");
    }

    #[test]
    fn waits_cover_both_ways_and_both_rules() {
        let all = chunks(1, 5_000);
        let w = waits(1, &all, 4);
        assert_eq!(w, waits(1, &all, 4));
        assert!(w.len() > 800, "{}", w.len());
        let run = w
            .values()
            .filter(|w| w.rule == DependencyFailure::Run)
            .count();
        assert!(run * 5 > w.len() && run * 2 < w.len(), "{run}");
        for (n, wait) in &w {
            assert!(wait.on.iter().all(|m| m != n), "no job waits for itself");
        }
        // A single waits for a job of its producer's previous chunk.
        let mut singles = 0;
        for (i, c) in all.iter().enumerate() {
            if let Mode::Singles { .. } = c.mode {
                for n in c.first..c.first + c.len {
                    if let Some(wait) = w.get(&n) {
                        let p = &all[i - 4];
                        assert!((p.first..p.first + p.len).contains(&wait.on[0]));
                        singles += 1;
                    }
                }
            }
        }
        assert!(singles > 20, "{singles}");
    }
}
