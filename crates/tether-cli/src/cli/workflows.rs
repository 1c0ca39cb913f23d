//! `tether workflows ls | show | wait | cancel | retry`: named graphs of jobs,
//! read, cancelled and retried whole. `show` draws the graph as a tree.

use std::collections::{HashMap, HashSet, VecDeque};

use chrono::Utc;
use clap::Subcommand;
use tether_client::{
    JobState, RetryMode, StateCounts, WorkflowGraph, WorkflowJob, WorkflowPage, WorkflowQuery,
    WorkflowState,
};
use uuid::Uuid;

use super::format::{self, Table};
use super::{out, CliError, Conn, Ctx};

/// `tether workflows …`.
#[derive(Debug, clap::Args)]
pub struct WorkflowsArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: WorkflowsCommand,
}

#[derive(Debug, Subcommand)]
enum WorkflowsCommand {
    /// List workflows, newest first, with their jobs per state.
    Ls(ListArgs),
    /// One workflow: its fields and its graph drawn as a tree (each job's
    /// short id, kind and state; jobs added at run time included).
    Show {
        /// The workflow's id.
        id: String,
    },
    /// Wait until a workflow has finished (or --timeout has passed), then
    /// show it. Exits 0 if it succeeded, 1 otherwise.
    Wait {
        /// The workflow's id.
        id: String,
        /// How long to wait.
        #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::duration::parse)]
        timeout: std::time::Duration,
    },
    /// Cancel every unfinished job of a workflow: waiting and queued ones at
    /// once, running ones are asked to stop.
    Cancel {
        /// The workflow's id.
        id: String,
    },
    /// Put a workflow's failed jobs back, with a fresh attempt budget.
    Retry {
        /// The workflow's id.
        id: String,
        /// Also every finished job downstream of them (cancelled by their
        /// failure, or run anyway), back to waiting for them.
        #[arg(long)]
        downstream: bool,
    },
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only this state: running, succeeded, failed or cancelled.
    #[arg(long, value_parser = workflow_state)]
    state: Option<WorkflowState>,
    /// Only workflows of this name.
    #[arg(long)]
    name: Option<String>,
    /// Workflows per page, 1–500 [default: 50, or 500 with --all].
    #[arg(long)]
    limit: Option<u32>,
    /// Continue after a previous page (the cursor it printed).
    #[arg(long, conflicts_with = "all")]
    cursor: Option<String>,
    /// Follow every page to the end.
    #[arg(long)]
    all: bool,
}

fn workflow_state(text: &str) -> Result<WorkflowState, String> {
    text.parse().map_err(|_| {
        format!("unknown state {text:?} (use running, succeeded, failed or cancelled)")
    })
}

/// A workflow id: the whole id, as `tether workflows ls` prints it.
fn workflow_id(text: &str) -> Result<Uuid, CliError> {
    Uuid::try_parse(text.trim()).map_err(|_| {
        CliError::Usage(format!(
            "{text:?} is not a workflow id (the whole id, as `tether workflows ls` prints it)"
        ))
    })
}

pub(crate) async fn run(args: WorkflowsArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    match args.command {
        WorkflowsCommand::Ls(ls) => {
            let page = list(&ctx, ls).await?;
            if ctx.json {
                return ctx.print_json(&page);
            }
            print_workflows(&page);
            Ok(())
        }
        WorkflowsCommand::Show { id } => {
            let id = workflow_id(&id)?;
            let graph = ctx.call(ctx.client.get_workflow(id)).await?;
            if ctx.json {
                return ctx.print_json(&graph);
            }
            out(&show(&graph));
            Ok(())
        }
        WorkflowsCommand::Wait { id, timeout } => {
            let id = workflow_id(&id)?;
            let graph = ctx.call(ctx.client.wait_workflow(id, timeout)).await?;
            if ctx.json {
                ctx.print_json(&graph)?;
            } else {
                out(&show(&graph));
            }
            match graph.workflow.state {
                WorkflowState::Succeeded => Ok(()),
                WorkflowState::Running => Err(CliError::Failed(format!(
                    "workflow {id} is still running after {}",
                    humantime::format_duration(timeout)
                ))),
                state => Err(CliError::Failed(format!("workflow {id} {state}"))),
            }
        }
        WorkflowsCommand::Cancel { id } => {
            let id = workflow_id(&id)?;
            let done = ctx.call(ctx.client.cancel_workflow(id)).await?;
            if ctx.json {
                return ctx.print_json(&done);
            }
            if done.cancelled + done.cancel_requested == 0 {
                out(&format!(
                    "workflow {id}: nothing to cancel (no job is waiting, queued, or running without a cancel requested)\n"
                ));
            } else {
                out(&format!(
                    "workflow {id}: cancelled {} at once; asked {} to stop\n",
                    format::plural(done.cancelled, "job"),
                    format::plural(done.cancel_requested, "running job"),
                ));
            }
            Ok(())
        }
        WorkflowsCommand::Retry { id, downstream } => {
            let id = workflow_id(&id)?;
            let mode = if downstream {
                RetryMode::FailedAndDownstream
            } else {
                RetryMode::Failed
            };
            let replayed = ctx.call(ctx.client.retry_workflow(id, mode)).await?;
            if ctx.json {
                return ctx.print_json(&tether_client::api::WorkflowRetryResponse { replayed });
            }
            if replayed == 0 {
                out(&format!("workflow {id}: no failed job to retry\n"));
            } else {
                let what = if downstream {
                    "the failed jobs and what was downstream of them"
                } else {
                    "the failed jobs"
                };
                out(&format!(
                    "workflow {id}: put back {} ({what})\n",
                    format::plural(replayed, "job")
                ));
            }
            Ok(())
        }
    }
}

/// One page (or, with `--all`, every page) of workflows.
async fn list(ctx: &Ctx, ls: ListArgs) -> Result<WorkflowPage, CliError> {
    let mut query = WorkflowQuery {
        state: ls.state,
        name: ls.name,
        limit: ls.limit.or(ls.all.then_some(500)),
        cursor: ls.cursor,
    };
    let mut workflows = Vec::new();
    loop {
        let got = ctx.call(ctx.client.list_workflows(&query)).await?;
        workflows.extend(got.workflows);
        match got.next_cursor {
            Some(cursor) if ls.all => query.cursor = Some(cursor),
            next_cursor => {
                return Ok(WorkflowPage {
                    workflows,
                    next_cursor,
                })
            }
        }
    }
}

/// The list: id, name, state, times, and the jobs per state.
fn print_workflows(page: &WorkflowPage) {
    if page.workflows.is_empty() {
        out("no workflows\n");
    } else {
        let now = Utc::now();
        let mut t = Table::new(&[
            "ID", "NAME", "STATE", "CREATED", "FINISHED", "JOBS", "COUNTS",
        ])
        .flex("COUNTS")
        .numeric(&["JOBS"]);
        for w in &page.workflows {
            t.row(vec![
                w.id.to_string(),
                w.name.clone(),
                w.state.to_string(),
                format::ago(w.created_at, now),
                format::ago_opt(w.finished_at, now),
                total(&w.counts).to_string(),
                counts(&w.counts),
            ]);
        }
        t.print();
    }
    if let Some(cursor) = &page.next_cursor {
        super::note(&format!("more workflows: add --cursor {cursor} (or --all)"));
    }
}

/// The states in the order a job goes through them.
const STATES: [JobState; 6] = [
    JobState::Waiting,
    JobState::Queued,
    JobState::Running,
    JobState::Succeeded,
    JobState::Failed,
    JobState::Cancelled,
];

fn count_of(c: &StateCounts, state: JobState) -> i64 {
    match state {
        JobState::Waiting => c.waiting,
        JobState::Queued => c.queued,
        JobState::Running => c.running,
        JobState::Succeeded => c.succeeded,
        JobState::Failed => c.failed,
        JobState::Cancelled => c.cancelled,
    }
}

fn total(c: &StateCounts) -> i64 {
    STATES.iter().map(|s| count_of(c, *s)).sum()
}

/// "2 succeeded, 1 failed": the states that have jobs, in lifecycle order.
fn counts(c: &StateCounts) -> String {
    let parts: Vec<String> = STATES
        .iter()
        .filter(|s| count_of(c, **s) > 0)
        .map(|s| format!("{} {s}", count_of(c, *s)))
        .collect();
    parts.join(", ")
}

/// `workflows show`: the fields, then the graph.
fn show(g: &WorkflowGraph) -> String {
    let w = &g.workflow;
    let now = Utc::now();
    let mut text = format::fields(&[
        ("id", w.id.to_string()),
        ("name", w.name.clone()),
        (
            "idempotency key",
            w.idempotency_key.clone().unwrap_or_default(),
        ),
        ("state", w.state.to_string()),
        ("created", format::time_ago(Some(w.created_at), now)),
        ("finished", format::time_ago(w.finished_at, now)),
        (
            "jobs",
            format!("{}: {}", total(&w.counts), counts(&w.counts)),
        ),
    ]);
    if g.jobs.is_empty() {
        return text;
    }
    text.push_str(&format!(
        "\ngraph ({}, each under the job it waits for; ↑ names its other dependencies):\n",
        format::plural(g.jobs.len() as u64, "job")
    ));
    for line in tree(&g.jobs).lines() {
        text.push_str(&format!("  {line}\n"));
    }
    text.push_str(&format!(
        "\nwhole ids: tether jobs ls --workflow {}; a job's details: tether jobs show <id>\n",
        w.id
    ));
    text
}

/// The shortest tail (in hex digits, at least 8) that tells every id of
/// `ids` apart. A tail, not a head: ids are time-ordered (UUID v7), so the
/// jobs of one batch share all but their last digits.
fn tail_len(ids: &[Uuid]) -> usize {
    let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
    (8..32)
        .find(|n| {
            let mut seen = HashSet::new();
            hex.iter().all(|h| seen.insert(&h[32 - n..]))
        })
        .unwrap_or(32)
}

/// `id`'s last `digits` hex digits, after an ellipsis: `…6ea9b0c1`.
fn short(id: Uuid, digits: usize) -> String {
    let hex = id.simple().to_string();
    format!("…{}", &hex[32 - digits..])
}

/// How many levels a tree is indented at most.
const MAX_LEVEL: usize = 16;

/// The graph as a tree: each job once, under the dependency that is
/// deepest in the graph (the latest of those on a tie), the others named
/// after it (`↑ also after …`); a job with no dependency in the workflow
/// starts a tree of its own. Lines carry the job's short id (the shortest
/// tail of its id that tells it apart from the others shown), its kind and
/// its state, the kinds and states aligned.
fn tree(jobs: &[WorkflowJob]) -> String {
    let index: HashMap<Uuid, usize> = jobs.iter().enumerate().map(|(i, j)| (j.id, i)).collect();
    // Each job's dependencies inside the workflow (by index, in the order
    // it names them, once each) and outside it.
    let mut inside: Vec<Vec<usize>> = Vec::with_capacity(jobs.len());
    let mut outside: Vec<Vec<Uuid>> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mut ins = Vec::new();
        let mut outs = Vec::new();
        for dep in &job.depends_on {
            match index.get(dep) {
                Some(&p) if !ins.contains(&p) => ins.push(p),
                Some(_) => {}
                None if !outs.contains(dep) => outs.push(*dep),
                None => {}
            }
        }
        inside.push(ins);
        outside.push(outs);
    }
    // Depth: the longest chain of dependencies above a job (Kahn's order;
    // a cycle, which the server never makes, leaves its jobs at 0).
    let mut waiters: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    let mut pending: Vec<usize> = inside.iter().map(Vec::len).collect();
    for (i, deps) in inside.iter().enumerate() {
        for &p in deps {
            waiters[p].push(i);
        }
    }
    let mut depth = vec![0usize; jobs.len()];
    let mut ready: VecDeque<usize> = (0..jobs.len()).filter(|i| pending[*i] == 0).collect();
    while let Some(p) = ready.pop_front() {
        for &i in &waiters[p] {
            depth[i] = depth[i].max(depth[p] + 1);
            pending[i] -= 1;
            if pending[i] == 0 {
                ready.push_back(i);
            }
        }
    }
    let parent: Vec<Option<usize>> = inside
        .iter()
        .map(|deps| deps.iter().copied().max_by_key(|&p| (depth[p], p)))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            children[*p].push(i);
        }
    }
    let mut shown: Vec<Uuid> = jobs.iter().map(|j| j.id).collect();
    shown.extend(outside.iter().flatten());
    let digits = tail_len(&shown);

    // Depth first, iteratively (a chain may be thousands of jobs long).
    struct Line {
        lead: String,
        job: usize,
        level: usize,
    }
    let mut lines: Vec<Line> = Vec::with_capacity(jobs.len());
    let mut drawn = vec![false; jobs.len()];
    // (job, the lead of its line, the lead of its children's lines, how
    // deep in its tree it is)
    let mut stack: Vec<(usize, String, String, usize)> = Vec::new();
    let starts: Vec<usize> = (0..jobs.len()).filter(|i| parent[*i].is_none()).collect();
    // Jobs of a cycle are reached from no start: each starts a tree then.
    let rest = (0..jobs.len()).filter(|i| parent[*i].is_some());
    for start in starts.into_iter().chain(rest) {
        if drawn[start] {
            continue;
        }
        stack.push((start, String::new(), String::new(), 0));
        while let Some((job, lead, below, level)) = stack.pop() {
            if drawn[job] {
                continue;
            }
            drawn[job] = true;
            lines.push(Line { lead, job, level });
            let kids: Vec<usize> = children[job]
                .iter()
                .copied()
                .filter(|k| !drawn[*k])
                .collect();
            for (n, &kid) in kids.iter().enumerate().rev() {
                let last = n + 1 == kids.len();
                let (branch, next) = if last {
                    ("└─ ", "   ")
                } else {
                    ("├─ ", "│  ")
                };
                // Past MAX_LEVEL the lines stop moving right (a long chain
                // would be thousands of columns wide); they say how deep.
                let deeper = if level < MAX_LEVEL {
                    format!("{below}{next}")
                } else {
                    below.clone()
                };
                stack.push((kid, format!("{below}{branch}"), deeper, level + 1));
            }
        }
    }

    let heads: Vec<String> = lines
        .iter()
        .map(|l| format!("{}{}", l.lead, short(jobs[l.job].id, digits)))
        .collect();
    let head_width = heads.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    let kind_width = jobs
        .iter()
        .map(|j| j.kind.chars().count())
        .max()
        .unwrap_or(0);
    let state_width = jobs
        .iter()
        .map(|j| j.state.as_str().len())
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for (line, head) in lines.iter().zip(&heads) {
        let job = &jobs[line.job];
        let mut notes = Vec::new();
        if line.level > MAX_LEVEL {
            notes.push(format!("level {}", line.level));
        }
        let others: Vec<String> = inside[line.job]
            .iter()
            .filter(|p| Some(**p) != parent[line.job])
            .map(|p| short(jobs[*p].id, digits))
            .collect();
        if !others.is_empty() {
            notes.push(format!("↑ also after {}", others.join(", ")));
        }
        if !outside[line.job].is_empty() {
            let ids: Vec<String> = outside[line.job]
                .iter()
                .map(|id| short(*id, digits))
                .collect();
            notes.push(format!("↑ after {} (outside the workflow)", ids.join(", ")));
        }
        let pad = head_width - head.chars().count();
        let row = format!(
            "{head}{:pad$}  {:kind_width$}  {:state_width$}  {}",
            "",
            format::visible(&job.kind),
            job.state.as_str(),
            notes.join("; "),
        );
        text.push_str(row.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u128, kind: &str, state: JobState, deps: &[u128]) -> WorkflowJob {
        WorkflowJob {
            id: Uuid::from_u128(n),
            kind: kind.to_owned(),
            state,
            depends_on: deps.iter().map(|d| Uuid::from_u128(*d)).collect(),
        }
    }

    /// Ids that differ only after their first 12 hex digits, as the jobs
    /// of one batch (UUID v7 of the same millisecond) do.
    const A: u128 = 0x0193_0000_0000_7000_8000_0000_0000_000a;
    const B: u128 = 0x0193_0000_0000_7001_8000_0000_0000_000b;
    const C: u128 = 0x0193_0000_0000_7002_8000_0000_0000_000c;
    const D: u128 = 0x0193_0000_0000_7003_8000_0000_0000_000d;
    const E: u128 = 0x0193_0000_0000_7004_8000_0000_0000_000e;

    #[test]
    fn a_diamond_draws_the_joining_job_once_with_its_other_parent() {
        let jobs = [
            job(A, "fetch", JobState::Succeeded, &[]),
            job(B, "resize", JobState::Failed, &[A]),
            job(C, "thumb", JobState::Succeeded, &[A]),
            job(D, "publish", JobState::Cancelled, &[B, C]),
            // Added at run time, after the last one.
            job(E, "notify", JobState::Waiting, &[D]),
        ];
        assert_eq!(
            tree(&jobs),
            "\
…0000000a           fetch    succeeded
├─ …0000000b        resize   failed
└─ …0000000c        thumb    succeeded
   └─ …0000000d     publish  cancelled  ↑ also after …0000000b
      └─ …0000000e  notify   waiting
"
        );
    }

    #[test]
    fn roots_chains_and_outside_dependencies() {
        let outside = 0x0193_0000_0000_7fff_8000_0000_0000_0001;
        let jobs = [
            job(A, "a", JobState::Queued, &[]),
            job(B, "b", JobState::Queued, &[]),
            job(C, "c", JobState::Waiting, &[B, outside]),
            job(D, "d", JobState::Waiting, &[A, B, C]),
        ];
        // d goes under c, the deepest of its dependencies; c's dependency
        // outside the workflow is named.
        assert_eq!(
            tree(&jobs),
            "\
…0000000a        a  queued
…0000000b        b  queued
└─ …0000000c     c  waiting  ↑ after …00000001 (outside the workflow)
   └─ …0000000d  d  waiting  ↑ also after …0000000a, …0000000b
"
        );
    }

    #[test]
    fn short_ids_are_the_shortest_tail_that_tells_them_apart() {
        // The jobs of one batch: the same millisecond, a counter, then
        // random bits.
        let one = Uuid::from_u128(0x01a2_4ded_7ab0_76a1_b070_6ea9_1234_5678);
        let two = Uuid::from_u128(0x01a2_4ded_7ab0_76a1_b070_6eaa_1234_5678);
        assert_eq!(tail_len(&[one]), 8);
        assert_eq!(short(one, 8), "…12345678");
        assert_eq!(tail_len(&[one, two]), 9);
        assert_eq!(short(two, 9), "…a12345678");
        assert_eq!(tail_len(&[one, Uuid::from_u128(A)]), 8);
    }

    #[test]
    fn a_long_chain_is_drawn_without_recursion() {
        let jobs: Vec<WorkflowJob> = (1..=3_000u128)
            .map(|n| {
                let deps: Vec<u128> = if n == 1 { vec![] } else { vec![n - 1] };
                job(n, "step", JobState::Waiting, &deps)
            })
            .collect();
        let drawn = tree(&jobs);
        let lines: Vec<&str> = drawn.lines().collect();
        assert_eq!(lines.len(), 3_000);
        // Indented 16 levels deep at most; deeper lines say how deep.
        let widest = lines.iter().map(|l| l.chars().count()).max().unwrap();
        assert!(widest < 140, "{widest}");
        assert!(!lines[16].contains("level"), "{}", lines[16]);
        assert!(lines[17].ends_with("level 17"), "{}", lines[17]);
        assert!(lines[2_999].ends_with("level 2999"), "{}", lines[2_999]);
    }
}
