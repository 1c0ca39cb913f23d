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
