//! How the new jobs of a batch stand against their dependencies, decided
//! before any row is written, so that a store inserts each job once, in the
//! state it enters (`waiting` or `queued`), with its edges already judged.
//!
//! Also the checks of jobs that join a running workflow, judged from what
//! a store read of it.
//!
//! The stores' own settling statements (a replay back into `waiting`, and
//! the batches this plan declines) apply the same rule as
//! [`DependencyFailure::judge`], in SQL.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::{Dependency, DependencyFailure, Error, JobState, NewJobRef, Result, MAX_WORKFLOW_JOBS};

/// How one edge stands against its dependency's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The dependency has not ended as the rule needs: the job waits for it.
    Unmet,
    /// The dependency ended as the rule needs: nothing to wait for.
    Met,
    /// The dependency failed or was cancelled and the rule is `cancel`: the
    /// job is cancelled at once.
    Fatal,
}

impl DependencyFailure {
    /// How an edge of a job with this rule stands when its dependency is in
    /// `state`: met once it succeeded (with `run`, once it ended at all);
    /// fatal when it failed or was cancelled under `cancel`.
    pub fn judge(self, state: JobState) -> Verdict {
        match (state, self) {
            (JobState::Succeeded, _) => Verdict::Met,
            (JobState::Failed | JobState::Cancelled, DependencyFailure::Run) => Verdict::Met,
            (JobState::Failed | JobState::Cancelled, DependencyFailure::Cancel) => Verdict::Fatal,
            (JobState::Waiting | JobState::Queued | JobState::Running, _) => Verdict::Unmet,
        }
    }
}

/// One new job as it enters, by [`GraphPlan::of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedJob {
    /// `waiting` while any edge is unmet, else `queued`.
    pub state: JobState,
    /// How many of its edges are unmet.
    pub waiting_on: u32,
    /// Whether a later entry of the batch waits for it (its end must then
    /// fire the store's release).
    pub has_dependents: bool,
    /// What it waits for, each once, in the order named.
    pub depends_on: Vec<Uuid>,
}

/// One edge of a new job, by [`GraphPlan::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedEdge {
    /// The new job that waits.
    pub job: Uuid,
    /// What it waits for.
    pub depends_on: Uuid,
    /// Whether its dependency's end is counted already.
    pub met: bool,
}

/// The new jobs of a batch with their dependencies judged: one per entry,
/// in order, and every edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphPlan {
    /// Per entry of the batch.
    pub jobs: Vec<PlannedJob>,
    /// Each edge once, by entry, in the order its dependencies are named.
    pub edges: Vec<PlannedEdge>,
}

impl GraphPlan {
    /// Whether a store may plan `jobs` before inserting them: some entry
    /// has dependencies, and none has an idempotency or unique key, so
    /// every entry creates its job (with a key, an entry may resolve to an
    /// existing job, whose state only the insert tells).
    pub fn applies(jobs: &[NewJobRef<'_>]) -> bool {
        jobs.iter().any(|r| !r.job.depends_on.is_empty())
            && jobs
                .iter()
                .all(|r| r.job.idempotency_key.is_none() && r.job.unique_key.is_none())
    }

    /// The existing jobs that `jobs` wait for, each once, in id order (the
    /// order in which a store locks them).
    pub fn existing(jobs: &[NewJobRef<'_>]) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = jobs
            .iter()
            .flat_map(|r| &r.job.depends_on)
            .filter_map(|dep| match *dep {
                Dependency::Job(id) => Some(id),
                Dependency::Entry(_) => None,
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Plans `jobs` (see [`GraphPlan::applies`]), given the state of each
    /// existing job they wait for (`found`, read under a lock that holds
    /// until the insert commits). An existing job missing from `found` is
    /// an error naming the first entry that waits for it. `None` when an
    /// existing dependency would cancel a new job at once: the store then
    /// inserts and settles (the rare path, which writes the cancellations
    /// with their events).
    pub fn of(
        jobs: &[NewJobRef<'_>],
        found: &HashMap<Uuid, JobState>,
    ) -> Result<Option<GraphPlan>> {
        check_found(jobs, |_| true, |id| found.contains_key(&id))?;
        let depended: HashSet<usize> = jobs
            .iter()
            .flat_map(|r| &r.job.depends_on)
            .filter_map(|dep| match *dep {
                Dependency::Entry(e) => Some(e),
                Dependency::Job(_) => None,
            })
            .collect();
        let mut planned = Vec::with_capacity(jobs.len());
        let mut edges = Vec::new();
        for (i, r) in jobs.iter().enumerate() {
            let mut depends_on: Vec<Uuid> = Vec::with_capacity(r.job.depends_on.len());
            let mut waiting_on = 0;
            for dep in &r.job.depends_on {
                let (id, verdict) = match *dep {
                    // An earlier entry of the batch: new, so unfinished.
                    Dependency::Entry(e) => (jobs[e].id, Verdict::Unmet),
                    Dependency::Job(id) => (id, r.job.dependency_failure.judge(found[&id])),
                };
                if depends_on.contains(&id) {
                    continue;
                }
                match verdict {
                    Verdict::Fatal => return Ok(None),
                    Verdict::Unmet => waiting_on += 1,
                    Verdict::Met => {}
                }
                depends_on.push(id);
                edges.push(PlannedEdge {
                    job: r.id,
                    depends_on: id,
                    met: verdict == Verdict::Met,
                });
            }
            planned.push(PlannedJob {
                state: if waiting_on > 0 {
                    JobState::Waiting
                } else {
                    JobState::Queued
                },
                waiting_on,
                has_dependents: depended.contains(&i),
                depends_on,
            });
        }
        Ok(Some(GraphPlan {
            jobs: planned,
            edges,
        }))
    }
}

/// Fails when an existing job that an entry of `jobs` waits for is not
/// `found` (not the tenant's, or no such job), naming the first such entry
/// (`jobs[i].depends_on`; a single job's enqueue names its own field, see
/// `Error::of_single_job`). Only the
/// entries that `created` their job count (one that resolved to an
/// existing job by its key enqueues nothing, dependencies included).
pub fn check_found(
    jobs: &[NewJobRef<'_>],
    created: impl Fn(usize) -> bool,
    found: impl Fn(Uuid) -> bool,
) -> Result<()> {
    for (i, r) in jobs.iter().enumerate().filter(|(i, _)| created(*i)) {
        for dep in &r.job.depends_on {
            if let Dependency::Job(id) = *dep {
                if !found(id) {
                    let field = format!("jobs[{i}].depends_on");
                    return Err(Error::invalid(field, format!("no job {id}")));
                }
            }
        }
    }
    Ok(())
}

/// What a store found of a running workflow that jobs are about to join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendTarget {
    /// How many jobs it holds.
    pub jobs: u64,
    /// Whether one of them is unfinished (a workflow runs while one is).
    pub open: bool,
}

/// The workflows that entries of `jobs` join (`workflow_id`), each once,
/// in id order (the order in which a store locks them).
pub fn appended_workflows(jobs: &[NewJobRef<'_>]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = jobs.iter().filter_map(|r| r.job.workflow_id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Judges the appends of `jobs` against what the store `found` of each
/// workflow they join: each must exist in the tenant, be unfinished, and
/// keep at most [`MAX_WORKFLOW_JOBS`]. Errors name the first entry that
/// joins the workflow at fault.
pub fn check_appends(jobs: &[NewJobRef<'_>], found: &HashMap<Uuid, AppendTarget>) -> Result<()> {
    let field = |id: Uuid| {
        let i = jobs
            .iter()
            .position(|r| r.job.workflow_id == Some(id))
            .unwrap_or(0);
        format!("jobs[{i}].workflow_id")
    };
    for id in appended_workflows(jobs) {
        let Some(target) = found.get(&id) else {
            return Err(Error::invalid(field(id), format!("no workflow {id}")));
        };
        if !target.open {
            return Err(Error::Conflict(format!(
                "workflow {id} has finished: jobs can join a workflow only while it runs"
            )));
        }
        let adding = jobs
            .iter()
            .filter(|r| r.job.workflow_id == Some(id))
            .count() as u64;
        if target.jobs + adding > MAX_WORKFLOW_JOBS as u64 {
            return Err(Error::invalid(
                field(id),
                format!(
                    "workflow {id} holds {} jobs; at most {MAX_WORKFLOW_JOBS} in all",
                    target.jobs
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewJob;
    use serde_json::json;

    fn refs(jobs: &[NewJob]) -> Vec<NewJobRef<'_>> {
        NewJobRef::mint(jobs)
    }

    #[test]
    fn judges_each_edge_by_its_rule() {
        use DependencyFailure::{Cancel, Run};
        use JobState::*;
        for rule in [Cancel, Run] {
            for state in [Waiting, Queued, Running] {
                assert_eq!(rule.judge(state), Verdict::Unmet);
            }
            assert_eq!(rule.judge(Succeeded), Verdict::Met);
        }
        for state in [Failed, Cancelled] {
            assert_eq!(Cancel.judge(state), Verdict::Fatal);
            assert_eq!(Run.judge(state), Verdict::Met);
        }
    }

    #[test]
    fn a_fan_out_fan_in_graph_waits_on_its_entries() {
        let job = || NewJob::new("q", "k", json!({}));
        let jobs = vec![
            job(),
            job().after_entry(0),
            job().after_entry(0),
            job().after_entry(1).after_entry(2).after_entry(1),
        ];
        let batch = refs(&jobs);
        let plan = GraphPlan::of(&batch, &HashMap::new()).unwrap().unwrap();
        let states: Vec<_> = plan.jobs.iter().map(|j| (j.state, j.waiting_on)).collect();
        assert_eq!(
            states,
            [
                (JobState::Queued, 0),
                (JobState::Waiting, 1),
                (JobState::Waiting, 1),
                (JobState::Waiting, 2)
            ]
        );
        let depended: Vec<_> = plan.jobs.iter().map(|j| j.has_dependents).collect();
        assert_eq!(depended, [true, true, true, false]);
        assert_eq!(plan.jobs[3].depends_on, [batch[1].id, batch[2].id]);
        assert_eq!(plan.edges.len(), 4, "a dependency named twice is one edge");
        assert!(plan.edges.iter().all(|e| !e.met));
    }

    #[test]
    fn existing_dependencies_are_judged_by_their_state() {
        let (done, failed, open) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let found = HashMap::from([
            (done, JobState::Succeeded),
            (failed, JobState::Failed),
            (open, JobState::Running),
        ]);
        let jobs = vec![
            NewJob::new("q", "k", json!({})).after(done),
            NewJob::new("q", "k", json!({}))
                .after(failed)
                .after(open)
                .dependency_failure(DependencyFailure::Run),
        ];
        let batch = refs(&jobs);
        assert_eq!(GraphPlan::existing(&batch).len(), 3);
        let plan = GraphPlan::of(&batch, &found).unwrap().unwrap();
        assert_eq!(plan.jobs[0].state, JobState::Queued);
        assert_eq!(
            (plan.jobs[1].state, plan.jobs[1].waiting_on),
            (JobState::Waiting, 1)
        );
        let met: Vec<_> = plan.edges.iter().map(|e| e.met).collect();
        assert_eq!(met, [true, true, false]);

        // Under `cancel`, a failed dependency declines the plan.
        let jobs = vec![NewJob::new("q", "k", json!({})).after(failed)];
        assert_eq!(GraphPlan::of(&refs(&jobs), &found).unwrap(), None);
    }

    #[test]
    fn an_unknown_dependency_names_the_entry() {
        let missing = Uuid::now_v7();
        let one = vec![NewJob::new("q", "k", json!({})).after(missing)];
        let err = GraphPlan::of(&refs(&one), &HashMap::new()).unwrap_err();
        assert!(err.to_string().contains("jobs[0].depends_on"), "{err}");
        let err = err.of_single_job().to_string();
        assert!(
            err.contains("depends_on") && !err.contains("jobs[0]"),
            "{err}"
        );
        let two = vec![
            NewJob::new("q", "k", json!({})),
            NewJob::new("q", "k", json!({})).after(missing),
        ];
        let err = GraphPlan::of(&refs(&two), &HashMap::new()).unwrap_err();
        assert!(err.to_string().contains("jobs[1].depends_on"), "{err}");
    }

    #[test]
    fn keys_keep_a_batch_off_the_plan() {
        let plain = vec![
            NewJob::new("q", "k", json!({})),
            NewJob::new("q", "k", json!({})).after_entry(0),
        ];
        assert!(GraphPlan::applies(&refs(&plain)));
        let keyed = vec![
            NewJob::new("q", "k", json!({})).idempotency_key("a"),
            NewJob::new("q", "k", json!({})).after_entry(0),
        ];
        assert!(!GraphPlan::applies(&refs(&keyed)));
        let free = vec![NewJob::new("q", "k", json!({}))];
        assert!(!GraphPlan::applies(&refs(&free)));
    }
}
