//! The storage trait. Each backend implements every operation atomically (one
//! statement or one transaction) with the database's clock, and may assume
//! its input was validated by [`crate::Engine`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::keys::{ApiKeyInfo, OperatorKeySetup, StoredKey, Tenant, TenantStatus};
use crate::model::{
    BulkReplayed, CarriedReports, ClaimRequest, ClaimedJob, Completed, Completion, DependencyJob,
    Enqueued, EventCursor, EventPage, Failure, FeedCursor, FeedFilter, FeedPage, Heartbeat,
    HeartbeatAck, Job, JobFilter, JobPage, Lease, LeaseToken, NewWorkflow, QueueConfigPatch,
    QueueStats, QueueThroughput, ReapReport, ReplayFilter, Reported, RetryMode, StoredClaim,
    WorkerAnnouncement, WorkerPresence, WorkerSummary, WorkflowCancelled, WorkflowEnqueued,
    WorkflowFilter, WorkflowGraph, WorkflowPage,
};
use crate::schedule::{Fire, FireOutcome, FireRef, Schedule, ScheduleRun, ScheduleSpec};
use crate::wakeup::Wakeup;

/// A place where jobs live. All methods take the tenant whose rows they may
/// see and touch; a job of another tenant is reported as not found.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Short backend name (`postgres`, `sqlite`).
    fn backend(&self) -> &'static str;

    /// Inserts jobs all-or-nothing, returning one answer per job in order. A
    /// job whose idempotency key exists (any state) or whose unique key is
    /// held by a `queued`/`running` job yields that job with `created: false`.
    /// A queue without a row gets one; if that would give the tenant more
    /// than `max_queues` queue rows, nothing is written and the answer is
    /// [`crate::Error::LimitReached`] (checked atomically: concurrent
    /// enqueues cannot pass the limit together).
    async fn enqueue(
        &self,
        tenant: &str,
        jobs: &[NewJobRef<'_>],
        max_queues: u32,
    ) -> Result<Vec<Enqueued>>;

    /// Atomically claims up to `limit` ready jobs (priority desc, run_at, id)
    /// from an unpaused queue, minting a fresh lease token for each.
    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>>;

    /// Applies the reports a claim carries — the completions as
    /// [`Store::complete_many`] would, then each failure as [`Store::fail`]
    /// would with its `jitters` entry — and then claims as [`Store::claim`],
    /// in one transaction, except where a queue's claims take turns and the
    /// reports are better committed just before the turn (PostgreSQL's
    /// flow-controlled queues); the slots they free count for the claim
    /// either way. One answer per report; a refused report never fails the
    /// claim.
    async fn report_and_claim(
        &self,
        tenant: &str,
        reports: &CarriedReports,
        jitters: &[f64],
        req: &ClaimRequest,
    ) -> Result<StoredClaim>;

    /// Extends a lease if the token still owns the running job: a
    /// [`Store::heartbeat_many`] of one item, answered by that item.
    async fn heartbeat(&self, tenant: &str, hb: &Heartbeat) -> Result<HeartbeatAck> {
        self.heartbeat_many(tenant, std::slice::from_ref(hb))
            .await?
            .pop()
            .unwrap_or_else(|| Err(Error::Storage("heartbeat_many answered no item".into())))
    }

    /// Heartbeats many jobs in one round trip (a worker's whole cycle); one
    /// answer per item, in order.
    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>>;

    /// Subscribes to hints that a queue may have ready jobs (sent after
    /// enqueues and replays; on PostgreSQL across processes by NOTIFY).
    fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup;

    /// Marks a running job succeeded if the token still owns it (a repeat
    /// of the report that did is answered with [`Reported::now`] false).
    async fn complete(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        result: Option<&Value>,
    ) -> Result<Reported>;

    /// Completes many jobs in one round trip; one answer per item, in order:
    /// [`Completed::Now`] with the job's queue and attempt times for an item
    /// that completed its job, [`Completed::Repeated`] for one that repeats
    /// an accepted report (the engine counts the first only).
    async fn complete_many(
        &self,
        tenant: &str,
        items: &[Completion],
    ) -> Result<Vec<Result<Completed>>>;

    /// Ends an attempt with a failure (see [`crate::lifecycle::fail_outcome`]);
    /// a retry waits `retry_after_ms` if given, else the jittered backoff.
    async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: &Failure,
        jitter: f64,
    ) -> Result<Reported>;

    /// Puts a running job back to `queued` after `delay_ms`, giving the
    /// attempt back.
    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<Reported>;

    /// Cancels a queued job at once, or requests cancellation of a running one.
    async fn cancel(&self, tenant: &str, id: Uuid) -> Result<Job>;

    /// Queues a failed or cancelled job again with a fresh attempt budget;
    /// its `expires_at` becomes `expires_at` (`None` clears it).
    async fn replay(
        &self,
        tenant: &str,
        id: Uuid,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<Job>;

    /// Replays many dead jobs of one queue: the first `limit` jobs of the
    /// selection (by id, after `cursor`) are the candidates; answers how
    /// many were replayed and where the next round starts.
    async fn replay_many(&self, tenant: &str, filter: &ReplayFilter) -> Result<BulkReplayed>;

    /// One job.
    async fn get(&self, tenant: &str, id: Uuid) -> Result<Job>;

    /// Jobs newest first, filtered, one page at a time.
    async fn list(&self, tenant: &str, filter: &JobFilter) -> Result<JobPage>;

    /// One page of a job's history, oldest first: at most `limit` events
    /// after `cursor` (from the start when `None`); `next_cursor` is set when
    /// the page came back full. `JobNotFound` if the tenant has no such job.
    async fn events(
        &self,
        tenant: &str,
        id: Uuid,
        cursor: Option<EventCursor>,
        limit: u32,
    ) -> Result<EventPage>;

    /// A cursor after every history event committed now, of every tenant:
    /// where a reader of the live feed starts.
    async fn feed_head(&self) -> Result<FeedCursor>;

    /// Up to `limit` history events committed after `after` that pass
    /// `filter`, in commit order per job (see [`FeedPage`]): each exactly
    /// once across reads that resume from the cursors handed out, however
    /// the transactions that wrote them interleaved. A cursor of another
    /// backend is [`Error::Invalid`].
    async fn feed_read(
        &self,
        after: &FeedCursor,
        filter: &FeedFilter,
        limit: u32,
    ) -> Result<FeedPage>;

    /// The jobs job `id` waits (or waited) for, in the order it names them:
    /// what its handler reads to use their results. `JobNotFound` if the
    /// tenant has no such job; a dependency removed by retention is left out.
    async fn dependencies(&self, tenant: &str, id: Uuid) -> Result<Vec<DependencyJob>>;

    /// Creates workflow `id` of `jobs` (each already carrying `workflow_id`
    /// `id`), all or nothing, in one transaction. With an idempotency key
    /// the tenant already used, answers that workflow and its jobs and
    /// writes nothing.
    async fn enqueue_workflow(
        &self,
        tenant: &str,
        id: Uuid,
        workflow: &NewWorkflow,
        jobs: &[NewJobRef<'_>],
        max_queues: u32,
    ) -> Result<WorkflowEnqueued>;

    /// One workflow with its whole graph. `NotFound` if the tenant has no
    /// such workflow.
    async fn get_workflow(&self, tenant: &str, id: Uuid) -> Result<WorkflowGraph>;

    /// Workflows newest first, filtered, one page at a time.
    async fn list_workflows(&self, tenant: &str, filter: &WorkflowFilter) -> Result<WorkflowPage>;

    /// Cancels every unfinished job of a workflow: waiting and queued ones
    /// at once, running ones cooperatively (as a single cancel does).
    async fn cancel_workflow(&self, tenant: &str, id: Uuid) -> Result<WorkflowCancelled>;

    /// Replays a workflow's failed jobs (and, with
    /// [`RetryMode::FailedAndDownstream`], every finished job of the
    /// workflow downstream of them); each goes back to `queued`, or to
    /// `waiting` and is settled against its dependencies. Answers how many.
    async fn retry_workflow(&self, tenant: &str, id: Uuid, mode: RetryMode) -> Result<u64>;

    /// One queue's stats (zeros and defaults for a queue never used).
    async fn queue_stats(&self, tenant: &str, queue: &str) -> Result<QueueStats>;

    /// Stats of every queue the tenant has used or configured, by name.
    async fn list_queues(&self, tenant: &str) -> Result<Vec<QueueStats>>;

    /// Removes the row (pause flag and settings) of a queue that holds no
    /// job in any state; `Conflict` naming how many it holds otherwise,
    /// `NotFound` when it has no row. Safe against a concurrent enqueue:
    /// a queue that gets a job is never left without its row.
    async fn delete_queue(&self, tenant: &str, queue: &str) -> Result<()>;

    /// The queue's last `minutes` minutes (database clock): outcome events
    /// per minute and the wait and run percentiles of the jobs that
    /// finished in them (see [`crate::QueueThroughput`]).
    async fn throughput(&self, tenant: &str, queue: &str, minutes: u32) -> Result<QueueThroughput>;

    /// The workers holding `running` jobs of the tenant, by `worker_id`
    /// (`presence` left `None`: [`Store::announced_workers`] has it).
    async fn list_workers(&self, tenant: &str) -> Result<Vec<WorkerSummary>>;

    /// Records a worker's announcement, seen now (database clock): creates
    /// or replaces its row, and deletes the tenant's rows not seen for
    /// [`crate::WORKER_FORGET_AFTER_MS`]. A worker new to a tenant that has
    /// `max_live` others not yet forgotten is [`crate::Error::LimitReached`].
    /// Answers when it was seen.
    async fn announce_worker(
        &self,
        tenant: &str,
        worker_id: &str,
        announcement: &WorkerAnnouncement,
        max_live: u32,
    ) -> Result<DateTime<Utc>>;

    /// Marks an announced worker seen now; nothing for one that did not
    /// announce (or was forgotten).
    async fn touch_worker(&self, tenant: &str, worker_id: &str) -> Result<()>;

    /// The tenant's announced workers seen within
    /// [`crate::WORKER_FORGET_AFTER_MS`], by `worker_id`.
    async fn announced_workers(&self, tenant: &str) -> Result<Vec<(String, WorkerPresence)>>;

    /// Pauses or resumes a queue. Pausing a queue without a row creates it
    /// (within `max_queues`, as for [`Store::enqueue`]); resuming one needs
    /// no row and creates none.
    async fn set_paused(
        &self,
        tenant: &str,
        queue: &str,
        paused: bool,
        max_queues: u32,
    ) -> Result<QueueStats>;

    /// Changes a queue's settings for jobs enqueued from now on, creating
    /// its row if needed (within `max_queues`).
    async fn configure_queue(
        &self,
        tenant: &str,
        queue: &str,
        patch: &QueueConfigPatch,
        max_queues: u32,
    ) -> Result<QueueStats>;

    /// Deletes at most `batch` queue rows (all tenants) that hold nothing:
    /// no job in any state, not paused, every setting at its default. Such a
    /// queue reads the same without its row; deleting it gives the tenant's
    /// room under the queue limit back. Safe against a concurrent enqueue:
    /// a queue that gets a job is never left without its row.
    async fn prune_empty_queues(&self, batch: u32) -> Result<u64>;

    /// Runs the maintenance passes (removing empty queues, the reaper,
    /// expiry, pruning, firing schedules) under the named lease `lease`
    /// (name, token) from now on: each changes nothing once that lease no
    /// longer carries the token or has expired, by the database's clock as
    /// the statement runs. `None` lifts the fence (see [`crate::MaintenanceFence`]).
    fn fence_maintenance(&self, lease: Option<(&str, LeaseToken)>);

    /// Reaper pass over all tenants, at most `batch` jobs: lapsed leases on a
    /// last attempt fail, cancel-requested ones are cancelled, the rest are
    /// queued again.
    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport>;

    /// Fails at most `batch` queued jobs past their `expires_at`.
    async fn expire_jobs(&self, batch: u32) -> Result<u64>;

    /// Deletes at most `batch` jobs that finished more than `retention_ms`
    /// ago, with their history; returns how many jobs.
    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64>;

    /// Takes the named lease if nobody holds it or its holder let it lapse,
    /// minting a fresh token; `None` while someone else holds it.
    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>>;

    /// Extends a held lease; `LeaseLost` once another holder took it.
    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease>;

    /// Gives a lease up so another node can take it at once.
    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()>;

    /// Creates a tenant with a fresh id; a taken name is `AlreadyExists`.
    async fn create_tenant(&self, name: &str) -> Result<Tenant>;

    /// Every tenant, by name.
    async fn list_tenants(&self) -> Result<Vec<Tenant>>;

    /// One tenant; `NotFound` if there is none with this id.
    async fn get_tenant(&self, id: Uuid) -> Result<Tenant>;

    /// The tenant named `name`, created first if it does not exist (safe
    /// when several processes call it at once).
    async fn ensure_tenant(&self, name: &str) -> Result<Tenant>;

    /// Stores a key's id and the SHA-256 of its secret (never the key).
    /// `NotFound` if the tenant does not exist; `Invalid` for an admin key
    /// outside [`crate::DEFAULT_TENANT`]. Both are checked by the store in
    /// the same statement or transaction as the insert.
    async fn create_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<ApiKeyInfo>;

    /// A key by id with its stored hash and its tenant's suspension;
    /// revoked keys are returned too (with `revoked_at` set): refusing
    /// them is the caller's job.
    async fn find_api_key(&self, key_id: Uuid) -> Result<Option<StoredKey>>;

    /// Suspends tenant `id` (a suspended one keeps its first instant): sets
    /// `suspended_at` and clears the `next_run_at` of the tenant's
    /// schedules, in one transaction, so that none fires until
    /// [`Store::resume_tenant`]. `NotFound` if there is no such tenant.
    async fn suspend_tenant(&self, id: Uuid) -> Result<TenantStatus>;

    /// Resumes tenant `id` if it is suspended: sets the `next_run_at` of
    /// each schedule in `next_runs` (of that tenant and enabled; computed by
    /// the engine from now) and clears `suspended_at`, in one transaction.
    /// A tenant that is not suspended is answered as it stands and its
    /// schedules are left alone. `NotFound` if there is no such tenant.
    async fn resume_tenant(
        &self,
        id: Uuid,
        next_runs: &[(Uuid, Option<DateTime<Utc>>)],
    ) -> Result<TenantStatus>;

    /// Every suspended tenant's id and when it was suspended.
    async fn suspended_tenants(&self) -> Result<Vec<(Uuid, DateTime<Utc>)>>;

    /// Revokes a key at once; `NotFound` if there is none. Revoking a
    /// revoked key changes nothing (the first `revoked_at` stays).
    async fn revoke_api_key(&self, key_id: Uuid) -> Result<()>;

    /// A tenant's keys, revoked ones included, oldest first; `NotFound` if
    /// the tenant does not exist.
    async fn list_api_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>>;

    /// Sets a key's `last_used_at` to now, unless it is revoked or was set
    /// less than `min_interval_ms` ago; whether it wrote. `Ok(false)` for an
    /// unknown key.
    async fn touch_api_key(&self, key_id: Uuid, min_interval_ms: i64) -> Result<bool>;

    /// Makes `key_id` (with `hash`) the operator key, in one transaction
    /// that excludes every other call of it (on every replica): stores it
    /// as an admin key named [`crate::keys::OPERATOR_KEY_NAME`] in
    /// `tenant_id` (the default tenant), marked as an operator key, unless
    /// a row with this id exists; then, if that row is not revoked, revokes
    /// every other unrevoked operator key. A revoked one stays revoked and
    /// revokes nothing. The same key stored again (another replica starting
    /// with it) changes nothing.
    async fn store_operator_key(
        &self,
        tenant_id: Uuid,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<OperatorKeySetup>;

    /// The database's server-secret check value. With `record`, `check` is
    /// stored first unless one is stored already, so the answer is always
    /// `Some` (safe when several processes call it at once: all get the
    /// first one stored); without, it only reads.
    async fn server_secret_check(&self, check: [u8; 32], record: bool) -> Result<Option<[u8; 32]>>;

    /// Creates a schedule with a fresh id; a name the tenant already uses is
    /// `AlreadyExists`; a tenant that has `max_schedules` already is
    /// [`crate::Error::LimitReached`] (checked atomically).
    async fn create_schedule(
        &self,
        tenant: &str,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
        max_schedules: u32,
    ) -> Result<Schedule>;

    /// One schedule; `NotFound` if the tenant has none with this id.
    async fn get_schedule(&self, tenant: &str, id: Uuid) -> Result<Schedule>;

    /// The tenant's schedule of this name, if it has one.
    async fn find_schedule(&self, tenant: &str, name: &str) -> Result<Option<Schedule>>;

    /// The tenant's schedules, by name.
    async fn list_schedules(&self, tenant: &str) -> Result<Vec<Schedule>>;

    /// Replaces a schedule's definition and `next_run_at` (its runs and
    /// `last_*` stay); `NotFound`, or `AlreadyExists` for a taken name.
    async fn update_schedule(
        &self,
        tenant: &str,
        id: Uuid,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<Schedule>;

    /// Deletes a schedule and its runs (its jobs stay); `NotFound`.
    async fn delete_schedule(&self, tenant: &str, id: Uuid) -> Result<()>;

    /// A schedule's newest `limit` runs, newest first; `NotFound` if the
    /// tenant has no such schedule.
    async fn schedule_runs(&self, tenant: &str, id: Uuid, limit: u32) -> Result<Vec<ScheduleRun>>;

    /// The newest `limit` runs of each of the tenant's schedules (newest
    /// first within a schedule), with the schedule's id: what a list of
    /// schedules shows, in one statement.
    async fn recent_schedule_runs(
        &self,
        tenant: &str,
        limit: u32,
    ) -> Result<Vec<(Uuid, ScheduleRun)>>;

    /// Enabled schedules of every tenant whose `next_run_at` has come
    /// (database clock), earliest first, at most `limit`; with the
    /// database's current time.
    async fn due_schedules(&self, limit: u32) -> Result<(DateTime<Utc>, Vec<Schedule>)>;

    /// The earliest `next_run_at` of any enabled schedule of any tenant, with
    /// the database's current time.
    async fn next_schedule_due(&self) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)>;

    /// Records one scheduler pass in one transaction, set-based, and
    /// answers each fire in order. For each fire: advances `next_run_at`
    /// from `fire.expected_next_run_at` (compare-and-set on an enabled
    /// schedule; `Raced` and nothing done for it when it no longer matches)
    /// and sets `last_run_at`; then, unless `fire.overlap` is `Skip` and the
    /// job of the last run is `queued` or `running` (a `skipped` run),
    /// enqueues `fire.job` with id `job_id` (an existing job with the same
    /// idempotency key counts as the run's job), sets `last_job_id` and
    /// records an `enqueued` run. The fires name distinct schedules
    /// ([`crate::schedule::distinct_schedules`]); an error writes nothing.
    /// Of passes racing on the same schedules, each fire runs in exactly
    /// one of them.
    async fn fire_schedules(&self, fires: &[FireRef<'_>]) -> Result<Vec<FireOutcome>>;

    /// One fire, as a pass of one ([`Store::fire_schedules`]).
    async fn fire_schedule(&self, fire: &Fire, job_id: Uuid) -> Result<FireOutcome> {
        self.fire_schedules(&[FireRef { fire, job_id }])
            .await?
            .pop()
            .ok_or_else(|| Error::Storage("a pass of one fire gave no answer".into()))
    }

    /// A run outside the timetable: enqueues `job` now, records an
    /// `enqueued` run stamped now, sets `last_run_at`/`last_job_id`, and
    /// leaves `next_run_at` alone; `NotFound` if the tenant has no such
    /// schedule. Returns the job.
    async fn trigger_schedule(&self, tenant: &str, id: Uuid, job: NewJobRef<'_>) -> Result<Job>;

    /// Deletes at most `batch` runs recorded more than `retention_ms` ago.
    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64>;
}

/// A validated job to enqueue, as the store receives it: the [`NewJob`]
/// plus the id the engine minted for it.
///
/// [`NewJob`]: crate::NewJob
#[derive(Debug, Clone, Copy)]
pub struct NewJobRef<'a> {
    /// The id the job gets if it is created.
    pub id: Uuid,
    /// The job.
    pub job: &'a crate::NewJob,
}

impl<'a> NewJobRef<'a> {
    /// Mints a fresh time-ordered id for each job, in order.
    pub fn mint(jobs: &'a [crate::NewJob]) -> Vec<NewJobRef<'a>> {
        jobs.iter()
            .map(|job| NewJobRef {
                id: Uuid::now_v7(),
                job,
            })
            .collect()
    }
}
