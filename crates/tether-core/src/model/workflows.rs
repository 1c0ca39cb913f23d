//! Jobs that wait for other jobs: what a job depends on, what happens to it
//! when a dependency fails, and what a handler reads of its dependencies.

use super::*;

/// Most dependencies one job may have.
pub const MAX_DEPENDENCIES: usize = 100;

/// One job a new job waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dependency {
    /// A job that exists already (same tenant).
    Job(Uuid),
    /// An earlier entry of the same batch, by its index.
    Entry(usize),
}

/// What a waiting job does when one of its dependencies ends `failed` or
/// `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependencyFailure {
    /// It is cancelled at once, and so are the jobs that wait for it.
    #[default]
    Cancel,
    /// It runs anyway once every dependency has ended, whatever the outcome.
    Run,
}

impl DependencyFailure {
    /// Both rules.
    pub const ALL: [DependencyFailure; 2] = [DependencyFailure::Cancel, DependencyFailure::Run];

    /// The rule's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyFailure::Cancel => "cancel",
            DependencyFailure::Run => "run",
        }
    }
}

impl fmt::Display for DependencyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DependencyFailure {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DependencyFailure::ALL
            .into_iter()
            .find(|rule| rule.as_str() == s)
            .ok_or_else(|| UnknownName::new("dependency_failure", s))
    }
}

/// A dependency as a handler reads it: enough to use its result.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyJob {
    /// The dependency's id.
    pub id: Uuid,
    /// Its handler name.
    pub kind: String,
    /// Where it is now.
    pub state: JobState,
    /// What its handler returned, once it succeeded.
    pub result: Option<Value>,
    /// The tail of its last error.
    pub last_error: Option<String>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<Job> for DependencyJob {
    fn from(job: Job) -> Self {
        DependencyJob {
            id: job.id,
            kind: job.kind,
            state: job.state,
            result: job.result,
            last_error: job.last_error,
            finished_at: job.finished_at,
        }
    }
}

/// A new workflow: a named graph of jobs enqueued as one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorkflow {
    /// What it is (a name: `[A-Za-z0-9._:-]`, 1–128 characters).
    pub name: String,
    /// A second batch with this key answers the existing workflow and its
    /// jobs, and writes nothing.
    pub idempotency_key: Option<String>,
}

/// Where a workflow is, derived from its jobs (see [`WorkflowState::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowState {
    /// Some job has not finished.
    Running,
    /// Every job succeeded.
    Succeeded,
    /// Every job finished and one failed.
    Failed,
    /// Every job finished, none failed, one was cancelled.
    Cancelled,
}

impl WorkflowState {
    /// All states.
    pub const ALL: [WorkflowState; 4] = [
        WorkflowState::Running,
        WorkflowState::Succeeded,
        WorkflowState::Failed,
        WorkflowState::Cancelled,
    ];

    /// The state's name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Running => "running",
            WorkflowState::Succeeded => "succeeded",
            WorkflowState::Failed => "failed",
            WorkflowState::Cancelled => "cancelled",
        }
    }

    /// The state of a workflow whose jobs are in `counts`: `running` while
    /// any job is unfinished, then `succeeded` if every job succeeded,
    /// `failed` if any failed, else `cancelled`. The one place this rule
    /// is written: stores count, the core judges.
    pub fn of(counts: &StateCounts) -> WorkflowState {
        if counts.waiting + counts.queued + counts.running > 0 {
            WorkflowState::Running
        } else if counts.failed > 0 {
            WorkflowState::Failed
        } else if counts.cancelled > 0 {
            WorkflowState::Cancelled
        } else {
            WorkflowState::Succeeded
        }
    }
}

impl fmt::Display for WorkflowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkflowState {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WorkflowState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownName::new("workflow state", s))
    }
}

/// A workflow as listed: what it is and where its jobs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workflow {
    /// Server-made, time-ordered (UUID v7).
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// The key it was created with, if any.
    pub idempotency_key: Option<String>,
    /// Derived from its jobs.
    pub state: WorkflowState,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When its last job finished, once every job has.
    pub finished_at: Option<DateTime<Utc>>,
    /// Its jobs per state.
    pub counts: StateCounts,
}

impl Workflow {
    /// A workflow from what a store read: its row, its jobs' counts and
    /// the latest `finished_at` among them; the state and whether it is
    /// finished are the core's to judge.
    pub fn judged(
        id: Uuid,
        name: String,
        idempotency_key: Option<String>,
        created_at: DateTime<Utc>,
        counts: StateCounts,
        last_finished_at: Option<DateTime<Utc>>,
    ) -> Workflow {
        let state = WorkflowState::of(&counts);
        Workflow {
            id,
            name,
            idempotency_key,
            state,
            created_at,
            finished_at: (state != WorkflowState::Running)
                .then_some(last_finished_at)
                .flatten(),
            counts,
        }
    }
}

/// One job of a workflow's graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowJob {
    /// The job's id.
    pub id: Uuid,
    /// Its handler name.
    pub kind: String,
    /// Where it is.
    pub state: JobState,
    /// What it waits (or waited) for.
    pub depends_on: Vec<Uuid>,
}

/// A workflow with its whole graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowGraph {
    /// The workflow.
    pub workflow: Workflow,
    /// Its jobs (at most [`MAX_WORKFLOW_JOBS`]), oldest first.
    pub jobs: Vec<WorkflowJob>,
}

/// Most jobs one workflow may hold (batch and appends together).
pub const MAX_WORKFLOW_JOBS: usize = 10_000;

/// Filters and page of a workflow listing (newest first).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkflowFilter {
    /// Only workflows in this state.
    pub state: Option<WorkflowState>,
    /// Only workflows of this name.
    pub name: Option<String>,
    /// Page size, 1..=500 (unset: 50).
    pub limit: Option<u32>,
    /// Continue after this workflow id (from a previous page).
    pub cursor: Option<Uuid>,
}

/// Page size of a workflow listing that does not set one.
pub const DEFAULT_WORKFLOW_PAGE: u32 = 50;

/// How many workflows a listing with a state filter looks at per page, as
/// a multiple of the page size (the state is derived, not stored, so no
/// index finds the workflows in one state).
const STATE_SCAN: u32 = 10;

impl WorkflowFilter {
    /// The page size asked for.
    pub fn page_size(&self) -> u32 {
        self.limit.unwrap_or(DEFAULT_WORKFLOW_PAGE)
    }

    /// How many workflows (newest first, after the cursor, of the name) a
    /// store reads for one page: the page size, or with a state filter
    /// `STATE_SCAN` (10) times it.
    pub fn scan(&self) -> u32 {
        match self.state {
            Some(_) => self.page_size() * STATE_SCAN,
            None => self.page_size(),
        }
    }
}

/// One page of a workflow listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowPage {
    /// The workflows, newest first.
    pub workflows: Vec<Workflow>,
    /// Pass as `cursor` for the next page; `None` at the end. A page with a
    /// state filter may hold fewer than its limit and still have a next
    /// page: a listing looks at a bounded number of workflows per page.
    pub next_cursor: Option<Uuid>,
}

impl WorkflowPage {
    /// The page that `filter` answers from `scanned`, the at most
    /// [`WorkflowFilter::scan`] workflows a store read for it, newest first:
    /// those in the state asked for, up to the page size; a cursor when the
    /// page is full, or when the scan was (more may follow either way).
    pub fn of(filter: &WorkflowFilter, scanned: Vec<Workflow>) -> WorkflowPage {
        let (limit, scan) = (filter.page_size() as usize, filter.scan() as usize);
        let mut next_cursor = (scanned.len() == scan)
            .then(|| scanned.last().map(|w| w.id))
            .flatten();
        let mut workflows = Vec::new();
        for workflow in scanned {
            if filter.state.is_none_or(|want| want == workflow.state) {
                workflows.push(workflow);
            }
            if workflows.len() == limit {
                next_cursor = workflows.last().map(|w| w.id);
                break;
            }
        }
        WorkflowPage {
            workflows,
            next_cursor,
        }
    }
}

/// What a new workflow's batch answered.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowEnqueued {
    /// The workflow (new, or the one its idempotency key led to).
    pub workflow: Workflow,
    /// Its jobs: the batch's, in request order; or, when the key led to an
    /// existing workflow, that workflow's jobs, oldest first.
    pub jobs: Vec<Enqueued>,
    /// False when an existing workflow was returned and nothing written.
    pub created: bool,
}

/// Which jobs a workflow retry puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryMode {
    /// The failed jobs only.
    Failed,
    /// The failed jobs and every finished job downstream of them.
    FailedAndDownstream,
}

impl RetryMode {
    /// Both modes.
    pub const ALL: [RetryMode; 2] = [RetryMode::Failed, RetryMode::FailedAndDownstream];

    /// The mode's name as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryMode::Failed => "failed",
            RetryMode::FailedAndDownstream => "failed_and_downstream",
        }
    }
}

/// What a workflow cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkflowCancelled {
    /// Jobs cancelled at once (waiting or queued).
    pub cancelled: u64,
    /// Running jobs asked to stop.
    pub cancel_requested: u64,
}
