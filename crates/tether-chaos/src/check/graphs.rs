//! The checks of jobs that wait for other jobs: the edges are the ones the
//! producers sent, nobody ran before its dependencies allowed, nobody was
//! left waiting, and a failure cancelled exactly what waits for it with
//! `cancel`, which then never ran.
//!
//! **Order from the history.** A dependency's final transition and the
//! release (or cancellation) of what waits for it commit in one
//! transaction; a claim of the released job can only pick it once that
//! transaction has committed. `seq` comes from one sequence, drawn when
//! each event is written: every event of the dependency's transaction drew
//! its number before that commit, and the claim's `claimed` event drew its
//! own after it. So an allowed claim has a `seq` above its dependencies'
//! final events, whatever the clocks say. The event's `at` cannot prove it
//! (a claim is stamped with its transaction's `now()`, and a transaction
//! that began before the dependency's ended may still claim the job it
//! released); the worker's own record can: it received the claim after the
//! dependency's transaction committed, so after its `at` on this machine's
//! one clock.

use super::*;

/// A job's end: its first event that left it `succeeded`, `failed` or
/// `cancelled`.
#[derive(Debug, Clone, Copy)]
pub(super) struct End<'a> {
    /// The event.
    pub event: &'a EventRow,
    /// The state it left.
    pub state: &'static str,
}

/// The state an event leaves a job in, when it ends the job.
fn ends_in(e: &EventRow) -> Option<&'static str> {
    match (e.event.as_str(), e.detail.as_deref()) {
        ("succeeded", _) => Some("succeeded"),
        ("failed" | "expired", _) | ("lease_expired", Some("failed")) => Some("failed"),
        ("cancelled", _) | ("lease_expired", Some("cancelled")) => Some("cancelled"),
        _ => None,
    }
}

/// Whether a `cancelled` event is a dependency's doing
/// (`{"dependency": id, "state": ...}`); answers the two.
pub(super) fn dependency_cancel(e: &EventRow) -> Option<(Uuid, String)> {
    if e.event != "cancelled" {
        return None;
    }
    let v: Value = serde_json::from_str(e.detail.as_deref()?).ok()?;
    let id = v.get("dependency")?.as_str()?.parse().ok()?;
    Some((id, v.get("state")?.as_str()?.to_owned()))
}

/// Whether an end lets a job with `rule` go: a success, or any end with `run`.
fn allows(state: &str, rule: DependencyFailure) -> bool {
    state == "succeeded" || rule == DependencyFailure::Run
}

/// Every check of [`super::CHECKS`] named `dependency_*`.
pub(super) fn check_graphs(
    f: &mut Findings,
    jobs: &[JobRow],
    history: &HashMap<Uuid, Vec<&EventRow>>,
    obs: &Obs,
    cx: &Context,
) {
    let empty = Vec::new();
    let n_of: HashMap<Uuid, i64> = jobs.iter().filter_map(|j| Some((j.id, j.n?))).collect();
    let ends: HashMap<Uuid, End<'_>> = history
        .iter()
        .filter_map(|(id, h)| {
            h.iter()
                .find_map(|e| ends_in(e).map(|state| (*id, End { event: e, state })))
        })
        .collect();
    // When each claim reached its worker: (job, attempt, worker) → µs.
    let mut received: HashMap<(Uuid, i32, &str), i64> = HashMap::new();
    for c in obs.claims.values() {
        let at = received
            .entry((c.job, c.attempt, c.worker.as_str()))
            .or_insert(c.at_us);
        *at = (*at).min(c.at_us);
    }
    let g = &mut f.stats.graphs;
    g.waits_sent = cx.waits.len() as u64;
    for job in jobs {
        let id = job.id;
        // The edges and the rule are what the producer sent.
        let sent = job.n.and_then(|n| cx.waits.get(&(n as u64)));
        let stored: Vec<Option<i64>> = job
            .depends_on
            .iter()
            .map(|d| n_of.get(d).copied())
            .collect();
        match sent {
            Some(w) => {
                let want: Vec<Option<i64>> = w.on.iter().map(|&m| Some(m as i64)).collect();
                if stored != want || job.dependency_failure != w.rule {
                    f.flag("dependency_graph", || {
                        format!(
                            "job {id} (n {:?}) waits for jobs n {stored:?} with {}, but was sent \
                             waiting for n {:?} with {}",
                            job.n, job.dependency_failure, w.on, w.rule
                        )
                    });
                }
            }
            None if !job.depends_on.is_empty() => f.flag("dependency_graph", || {
                format!(
                    "job {id} (n {:?}) waits for {:?}, but was sent without dependencies",
                    job.n, job.depends_on
                )
            }),
            None => {}
        }
        let h = history.get(&id).unwrap_or(&empty);
        let cancels: Vec<(&EventRow, Uuid, String)> = h
            .iter()
            .filter_map(|e| dependency_cancel(e).map(|(d, s)| (*e, d, s)))
            .collect();
        if job.depends_on.is_empty() {
            for (e, dep, _) in &cancels {
                f.flag("dependency_cancel", || {
                    format!(
                        "job {id}: cancelled (seq {}) by dependency {dep}, but it waits for nothing",
                        e.seq
                    )
                });
            }
            continue;
        }
        let rule = job.dependency_failure;
        let g = &mut f.stats.graphs;
        g.jobs += 1;
        g.edges += job.depends_on.len() as u64;
        *g.rules.entry(rule.as_str()).or_insert(0) += 1;
        let deps: Vec<(Uuid, Option<&End<'_>>)> =
            job.depends_on.iter().map(|d| (*d, ends.get(d))).collect();
        for (dep, _) in deps.iter().filter(|(d, _)| !n_of.contains_key(d)) {
            f.flag("dependency_graph", || {
                format!("job {id} waits for {dep}, which is not a job of the run")
            });
        }
        let failed_dep = deps
            .iter()
            .find_map(|(d, end)| end.filter(|e| e.state != "succeeded").map(|e| (*d, e)));
        let claims = h.iter().filter(|e| e.event == "claimed").count();
        let released = h.iter().filter(|e| e.event == "released").count();
        let g = &mut f.stats.graphs;
        g.released += released as u64;
        if failed_dep.is_some() {
            match rule {
                DependencyFailure::Cancel => g.downstream_of_failure_cancel += 1,
                DependencyFailure::Run if claims > 0 => g.ran_after_failure += 1,
                DependencyFailure::Run => {}
            }
        }
        if let Some((cancel, _, _)) = cancels.first() {
            g.cancelled_by_dependency += 1;
            // Settled at enqueue: in the enqueue's own transaction, so at
            // its instant (a later cancellation is a later transaction's).
            let enqueued = h.iter().find(|e| e.event == "enqueued");
            if enqueued.is_some_and(|e| e.at == cancel.at) {
                g.cancelled_at_enqueue += 1;
            }
        }

        // Released and claimed only after every dependency allowed it.
        for e in h
            .iter()
            .filter(|e| matches!(e.event.as_str(), "released" | "claimed"))
        {
            let ev = e.event.as_str();
            for (dep, end) in &deps {
                let Some(end) = end else {
                    f.flag("dependency_order", || {
                        format!(
                            "job {id}: {ev} (seq {}) though dependency {dep} never ended",
                            e.seq
                        )
                    });
                    continue;
                };
                if !allows(end.state, rule) {
                    f.flag("dependency_order", || {
                        format!(
                            "job {id} ({rule}): {ev} (seq {}) though dependency {dep} ended {}",
                            e.seq, end.state
                        )
                    });
                } else if end.event.seq >= e.seq {
                    f.flag("dependency_order", || {
                        format!(
                            "job {id}: {ev} (seq {}, {}) before dependency {dep} ended ({}, seq {}, {})",
                            e.seq, e.at, end.event.event, end.event.seq, end.event.at
                        )
                    });
                }
                let got = (ev == "claimed")
                    .then_some(e.worker_id.as_deref())
                    .flatten()
                    .and_then(|w| received.get(&(id, e.attempt, w)));
                if let Some(&got) = got {
                    if got + CLOCK_SLACK_US + cx.clock_back_us < us(end.event.at) {
                        f.flag("dependency_order", || {
                            format!(
                                "job {id}: worker {:?} received its claim (attempt {}) at {}, \
                                 before dependency {dep} ended at {}",
                                e.worker_id,
                                e.attempt,
                                at_us(got),
                                end.event.at
                            )
                        });
                    }
                }
            }
        }

        // Downstream of a failure with `cancel`: cancelled, never run.
        if let (DependencyFailure::Cancel, Some((dep, end))) = (rule, failed_dep) {
            if claims > 0 || job.state != "cancelled" {
                f.flag("dependency_cancel", || {
                    format!(
                        "job {id} (cancel) ended {} after {claims} claims, though dependency {dep} \
                         ended {} (seq {})",
                        job.state, end.state, end.event.seq
                    )
                });
            }
        }
        // Every cancellation by a dependency is due: the job waits with
        // `cancel` for the job named, which had ended failed or cancelled.
        for (e, dep, state) in &cancels {
            let due = rule == DependencyFailure::Cancel
                && job.depends_on.contains(dep)
                && ends
                    .get(dep)
                    .is_some_and(|end| end.state == state.as_str() && end.state != "succeeded");
            if !due {
                f.flag("dependency_cancel", || {
                    format!(
                        "job {id} ({rule}, waiting for {:?}): cancelled (seq {}) by dependency \
                         {dep} ({state}), which it does not wait for with cancel or which did not \
                         end so",
                        job.depends_on, e.seq
                    )
                });
            }
        }

        // Nobody left waiting.
        if job.state == "waiting" {
            let open: Vec<&Uuid> = deps
                .iter()
                .filter(|(_, end)| end.is_none())
                .map(|(d, _)| d)
                .collect();
            if open.is_empty() {
                f.flag("dependency_left_waiting", || {
                    format!(
                        "job {id} is still waiting though every dependency ended ({:?})",
                        job.depends_on
                    )
                });
            } else {
                f.flag("not_terminal", || {
                    format!("job {id} is still waiting for {open:?}, which never ended")
                });
            }
        }
    }
    let g = f.stats.graphs.clone();
    if cx.jobs >= EXERCISED_AFTER_JOBS && g.waits_sent > 0 {
        let seen = [
            ("released by its dependencies", g.released),
            (
                "cancelled by a failed dependency",
                g.cancelled_by_dependency,
            ),
            ("run after a failed dependency (run)", g.ran_after_failure),
        ];
        for (what, n) in seen {
            if n == 0 {
                f.flag("dependencies_not_exercised", || {
                    format!("no job was {what} ({} jobs waited for others)", g.jobs)
                });
            }
        }
    }
}

/// Runs this large are expected to have released, cancelled and run jobs
/// after failures ([`crate::graph`]); smaller ones may not.
const EXERCISED_AFTER_JOBS: u64 = 1_000;
